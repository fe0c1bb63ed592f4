/* cuda_gemv_d4 — the decode GEMV over GGUF block weights on integer dot
 * products (dp4a): MATMUL and MATMUL_GLU of 1..GD4_MAX_N f32 x rows over
 * Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K.
 *
 * Why: decoding every weight to f32 (cuda_gemv_q.cu, k_gemv_quant) costs
 * ~5 instructions a value, and those kernels ran at ~1.3 G values per ms
 * whatever the format (8B shapes, session 11: Q4_0 0.7 TB/s, Q8_0 1.4,
 * bf16's GEMV 3.4). Here x is quantized to 8 bits per 32 values (as the
 * CPU backend and llama.cpp do for quantized weights), and each 4 weight
 * values meet 4 x values in one dp4a; the format's scales apply once per
 * 16 or 32 values.
 *
 * Grid: persistent, at most GD4_CPS blocks per SM. Each block first
 * quantizes the x rows into shared memory (per 32 values: d = amax / 127,
 * int8 q = round(x / d), and the sums of q per 16 values for the formats'
 * offsets and minimums), then each warp takes whole rows (MATMUL_GLU: the
 * gate row p and the up row f + p, in turn) = gw, gw + warps, ... and walks
 * each row in segments of GQ_SEG super-units as cuda_gemv_q.cu does (16-byte
 * loads from the 16-byte boundary below, staged in the warp's shared
 * memory, the next segment in flight, across row ends too; the first before
 * the PDL wait). Lane l takes 32-value units l, l + 32, .. of a segment.
 * One warp per row: no block-wide reduce; the sum order depends on the
 * shape only. VLLM_CUDA_GEMV_D4=0: cuda_gemv_q.cu instead (A/B);
 * VLLM_CUDA_GEMV_D4_SEG=1 / 2 forces the segment length (gd4_plan),
 * VLLM_CUDA_GEMV_D4_CPS blocks per SM (default 2; 3 and 4 measured
 * mixed-to-slower in session 11).
 * One-row calls the x-in-registers GEMV takes (cuda_gemv_xr.cu: K-quants,
 * Q4_0, Q4_1; session 13, 1.2-1.9x on the 8B's large shapes) go there
 * from the entry below.
 */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_gemv_q.cuh"
#include "backends/cuda/cuda_gemv_xr.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define GD4_WARPS 8
#define GD4_MAX_N CUDA_GEMV_MAX_N
#define GD4_CPS 2             /* blocks per SM */
#define GD4_SMEM (200 << 10)  /* the most dynamic shared memory a block asks for */
#define GD4_QU 4              /* rounds of x loads in flight while quantizing */

/* x of one row at one 32-value unit: 8 words of int8, its scale, and the
 * sums of its two 16-value halves. */
struct gd4_x {
    int q[8];
    float d;
    int s0, s1;
};

/* An unaligned (2-byte aligned) 32-bit word of shared memory. */
__device__ __forceinline__ int gd4_w2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}
__device__ __forceinline__ int gd4_w4(const uint8_t *p) { return *(const int *)p; }

/* sum over unit u (32 values, from segment base b) of w * x, for one x row. */
template <rt_dtype T> __device__ __forceinline__ float gd4_unit(const uint8_t *b, int u, const gd4_x &x);

template <> __device__ __forceinline__ float gd4_unit<RT_Q4_0>(const uint8_t *b, int u, const gd4_x &x) {
    const uint8_t *k = b + u * 18;
    int s = 0, t = 0; /* two chains of dp4a */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int w = gd4_w2(k + 2 + 4 * i);
        s = __dp4a(w & 0x0F0F0F0F, x.q[i], s);
        t = __dp4a((w >> 4) & 0x0F0F0F0F, x.q[4 + i], t);
    }
    return cuda_h2f(k) * x.d * (float)(s + t - 8 * (x.s0 + x.s1));
}

template <> __device__ __forceinline__ float gd4_unit<RT_Q4_1>(const uint8_t *b, int u, const gd4_x &x) {
    const uint8_t *k = b + u * 20;
    int s = 0, t = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int w = gd4_w4(k + 4 + 4 * i);
        s = __dp4a(w & 0x0F0F0F0F, x.q[i], s);
        t = __dp4a((w >> 4) & 0x0F0F0F0F, x.q[4 + i], t);
    }
    return x.d * (cuda_h2f(k) * (float)(s + t) + cuda_h2f(k + 2) * (float)(x.s0 + x.s1));
}

