/* Tests of the GGUF reader: real files from ../shared (skipped if absent),
 * a synthetic file assembled byte by byte here (independent of our writer),
 * and corrupted variants of it, which must all fail cleanly with a message
 * naming the file and the offending key/tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "model/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHARED VLLM_SHARED_DIR "/models/"

static bool exists(const char *p) { return access(p, R_OK) == 0; }

static bool str_eq(gguf_str s, const char *lit) {
    return s.p && s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

/* ---- real files --------------------------------------------------------- */

static void test_vocab_llama_spm(void **state) {
    (void)state;
    const char *path = SHARED "ggml-vocab/ggml-vocab-llama-spm.gguf";
    if (!exists(path)) skip();
    gguf_ctx *g = gguf_open(path);
    assert_non_null(g);
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_n_tensors(g), 0);
    assert_int_equal(gguf_n_kv(g), 22);
    assert_int_equal(gguf_alignment(g), 32);
    assert_string_equal(gguf_get_string(g, "general.architecture"), "llama");
    assert_string_equal(gguf_get_string(g, "tokenizer.ggml.model"), "llama");
    uint32_t u;
    assert_true(gguf_get_u32(g, "llama.embedding_length", &u));
    assert_int_equal(u, 4096);
    assert_true(gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u));
    assert_int_equal(u, 1);
    float f;
    assert_true(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f));
    assert_true(f > 0.99e-5f && f < 1.01e-5f);
    bool b = false;
    assert_true(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b));
    assert_true(b);
    assert_true(gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b));
    assert_false(b);
    gguf_type et;
    uint64_t n;
    assert_true(gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n));
    assert_int_equal(et, GGUF_TYPE_STRING);
    assert_int_equal(n, 32000);
    assert_true(str_eq(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 0), "<unk>"));
    assert_true(str_eq(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1), "<s>"));
    assert_true(str_eq(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 100), "<0x61>"));
    assert_true(str_eq(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 31999), "给"));
    assert_null(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 32000).p);
    assert_true(gguf_get_arr_f32(g, "tokenizer.ggml.scores", 31999, &f));
    assert_true(f == -31740.0f);
    int64_t v;
    assert_true(gguf_get_arr_i64(g, "tokenizer.ggml.token_type", 0, &v));
    assert_int_equal(v, 2);
    assert_true(gguf_get_arr_i64(g, "tokenizer.ggml.token_type", 100, &v));
    assert_int_equal(v, 6);
    assert_false(gguf_get_arr_i64(g, "tokenizer.ggml.scores", 0, &v)); /* float array */
    assert_true(gguf_get_arr_data(g, "tokenizer.ggml.scores", &et, &n) != NULL);
    assert_int_equal(et, GGUF_TYPE_FLOAT32);
    assert_null(gguf_get_arr_data(g, "tokenizer.ggml.tokens", &et, &n));
    assert_int_equal(gguf_find_key(g, "nope"), -1);
    int64_t i = gguf_find_key(g, "general.name");
    assert_true(i >= 0);
    assert_string_equal(gguf_kv_key(g, i), "general.name");
    assert_int_equal(gguf_kv_type(g, i), GGUF_TYPE_STRING);
    gguf_close(g);
}

static void test_vocab_gpt2(void **state) {
    (void)state;
    const char *path = SHARED "ggml-vocab/ggml-vocab-gpt-2.gguf";
    if (!exists(path)) skip();
    gguf_ctx *g = gguf_open(path);
    assert_non_null(g);
    gguf_type et;
    uint64_t n;
    assert_true(gguf_get_arr_info(g, "tokenizer.ggml.merges", &et, &n));
    assert_int_equal(n, 50000);
    assert_true(str_eq(gguf_get_arr_str(g, "tokenizer.ggml.merges", 0), "Ġ t"));
    assert_true(str_eq(gguf_get_arr_str(g, "tokenizer.ggml.merges", 49999), "Ġg azed"));
    assert_true(gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n));
    assert_int_equal(n, 50257);
    assert_true(str_eq(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 50256), "<|endoftext|>"));
    uint32_t u;
    assert_true(gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u));
    assert_int_equal(u, 50256);
    gguf_close(g);
}

