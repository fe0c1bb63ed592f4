/* Gemma 3 config parsing (both config.json layouts, the refusals) and the
 * lossless Q5_0 -> Q8_0 repack used for llama.cpp's Q4_K_M Gemma files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "model/config.h"
#include "model/weights.h"
#include "runtime/quant.h"
#include "runtime/quant_blocks.h"

#define TINY VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-gemma3/config.json"

/* Common keys of a small Gemma3ForCausalLM config; `extra` is spliced in. */
static int parse_with(mdl_config *c, const char *extra) {
    char dir[] = "/tmp/gemma3cfgXXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\",\n"
            " \"hidden_size\": 640, \"intermediate_size\": 2048, \"num_hidden_layers\": 8,\n"
            " \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 256,\n"
            " \"vocab_size\": 262144, \"max_position_embeddings\": 32768, \"rms_norm_eps\": 1e-6,\n"
            " \"hidden_activation\": \"gelu_pytorch_tanh\", \"bos_token_id\": 2, \"eos_token_id\": [1, 106]%s}\n",
            extra);
    fclose(f);
    int rc = mdl_config_from_hf(c, path);
    unlink(path);
    rmdir(dir);
    return rc;
}

static void test_v5_layout_fixture(void **st) {
    (void)st;
    mdl_config c;
    assert_int_equal(mdl_config_from_hf(&c, TINY), 0);
    assert_string_equal(c.arch, "gemma3");
    assert_int_equal(c.swa_pattern, 6);
    assert_int_equal(c.sliding_window, 8);
    assert_true(c.rope_theta == 1e6f && c.rope_theta_swa == 1e4f);
    assert_int_equal(c.rope_scaling, MDL_ROPE_LINEAR);
    assert_true(c.rope_factor == 4.0f);
    assert_true(fabsf(c.attn_scale - 1.0f / sqrtf(48.0f)) < 1e-7f);
    assert_true(c.norm_w_offset == 1.0f && c.rope_neox && c.tie_embeddings);
    int want[7] = {8, 8, 8, 8, 8, 0, 8};
    for (int l = 0; l < 7; l++) assert_int_equal(mdl_config_layer_window(&c, l), want[l]);
}

/* The in-memory entry (fuzz/fuzz_config.c's) gives the file's config,
 * and names its origin in errors. */
static void test_from_text(void **st) {
    (void)st;
    FILE *f = fopen(TINY, "rb");
    assert_non_null(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof text);
    mdl_config a, b;
    assert_int_equal(mdl_config_from_hf(&a, TINY), 0);
    assert_int_equal(mdl_config_from_hf_text(&b, text, n, "mem"), 0);
    assert_string_equal(a.arch, b.arch);
    assert_true(a.hidden == b.hidden && a.n_layers == b.n_layers && a.n_heads == b.n_heads &&
                a.n_kv_heads == b.n_kv_heads && a.head_dim == b.head_dim && a.vocab == b.vocab &&
                a.swa_pattern == b.swa_pattern && a.sliding_window == b.sliding_window &&
                a.rope_theta == b.rope_theta && a.attn_scale == b.attn_scale && a.n_eos == b.n_eos);
    assert_int_equal(mdl_config_from_hf_text(&b, text, n / 2, "half.json"), VC_ERR_FORMAT);
    assert_non_null(strstr(vc_err_msg(), "half.json"));
    assert_int_equal(mdl_config_from_hf_text(&b, "[1]", 3, "list.json"), VC_ERR_FORMAT);
}

static void test_legacy_layout(void **st) {
    (void)st;
    mdl_config c;
    assert_int_equal(parse_with(&c, ", \"rope_theta\": 1000000.0, \"rope_local_base_freq\": 20000.0,"
                                    " \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0},"
                                    " \"sliding_window_pattern\": 4, \"sliding_window\": 512,"
                                    " \"query_pre_attn_scalar\": 256, \"final_logit_softcapping\": null"),
                     0);
    assert_int_equal(c.swa_pattern, 4);
    assert_true(c.rope_theta == 1e6f && c.rope_theta_swa == 2e4f && c.rope_factor == 8.0f);
    assert_int_equal(c.rope_scaling, MDL_ROPE_LINEAR);
    assert_int_equal(mdl_config_layer_window(&c, 2), 512);
    assert_int_equal(mdl_config_layer_window(&c, 3), 0);
    assert_int_equal(mdl_config_layer_window(&c, 7), 0);
    assert_true(c.attn_scale == 1.0f / 16.0f);
    assert_int_equal(c.n_eos, 2);
    /* Defaults: pattern 6, window 4096, thetas 1e6 / 1e4, scalar 256. */
    assert_int_equal(parse_with(&c, ""), 0);
    assert_int_equal(c.swa_pattern, 6);
    assert_int_equal(c.sliding_window, 4096);
    assert_true(c.rope_theta == 1e6f && c.rope_theta_swa == 1e4f && c.rope_scaling == MDL_ROPE_NONE);
    assert_int_equal(mdl_config_layer_window(&c, 5), 0);
    assert_int_equal(mdl_config_layer_window(&c, 6), 4096);
}

