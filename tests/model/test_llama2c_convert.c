/* Tests of tools/llama2c_convert.c (compiled in here without its main):
 * a synthetic untied checkpoint whose every tensor is checked against its
 * source bytes, bad/truncated inputs, and the real stories260K (skipped
 * if ../shared is absent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#define LLAMA2C_CONVERT_NO_MAIN
#include "../../tools/llama2c_convert.c"

#include "model/gguf.h"

#include <unistd.h>

#define SHARED VLLM_SHARED_DIR "/models/stories260K/"

static char g_dir[64];
static char g_path[4][256]; /* model, tokenizer, out, scratch */

static void setup_dir(void) {
    strcpy(g_dir, "/tmp/test_l2c_XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    const char *names[4] = {"m.bin", "t.bin", "o.gguf", "x.bin"};
    for (int i = 0; i < 4; i++) snprintf(g_path[i], sizeof g_path[i], "%s/%s", g_dir, names[i]);
}

static void cleanup_dir(void) {
    for (int i = 0; i < 4; i++) unlink(g_path[i]);
    rmdir(g_dir);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* dim 8, hidden 12, 2 layers, 4 heads, 2 kv heads (kv_dim 4), vocab 260
 * untied, seq 3. Weight value i = float(i) so each tensor's origin is
 * checkable. */
enum { D = 8, H = 12, L = 2, NH = 4, NKV = 2, V = 260, S = 3, HD = D / NH, KV = HD * NKV };
#define N_FLOATS (V * D + L * D + L * D * D + 2 * L * KV * D + L * D * D + L * D + 3 * L * H * D + D + S * HD + V * D)

static void synth_model(const char *path, int32_t vocab_field, size_t cut) {
    size_t n = 28 + 4 * (size_t)N_FLOATS;
    uint8_t *b = malloc(n);
    assert_non_null(b);
    int32_t hdr[7] = {D, H, L, NH, NKV, vocab_field, S};
    memcpy(b, hdr, 28);
    for (int i = 0; i < N_FLOATS; i++) {
        float f = (float)i;
        memcpy(b + 28 + 4 * i, &f, 4);
    }
    write_bytes(path, b, n - cut);
    free(b);
}

/* 260 tokens: <unk>, \n<s>\n, \n</s>\n, <0x00>..<0xFF>, " hi". */
static void synth_tok(const char *path, int n_tokens, bool trailing) {
    uint8_t b[8192];
    size_t k = 0;
    int32_t maxlen = 6;
    memcpy(b, &maxlen, 4);
    k = 4;
    for (int i = 0; i < n_tokens; i++) {
        char s[16];
        if (i == 0) strcpy(s, "<unk>");
        else if (i == 1) strcpy(s, "\n<s>\n");
        else if (i == 2) strcpy(s, "\n</s>\n");
        else if (i < 259) snprintf(s, sizeof s, "<0x%02X>", i - 3);
        else strcpy(s, " hi");
        float score = (float)-i;
        int32_t len = (int32_t)strlen(s);
        memcpy(b + k, &score, 4);
        memcpy(b + k + 4, &len, 4);
        memcpy(b + k + 8, s, (size_t)len);
        k += 8 + (size_t)len;
    }
    if (trailing) b[k++] = 0;
    write_bytes(path, b, k);
}

static float first_f32(const gguf_tensor_info *t) {
    float f;
    memcpy(&f, t->data, 4);
    return f;
}

static void test_synthetic_untied(void **state) {
    (void)state;
    setup_dir();
    synth_model(g_path[0], -V, 0);
    synth_tok(g_path[1], V, false);
    if (l2c_convert(g_path[0], g_path[1], g_path[2]) < 0) fail_msg("%s", vc_err_msg());
    gguf_ctx *g = gguf_open(g_path[2]);
    assert_non_null(g);
    assert_string_equal(gguf_get_string(g, "general.architecture"), "llama");
    assert_string_equal(gguf_get_string(g, "general.name"), "m");
    uint32_t u;
    float f;
    assert_true(gguf_get_u32(g, "llama.embedding_length", &u)); assert_int_equal(u, D);
    assert_true(gguf_get_u32(g, "llama.feed_forward_length", &u)); assert_int_equal(u, H);
    assert_true(gguf_get_u32(g, "llama.block_count", &u)); assert_int_equal(u, L);
    assert_true(gguf_get_u32(g, "llama.attention.head_count", &u)); assert_int_equal(u, NH);
    assert_true(gguf_get_u32(g, "llama.attention.head_count_kv", &u)); assert_int_equal(u, NKV);
    assert_true(gguf_get_u32(g, "llama.rope.dimension_count", &u)); assert_int_equal(u, HD);
    assert_true(gguf_get_u32(g, "llama.context_length", &u)); assert_int_equal(u, S);
    assert_true(gguf_get_f32(g, "llama.rope.freq_base", &f)); assert_true(f == 10000.0f);
    assert_true(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f)); assert_true(f == 1e-5f);
    gguf_str s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1);
    assert_true(s.n == 3 && !memcmp(s.p, "<s>", 3));
    s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", 259);
    assert_true(s.n == 5 && !memcmp(s.p, "\xe2\x96\x81hi", 5));
    int64_t v;
    assert_true(gguf_get_arr_i64(g, "tokenizer.ggml.token_type", 0, &v)); assert_int_equal(v, 2);
    assert_true(gguf_get_arr_i64(g, "tokenizer.ggml.token_type", 2, &v)); assert_int_equal(v, 3);
    assert_true(gguf_get_arr_i64(g, "tokenizer.ggml.token_type", 3, &v)); assert_int_equal(v, 6);
    assert_true(gguf_get_arr_i64(g, "tokenizer.ggml.token_type", 258, &v)); assert_int_equal(v, 6);
    assert_true(gguf_get_arr_i64(g, "tokenizer.ggml.token_type", 259, &v)); assert_int_equal(v, 1);
    assert_true(gguf_get_arr_f32(g, "tokenizer.ggml.scores", 259, &f)); assert_true(f == -259.0f);

    /* Expected start offsets (in floats) of each source array. */
    size_t o_emb = 0, o_ra = o_emb + V * D, o_wq = o_ra + L * D, o_wk = o_wq + L * D * D,
           o_wv = o_wk + L * KV * D, o_wo = o_wv + L * KV * D, o_rf = o_wo + L * D * D,
           o_w1 = o_rf + L * D, o_w2 = o_w1 + L * H * D, o_w3 = o_w2 + L * D * H,
           o_fin = o_w3 + L * H * D, o_cls = o_fin + D + S * HD;
    struct { const char *n; int64_t s0, s1; size_t off; } want[] = {
        {"token_embd.weight", V, D, o_emb},
        {"blk.1.attn_norm.weight", D, 1, o_ra + D},
        {"blk.1.attn_q.weight", D, D, o_wq + D * D},
        {"blk.1.attn_k.weight", KV, D, o_wk + KV * D},
        {"blk.0.attn_v.weight", KV, D, o_wv},
        {"blk.1.attn_output.weight", D, D, o_wo + D * D},
        {"blk.1.ffn_norm.weight", D, 1, o_rf + D},
        {"blk.1.ffn_gate.weight", H, D, o_w1 + H * D},
        {"blk.1.ffn_down.weight", D, H, o_w2 + D * H},
        {"blk.1.ffn_up.weight", H, D, o_w3 + H * D},
        {"output_norm.weight", D, 1, o_fin},
        {"output.weight", V, D, o_cls},
    };
    assert_int_equal(gguf_n_tensors(g), 1 + 9 * L + 2);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const gguf_tensor_info *t = gguf_find_tensor(g, want[i].n);
        if (!t) fail_msg("missing %s", want[i].n);
        assert_int_equal(t->dtype, RT_F32);
        assert_int_equal(t->shape[0], want[i].s0);
        if (want[i].s1 > 1) assert_int_equal(t->shape[1], want[i].s1);
        else assert_int_equal(t->ndim, 1);
        if (first_f32(t) != (float)want[i].off) fail_msg("%s starts with %g, want %zu", want[i].n, first_f32(t), want[i].off);
        float last;
        memcpy(&last, (const uint8_t *)t->data + t->nbytes - 4, 4);
        assert_true(last == (float)(want[i].off + t->nbytes / 4 - 1));
    }
    gguf_close(g);

    /* Tied: same weights minus the classifier; no output.weight. */
    FILE *fp = fopen(g_path[0], "r+b");
    assert_non_null(fp);
    assert_int_equal(ftruncate(fileno(fp), 28 + 4 * (N_FLOATS - V * D)), 0);
    int32_t vv = V;
    fseek(fp, 20, SEEK_SET);
    fwrite(&vv, 4, 1, fp);
    fclose(fp);
    if (l2c_convert(g_path[0], g_path[1], g_path[2]) < 0) fail_msg("%s", vc_err_msg());
    g = gguf_open(g_path[2]);
    assert_non_null(g);
    assert_null(gguf_find_tensor(g, "output.weight"));
    assert_int_equal(gguf_n_tensors(g), 1 + 9 * L + 1);
    gguf_close(g);
    cleanup_dir();
}