static void test_tiny_random(void **state) {
    (void)state;
    const char *path = SHARED "llama-2-tiny-random-gguf/llama-2-tiny-random.gguf";
    if (!exists(path)) skip();
    gguf_ctx *g = gguf_open(path);
    assert_non_null(g);
    assert_int_equal(gguf_n_tensors(g), 12);
    assert_int_equal(gguf_data_offset(g), 724416);
    const gguf_tensor_info *t = gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 32000);
    assert_int_equal(t->shape[1], 8);
    assert_int_equal(t->dtype, RT_F16);
    assert_int_equal(t->ggml_type, 1);
    assert_int_equal(t->nbytes, 512000);
    t = gguf_find_tensor(g, "blk.0.ffn_down.weight"); /* ggml ne {32, 8} */
    assert_non_null(t);
    assert_int_equal(t->shape[0], 8);
    assert_int_equal(t->shape[1], 32);
    t = gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_non_null(t);
    uint16_t h[3];
    memcpy(h, t->data, sizeof h);
    assert_true(rt_f16_to_f32(h[0]) > 0.0242f && rt_f16_to_f32(h[0]) < 0.0243f);
    assert_true(rt_f16_to_f32(h[2]) < -0.0508f && rt_f16_to_f32(h[2]) > -0.0510f);
    t = gguf_find_tensor(g, "output_norm.weight");
    assert_non_null(t);
    assert_int_equal(t->ndim, 1);
    assert_int_equal(t->dtype, RT_F32);
    assert_null(gguf_find_tensor(g, "missing"));
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        t = gguf_tensor(g, i);
        assert_non_null(t);
        assert_ptr_equal(gguf_find_tensor(g, t->name), t);
        assert_int_equal(t->offset % 32, 0);
    }
    assert_null(gguf_tensor(g, 12));
    assert_null(gguf_tensor(g, -1));
    gguf_close(g);
}

static void test_missing_file(void **state) {
    (void)state;
    assert_null(gguf_open("/nonexistent/x.gguf"));
    assert_non_null(strstr(vc_err_msg(), "/nonexistent/x.gguf"));
}

/* ---- synthetic files ---------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void u32(buf *b, uint32_t v) { put(b, &v, 4); } /* test host is little-endian */
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void key(buf *b, const char *k, uint32_t type) { str(b, k); u32(b, type); }

/* Knobs for corrupting the synthetic file. */
typedef struct {
    uint32_t magic, version;
    uint64_t n_kv_extra;      /* added to the true count */
    uint64_t n_tensors_extra;
    uint32_t align_type;      /* type of general.alignment */
    uint32_t align;           /* value of general.alignment */
    uint32_t ttype;           /* ggml type of tensor "a" */
    uint32_t ndims;           /* n_dims of tensor "b" */
    uint64_t off_b;           /* data offset of tensor "b" */
    const char *name_b;       /* name of tensor "b" */
    const char *key_dup;      /* name of the last key */
    int nest;                 /* nesting depth of the nested array */
    uint64_t str_len_override;
} knobs;

static knobs default_knobs(void) {
    knobs k = {.magic = 0x46554747u, .version = 3, .align_type = GGUF_TYPE_UINT32, .align = 64,
               .ttype = 0, .ndims = 1, .off_b = 64, .name_b = "b", .key_dup = "last", .nest = 2};
    return k;
}

#define N_KV 21

/* Tensors: "a" F32 ne {3, 2} (shape {2, 3}) at 0, 24 bytes; "b" F16 ne {4}
 * at 64, 8 bytes. The file ends exactly at the end of b's data, so any
 * truncation must be detected. */
