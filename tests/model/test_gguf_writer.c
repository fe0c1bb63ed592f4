/* Tests of the GGUF writer: every value type and several tensor types are
 * written (to memory and to a file) and read back with the reader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static float g_f32[6] = {1, 2, 3, 4, 5, 6};
static uint16_t g_f16[8];
static uint8_t g_q8[2 * 34];  /* Q8_0: 2 rows of 32 */
static uint8_t g_q50[22];     /* Q5_0 (ggml 6): one block of 32 */

static gguf_writer *make(size_t alignment) {
    gguf_writer *w = gguf_w_create(alignment);
    assert_non_null(w);
    assert_int_equal(gguf_w_set_u8(w, "u8", 250), 0);
    assert_int_equal(gguf_w_set_i8(w, "i8", -3), 0);
    assert_int_equal(gguf_w_set_u16(w, "u16", 65000), 0);
    assert_int_equal(gguf_w_set_i16(w, "i16", -32000), 0);
    assert_int_equal(gguf_w_set_u32(w, "u32", 4000000000u), 0);
    assert_int_equal(gguf_w_set_i32(w, "i32", -2000000000), 0);
    assert_int_equal(gguf_w_set_u64(w, "u64", 1ull << 40), 0);
    assert_int_equal(gguf_w_set_i64(w, "i64", -(1ll << 40)), 0);
    assert_int_equal(gguf_w_set_f32(w, "f32", 0.25f), 0);
    assert_int_equal(gguf_w_set_f64(w, "f64", 1e-300), 0);
    assert_int_equal(gguf_w_set_bool(w, "bool", true), 0);
    assert_int_equal(gguf_w_set_str(w, "str", "first"), 0);
    assert_int_equal(gguf_w_set_str(w, "str", "replaced"), 0); /* same key: replaced */
    assert_int_equal(gguf_w_set_strn(w, "strn", "a\0b", 3), 0);
    int32_t ia[3] = {5, -6, 7};
    assert_int_equal(gguf_w_set_arr(w, "arr.i32", GGUF_TYPE_INT32, ia, 3), 0);
    float fa[2] = {0.5f, -1.5f};
    assert_int_equal(gguf_w_set_arr(w, "arr.f32", GGUF_TYPE_FLOAT32, fa, 2), 0);
    uint8_t ba[3] = {0, 1, 7};
    assert_int_equal(gguf_w_set_arr(w, "arr.bool", GGUF_TYPE_BOOL, ba, 3), 0);
    double da[1] = {2.5};
    assert_int_equal(gguf_w_set_arr(w, "arr.f64", GGUF_TYPE_FLOAT64, da, 1), 0);
    assert_int_equal(gguf_w_set_arr(w, "arr.empty", GGUF_TYPE_UINT64, NULL, 0), 0);
    const char *sa[3] = {"<unk>", "", "héllo"};
    assert_int_equal(gguf_w_set_arr_str(w, "arr.str", sa, 3), 0);
    gguf_str sv[2] = {{"x\0y", 3}, {"zz", 2}};
    assert_int_equal(gguf_w_set_arr_strn(w, "arr.strn", sv, 2), 0);
    /* array of 2 arrays of u8: [[1,2],[3]] given raw */
    uint8_t raw[] = {GGUF_TYPE_UINT8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
                     GGUF_TYPE_UINT8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 2,
                     GGUF_TYPE_UINT8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3};
    raw[0] = GGUF_TYPE_ARRAY;
    assert_int_equal(gguf_w_set_raw(w, "arr.nested", GGUF_TYPE_ARRAY, raw, sizeof raw), 0);

    int64_t s23[2] = {2, 3}, s8[1] = {8}, s2x32[2] = {2, 32}, s32[1] = {32};
    assert_int_equal(gguf_w_add_tensor(w, "t.f32", RT_F32, 2, s23, g_f32, sizeof g_f32), 0);
    assert_int_equal(gguf_w_add_tensor(w, "t.f16", RT_F16, 1, s8, g_f16, sizeof g_f16), 0);
    assert_int_equal(gguf_w_add_tensor(w, "t.q8", RT_Q8_0, 2, s2x32, g_q8, sizeof g_q8), 0);
    assert_int_equal(gguf_w_add_tensor_ggml(w, "t.q5_0", 6, 1, s32, g_q50, sizeof g_q50), 0);
    assert_int_equal(gguf_w_add_tensor(w, "t.empty", RT_F32, 2, (int64_t[]){0, 4}, NULL, 0), 0);
    return w;
}

