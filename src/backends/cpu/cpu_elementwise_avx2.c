/* cpu_elementwise_avx2 — AVX2 row kernels: RMSNORM, SOFTMAX, GLU, ADD,
 * SCALE, and f16/bf16 <-> f32 row conversion (F16C). GLU uses the identities silu(g) = g*sigmoid(g) and
 * gelu_tanh(g) = g*sigmoid(2*sqrt(2/pi)*(g + 0.044715 g^3)), which avoid the
 * cancellation of 1 + tanh(u) for negative g. */
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_simd_avx2.h"

#include <math.h>

static void rmsnorm(const float *x, const float *w, float *y, int64_t d, float eps, float w_off) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    double ss = cpu_hsum8(_mm256_add_ps(a0, a1));
    for (; i < d; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
    __m256 rv = _mm256_set1_ps(r), ov = _mm256_set1_ps(w_off);
    for (i = 0; i + 8 <= d; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), rv);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(v, _mm256_add_ps(ov, _mm256_loadu_ps(w + i))));
    }
    for (; i < d; i++) y[i] = x[i] * r * (w_off + w[i]);
}

static void softmax(const float *x, float *y, int64_t n) {
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
    float mx = cpu_hmax8(mv);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (mx == -INFINITY) {
        for (i = 0; i < n; i++) y[i] = 1.0f / (float)n;
        return;
    }
    __m256 m8 = _mm256_set1_ps(mx), sv = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = cpu_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m8));
        _mm256_storeu_ps(y + i, e);
        sv = _mm256_add_ps(sv, e);
    }
    double sum = cpu_hsum8(sv);
    for (; i < n; i++) {
        y[i] = expf(x[i] - mx);
        sum += y[i];
    }
    float inv = (float)(1.0 / sum);
    __m256 iv = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), iv));
    for (; i < n; i++) y[i] *= inv;
}

static void glu(const float *g, const float *u, float *y, int64_t n, int act) {
    int64_t i = 0;
    if (act == RT_ACT_GELU_TANH) {
        const __m256 k2 = _mm256_set1_ps(2.0f * 0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
        for (; i + 8 <= n; i += 8) {
            __m256 gv = _mm256_loadu_ps(g + i);
            __m256 z = _mm256_mul_ps(k2, _mm256_fmadd_ps(_mm256_mul_ps(c, gv), _mm256_mul_ps(gv, gv), gv));
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(gv, cpu_sigmoid8(z)), _mm256_loadu_ps(u + i)));
        }
    } else {
        for (; i + 8 <= n; i += 8) {
            __m256 gv = _mm256_loadu_ps(g + i);
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(gv, cpu_sigmoid8(gv)), _mm256_loadu_ps(u + i)));
        }
    }
    if (i < n) cpu_glu_ref(g + i, u + i, y + i, n - i, act);
}

static void add(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) y[i] = a[i] + b[i];
}

static void scale(const float *a, float s, float *y, int64_t n) {
    __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), sv));
    for (; i < n; i++) y[i] = a[i] * s;
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = _cvtsh_ss(x[i]);
}

/* RNE like rt_f32_to_f16; NaN lanes are rewritten to its quiet NaN
 * (sign | 0x7e00) so the bits match for every input. */
static void f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
        __m128i qnan = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)), _mm_set1_epi16(0x7e00));
        _mm_storeu_si128((__m128i *)(y + i), _mm_blendv_epi8(h, qnan, nan16));
    }
    for (; i < n; i++) y[i] = rt_f32_to_f16(x[i]);
}

static void bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < n; i++) y[i] = rt_bf16_to_f32(x[i]);
}

void cpu_fill_elementwise_avx2(cpu_kernels *k) {
    k->rmsnorm = rmsnorm;
    k->softmax = softmax;
    k->glu = glu;
    k->add = add;
    k->scale = scale;
    k->f16_to_f32 = f16_to_f32;
    k->bf16_to_f32 = bf16_to_f32;
    k->f32_to_f16 = f32_to_f16;
}
