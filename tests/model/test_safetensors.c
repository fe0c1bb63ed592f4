/* Tests of the safetensors reader: synthetic files written here (header
 * JSON by hand), corrupted variants, and sharded checkpoint directories. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* File image: u64 LE header length | header | data. */
static uint8_t *image(const char *json, const void *data, size_t ndata, size_t *size) {
    size_t h = strlen(json);
    *size = 8 + h + ndata;
    uint8_t *p = malloc(*size ? *size : 1);
    assert_non_null(p);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(p + 8, json, h);
    if (ndata) memcpy(p + 8 + h, data, ndata);
    return p;
}

static void write_file(const char *path, const char *json, const void *data, size_t ndata) {
    size_t n;
    uint8_t *p = image(json, data, ndata, &n);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
    free(p);
}

static const char *GOOD_JSON =
    "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"s\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[32,33]},"
    "\"f8\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[33,37]},"
    "\"f4\":{\"dtype\":\"F4\",\"shape\":[1,4],\"data_offsets\":[37,39]},"
    "\"e\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[39,39]},"
    "\"v5\":{\"dtype\":\"F16\",\"shape\":[1,1,1,1,1],\"data_offsets\":[39,41]}}    ";
#define GOOD_DATA_LEN 41

static uint8_t g_data[64];

static void test_good_file(void **state) {
    (void)state;
    for (int i = 0; i < 64; i++) g_data[i] = (uint8_t)i;
    size_t n;
    uint8_t *p = image(GOOD_JSON, g_data, GOOD_DATA_LEN, &n);
    st_model *m = st_open_memory(p, n, "good.safetensors");
    if (!m) fail_msg("%s", vc_err_msg());
    assert_int_equal(st_n_tensors(m), 7);
    assert_int_equal(st_n_shards(m), 1);
    assert_string_equal(st_shard_path(m, 0), "good.safetensors");
    assert_string_equal(st_metadata(m, "format"), "pt");
    assert_null(st_metadata(m, "absent"));
    const st_tensor *t = st_find(m, "w");
    assert_non_null(t);
    assert_int_equal(t->dtype, RT_F32);
    assert_string_equal(t->dtype_str, "F32");
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->numel, 6);
    assert_int_equal(t->nbytes, 24);
    const uint8_t *data0 = p + 8 + strlen(GOOD_JSON);
    assert_ptr_equal(t->data, data0);
    t = st_find(m, "b");
    assert_int_equal(t->dtype, RT_BF16);
    assert_ptr_equal(t->data, data0 + 24);
    t = st_find(m, "s");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->numel, 1);
    assert_int_equal(t->dtype, -1);
    assert_int_equal(((const uint8_t *)t->data)[0], 32);
    t = st_find(m, "f8");
    assert_int_equal(t->dtype, -1);
    assert_string_equal(t->dtype_str, "F8_E4M3");
    assert_int_equal(t->elem_bits, 8);
    t = st_find(m, "f4");
    assert_int_equal(t->nbytes, 2);
    assert_int_equal(t->elem_bits, 4);
    t = st_find(m, "e");
    assert_int_equal(t->nbytes, 0);
    assert_int_equal(t->numel, 0);
    t = st_find(m, "v5");
    assert_int_equal(t->ndim, 5);
    assert_int_equal(t->dtype, RT_F16);
    assert_null(st_find(m, "nope"));
    /* sorted by name */
    for (int64_t i = 1; i < st_n_tensors(m); i++)
        assert_true(strcmp(st_tensor_at(m, i - 1)->name, st_tensor_at(m, i)->name) < 0);
    assert_null(st_tensor_at(m, 7));
    assert_int_equal(st_dtype_bits("BF16"), 16);
    assert_int_equal(st_dtype_bits("Q4"), 0);
    st_close(m);
    free(p);
}

static void test_truncated_everywhere(void **state) {
    (void)state;
    size_t n;
    uint8_t *p = image(GOOD_JSON, g_data, GOOD_DATA_LEN, &n);
    for (size_t k = 0; k < n; k++) {
        uint8_t *q = malloc(k ? k : 1); /* exact size: ASan/valgrind see over-reads */
        assert_non_null(q);
        memcpy(q, p, k);
        st_model *m = st_open_memory(q, k, "t.safetensors");
        if (m) fail_msg("truncation at %zu of %zu accepted", k, n);
        assert_non_null(strstr(vc_err_msg(), "t.safetensors"));
        free(q);
    }
    free(p);
}