static bool str_eq(gguf_str s, const char *p, size_t n) { return s.p && s.n == n && !memcmp(s.p, p, n); }

static void check(const gguf_ctx *g, size_t alignment) {
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_alignment(g), alignment);
    uint32_t u;
    int64_t v;
    float f;
    bool b;
    assert_true(gguf_get_u32(g, "u8", &u)); assert_int_equal(u, 250);
    assert_true(gguf_get_i64(g, "i8", &v)); assert_int_equal(v, -3);
    assert_true(gguf_get_u32(g, "u16", &u)); assert_int_equal(u, 65000);
    assert_true(gguf_get_i64(g, "i16", &v)); assert_int_equal(v, -32000);
    assert_true(gguf_get_u32(g, "u32", &u)); assert_true(u == 4000000000u);
    assert_true(gguf_get_i64(g, "i32", &v)); assert_int_equal(v, -2000000000);
    assert_true(gguf_get_i64(g, "u64", &v)); assert_int_equal(v, 1ll << 40);
    assert_true(gguf_get_i64(g, "i64", &v)); assert_int_equal(v, -(1ll << 40));
    assert_true(gguf_get_f32(g, "f32", &f)); assert_true(f == 0.25f);
    assert_int_equal(gguf_kv_type(g, gguf_find_key(g, "f64")), GGUF_TYPE_FLOAT64);
    assert_true(gguf_get_bool(g, "bool", &b)); assert_true(b);
    assert_string_equal(gguf_get_string(g, "str"), "replaced");
    assert_true(str_eq(gguf_get_str(g, "strn"), "a\0b", 3));
    assert_string_equal(gguf_get_string(g, "strn"), "a"); /* embedded NUL truncates */
    assert_true(gguf_get_arr_i64(g, "arr.i32", 1, &v)); assert_int_equal(v, -6);
    assert_true(gguf_get_arr_f32(g, "arr.f32", 1, &f)); assert_true(f == -1.5f);
    assert_true(gguf_get_arr_i64(g, "arr.bool", 2, &v)); assert_int_equal(v, 1);
    assert_true(gguf_get_arr_f32(g, "arr.f64", 0, &f)); assert_true(f == 2.5f);
    gguf_type et;
    uint64_t n;
    assert_true(gguf_get_arr_info(g, "arr.empty", &et, &n));
    assert_int_equal(et, GGUF_TYPE_UINT64); assert_int_equal(n, 0);
    assert_true(str_eq(gguf_get_arr_str(g, "arr.str", 0), "<unk>", 5));
    assert_true(str_eq(gguf_get_arr_str(g, "arr.str", 1), "", 0));
    assert_true(str_eq(gguf_get_arr_str(g, "arr.str", 2), "héllo", strlen("héllo")));
    assert_true(str_eq(gguf_get_arr_str(g, "arr.strn", 0), "x\0y", 3));
    assert_true(gguf_get_arr_info(g, "arr.nested", &et, &n));
    assert_int_equal(et, GGUF_TYPE_ARRAY); assert_int_equal(n, 2);
    /* key order is insertion order; "str" kept its first slot */
    int64_t first = gguf_kv_key(g, 0) && !strcmp(gguf_kv_key(g, 0), "general.alignment") ? 1 : 0;
    assert_string_equal(gguf_kv_key(g, first), "u8");
    assert_string_equal(gguf_kv_key(g, first + 11), "str");

    assert_int_equal(gguf_n_tensors(g), 5);
    const gguf_tensor_info *t = gguf_find_tensor(g, "t.f32");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2); assert_int_equal(t->shape[1], 3);
    assert_memory_equal(t->data, g_f32, sizeof g_f32);
    t = gguf_find_tensor(g, "t.f16");
    assert_int_equal(t->dtype, RT_F16);
    assert_memory_equal(t->data, g_f16, sizeof g_f16);
    t = gguf_find_tensor(g, "t.q8");
    assert_int_equal(t->dtype, RT_Q8_0);
    assert_int_equal(t->shape[0], 2); assert_int_equal(t->shape[1], 32);
    assert_memory_equal(t->data, g_q8, sizeof g_q8);
    t = gguf_find_tensor(g, "t.q5_0");
    assert_int_equal(t->dtype, -1);
    assert_int_equal(t->ggml_type, 6);
    assert_int_equal(t->nbytes, 22);
    assert_memory_equal(t->data, g_q50, sizeof g_q50);
    t = gguf_find_tensor(g, "t.empty");
    assert_int_equal(t->nbytes, 0);
    assert_int_equal(t->shape[0], 0); assert_int_equal(t->shape[1], 4);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) assert_int_equal(gguf_tensor(g, i)->offset % alignment, 0);
}

