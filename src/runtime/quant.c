/* quant — scalar reference (de)quantization of the GGUF block formats.
 *
 * Dequantization is bit-exact with the `gguf` Python package (each value is
 * computed with the same sequence of f32 roundings: products and sums are
 * never fused; C11 mode keeps -ffp-contract=off). Quantizers follow ggml's
 * reference ("_ref") algorithms; Q4_0/Q4_1/Q8_0/F16/BF16 are byte-exact with
 * gguf.quants.quantize (tests/runtime/test_quant.c), the K-quant
 * quantizers (absent from gguf-py) are checked by round-trip error.
 */
#include "runtime/quant.h"

#include "base/err.h"
#include "runtime/quant_blocks.h"

#include <math.h>
#include <string.h>

/* ---- dequantization ---------------------------------------------------- */

static void dq_q4_0(const rt_block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RT_QK) {
        float d = rt_f16_to_f32(b[i].d);
        for (int l = 0; l < RT_QK / 2; l++) {
            y[l] = d * (float)((b[i].qs[l] & 0xF) - 8);
            y[l + 16] = d * (float)((b[i].qs[l] >> 4) - 8);
        }
    }
}

static void dq_q4_1(const rt_block_q4_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RT_QK) {
        float d = rt_f16_to_f32(b[i].d), m = rt_f16_to_f32(b[i].m);
        for (int l = 0; l < RT_QK / 2; l++) {
            float p0 = d * (float)(b[i].qs[l] & 0xF), p1 = d * (float)(b[i].qs[l] >> 4);
            y[l] = p0 + m;
            y[l + 16] = p1 + m;
        }
    }
}

static void dq_q8_0(const rt_block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RT_QK) {
        float d = rt_f16_to_f32(b[i].d);
        for (int l = 0; l < RT_QK; l++) y[l] = (float)b[i].qs[l] * d;
    }
}