static void expect_err(const char *want) {
    assert_true(l2c_convert(g_path[0], g_path[1], g_path[2]) < 0);
    if (!strstr(vc_err_msg(), want)) fail_msg("message '%s' lacks '%s'", vc_err_msg(), want);
}

static void test_bad_inputs(void **state) {
    (void)state;
    setup_dir();
    synth_tok(g_path[1], V, false);
    synth_model(g_path[0], -V, 4);
    expect_err("needs exactly");
    synth_model(g_path[0], V, 0); /* tied header, untied size */
    expect_err("needs exactly");
    int32_t bad[7] = {D, H, L, 0, NKV, V, S};
    write_bytes(g_path[0], bad, 28);
    expect_err("bad header");
    int32_t odd[7] = {D, H, L, 3, 1, V, S};
    write_bytes(g_path[0], odd, 28);
    expect_err("inconsistent");
    write_bytes(g_path[0], bad, 10);
    expect_err("too small");
    synth_model(g_path[0], -V, 0);
    synth_tok(g_path[1], V - 1, false);
    expect_err("truncated at token 259");
    synth_tok(g_path[1], V, true);
    expect_err("1 trailing bytes");
    int32_t t0[3] = {4, 0, 99}; /* max_len 4, token 0 with length 99 */
    write_bytes(g_path[1], t0, sizeof t0);
    expect_err("token 0: bad length 99");
    unlink(g_path[1]);
    expect_err("t.bin");
    cleanup_dir();
}