static buf build(const knobs *k) {
    buf b = {0};
    u32(&b, k->magic);
    u32(&b, k->version);
    u64(&b, 2 + k->n_tensors_extra);
    u64(&b, N_KV + k->n_kv_extra);
    key(&b, "general.alignment", k->align_type);
    if (k->align_type == GGUF_TYPE_STRING) str(&b, "64"); else u32(&b, k->align);
    key(&b, "v.u8", GGUF_TYPE_UINT8); u8(&b, 200);
    key(&b, "v.i8", GGUF_TYPE_INT8); u8(&b, (uint8_t)-5);
    key(&b, "v.u16", GGUF_TYPE_UINT16); u8(&b, 0x34); u8(&b, 0x12);
    key(&b, "v.i16", GGUF_TYPE_INT16); u8(&b, 0xff); u8(&b, 0xff);
    key(&b, "v.u32", GGUF_TYPE_UINT32); u32(&b, 4000000000u);
    key(&b, "v.i32", GGUF_TYPE_INT32); u32(&b, (uint32_t)-70000);
    key(&b, "v.f32", GGUF_TYPE_FLOAT32); { float f = 1.5f; put(&b, &f, 4); }
    key(&b, "v.bool", GGUF_TYPE_BOOL); u8(&b, 1);
    key(&b, "v.str", GGUF_TYPE_STRING);
    if (k->str_len_override) { u64(&b, k->str_len_override); put(&b, "hello", 5); } else str(&b, "hello");
    key(&b, "v.u64", GGUF_TYPE_UINT64); u64(&b, UINT64_MAX);
    key(&b, "v.i64", GGUF_TYPE_INT64); u64(&b, (uint64_t)INT64_MIN);
    key(&b, "v.f64", GGUF_TYPE_FLOAT64); { double d = -2.25; put(&b, &d, 8); }
    key(&b, "a.i32", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_INT32); u64(&b, 3);
    u32(&b, 1); u32(&b, (uint32_t)-2); u32(&b, 3);
    key(&b, "a.str", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_STRING); u64(&b, 3);
    str(&b, "x"); str(&b, ""); str(&b, "zz");
    key(&b, "a.f32", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_FLOAT32); u64(&b, 2);
    { float f[2] = {0.5f, -4.0f}; put(&b, f, 8); }
    key(&b, "a.u64", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_UINT64); u64(&b, 2);
    u64(&b, 7); u64(&b, UINT64_MAX);
    key(&b, "a.empty", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_UINT8); u64(&b, 0);
    /* Array of (nest-1 levels of) arrays, innermost holding 2 strings. */
    key(&b, "a.nested", GGUF_TYPE_ARRAY);
    for (int d = 0; d < k->nest - 1; d++) { u32(&b, GGUF_TYPE_ARRAY); u64(&b, 1); }
    u32(&b, GGUF_TYPE_STRING); u64(&b, 2); str(&b, "p"); str(&b, "q");
    key(&b, "a.bool", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_BOOL); u64(&b, 2); u8(&b, 0); u8(&b, 1);
    key(&b, k->key_dup, GGUF_TYPE_UINT8); u8(&b, 1);
    /* tensor infos */
    str(&b, "a"); u32(&b, 2); u64(&b, 3); u64(&b, 2); u32(&b, k->ttype); u64(&b, 0);
    str(&b, k->name_b); u32(&b, k->ndims);
    for (uint32_t d = 0; d < k->ndims && d < 8; d++) u64(&b, d == 0 ? 4 : 1);
    u32(&b, 1); u64(&b, k->off_b);
    while (b.n % 64) u8(&b, 0);
    for (int i = 0; i < 6; i++) { float f = (float)i; put(&b, &f, 4); }
    while (b.n % 64) u8(&b, 0);
    uint16_t h[4] = {0x3c00, 0x4000, 0xbc00, 0};
    put(&b, h, 8);
    return b;
}