template <> __device__ __forceinline__ float gd4_unit<RT_Q8_0>(const uint8_t *b, int u, const gd4_x &x) {
    const uint8_t *k = b + u * 34;
    int s = 0, t = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s = __dp4a(gd4_w2(k + 2 + 8 * i), x.q[2 * i], s);
        t = __dp4a(gd4_w2(k + 6 + 8 * i), x.q[2 * i + 1], t);
    }
    return cuda_h2f(k) * x.d * (float)(s + t);
}

template <> __device__ __forceinline__ float gd4_unit<RT_Q4_K>(const uint8_t *b, int u, const gd4_x &x) {
    const uint8_t *k = b + (u >> 3) * 144;
    const int j = u & 7, sh = 4 * (j & 1);
    int sc, m;
    cuda_q4k_sm(j, k + 4, sc, m);
    const uint8_t *qs = k + 16 + 32 * (j >> 1);
    int s = 0, t = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s = __dp4a((gd4_w4(qs + 8 * i) >> sh) & 0x0F0F0F0F, x.q[2 * i], s);
        t = __dp4a((gd4_w4(qs + 8 * i + 4) >> sh) & 0x0F0F0F0F, x.q[2 * i + 1], t);
    }
    return x.d * (cuda_h2f(k) * (float)(sc * (s + t)) - cuda_h2f(k + 2) * (float)(m * (x.s0 + x.s1)));
}

template <> __device__ __forceinline__ float gd4_unit<RT_Q5_K>(const uint8_t *b, int u, const gd4_x &x) {
    const uint8_t *k = b + (u >> 3) * 176;
    const int j = u & 7, sh = 4 * (j & 1);
    int sc, m;
    cuda_q4k_sm(j, k + 4, sc, m);
    const uint8_t *qh = k + 16, *qs = k + 48 + 32 * (j >> 1);
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int lo = (gd4_w4(qs + 4 * i) >> sh) & 0x0F0F0F0F, hi = ((gd4_w4(qh + 4 * i) >> j) & 0x01010101) << 4;
        s = __dp4a(lo | hi, x.q[i], s);
    }
    return x.d * (cuda_h2f(k) * (float)(sc * s) - cuda_h2f(k + 2) * (float)(m * (x.s0 + x.s1)));
}

template <> __device__ __forceinline__ float gd4_unit<RT_Q6_K>(const uint8_t *b, int u, const gd4_x &x) {
    const uint8_t *k = b + (u >> 3) * 210;
    const int j = u & 7, h = j >> 2, kk = j & 3, shl = kk < 2 ? 0 : 4, shh = 2 * kk;
    const uint8_t *ql = k + 64 * h + 32 * (kk & 1), *qh = k + 128 + 32 * h;
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int v = ((gd4_w2(ql + 4 * i) >> shl) & 0x0F0F0F0F) | (((gd4_w2(qh + 4 * i) >> shh) & 0x03030303) << 4);
        if (i < 4) s0 = __dp4a(v, x.q[i], s0);
        else s1 = __dp4a(v, x.q[i], s1);
    }
    const int8_t *sc = (const int8_t *)(k + 192) + 8 * h + 2 * kk;
    return cuda_h2f(k + 208) * x.d * (float)(sc[0] * (s0 - 32 * x.s0) + sc[1] * (s1 - 32 * x.s1));
}

/* Shared memory of a launch: the warps' W stages, then x as int8 [n][in],
 * scales [n][in / 32], sums [n][in / 16]. */
template <rt_dtype T, int M> static size_t gd4_smem(int64_t n, int64_t in) {
    return (size_t)GD4_WARPS * gq_nv<T, M>() * 512 + (size_t)(n * in) + (size_t)(n * in / 32) * 4 + (size_t)(n * in / 16) * 4;
}

