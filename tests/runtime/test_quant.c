/* Tests for runtime/quant: bit-exact dequantization vs gguf-py fixtures,
 * byte-exact reference quantizers where gguf-py has them, and round-trip
 * error bounds for the K-quant quantizers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/err.h"
#include "runtime/quant.h"
#include "runtime/quant_blocks.h"

#include "quant_fixtures.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_dequant_matches_gguf(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof g_quant_fixtures / sizeof g_quant_fixtures[0]; k++) {
        const quant_fixture *fx = &g_quant_fixtures[k];
        assert_int_equal(rt_dtype_row_bytes(fx->type, fx->n), fx->q_bytes);
        float *y = malloc((size_t)fx->n * sizeof(float));
        assert_non_null(y);
        rt_dequant_row(fx->type, fx->q, y, fx->n);
        for (int i = 0; i < fx->n; i++) {
            float want = bits_f32(fx->y[i]);
            if (isnan(want)) {
                if (!isnan(y[i])) fail_msg("%s[%d]: want NaN, got %g", fx->name, i, y[i]);
            } else if (f32_bits(y[i]) != fx->y[i]) {
                fail_msg("%s[%d]: want %a, got %a", fx->name, i, want, y[i]);
            }
        }
        free(y);
    }
}

static void test_quantize_matches_gguf(void **state) {
    (void)state;
    int checked = 0;
    for (size_t k = 0; k < sizeof g_quant_fixtures / sizeof g_quant_fixtures[0]; k++) {
        const quant_fixture *fx = &g_quant_fixtures[k];
        if (!fx->x) continue;
        float *x = malloc((size_t)fx->n * sizeof(float));
        uint8_t *q = malloc(fx->q_bytes);
        assert_true(x && q);
        for (int i = 0; i < fx->n; i++) x[i] = bits_f32(fx->x[i]);
        assert_int_equal(rt_quant_row(fx->type, x, q, fx->n), VC_OK);
        for (size_t i = 0; i < fx->q_bytes; i++)
            if (q[i] != fx->q[i])
                fail_msg("%s byte %zu: want 0x%02x, got 0x%02x", fx->name, i, fx->q[i], q[i]);
        checked++;
        free(x);
        free(q);
    }
    assert_int_equal(checked, 5);
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* Normalised RMS error of quantize -> dequantize over rows of varied scale. */
static double roundtrip_err(rt_dtype t, int n, unsigned seed, float amp) {
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    void *q = malloc(rt_dtype_row_bytes(t, n));
    assert_true(x && y && q);
    for (int i = 0; i < n; i++) x[i] = amp * (frand(&seed) + 0.3f * frand(&seed) * frand(&seed));
    assert_int_equal(rt_quant_row(t, x, q, n), VC_OK);
    rt_dequant_row(t, q, y, n);
    double e = 0, s = 0;
    for (int i = 0; i < n; i++) {
        e += (double)(x[i] - y[i]) * (x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    free(x);
    free(y);
    free(q);
    return sqrt(e / s);
}

static void test_roundtrip_bounds(void **state) {
    (void)state;
    struct { rt_dtype t; double bound; } cases[] = {
        {RT_Q4_0, 0.12}, {RT_Q4_1, 0.10}, {RT_Q8_0, 0.008}, {RT_Q4_K, 0.09},
        {RT_Q5_K, 0.045}, {RT_Q6_K, 0.022}, {RT_Q8_K, 0.006}, {RT_F16, 1e-3}, {RT_BF16, 5e-3},
    };
    float amps[] = {1e-3f, 1.0f, 300.0f};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t a = 0; a < 3; a++) {
            double e = roundtrip_err(cases[c].t, 1024, 7u + (unsigned)c, amps[a]);
            if (!(e < cases[c].bound))
                fail_msg("%s amp %g: rel err %g >= %g", rt_dtype_name(cases[c].t), amps[a], e,
                         cases[c].bound);
        }
}

static void test_zero_rows(void **state) {
    (void)state;
    rt_dtype ts[] = {RT_Q4_0, RT_Q4_1, RT_Q8_0, RT_Q4_K, RT_Q5_K, RT_Q6_K, RT_Q8_K};
    float x[512] = {0}, y[512];
    uint8_t q[1024];
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
        assert_int_equal(rt_quant_row(ts[k], x, q, 512), VC_OK);
        for (int i = 0; i < 512; i++) y[i] = 1.0f;
        rt_dequant_row(ts[k], q, y, 512);
        for (int i = 0; i < 512; i++) assert_true(y[i] == 0.0f);
    }
}

