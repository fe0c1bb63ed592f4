/* cpu_matmul_ref — scalar matmul micro-kernels and activation quantizers.
 *
 * The reference for every SIMD variant. Quantized weights are never
 * dequantized to floats: activations are quantized per row (cpu_block_q8a
 * for Q4_0/Q4_1/Q8_0, rt_block_q8_K for K-quants) and each block's dot
 * product is an integer sum scaled once by the two block scales. */
#include "backends/cpu/cpu_internal.h"

#include "runtime/quant.h"

#include <math.h>
#include <string.h>

static inline int nearest_even(float v) { return (int)lrintf(v); }

void cpu_quant_q8a_ref(const float *x, cpu_block_q8a *y, int64_t k) {
    for (int64_t b = 0; b < k / RT_QK; b++, x += RT_QK) {
        float amax = 0.0f;
        for (int l = 0; l < RT_QK; l++) amax = fmaxf(amax, fabsf(x[l]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int l = 0; l < RT_QK; l++) {
            int q = nearest_even(x[l] * id);
            y[b].qs[l] = (int8_t)q;
            sum += q;
        }
        y[b].d = d;
        y[b].sum = sum;
        y[b].s = d * (float)sum;
    }
}

void cpu_quant_q8k_ref(const float *x, rt_block_q8_K *y, int64_t k) {
    rt_quant_row(RT_Q8_K, x, y, k); /* k is a multiple of 256: cannot fail */
}

void cpu_mm_f32_ref(int64_t k, const void *w, const void *act, size_t as, int m, float *y,
                    size_t ys) {
    const float *wr = w;
    for (int j = 0; j < m; j++) {
        const float *x = (const float *)((const char *)act + j * as);
        float s = 0.0f;
        for (int64_t i = 0; i < k; i++) s += wr[i] * x[i];
        y[j * ys] = s;
    }
}

void cpu_mm_f16_ref(int64_t k, const void *w, const void *act, size_t as, int m, float *y,
                    size_t ys) {
    const uint16_t *wr = w;
    for (int j = 0; j < m; j++) {
        const float *x = (const float *)((const char *)act + j * as);
        float s = 0.0f;
        for (int64_t i = 0; i < k; i++) s += rt_f16_to_f32(wr[i]) * x[i];
        y[j * ys] = s;
    }
}

void cpu_mm_bf16_ref(int64_t k, const void *w, const void *act, size_t as, int m, float *y,
                     size_t ys) {
    const uint16_t *wr = w;
    for (int j = 0; j < m; j++) {
        const float *x = (const float *)((const char *)act + j * as);
        float s = 0.0f;
        for (int64_t i = 0; i < k; i++) s += rt_bf16_to_f32(wr[i]) * x[i];
        y[j * ys] = s;
    }
}

void cpu_mm_q4_0_ref(int64_t k, const void *w, const void *act, size_t as, int m, float *y,
                     size_t ys) {
    const rt_block_q4_0 *wb = w;
    for (int j = 0; j < m; j++) {
        const cpu_block_q8a *a = (const cpu_block_q8a *)((const char *)act + j * as);
        float s = 0.0f;
        for (int64_t b = 0; b < k / RT_QK; b++) { /* chain arithmetic (cpu_internal.h) */
            int isum = 0;
            for (int l = 0; l < 16; l++) {
                isum += ((wb[b].qs[l] & 0xF) - 8) * a[b].qs[l];
                isum += ((wb[b].qs[l] >> 4) - 8) * a[b].qs[l + 16];
            }
            s = fmaf(rt_f16_to_f32(wb[b].d) * a[b].d, (float)isum, s);
        }
        y[j * ys] = s;
    }
}

void cpu_mm_q4_1_ref(int64_t k, const void *w, const void *act, size_t as, int m, float *y,
                     size_t ys) {
    const rt_block_q4_1 *wb = w;
    for (int j = 0; j < m; j++) {
        const cpu_block_q8a *a = (const cpu_block_q8a *)((const char *)act + j * as);
        float s = 0.0f;
        for (int64_t b = 0; b < k / RT_QK; b++) {
            int isum = 0;
            for (int l = 0; l < 16; l++) {
                isum += (wb[b].qs[l] & 0xF) * a[b].qs[l];
                isum += (wb[b].qs[l] >> 4) * a[b].qs[l + 16];
            }
            /* chain arithmetic with Q4_1's offset: value = d*q + m, so the
             * block adds d*da*isum + m*da*sum(a) (two fused steps) */
            s = fmaf(rt_f16_to_f32(wb[b].d) * a[b].d, (float)isum, s);
            s = fmaf(rt_f16_to_f32(wb[b].m) * a[b].d, (float)a[b].sum, s);
        }
        y[j * ys] = s;
    }
}

void cpu_mm_q8_0_ref(int64_t k, const void *w, const void *act, size_t as, int m, float *y,
                     size_t ys) {
    const rt_block_q8_0 *wb = w;
    for (int j = 0; j < m; j++) {
        const cpu_block_q8a *a = (const cpu_block_q8a *)((const char *)act + j * as);
        float s = 0.0f;
        for (int64_t b = 0; b < k / RT_QK; b++) {
            int isum = 0;
            for (int l = 0; l < RT_QK; l++) isum += wb[b].qs[l] * a[b].qs[l];
            s = fmaf(rt_f16_to_f32(wb[b].d) * a[b].d, (float)isum, s); /* chain */
        }
        y[j * ys] = s;
    }
}

/* Q4_K and Q5_K share the scale/min algebra:
 *   sum_j (d*sc_j*q - dmin*m_j) * a = d*sum_j sc_j*(q.a)_j - dmin*sum_j m_j*asum_j
 * with asum_j from the activation's bsums (two per 32-element sub-block). */
static float kq_dot(const uint16_t *dd, const uint8_t *scales, const int *dots32,
                    const rt_block_q8_K *a) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        rt_q4k_scale_min(j, scales, &sc, &mn);
        sumi += sc * dots32[j];
        summ += mn * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    float d = rt_f16_to_f32(dd[0]) * a->d, dmin = rt_f16_to_f32(dd[1]) * a->d;
    return d * (float)sumi - dmin * (float)summ;
}