static void test_synthetic(void **state) {
    (void)state;
    knobs k = default_knobs();
    buf b = build(&k);
    gguf_ctx *g = gguf_open_memory(b.p, b.n, "synth.gguf");
    if (!g) fail_msg("%s", vc_err_msg());
    assert_string_equal(gguf_path(g), "synth.gguf");
    assert_int_equal(gguf_alignment(g), 64);
    assert_int_equal(gguf_n_kv(g), N_KV);
    uint32_t u;
    int64_t v;
    float f;
    bool bo;
    assert_true(gguf_get_u32(g, "v.u8", &u)); assert_int_equal(u, 200);
    assert_false(gguf_get_u32(g, "v.i8", &u)); /* -5 does not fit */
    assert_true(gguf_get_i64(g, "v.i8", &v)); assert_int_equal(v, -5);
    assert_true(gguf_get_u32(g, "v.u16", &u)); assert_int_equal(u, 0x1234);
    assert_true(gguf_get_i64(g, "v.i16", &v)); assert_int_equal(v, -1);
    assert_true(gguf_get_u32(g, "v.u32", &u)); assert_true(u == 4000000000u);
    assert_true(gguf_get_i64(g, "v.i32", &v)); assert_int_equal(v, -70000);
    assert_true(gguf_get_f32(g, "v.f32", &f)); assert_true(f == 1.5f);
    assert_false(gguf_get_u32(g, "v.f32", &u)); /* float is not an integer */
    assert_true(gguf_get_f32(g, "v.i32", &f)); assert_true(f == -70000.0f);
    assert_true(gguf_get_bool(g, "v.bool", &bo)); assert_true(bo);
    assert_true(gguf_get_u32(g, "v.bool", &u)); assert_int_equal(u, 1);
    assert_false(gguf_get_bool(g, "v.u8", &bo));
    assert_string_equal(gguf_get_string(g, "v.str"), "hello");
    assert_true(str_eq(gguf_get_str(g, "v.str"), "hello"));
    assert_null(gguf_get_string(g, "v.u8"));
    assert_false(gguf_get_i64(g, "v.u64", &v)); /* > INT64_MAX */
    assert_false(gguf_get_u32(g, "v.u64", &u));
    assert_true(gguf_get_i64(g, "v.i64", &v)); assert_true(v == INT64_MIN);
    assert_true(gguf_get_f32(g, "v.f64", &f)); assert_true(f == -2.25f);
    assert_false(gguf_get_u32(g, "absent", &u));

    gguf_type et;
    uint64_t n;
    assert_true(gguf_get_arr_info(g, "a.i32", &et, &n));
    assert_int_equal(et, GGUF_TYPE_INT32); assert_int_equal(n, 3);
    assert_true(gguf_get_arr_i64(g, "a.i32", 1, &v)); assert_int_equal(v, -2);
    assert_true(gguf_get_arr_f32(g, "a.i32", 2, &f)); assert_true(f == 3.0f);
    assert_false(gguf_get_arr_i64(g, "a.i32", 3, &v));
    assert_true(str_eq(gguf_get_arr_str(g, "a.str", 0), "x"));
    assert_true(str_eq(gguf_get_arr_str(g, "a.str", 1), ""));
    assert_true(str_eq(gguf_get_arr_str(g, "a.str", 2), "zz"));
    assert_null(gguf_get_arr_str(g, "a.i32", 0).p);
    assert_true(gguf_get_arr_f32(g, "a.f32", 1, &f)); assert_true(f == -4.0f);
    assert_true(gguf_get_arr_i64(g, "a.u64", 0, &v)); assert_int_equal(v, 7);
    assert_false(gguf_get_arr_i64(g, "a.u64", 1, &v));
    assert_true(gguf_get_arr_info(g, "a.empty", &et, &n)); assert_int_equal(n, 0);
    assert_false(gguf_get_arr_i64(g, "a.empty", 0, &v));
    assert_true(gguf_get_arr_info(g, "a.nested", &et, &n));
    assert_int_equal(et, GGUF_TYPE_ARRAY); assert_int_equal(n, 1);
    assert_false(gguf_get_arr_i64(g, "a.nested", 0, &v));
    assert_null(gguf_get_arr_str(g, "a.nested", 0).p);
    assert_true(gguf_get_arr_i64(g, "a.bool", 1, &v)); assert_int_equal(v, 1);
    assert_false(gguf_get_arr_info(g, "v.u8", &et, &n));

    assert_int_equal(gguf_n_tensors(g), 2);
    const gguf_tensor_info *a = gguf_find_tensor(g, "a"), *tb = gguf_find_tensor(g, "b");
    assert_non_null(a); assert_non_null(tb);
    assert_int_equal(a->ndim, 2);
    assert_int_equal(a->shape[0], 2); assert_int_equal(a->shape[1], 3);
    assert_int_equal(a->nbytes, 24);
    assert_int_equal(a->dtype, RT_F32);
    float av[6];
    memcpy(av, a->data, 24);
    assert_true(av[5] == 5.0f);
    assert_int_equal(tb->shape[0], 4);
    assert_int_equal(tb->dtype, RT_F16);
    assert_int_equal(tb->nbytes, 8);
    assert_ptr_equal(tb->data, b.p + b.n - 8);
    assert_int_equal(gguf_data_offset(g) % 64, 0);
    gguf_close(g);
    free(b.p);
}