template <rt_dtype T, int M, int NB, bool GLU>
__global__ void __launch_bounds__(GD4_WARPS * 32) k_gemv_d4(const char *w, int64_t ws, const float *x, int64_t x_ld,
                                                            float *y, int64_t y_ld, const float *bias, int64_t out,
                                                            int64_t in, int n, int act) {
    using F = gq_fmt<T>;
    constexpr int NV = gq_nv<T, M>(), SEG = M * F::SEG;
    extern __shared__ uint4 gd4_sm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint4 *wbuf = gd4_sm + warp * NV * 32;
    int8_t *xq = (int8_t *)(gd4_sm + GD4_WARPS * NV * 32);
    float *xd = (float *)(xq + n * in);
    int *xs = (int *)(xd + n * in / 32);
    const int64_t f = out / 2, P = GLU ? f : out, nsu = in / F::SV, nseg = (nsu + SEG - 1) / SEG;
    const int64_t gw = (int64_t)blockIdx.x * GD4_WARPS + warp, nw = (int64_t)gridDim.x * GD4_WARPS;
    const int H = GLU ? 2 : 1;
    const int64_t nit = (gw < P ? (P - gw + nw - 1) / nw : 0) * H * nseg;
    /* item it: row p = gw + (it / (H nseg)) nw, half (it / nseg) % H, segment it % nseg */
    auto row_of = [&](int64_t it) {
        const int64_t p = gw + it / (H * nseg) * nw, r = GLU && (it / nseg) % H ? p + f : p;
        return w + r * ws;
    };
    auto seg_len = [&](int64_t sg) { return nsu - sg * SEG < SEG ? nsu - sg * SEG : (int64_t)SEG; };
    uint4 q[NV];
    if (nit > 0) gq_load<T, M>(q, row_of(0), 0, seg_len(0), lane);
    CUDA_PDL_ENTER();
    /* x rows -> int8 per 32 values: 8 lanes a unit (a float4 each), 4 units
     * a warp, GD4_QU rounds of loads in flight (a unit at a time per warp
     * was a chain of L2 trips: ~8 us for a row of 14336) */
    const int upr = (int)(in / 32), nun = n * upr; /* n * in < 2^31: cuda_gemv_d4_fits */
    const int sub = lane >> 3, l8 = lane & 7;
    for (int base = warp * 4; base < nun; base += GD4_WARPS * 4 * GD4_QU) { /* uniform per warp (shuffles) */
        float4 v[GD4_QU];
#pragma unroll
        for (int i = 0; i < GD4_QU; i++) {
            const int uu = base + sub + i * GD4_WARPS * 4;
            v[i] = uu < nun ? __ldg((const float4 *)(x + (int64_t)(uu / upr) * x_ld + (int64_t)(uu % upr) * 32) + l8)
                            : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < GD4_QU; i++) {
            const int uu = base + sub + i * GD4_WARPS * 4, t = uu / upr, k = uu % upr;
            float a = fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w)));
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
            const float id = a > 0.0f ? 127.0f / a : 0.0f;
            const int q0 = __float2int_rn(v[i].x * id), q1 = __float2int_rn(v[i].y * id), q2 = __float2int_rn(v[i].z * id),
                      q3 = __float2int_rn(v[i].w * id);
            int sm = q0 + q1 + q2 + q3;
            sm += __shfl_xor_sync(0xffffffffu, sm, 1);
            sm += __shfl_xor_sync(0xffffffffu, sm, 2);
            if (uu < nun) {
                ((int *)(xq + (int64_t)t * in + k * 32))[l8] =
                    (int)((uint32_t)(q0 & 255) | ((uint32_t)(q1 & 255) << 8) | ((uint32_t)(q2 & 255) << 16) | ((uint32_t)q3 << 24));
                if ((l8 & 3) == 0) xs[(int64_t)t * (in / 16) + 2 * k + (l8 >> 2)] = sm;
                if (l8 == 0) xd[t * upr + k] = a / 127.0f;
            }
        }
    }
    __syncthreads();
    float acc[NB] = {0}, g[NB] = {0};
    for (int64_t it = 0; it < nit; it++) {
        const int64_t sg = it % nseg, s = sg * SEG, m = seg_len(sg);
        const char *row = row_of(it);
        const int off = (int)((uintptr_t)(row + s * F::SB) & 15);
        __syncwarp();
#pragma unroll
        for (int j = 0; j < NV; j++) wbuf[lane + 32 * j] = q[j];
        __syncwarp();
        if (it + 1 < nit) gq_load<T, M>(q, row_of(it + 1), ((it + 1) % nseg) * SEG, seg_len((it + 1) % nseg), lane);
        const uint8_t *sb = (const uint8_t *)wbuf + off;
        const int nu = (int)m * (F::SV / 32);
        const int64_t u0 = s * (F::SV / 32); /* the segment's first unit in the row */
#pragma unroll 2
        for (int u = lane; u < nu; u += 32) {
#pragma unroll
            for (int t = 0; t < NB; t++) {
                if (t >= n) break;
                const int64_t ug = u0 + u;
                const int4 *xw = (const int4 *)(xq + t * in + ug * 32); /* 32-byte aligned: in % 32 == 0 */
                const int4 a = xw[0], b = xw[1];
                const int *ss = xs + t * (in / 16) + 2 * ug;
                const gd4_x xv = {{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, xd[t * upr + ug], ss[0], ss[1]};
                acc[t] += gd4_unit<T>(sb, u, xv);
            }
        }
        if (sg == nseg - 1) { /* the row's end */
            const int64_t p = gw + it / (H * nseg) * nw;
            const bool up = GLU && (it / nseg) % H;
#pragma unroll
            for (int t = 0; t < NB; t++) {
                if (t >= n) break;
                const float v = warp_sum(acc[t]);
                acc[t] = 0.0f;
                if (GLU && !up) g[t] = v;
                else if (lane == 0) y[t * y_ld + p] = GLU ? cuda_glu_act(act, g[t]) * v : v + (bias ? bias[p] : 0.0f);
            }
        }
    }
}