static void dq_q4_K(const rt_block_q4_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = rt_f16_to_f32(b[i].d), dmin = rt_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            rt_q4k_scale_min(2 * c, b[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            rt_q4k_scale_min(2 * c + 1, b[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                float p = d1 * (float)(q[l] & 0xF);
                *y++ = p - m1;
            }
            for (int l = 0; l < 32; l++) {
                float p = d2 * (float)(q[l] >> 4);
                *y++ = p - m2;
            }
        }
    }
}

static void dq_q5_K(const rt_block_q5_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = rt_f16_to_f32(b[i].d), dmin = rt_f16_to_f32(b[i].dmin);
        const uint8_t *ql = b[i].qs, *qh = b[i].qh;
        for (int c = 0; c < 4; c++, ql += 32) {
            uint8_t sc, m;
            rt_q4k_scale_min(2 * c, b[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            rt_q4k_scale_min(2 * c + 1, b[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            int s1 = 2 * c, s2 = 2 * c + 1;
            for (int l = 0; l < 32; l++) {
                int q = (ql[l] & 0xF) | (((qh[l] >> s1) & 1) << 4);
                float p = d1 * (float)q;
                *y++ = p - m1;
            }
            for (int l = 0; l < 32; l++) {
                int q = (ql[l] >> 4) | (((qh[l] >> s2) & 1) << 4);
                float p = d2 * (float)q;
                *y++ = p - m2;
            }
        }
    }
}

static void dq_q6_K(const rt_block_q6_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RT_QK_K) {
        float d = rt_f16_to_f32(b[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            float *yh = y + 128 * h;
            for (int l = 0; l < 32; l++) {
                int q[4] = {
                    (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4),
                    (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                    (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                    (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                };
                for (int k = 0; k < 4; k++) {
                    int e = 32 * k + l;
                    float dl = d * (float)b[i].scales[(128 * h + e) / 16];
                    yh[e] = dl * (float)(q[k] - 32);
                }
            }
        }
    }
}

static void dq_q8_K(const rt_block_q8_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RT_QK_K)
        for (int l = 0; l < RT_QK_K; l++) y[l] = b[i].d * (float)b[i].qs[l];
}

void rt_dequant_row(rt_dtype t, const void *src, float *dst, int64_t n) {
    const rt_dtype_traits *tr = rt_dtype_info(t);
    VC_ASSERT(tr && n >= 0 && n % tr->block_elems == 0);
    int64_t nb = n / tr->block_elems;
    switch (t) {
    case RT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case RT_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = rt_f16_to_f32(s[i]);
        break;
    }
    case RT_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = rt_bf16_to_f32(s[i]);
        break;
    }
    case RT_Q4_0: dq_q4_0(src, dst, nb); break;
    case RT_Q4_1: dq_q4_1(src, dst, nb); break;
    case RT_Q8_0: dq_q8_0(src, dst, nb); break;
    case RT_Q4_K: dq_q4_K(src, dst, nb); break;
    case RT_Q5_K: dq_q5_K(src, dst, nb); break;
    case RT_Q6_K: dq_q6_K(src, dst, nb); break;
    case RT_Q8_K: dq_q8_K(src, dst, nb); break;
    default: VC_ASSERT(!"rt_dequant_row: dtype without float values");
    }
}

/* ---- reference quantizers ---------------------------------------------- */

#define GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even, via the 1.5*2^23 trick (|x| < 2^22). */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static void q_q4_0(const float *x, rt_block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RT_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RT_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rt_f32_to_f16(d);
        for (int j = 0; j < RT_QK / 2; j++) {
            float x0 = x[j] * id + 8.5f, x1 = x[j + 16] * id + 8.5f;
            int q0 = (int)x0, q1 = (int)x1; /* trunc; >= 0 by construction */
            q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
            q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void q_q4_1(const float *x, rt_block_q4_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RT_QK) {
        float min = x[0], max = x[0];
        for (int j = 1; j < RT_QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rt_f32_to_f16(d);
        y[i].m = rt_f32_to_f16(min);
        for (int j = 0; j < RT_QK / 2; j++) {
            float x0 = (x[j] - min) * id + 0.5f, x1 = (x[j + 16] - min) * id + 0.5f;
            int q0 = (int)x0, q1 = (int)x1;
            q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
            q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void q_q8_0(const float *x, rt_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RT_QK) {
        float amax = 0.0f;
        for (int j = 0; j < RT_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rt_f32_to_f16(d);
        for (int j = 0; j < RT_QK; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void q_q8_K(const float *x, rt_block_q8_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RT_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < RT_QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127 (not -128) keeps every q in [-127, 127]. */
        float iscale = -127.0f / max;
        for (int j = 0; j < RT_QK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int g = 0; g < RT_QK_K / 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* Weighted least-squares fit of x ~ scale*L + min over L in [0, nmax],
 * scanning nstep candidate scales (ggml's make_qkx2_quants). Returns the
 * scale; *the_min receives -min (>= 0). */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        l = l < 0 ? 0 : l > nmax ? nmax : l;
        L[i] = (uint8_t)l;
        float diff = scale * (float)L[i] + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per-sub-block scale/min fit,
 * 6-bit quantization of scales and mins into scales[12], final levels L. */
static void kquant_scales(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out,
                          uint16_t *dmin_out, uint8_t *packed, uint8_t *L) {
    float mins[8], scales[8], weights[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(packed, 0, 12);
    for (int j = 0; j < 8; j++) {
        /* through uint8_t as ggml does (a negative fit wraps, then clamps to 63) */
        int ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        int lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = ls > 63 ? 63 : ls;
        lm = lm > 63 ? 63 : lm;
        if (j < 4) {
            packed[j] = (uint8_t)ls;
            packed[j + 4] = (uint8_t)lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = rt_f32_to_f16(max_scale / 63.f);
    *dmin_out = rt_f32_to_f16(max_min / 63.f);
    float d_all = rt_f16_to_f32(*d_out), dmin_all = rt_f16_to_f32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rt_q4k_scale_min(j, packed, &sc, &m);
        float d = d_all * (float)sc;
        if (d == 0.0f) continue;
        float dm = dmin_all * (float)m;
        for (int ii = 0; ii < 32; ii++) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        }
    }
}

static void q_q4_K(const float *x, rt_block_q4_K *y, int64_t nb) {
    uint8_t L[RT_QK_K];
    for (int64_t i = 0; i < nb; i++, x += RT_QK_K) {
        kquant_scales(x, 15, -1.0f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < RT_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void q_q5_K(const float *x, rt_block_q5_K *y, int64_t nb) {
    uint8_t L[RT_QK_K];
    for (int64_t i = 0; i < nb; i++, x += RT_QK_K) {
        kquant_scales(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, RT_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < RT_QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

/* Symmetric fit x ~ scale*(L - nmax) with weights x^2 (ggml's
 * make_qx_quants with rmse_type 1), trying 18 scales around -nmax/max. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -(float)nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void q_q6_K(const float *x, rt_block_q6_K *y, int64_t nb) {
    int8_t L[RT_QK_K];
    float scales[RT_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += RT_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < RT_QK_K / 16; ib++) {
            float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (max_abs_scale < GROUP_MAX_EPS) continue; /* all-zero block, d = +0 */
        float iscale = -128.f / max_scale;
        y[i].d = rt_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < RT_QK_K / 16; ib++) {
            int v = nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(v > 127 ? 127 : v);
        }
        float dall = rt_f16_to_f32(y[i].d);
        for (int j = 0; j < RT_QK_K / 16; j++) {
            float d = dall * (float)y[i].scales[j];
            if (d == 0.0f) continue; /* keep make_qx_quants' levels (value 0 anyway) */
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = l < -32 ? -32 : l > 31 ? 31 : l;
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < RT_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

int rt_quant_row(rt_dtype t, const float *src, void *dst, int64_t n) {
    const rt_dtype_traits *tr = rt_dtype_info(t);
    if (!tr || t == RT_I32)
        return vc_err_set(VC_ERR_UNSUPPORTED, "quantize: unsupported dtype %s", rt_dtype_name(t));
    if (n < 0 || n % tr->block_elems)
        return vc_err_set(VC_ERR_INVALID, "quantize: row of %lld is not a multiple of %d",
                          (long long)n, tr->block_elems);
    int64_t nb = n / tr->block_elems;
    switch (t) {
    case RT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case RT_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = rt_f32_to_f16(src[i]);
        break;
    }
    case RT_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = rt_f32_to_bf16(src[i]);
        break;
    }
    case RT_Q4_0: q_q4_0(src, dst, nb); break;
    case RT_Q4_1: q_q4_1(src, dst, nb); break;
    case RT_Q8_0: q_q8_0(src, dst, nb); break;
    case RT_Q4_K: q_q4_K(src, dst, nb); break;
    case RT_Q5_K: q_q5_K(src, dst, nb); break;
    case RT_Q6_K: q_q6_K(src, dst, nb); break;
    case RT_Q8_K: q_q8_K(src, dst, nb); break;
    default:
        return vc_err_set(VC_ERR_UNSUPPORTED, "quantize: unsupported dtype %s", rt_dtype_name(t));
    }
    return VC_OK;
}