/* Truncating the file at every byte must fail cleanly. */
static void test_truncated_everywhere(void **state) {
    (void)state;
    knobs k = default_knobs();
    buf b = build(&k);
    /* Exact-size heap copies, so ASan/valgrind see any read past the end. */
    for (size_t n = 0; n <= b.n; n++) {
        void *p = malloc(n ? n : 1);
        assert_non_null(p);
        memcpy(p, b.p, n);
        gguf_ctx *g = gguf_open_memory(p, n, "synth.gguf");
        if (n < b.n) {
            if (g) fail_msg("truncation at %zu bytes (of %zu) was accepted", n, b.n);
            assert_non_null(strstr(vc_err_msg(), "synth.gguf"));
        } else {
            assert_non_null(g);
            gguf_close(g);
        }
        free(p);
    }
    free(b.p);
}

/* One corruption: apply `mut` to the knobs, expect failure with `want` in the message. */
static void expect_fail(knobs k, const char *want) {
    buf b = build(&k);
    gguf_ctx *g = gguf_open_memory(b.p, b.n, "synth.gguf");
    if (g) fail_msg("corruption expecting '%s' was accepted", want);
    const char *msg = vc_err_msg();
    if (!strstr(msg, want) || !strstr(msg, "synth.gguf"))
        fail_msg("message '%s' lacks '%s'", msg, want);
    free(b.p);
}