static void expect_fail(const char *json, size_t ndata, const char *want) {
    size_t n;
    uint8_t *p = image(json, g_data, ndata, &n);
    st_model *m = st_open_memory(p, n, "bad.safetensors");
    if (m) fail_msg("accepted: %s", json);
    if (!strstr(vc_err_msg(), want) || !strstr(vc_err_msg(), "bad.safetensors"))
        fail_msg("message '%s' lacks '%s'", vc_err_msg(), want);
    free(p);
}

#define T(body) "{\"t\":" body "}"

static void test_corrupt(void **state) {
    (void)state;
    expect_fail("[1,2]", 0, "header is not a JSON object");
    expect_fail("{\"t\":", 0, "invalid JSON header");
    expect_fail("{\"t\":{},\"t\":{}}", 0, "invalid JSON header");
    expect_fail("{\"t\":5}", 0, "tensor 't': entry is not a JSON object");
    expect_fail(T("{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}"), 1, "tensor 't': unknown dtype \"Q4\"");
    expect_fail(T("{\"shape\":[1],\"data_offsets\":[0,1]}"), 1, "\"dtype\"");
    expect_fail(T("{\"dtype\":\"U8\",\"data_offsets\":[0,1]}"), 1, "\"shape\"");
    expect_fail(T("{\"dtype\":\"U8\",\"shape\":[1]}"), 1, "data_offsets");
    expect_fail(T("{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}"), 1, "shape[0]");
    expect_fail(T("{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}"), 1, "shape[0]");
    expect_fail(T("{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}"), 1, "9 dimensions");
    expect_fail(T("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}"), 1, "reversed");
    expect_fail(T("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}"), 1, "[begin, end]");
    expect_fail(T("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}"), 1, "non-negative");
    expect_fail(T("{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}"), 1, "tensor 't': data_offsets [0, 2) past end");
    expect_fail(T("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}"), 8, "hold 4 bytes but shape x F32 needs 8");
    expect_fail(T("{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}"), 2, "do not fill whole bytes");
    expect_fail(T("{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,1]}"), 1,
                "overflows");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}", 8,
                "tensor 'b': data [3, 5) overlaps tensor 'a'");
    expect_fail("{\"__metadata__\":{\"k\":1}}", 0, "is not a string");
    expect_fail("{\"__metadata__\":[]}", 0, "\"__metadata__\" is not an object");

    /* Header length problems. */
    uint8_t small[4] = {1, 2, 3, 4};
    assert_null(st_open_memory(small, 4, "bad.safetensors"));
    assert_non_null(strstr(vc_err_msg(), "too small"));
    uint8_t hl[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    assert_null(st_open_memory(hl, sizeof hl, "bad.safetensors"));
    assert_non_null(strstr(vc_err_msg(), "exceeds the file size"));
    /* A header over the 100 MB cap inside a big (lazily zeroed) buffer. */
    size_t big = (101u << 20) + 16;
    uint8_t *bp = calloc(1, big);
    assert_non_null(bp);
    uint64_t h = 101u << 20;
    memcpy(bp, &h, 8);
    assert_null(st_open_memory(bp, big, "bad.safetensors"));
    assert_non_null(strstr(vc_err_msg(), "is larger than"));
    free(bp);
    /* Empty object: a valid file with no tensors. */
    size_t n;
    uint8_t *p = image("{}", NULL, 0, &n);
    st_model *m = st_open_memory(p, n, "empty.safetensors");
    assert_non_null(m);
    assert_int_equal(st_n_tensors(m), 0);
    assert_null(st_find(m, "x"));
    st_close(m);
    free(p);
}

/* ---- directories ---------------------------------------------------------- */

static char g_dir[64];

static void mkdir_tmp(void) {
    strcpy(g_dir, "/tmp/test_st_XXXXXX");
    assert_non_null(mkdtemp(g_dir));
}

static void rm_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    assert_int_equal(system(cmd), 0);
}

static char *path_in(const char *name) {
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return p;
}