static void test_roundtrip_memory(void **state) {
    (void)state;
    for (int i = 0; i < 8; i++) g_f16[i] = rt_f32_to_f16((float)i - 3.5f);
    for (size_t i = 0; i < sizeof g_q8; i++) g_q8[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof g_q50; i++) g_q50[i] = (uint8_t)(255 - i);
    size_t aligns[3] = {0, 64, 4096};
    for (int k = 0; k < 3; k++) {
        gguf_writer *w = make(aligns[k]);
        void *buf;
        size_t size;
        assert_int_equal(gguf_w_write_memory(w, &buf, &size), 0);
        gguf_ctx *g = gguf_open_memory(buf, size, "mem.gguf");
        if (!g) fail_msg("%s", vc_err_msg());
        check(g, aligns[k] ? aligns[k] : 32);
        gguf_close(g);
        free(buf);
        gguf_w_free(w);
    }
}

static void test_roundtrip_file(void **state) {
    (void)state;
    char path[] = "/tmp/test_gguf_writer_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    gguf_writer *w = make(128);
    assert_int_equal(gguf_w_write_file(w, path), 0);
    void *buf;
    size_t size;
    assert_int_equal(gguf_w_write_memory(w, &buf, &size), 0);
    gguf_w_free(w);
    gguf_ctx *g = gguf_open(path);
    if (!g) fail_msg("%s", vc_err_msg());
    check(g, 128);
    gguf_close(g);
    /* The file and the memory image are byte-identical. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *fb = malloc(size + 1);
    assert_int_equal(fread(fb, 1, size + 1, f), size);
    fclose(f);
    assert_memory_equal(fb, buf, size);
    free(fb);
    free(buf);
    unlink(path);
}

static void test_errors(void **state) {
    (void)state;
    assert_null(gguf_w_create(48));
    gguf_writer *w = gguf_w_create(0);
    assert_non_null(w);
    int64_t s4[1] = {4}, s0[1] = {32};
    float d[4] = {0};
    assert_int_equal(gguf_w_add_tensor(w, "a", RT_F32, 1, s4, d, 16), 0);
    assert_true(gguf_w_add_tensor(w, "a", RT_F32, 1, s4, d, 16) < 0);
    assert_non_null(strstr(vc_err_msg(), "duplicate tensor 'a'"));
    assert_true(gguf_w_add_tensor(w, "b", RT_F32, 1, s4, d, 12) < 0);
    assert_non_null(strstr(vc_err_msg(), "12 bytes given, shape needs 16"));
    assert_true(gguf_w_add_tensor(w, "c", RT_F32, 5, s4, d, 16) < 0);
    assert_true(gguf_w_add_tensor(w, "c", RT_F32, 0, s4, d, 16) < 0);
    assert_true(gguf_w_add_tensor(w, "c", RT_Q4_0, 1, s4, d, 16) < 0);
    assert_non_null(strstr(vc_err_msg(), "not a multiple of 32"));
    assert_true(gguf_w_add_tensor_ggml(w, "c", 4, 1, s0, d, 16) < 0); /* removed Q4_2 */
    assert_true(gguf_w_add_tensor_ggml(w, "c", 999, 1, s0, d, 16) < 0);
    assert_true(gguf_w_add_tensor(w, "c", RT_F32, 1, (int64_t[]){-1}, d, 0) < 0);
    assert_true(gguf_w_set_arr(w, "k", GGUF_TYPE_STRING, d, 1) < 0);
    assert_true(gguf_w_set_raw(w, "k", (gguf_type)77, d, 1) < 0);
    assert_true(gguf_w_set_str(w, "k", NULL) < 0);
    assert_true(gguf_w_write_file(w, "/nonexistent/dir/x.gguf") < 0);
    assert_non_null(strstr(vc_err_msg(), "/nonexistent/dir/x.gguf"));
    gguf_w_free(w);
    gguf_w_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_memory),
        cmocka_unit_test(test_roundtrip_file),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