/* Segment multiplier: 2 (a warp's loads twice as long) where two blocks of
 * it still fit an SM, else 1. Session 11's table (8B shapes, n = 1): the
 * sum of QKV + gate|up + down 74.8 -> 67.8 us (Q4_0), 96.8 -> 75.7 (Q4_K),
 * 102.9 -> 100.2 (Q6_K), 97.6 -> 78.6 (Q8_0); at n = 4 over rows of 14336
 * one block a SM fits and down got 1.5x slower. VLLM_CUDA_GEMV_D4_SEG = 1
 * or 2 forces it. */
#define GD4_SEG2_SMEM (110 << 10)

/* gd4_smem of a runtime dtype (0: no decoder). */
template <int M> static size_t gd4_smem_of(rt_dtype t, int64_t n, int64_t in) {
    switch (t) {
#define X(T) case T: return gd4_smem<T, M>(n, in);
        CUDA_FOR_QUANT(X)
#undef X
    default: return 0;
    }
}

/* A call's segment multiplier (by the rule above unless forced); false
 * where its x does not fit GD4_SMEM. */
static bool gd4_plan(const cuda_ctx *c, rt_dtype t, int64_t n, int64_t in, int *m) {
    const size_t s2 = gd4_smem_of<2>(t, n, in);
    *m = c->gemv_d4_seg ? c->gemv_d4_seg : s2 && s2 <= (size_t)GD4_SEG2_SMEM ? 2 : 1;
    const size_t sm = *m == 2 ? s2 : gd4_smem_of<1>(t, n, in);
    return sm && sm <= (size_t)GD4_SMEM;
}

/* Whether d4 takes a call that cuda_gemv_q_fits already accepted. */
bool cuda_gemv_d4_fits(cuda_ctx *c, const rt_tensor *w, int64_t n) {
    if (!c->gemv_d4) {
        const char *e = getenv("VLLM_CUDA_GEMV_D4");
        c->gemv_d4 = e && !strcmp(e, "0") ? 1 : 2;
        e = getenv("VLLM_CUDA_GEMV_D4_SEG");
        c->gemv_d4_seg = e && !strcmp(e, "2") ? 2 : e && !strcmp(e, "1") ? 1 : 0; /* 0: gd4_plan's rule */
        e = getenv("VLLM_CUDA_GEMV_D4_CPS");
        const int v = e && *e ? atoi(e) : GD4_CPS;
        c->gemv_d4_cps = v >= 1 && v <= 8 ? v : GD4_CPS;
        e = getenv("VLLM_CUDA_GEMV_D4_N1");
        c->gemv_d4_n1 = !(e && !strcmp(e, "0"));
    }
    int m;
    return c->gemv_d4 == 2 && n >= 1 && n <= GD4_MAX_N && n * w->shape[1] < INT_MAX &&
           gd4_plan(c, w->dtype, n, w->shape[1], &m);
}