/* The same sums as one step of the chain (Q4_K): s += d*sumi, s -= m*summ,
 * each a fused multiply-add. */
static float kq_chain(float s, const uint16_t *dd, const uint8_t *scales, const int *dots32,
                      const rt_block_q8_K *a) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        rt_q4k_scale_min(j, scales, &sc, &mn);
        sumi += sc * dots32[j];
        summ += mn * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    s = fmaf(rt_f16_to_f32(dd[0]) * a->d, (float)sumi, s);
    return fmaf(-(rt_f16_to_f32(dd[1]) * a->d), (float)summ, s);
}

void cpu_mm_q4_K_ref(int64_t k, const void *w, const void *act, size_t as, int m, float *y,
                     size_t ys) {
    const rt_block_q4_K *wb = w;
    for (int j = 0; j < m; j++) {
        const rt_block_q8_K *a = (const rt_block_q8_K *)((const char *)act + j * as);
        float s = 0.0f;
        for (int64_t b = 0; b < k / RT_QK_K; b++) {
            int dots[8];
            const uint8_t *q = wb[b].qs;
            const int8_t *aq = a[b].qs;
            for (int c = 0; c < 4; c++, q += 32, aq += 64) {
                int lo = 0, hi = 0;
                for (int l = 0; l < 32; l++) {
                    lo += (q[l] & 0xF) * aq[l];
                    hi += (q[l] >> 4) * aq[l + 32];
                }
                dots[2 * c] = lo;
                dots[2 * c + 1] = hi;
            }
            s = kq_chain(s, &wb[b].d, wb[b].scales, dots, &a[b]);
        }
        y[j * ys] = s;
    }
}

void cpu_mm_q5_K_ref(int64_t k, const void *w, const void *act, size_t as, int m, float *y,
                     size_t ys) {
    const rt_block_q5_K *wb = w;
    for (int j = 0; j < m; j++) {
        const rt_block_q8_K *a = (const rt_block_q8_K *)((const char *)act + j * as);
        float s = 0.0f;
        for (int64_t b = 0; b < k / RT_QK_K; b++) {
            int dots[8];
            const uint8_t *q = wb[b].qs, *qh = wb[b].qh;
            const int8_t *aq = a[b].qs;
            for (int c = 0; c < 4; c++, q += 32, aq += 64) {
                int lo = 0, hi = 0;
                for (int l = 0; l < 32; l++) {
                    lo += ((q[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) * aq[l];
                    hi += ((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) * aq[l + 32];
                }
                dots[2 * c] = lo;
                dots[2 * c + 1] = hi;
            }
            s += kq_dot(&wb[b].d, wb[b].scales, dots, &a[b]);
        }
        y[j * ys] = s;
    }
}

void cpu_mm_q6_K_ref(int64_t k, const void *w, const void *act, size_t as, int m, float *y,
                     size_t ys) {
    const rt_block_q6_K *wb = w;
    for (int j = 0; j < m; j++) {
        const rt_block_q8_K *a = (const rt_block_q8_K *)((const char *)act + j * as);
        float s = 0.0f;
        for (int64_t b = 0; b < k / RT_QK_K; b++) {
            int g16[16] = {0}; /* sum of (q-32)*a per group of 16 */
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = wb[b].ql + 64 * h, *qh = wb[b].qh + 32 * h;
                const int8_t *aq = a[b].qs + 128 * h;
                for (int l = 0; l < 32; l++) {
                    int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    g16[8 * h + (l >> 4)] += q0 * aq[l];
                    g16[8 * h + 2 + (l >> 4)] += q1 * aq[l + 32];
                    g16[8 * h + 4 + (l >> 4)] += q2 * aq[l + 64];
                    g16[8 * h + 6 + (l >> 4)] += q3 * aq[l + 96];
                }
            }
            int sumi = 0;
            for (int g = 0; g < 16; g++) sumi += wb[b].scales[g] * g16[g];
            s = fmaf(rt_f16_to_f32(wb[b].d) * a[b].d, (float)sumi, s);
        }
        y[j * ys] = s;
    }
}
