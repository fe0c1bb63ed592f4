/* vecf — 4-lane float vectors for the sampler's row passes (GCC/clang
 * vector extensions: SSE2 on x86-64, NEON on arm64), and a vector expf.
 *
 * Rows are walked in blocks of VECF_N; the last partial block goes through a
 * padded copy (vecf_load_tail) so every pass stays branch-free.
 */
#ifndef SMP_VECF_H
#define SMP_VECF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 16 bytes: the width every 64-bit target has natively (SSE2, NEON), so
 * nothing is split or spilled. */
#define VECF_N 4
typedef float vecf __attribute__((vector_size(16)));
typedef int32_t veci __attribute__((vector_size(16)));

static inline vecf vecf_set(float a) { return (vecf){a, a, a, a}; }
static inline veci veci_set(int32_t a) { return (veci){a, a, a, a}; }
static inline vecf vecf_load(const float *p) {
    vecf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vecf_store(float *p, vecf v) { memcpy(p, &v, sizeof v); }
/* The n < 8 remaining floats of p, padded with `pad`. */
static inline vecf vecf_load_tail(const float *p, int64_t n, float pad) {
    float t[VECF_N];
    for (int i = 0; i < VECF_N; i++) t[i] = i < n ? p[i] : pad;
    return vecf_load(t);
}
static inline void vecf_store_tail(float *p, int64_t n, vecf v) {
    float t[VECF_N];
    vecf_store(t, v);
    memcpy(p, t, (size_t)n * sizeof *p);
}
/* m ? a : b, m a lane mask (-1 / 0) from a vector comparison. */
static inline vecf vecf_sel(veci m, vecf a, vecf b) { return (vecf)(((veci)a & m) | ((veci)b & ~m)); }
static inline vecf vecf_max(vecf a, vecf b) { return vecf_sel(a > b, a, b); }
/* NaN lanes to -inf. */
static inline vecf vecf_nonan(vecf a) { return vecf_sel(a == a, a, vecf_set(-INFINITY)); }
static inline float vecf_hmax(vecf a) {
    float m = a[0];
    for (int i = 1; i < VECF_N; i++) m = a[i] > m ? a[i] : m;
    return m;
}
static inline double vecf_hsum(vecf a) {
    double s = 0;
    for (int i = 0; i < VECF_N; i++) s += a[i];
    return s;
}
static inline int veci_any(veci m) {
    int32_t r = 0;
    for (int i = 0; i < VECF_N; i++) r |= m[i];
    return r != 0;
}

/* exp(x) for x <= 0 (x - max of a row); 0 below -87.3, for -inf and NaN.
 * Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial:
 * about 1 ulp from expf. */
static inline vecf vecf_exp_neg(vecf x) {
    const vecf lo = vecf_set(-87.3f);
    veci under = ~(x >= lo);
    x = vecf_max(x, lo);
    vecf n = x * vecf_set(1.44269504088896341f) + vecf_set(12582912.0f); /* round to nearest */
    n = n - vecf_set(12582912.0f);
    vecf r = x - n * vecf_set(0.693359375f);
    r = r - n * vecf_set(-2.12194440e-4f);
    vecf p = vecf_set(1.9875691500e-4f);
    p = p * r + vecf_set(1.3981999507e-3f);
    p = p * r + vecf_set(8.3334519073e-3f);
    p = p * r + vecf_set(4.1665795894e-2f);
    p = p * r + vecf_set(1.6666665459e-1f);
    p = p * r + vecf_set(5.0000001201e-1f);
    p = p * r * r + r + vecf_set(1.0f);
    veci e = (__builtin_convertvector(n, veci) + veci_set(127)) << 23;
    vecf y = p * (vecf)e;
    return vecf_sel(under, vecf_set(0.0f), y);
}

#endif