static void test_layer_types(void **st) {
    (void)st;
    mdl_config c;
    const char *s = "\"sliding_attention\"", *f = "\"full_attention\"";
    char buf[512];
    snprintf(buf, sizeof buf, ", \"layer_types\": [%s,%s,%s,%s,%s,%s,%s,%s]", s, s, f, s, s, f, s, s);
    assert_int_equal(parse_with(&c, buf), 0);
    assert_int_equal(c.swa_pattern, 3);
    snprintf(buf, sizeof buf, ", \"layer_types\": [%s,%s,%s,%s,%s,%s,%s,%s]", s, s, s, s, s, s, s, s);
    assert_int_equal(parse_with(&c, buf), 0);
    for (int l = 0; l < 8; l++) assert_true(mdl_config_layer_window(&c, l) > 0);
    snprintf(buf, sizeof buf, ", \"layer_types\": [%s,%s,%s,%s,%s,%s,%s,%s]", s, f, f, s, s, f, s, s);
    assert_int_equal(parse_with(&c, buf), VC_ERR_UNSUPPORTED);
    assert_non_null(strstr(vc_err_msg(), "periodic"));
    snprintf(buf, sizeof buf, ", \"layer_types\": [%s,%s]", s, f);
    assert_int_equal(parse_with(&c, buf), VC_ERR_FORMAT);
    snprintf(buf, sizeof buf, ", \"layer_types\": [%s,%s,%s,%s,%s,%s,%s,\"chunked\"]", s, s, s, s, s, s, s);
    assert_int_equal(parse_with(&c, buf), VC_ERR_FORMAT);
}

static void test_refusals(void **st) {
    (void)st;
    mdl_config c;
    assert_int_equal(parse_with(&c, ", \"final_logit_softcapping\": 30.0"), VC_ERR_UNSUPPORTED);
    assert_int_equal(parse_with(&c, ", \"attn_logit_softcapping\": 50.0"), VC_ERR_UNSUPPORTED);
    assert_int_equal(parse_with(&c, ", \"use_bidirectional_attention\": true"), VC_ERR_UNSUPPORTED);
    assert_int_equal(parse_with(&c, ", \"query_pre_attn_scalar\": 0"), VC_ERR_FORMAT);
    assert_int_equal(parse_with(&c, ", \"sliding_window\": -1"), VC_ERR_FORMAT);
    assert_int_equal(parse_with(&c, ", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\"},"
                                    " \"sliding_attention\": {\"rope_type\": \"linear\", \"factor\": 2.0}}"),
                     VC_ERR_UNSUPPORTED);
    /* hidden_activation other than gelu_pytorch_tanh: the later key wins in jansson. */
    assert_int_equal(parse_with(&c, ", \"hidden_activation\": \"silu\""), VC_ERR_UNSUPPORTED);
}

/* Encode known 5-bit values as Q5_0 blocks (layout per the GGUF spec), repack,
 * and check every Q8_0 value and scale. */
static void test_q5_0_repack(void **st) {
    (void)st;
    enum { NB = 64 };
    uint8_t q5[NB * 22];
    int q[NB][32];
    rt_block_q8_0 q8[NB];
    srand(7);
    for (int b = 0; b < NB; b++) {
        uint8_t *blk = q5 + b * 22;
        uint16_t d = rt_f32_to_f16(0.01f * (float)(b + 1) * (b % 2 ? -1.0f : 1.0f));
        memcpy(blk, &d, 2);
        uint32_t qh = 0;
        for (int i = 0; i < 32; i++) {
            q[b][i] = b == 0 ? (i < 16 ? 0 : 31) : rand() % 32;
            if (q[b][i] & 16) qh |= 1u << i;
        }
        for (int i = 0; i < 4; i++) blk[2 + i] = (uint8_t)(qh >> (8 * i));
        for (int i = 0; i < 16; i++) blk[6 + i] = (uint8_t)((q[b][i] & 15) | (q[b][i + 16] & 15) << 4);
    }
    mdl_repack_q5_0_to_q8_0(q5, q8, NB);
    float out[NB * 32];
    rt_dequant_row(RT_Q8_0, q8, out, NB * 32);
    for (int b = 0; b < NB; b++) {
        float d = 0.01f * (float)(b + 1) * (b % 2 ? -1.0f : 1.0f);
        float dh = rt_f16_to_f32(rt_f32_to_f16(d));
        for (int i = 0; i < 32; i++) {
            assert_int_equal(q8[b].qs[i], q[b][i] - 16);
            assert_true(out[b * 32 + i] == dh * (float)(q[b][i] - 16));
        }
    }
    assert_true(mdl_repack_supported(MDL_GGML_Q5_0));
    assert_false(mdl_repack_supported(8));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v5_layout_fixture), cmocka_unit_test(test_from_text), cmocka_unit_test(test_legacy_layout),
        cmocka_unit_test(test_layer_types), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_q5_0_repack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