static void write_text(const char *name, const char *text) {
    FILE *f = fopen(path_in(name), "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static const char *SHARD1 = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"__metadata__\":{\"format\":\"pt\"}}";
static const char *SHARD2 = "{\"y\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                            "\"z\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]}}";

static void write_shards(void) {
    write_file(path_in("model-00001-of-00002.safetensors"), SHARD1, g_data, 8);
    write_file(path_in("model-00002-of-00002.safetensors"), SHARD2, g_data + 8, 12);
}

static void test_dir_index(void **state) {
    (void)state;
    mkdir_tmp();
    write_shards();
    write_text("model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":20},\"weight_map\":{"
               "\"x\":\"model-00001-of-00002.safetensors\","
               "\"y\":\"model-00002-of-00002.safetensors\","
               "\"z\":\"model-00002-of-00002.safetensors\"}}");
    st_model *m = st_open_dir(g_dir);
    if (!m) fail_msg("%s", vc_err_msg());
    assert_int_equal(st_n_shards(m), 2);
    assert_int_equal(st_n_tensors(m), 3);
    const st_tensor *t = st_find(m, "z");
    assert_non_null(t);
    assert_int_equal(t->shard, 1);
    assert_int_equal(t->dtype, RT_I32);
    assert_int_equal(((const uint8_t *)t->data)[0], 16);
    assert_non_null(strstr(st_shard_path(m, t->shard), "model-00002-of-00002.safetensors"));
    assert_int_equal(st_find(m, "x")->shard, 0);
    assert_string_equal(st_metadata(m, "format"), "pt");
    st_close(m);

    /* Index names a tensor its shard lacks. */
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
               "\"q\":\"model-00002-of-00002.safetensors\"}}");
    assert_null(st_open_dir(g_dir));
    assert_non_null(strstr(vc_err_msg(), "tensor 'q' is mapped to model-00002-of-00002.safetensors"));
    /* Index maps a tensor to the wrong shard. */
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"x\":\"model-00002-of-00002.safetensors\"}}");
    assert_null(st_open_dir(g_dir));
    assert_non_null(strstr(vc_err_msg(), "tensor 'x'"));
    /* Index names a missing shard. */
    write_text("model.safetensors.index.json", "{\"weight_map\":{\"x\":\"model-00009-of-00009.safetensors\"}}");
    assert_null(st_open_dir(g_dir));
    assert_non_null(strstr(vc_err_msg(), "shard 'model-00009-of-00009.safetensors'"));
    assert_non_null(strstr(vc_err_msg(), "does not exist"));
    /* Paths are refused. */
    write_text("model.safetensors.index.json", "{\"weight_map\":{\"x\":\"../etc/passwd\"}}");
    assert_null(st_open_dir(g_dir));
    assert_non_null(strstr(vc_err_msg(), "not a plain file name"));
    write_text("model.safetensors.index.json", "{\"weight_map\":3}");
    assert_null(st_open_dir(g_dir));
    assert_non_null(strstr(vc_err_msg(), "weight_map"));
    write_text("model.safetensors.index.json", "{not json");
    assert_null(st_open_dir(g_dir));
    assert_non_null(strstr(vc_err_msg(), "invalid JSON"));

    /* Without an index: every *.safetensors in the directory. */
    unlink(path_in("model.safetensors.index.json"));
    m = st_open_dir(g_dir);
    if (!m) fail_msg("%s", vc_err_msg());
    assert_int_equal(st_n_tensors(m), 3);
    st_close(m);
    /* A tensor in two shards. */
    write_file(path_in("extra.safetensors"), SHARD1, g_data, 8);
    assert_null(st_open_dir(g_dir));
    assert_non_null(strstr(vc_err_msg(), "tensor 'x' appears in both"));
    /* model.safetensors takes precedence over the glob. */
    write_file(path_in("model.safetensors"), SHARD2, g_data, 12);
    m = st_open_dir(g_dir);
    if (!m) fail_msg("%s", vc_err_msg());
    assert_int_equal(st_n_shards(m), 1);
    assert_non_null(st_find(m, "y"));
    assert_null(st_find(m, "x"));
    st_close(m);
    /* A corrupt shard names its file. */
    write_file(path_in("model.safetensors"), "{\"y\":1}", NULL, 0);
    assert_null(st_open_dir(g_dir));
    assert_non_null(strstr(vc_err_msg(), "model.safetensors: tensor 'y'"));
    rm_dir();

    /* Empty directory and missing directory. */
    mkdir_tmp();
    assert_null(st_open_dir(g_dir));
    assert_non_null(strstr(vc_err_msg(), "no model.safetensors.index.json"));
    rm_dir();
    assert_null(st_open_dir("/nonexistent/dir"));
    assert_null(st_open("/nonexistent/x.safetensors"));
    assert_non_null(strstr(vc_err_msg(), "/nonexistent/x.safetensors"));
}

static void test_open_file(void **state) {
    (void)state;
    mkdir_tmp();
    write_file(path_in("a.safetensors"), GOOD_JSON, g_data, GOOD_DATA_LEN);
    st_model *m = st_open(path_in("a.safetensors"));
    if (!m) fail_msg("%s", vc_err_msg());
    assert_int_equal(st_n_tensors(m), 7);
    const st_tensor *t = st_find(m, "w");
    float f[6];
    memcpy(f, t->data, 24);
    assert_memory_equal(f, g_data, 24);
    st_close(m);
    rm_dir();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_file), cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_corrupt),   cmocka_unit_test(test_dir_index),
        cmocka_unit_test(test_open_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