static void test_q8_K_bsums(void **state) {
    (void)state;
    float x[512];
    unsigned s = 99;
    for (int i = 0; i < 512; i++) x[i] = 5.0f * frand(&s);
    rt_block_q8_K b[2];
    assert_int_equal(rt_quant_row(RT_Q8_K, x, b, 512), VC_OK);
    for (int k = 0; k < 2; k++)
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                sum += b[k].qs[16 * g + l];
                assert_true(b[k].qs[16 * g + l] >= -127);
            }
            assert_int_equal(sum, b[k].bsums[g]);
        }
}

/* Hand-built blocks pin the documented element order independently of gguf. */
static void test_layout_by_hand(void **state) {
    (void)state;
    rt_block_q4_K b4;
    memset(&b4, 0, sizeof b4);
    b4.d = rt_f32_to_f16(1.0f);
    b4.dmin = rt_f32_to_f16(0.5f);
    /* sub-block 5: scale 37 = 0b100101 (low 4 in byte 9 low nibble, top 2 in byte 1 bits 6-7),
     * min 22 = 0b010110 (low 4 in byte 9 high nibble, top 2 in byte 5 bits 6-7) */
    b4.scales[9] = (uint8_t)((37 & 0xF) | ((22 & 0xF) << 4));
    b4.scales[1] = (uint8_t)((37 >> 4) << 6);
    b4.scales[5] = (uint8_t)((22 >> 4) << 6);
    b4.qs[64 + 3] = 0x70; /* chunk 2, high nibble -> sub-block 5, element 160+3 */
    float y[256];
    rt_dequant_row(RT_Q4_K, &b4, y, 256);
    assert_true(y[163] == 37.0f * 7.0f - 0.5f * 22.0f);
    assert_true(y[162] == -0.5f * 22.0f);
    assert_true(y[131] == 0.0f); /* sub-block 4: scale 0, min 0 */

    rt_block_q6_K b6;
    memset(&b6, 0, sizeof b6);
    b6.d = rt_f32_to_f16(2.0f);
    for (int i = 0; i < 16; i++) b6.scales[i] = (int8_t)(i + 1);
    /* element 128 + 64 + 5 (half 1, k = 2): low nibble = ql[64+5] >> 4, high = qh[32+5] >> 4 */
    b6.ql[69] = 0xA0;
    b6.qh[37] = 0x30;
    rt_dequant_row(RT_Q6_K, &b6, y, 256);
    int q = 0xA | (3 << 4);
    assert_true(y[197] == 2.0f * 13.0f * (float)(q - 32));
    assert_true(y[5] == 2.0f * 1.0f * -32.0f);
}

static void test_errors(void **state) {
    (void)state;
    float x[32] = {0};
    uint8_t q[64];
    assert_int_equal(rt_quant_row(RT_I32, x, q, 32), VC_ERR_UNSUPPORTED);
    assert_int_equal(rt_quant_row(RT_Q4_0, x, q, 31), VC_ERR_INVALID);
    assert_int_equal(rt_quant_row(RT_Q4_K, x, q, 32), VC_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_matches_gguf), cmocka_unit_test(test_quantize_matches_gguf),
        cmocka_unit_test(test_roundtrip_bounds),     cmocka_unit_test(test_zero_rows),
        cmocka_unit_test(test_q8_K_bsums),           cmocka_unit_test(test_layout_by_hand),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
