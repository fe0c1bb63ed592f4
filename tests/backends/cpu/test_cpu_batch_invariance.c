/* Batch invariance of the CPU matmul: a token's output row is bit-identical
 * whether the token is multiplied alone (decode) or inside a batch of any
 * size (prefill / mixed steps), for every weight type and kernel level.
 * The engine's guarantees (greedy ties, seeded sampling independent of the
 * batch) rest on this. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ops.h"
#include "runtime/quant.h"

static void check_level(const char *isa) {
    if (isa) setenv("VLLM_CPU_ISA", isa, 1);
    else unsetenv("VLLM_CPU_ISA"); /* the best level this CPU has */
    if (!isa) isa = "best";
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 2;
    rt_backend *be = rt_backend_create(RT_DEV_CPU, &p);
    assert_non_null(be);
    const rt_dtype types[] = {RT_F32, RT_F16, RT_BF16, RT_Q4_0, RT_Q4_1, RT_Q8_0, RT_Q4_K, RT_Q5_K, RT_Q6_K};
    const int64_t in = 2304, out = 72, N = 23; /* in spans 3 k-slices; N not a multiple of 4 */
    float *wf = malloc((size_t)(in * out) * 4), *x = malloc((size_t)(N * in) * 4);
    float *y1 = malloc((size_t)out * 4), *yN = malloc((size_t)(N * out) * 4);
    uint64_t s = 7;
    for (int64_t i = 0; i < in * out; i++) {
        s = s * 6364136223846793005ull + 1;
        wf[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    for (int64_t i = 0; i < N * in; i++) {
        s = s * 6364136223846793005ull + 1;
        x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        rt_dtype t = types[ti];
        size_t rb = rt_dtype_row_bytes(t, in);
        char *w = malloc(rb * (size_t)out);
        for (int64_t r = 0; r < out; r++) assert_int_equal(rt_quant_row(t, wf + r * in, w + r * rb, in), 0);
        rt_tensor W = rt_tensor_2d(w, t, RT_DEV_CPU, out, in);
        for (int64_t n = 5; n <= N; n += 9) {
            rt_tensor X = rt_tensor_2d(x, RT_F32, RT_DEV_CPU, n, in), Y = rt_tensor_2d(yN, RT_F32, RT_DEV_CPU, n, out);
            assert_int_equal(rt_matmul(be, &Y, &X, &W, NULL), 0);
            for (int64_t t0 = 0; t0 < n; t0++) {
                rt_tensor X1 = rt_tensor_2d(x + t0 * in, RT_F32, RT_DEV_CPU, 1, in);
                rt_tensor Y1 = rt_tensor_2d(y1, RT_F32, RT_DEV_CPU, 1, out);
                assert_int_equal(rt_matmul(be, &Y1, &X1, &W, NULL), 0);
                if (memcmp(y1, yN + t0 * out, (size_t)out * 4))
                    fail_msg("%s %s: row %lld of a %lld-token batch differs from the token alone", isa,
                             rt_dtype_name(t), (long long)t0, (long long)n);
            }
        }
        free(w);
    }
    free(wf);
    free(x);
    free(y1);
    free(yN);
    rt_backend_free(be);
}

static void test_scalar(void **st) {
    (void)st;
    check_level("scalar");
}

static void test_auto(void **st) {
    (void)st;
    check_level(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_scalar), cmocka_unit_test(test_auto)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