template <rt_dtype T, int M, int NB, bool GLU>
static int gd4_launch(cuda_ctx *c, const char *w, int64_t ws, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                      const float *bias, int64_t out, int64_t in, int n, int act) {
    const size_t smem = gd4_smem<T, M>(n, in);
    /* the opt-in above 48 KiB is per device: at every launch, as the flash
     * kernels do; to the most any call asks (one instance serves calls of
     * different n and rows, and graphs recorded before replay) */
    cudaError_t e = cudaFuncSetAttribute(k_gemv_d4<T, M, NB, GLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, GD4_SMEM);
    if (e != cudaSuccess) return cuda_fail(e, "gemv d4 smem opt-in", __FILE__, __LINE__);
    const int64_t rows = GLU ? out / 2 : out, blocks = (rows + GD4_WARPS - 1) / GD4_WARPS;
    const int64_t most = (int64_t)c->n_sm * c->gemv_d4_cps;
    const unsigned grid = (unsigned)(blocks < most ? blocks : most);
    cuda_launch(k_gemv_d4<T, M, NB, GLU>, grid, GD4_WARPS * 32, smem, c->stream, w, ws, x, x_ld, y, y_ld, bias, out, in,
                n, act);
    return VC_OK;
}

/* One row (batch-1 decode) gets an instance of its own: acc / g of one
 * value and no loops over rows (VLLM_CUDA_GEMV_D4_N1=0: the 8-row
 * instance at n = 1 too, A/B). */
template <rt_dtype T, int M, bool GLU>
static int gd4_go(cuda_ctx *c, const char *w, int64_t ws, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                  const float *bias, int64_t out, int64_t in, int n, int act) {
    if (n == 1 && c->gemv_d4_n1) return gd4_launch<T, M, 1, GLU>(c, w, ws, x, x_ld, y, y_ld, bias, out, in, n, act);
    return gd4_launch<T, M, GD4_MAX_N, GLU>(c, w, ws, x, x_ld, y, y_ld, bias, out, in, n, act);
}

int cuda_gemv_d4(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                 const float *bias, int64_t out, int64_t in, int n, bool glu, int act) {
    if (cuda_gemv_xr_fits(c, w, n)) /* one row of K-quants: x in registers */
        return cuda_gemv_xr(c, w, x, x_ld, y, y_ld, glu ? NULL : bias, out, in, n, glu, act);
    const char *wd = (const char *)w->data;
    const int64_t ws = w->stride[0];
    int m = 1;
    (void)gd4_plan(c, w->dtype, n, in, &m); /* fits by cuda_gemv_d4_fits */
    const int m2 = m == 2;
    int rc = VC_OK;
    switch (w->dtype) {
#define X(T)                                                                                            \
    case T:                                                                                             \
        if (m2 && glu) rc = gd4_go<T, 2, true>(c, wd, ws, x, x_ld, y, y_ld, NULL, out, in, n, act); \
        else if (m2) rc = gd4_go<T, 2, false>(c, wd, ws, x, x_ld, y, y_ld, bias, out, in, n, act);  \
        else if (glu) rc = gd4_go<T, 1, true>(c, wd, ws, x, x_ld, y, y_ld, NULL, out, in, n, act);  \
        else rc = gd4_go<T, 1, false>(c, wd, ws, x, x_ld, y, y_ld, bias, out, in, n, act);          \
        break;
        CUDA_FOR_QUANT(X)
#undef X
    default: return vc_err_set(VC_ERR_UNSUPPORTED, "cuda gemv: weight dtype %s", rt_dtype_name(w->dtype));
    }
    if (rc < 0) return rc;
    CU_LAUNCHED();
    return VC_OK;
}