static void test_corruptions(void **state) {
    (void)state;
    knobs k;
    k = default_knobs(); k.magic = 0x46554746u; expect_fail(k, "not a GGUF file");
    k = default_knobs(); k.version = 1; expect_fail(k, "v1 is not supported");
    k = default_knobs(); k.version = 4; expect_fail(k, "unsupported GGUF version 4");
    k = default_knobs(); k.version = 0x03000000u; expect_fail(k, "big-endian");
    k = default_knobs(); k.n_kv_extra = UINT64_MAX / 2; expect_fail(k, "metadata count");
    k = default_knobs(); k.n_kv_extra = 1; expect_fail(k, "tensor info 0: tensor name length"); /* tensor "a" eaten as a key */
    k = default_knobs(); k.n_tensors_extra = 1ull << 60; expect_fail(k, "tensor count");
    k = default_knobs(); k.n_tensors_extra = 1; expect_fail(k, "tensor '': n_dims 0"); /* read from padding */
    k = default_knobs(); k.align = 48; expect_fail(k, "not a power of two");
    k = default_knobs(); k.align = 0; expect_fail(k, "not a power of two");
    k = default_knobs(); k.align_type = GGUF_TYPE_STRING; expect_fail(k, "general.alignment");
    k = default_knobs(); k.ttype = 99; expect_fail(k, "tensor 'a': unknown ggml type id 99");
    k = default_knobs(); k.ttype = 4; expect_fail(k, "tensor 'a': ggml type 4 (Q4_2) was removed");
    k = default_knobs(); k.ttype = 2; expect_fail(k, "not a multiple of the Q4_0 block size 32");
    k = default_knobs(); k.ndims = 0; expect_fail(k, "tensor 'b': n_dims 0");
    k = default_knobs(); k.ndims = 5; expect_fail(k, "tensor 'b': n_dims 5");
    k = default_knobs(); k.off_b = 32; expect_fail(k, "tensor 'b': data offset 32 is not a multiple");
    k = default_knobs(); k.off_b = 128; expect_fail(k, "tensor 'b': data offset 128 past end of file");
    k = default_knobs(); k.off_b = 1ull << 62; expect_fail(k, "past end of file");
    k = default_knobs(); k.off_b = 0; expect_fail(k, "overlaps tensor 'a'");
    k = default_knobs(); k.name_b = "a"; expect_fail(k, "duplicate tensor name");
    k = default_knobs(); k.key_dup = "v.u8"; expect_fail(k, "key 'v.u8': duplicate key");
    k = default_knobs(); k.nest = 9; expect_fail(k, "nested deeper");
    k = default_knobs(); k.str_len_override = 1ull << 40; expect_fail(k, "key 'v.str': string value length");
}

/* A tensor whose data extends past EOF (offset fine, size not) and a string
 * with an invalid value type, patched into an otherwise valid file. */
static void test_patched(void **state) {
    (void)state;
    knobs k = default_knobs();
    buf b = build(&k);
    /* Drop the last 4 bytes: b's data [64, +8) no longer fits. */
    gguf_ctx *g = gguf_open_memory(b.p, b.n - 4, "synth.gguf");
    assert_null(g);
    assert_non_null(strstr(vc_err_msg(), "tensor 'b': data [64, +8) extends past end of file"));
    /* Invalid value type for "v.u8": find the key and patch the type field. */
    uint8_t *p = memmem(b.p, b.n, "v.u8", 4);
    assert_non_null(p);
    memcpy(p + 4, &(uint32_t){77}, 4);
    assert_null(gguf_open_memory(b.p, b.n, "synth.gguf"));
    assert_non_null(strstr(vc_err_msg(), "key 'v.u8': invalid value type 77"));
    /* Invalid array element type. */
    memcpy(p + 4, &(uint32_t){GGUF_TYPE_UINT8}, 4);
    p = memmem(b.p, b.n, "a.i32", 5);
    assert_non_null(p);
    memcpy(p + 5 + 4, &(uint32_t){13}, 4);
    assert_null(gguf_open_memory(b.p, b.n, "synth.gguf"));
    assert_non_null(strstr(vc_err_msg(), "key 'a.i32': array has invalid element type 13"));
    /* Huge array length. */
    memcpy(p + 5 + 4, &(uint32_t){GGUF_TYPE_INT32}, 4);
    memcpy(p + 5 + 8, &(uint64_t){1ull << 61}, 8);
    assert_null(gguf_open_memory(b.p, b.n, "synth.gguf"));
    assert_non_null(strstr(vc_err_msg(), "key 'a.i32': array length"));
    memcpy(p + 5 + 8, &(uint64_t){3}, 8);
    g = gguf_open_memory(b.p, b.n, "synth.gguf"); /* restored: valid again */
    assert_non_null(g);
    gguf_close(g);
    assert_null(gguf_open_memory(NULL, 0, "empty.gguf"));
    assert_non_null(strstr(vc_err_msg(), "empty.gguf: header: file too small"));
    free(b.p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_llama_spm),  cmocka_unit_test(test_vocab_gpt2),
        cmocka_unit_test(test_tiny_random),      cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_synthetic),        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_corruptions),      cmocka_unit_test(test_patched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