static void test_stories260k(void **state) {
    (void)state;
    const char *model = SHARED "stories260K.bin", *tok = SHARED "tok512.bin";
    if (access(model, R_OK) || access(tok, R_OK)) skip();
    setup_dir();
    if (l2c_convert(model, tok, g_path[2]) < 0) fail_msg("%s", vc_err_msg());
    gguf_ctx *g = gguf_open(g_path[2]);
    assert_non_null(g);
    uint32_t u;
    assert_true(gguf_get_u32(g, "llama.embedding_length", &u)); assert_int_equal(u, 64);
    assert_true(gguf_get_u32(g, "llama.feed_forward_length", &u)); assert_int_equal(u, 172);
    assert_true(gguf_get_u32(g, "llama.block_count", &u)); assert_int_equal(u, 5);
    assert_true(gguf_get_u32(g, "llama.attention.head_count", &u)); assert_int_equal(u, 8);
    assert_true(gguf_get_u32(g, "llama.attention.head_count_kv", &u)); assert_int_equal(u, 4);
    assert_true(gguf_get_u32(g, "llama.rope.dimension_count", &u)); assert_int_equal(u, 8);
    assert_true(gguf_get_u32(g, "llama.context_length", &u)); assert_int_equal(u, 512);
    gguf_type et;
    uint64_t n;
    assert_true(gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n));
    assert_int_equal(n, 512);
    gguf_str s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", 259);
    assert_true(s.n == 4 && !memcmp(s.p, "\xe2\x96\x81t", 4)); /* " t" */
    s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", 2);
    assert_true(s.n == 4 && !memcmp(s.p, "</s>", 4));
    float f;
    assert_true(gguf_get_arr_f32(g, "tokenizer.ggml.scores", 511, &f)); assert_true(f == -252.0f);
    assert_int_equal(gguf_n_tensors(g), 1 + 9 * 5 + 1);
    assert_null(gguf_find_tensor(g, "output.weight")); /* tied */
    const gguf_tensor_info *t = gguf_find_tensor(g, "blk.4.attn_k.weight");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 32);
    assert_int_equal(t->shape[1], 64);
    t = gguf_find_tensor(g, "blk.0.ffn_down.weight");
    assert_int_equal(t->shape[0], 64);
    assert_int_equal(t->shape[1], 172);
    /* token_embd is the first weight block of the source, byte for byte. */
    t = gguf_find_tensor(g, "token_embd.weight");
    vc_mapfile m;
    assert_int_equal(vc_mapfile_open(&m, model), 0);
    assert_int_equal(t->nbytes, 512 * 64 * 4);
    assert_memory_equal(t->data, m.data + 28, t->nbytes);
    /* rms_final sits right before the RoPE tables at the end. */
    t = gguf_find_tensor(g, "output_norm.weight");
    assert_memory_equal(t->data, m.data + m.size - 2 * 512 * 4 * 4 - 64 * 4, 64 * 4);
    vc_mapfile_close(&m);
    gguf_close(g);
    cleanup_dir();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_untied),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_stories260k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
