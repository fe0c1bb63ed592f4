/* cuda_mmq — MATMUL over GGUF block weights on int8 tensor cores, for
 * steps of more rows than the decode GEMVs take (batched decode, short
 * prefill chunks): mma.sync m16n8k32 (Q6_K: m16n8k16) s8 x s8 -> s32.
 *
 * Why: above CUDA_GEMV_MAX_N rows the dp4a GEMV's cost grows with the rows,
 * and the fallback, cuBLAS over a bf16 copy dequantized per call, writes and
 * reads 2 bytes a value more than the 0.56-1.06 of the blocks, and its
 * per-call allocation keeps those steps out of CUDA graphs. Here W is read
 * once per call in its own bytes, x once per 128 W rows.
 *
 * Shapes. k_mq_quant: x [n, in] (f32 or bf16 rows) -> xq [n_pad, in] int8,
 * per 32 values d = amax / 127, q = round(x / d), and xs [in / 32, n_pad]
 * float2 (d, d * sum q), in the workspace cuda_ctx.mq (n_pad: n rounded up
 * to the token tile; its rows past n are zeros). k_mmq: a CTA takes
 * MQ_TR = 128 W rows x TN = 16 NB tokens; its 8 warps are 4 (rows) x 2
 * (tokens), a warp 32 rows (two 16-row strips) x NB n-blocks of 8 tokens.
 * K goes in chunks of 256 values (8 units of 32; one K-quant super-block),
 * staged by cp.async in MQ_STAGES buffers: each W row's chunk bytes from
 * the 16-byte boundary at or below them (rows are only 2-byte aligned),
 * the tokens' 256 int8 x and their scales. A unit of W (32 values of 16
 * rows) meets a unit of x (32 values of 8 tokens) in one mma (Q6_K: two,
 * one per 16-value scale), and its int32 sums s enter
 *     y[tok, row] += d_row * (dx_tok * s) + m_row * (dx_tok * sum q_tok)
 * with the format's scale d (Q4_K / Q5_K: d * the sub-block scale) and its
 * minimum term m (Q4_1: m; Q4_K / Q5_K: -dmin * the sub-block min; else 0).
 * Q4_0 and Q6_K values are made signed (q - 8, q - 32) before the mma.
 *
 * K split: when row tiles x token tiles are fewer than one wave of CTAs,
 * blockIdx.z takes a range of chunks and writes f32 partials [S, n, out]
 * that k_mq_reduce sums in split order (the result depends on the shape
 * only, not on timing). The kernels chain by PDL; W loads of the first
 * stages go out before the wait. Numerics: x rounded to 8 bits per 32
 * values, as cuda_gemv_d4.cu, the CPU backend and llama.cpp do for
 * quantized weights (~0.4% a value).
 *
 * Calls with bf16 x rows go to cuda_mmq_bf.cu (W decoded to bf16, no
 * per-unit float work; the default), the rest (f32 x) here.
 * VLLM_CUDA_MMQ=0: cuBLAS over the dequantized copy (A/B); =int8: this
 * kernel for every call;
 * VLLM_CUDA_MMQ_MAX_N: the most rows it takes (default MQ_MAX_N);
 * VLLM_CUDA_MMQ_SPLIT: K splits forced (tuning).
 */
#include "backends/cuda/cuda_mmq.cuh"

#include <cuda_bf16.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MQ_WR 4              /* warps along W rows (32 rows each: MQ_TR) */
#define MQ_WN 2              /* warps along tokens */
#define MQ_WARPS (MQ_WR * MQ_WN)
#define MQ_XS 272            /* shared bytes per token row of a chunk: 256 + 16 (bank spread) */
/* default VLLM_CUDA_MMQ_MIN_N: decode steps of 3+ rows over GGUF weights
 * ask for bf16 rows and come here (cuda_gemv_rows) rather than to the dp4a
 * GEMV, whose cost grows with the rows. Session 12's table (8B Q4_K, us,
 * bf16 kernel / GEMV): 1 row gate|up 59.7 / 39.9, down 28.0 / 23.8; 2 rows
 * 60.2 / 53.0, 28.1 / 35.4 (even over the four matmuls); 4 rows 59.8 /
 * 81.3, 28.0 / 62.8; 8 rows 60.2 / 138.8, 28.2 / 174.7. */
#define MQ_MIN_N 3
#define MQ_MAX_N 64          /* default VLLM_CUDA_MMQ_MAX_N (session 12: ahead of the copy to 64 rows on every 8B shape, behind at 128) */

/* ---- formats ------------------------------------------------------------ */

/* Nibbles (w & 0x0F0F0F0F) minus 8 as signed bytes, without __vsub4's
 * emulation: t = q ^ 8 is q - 8 in 4-bit two's complement; its bit 3 times
 * 0x1E sets bits 4..7 (8 * 30 = 0xF0, no carry into the next byte). */
__device__ __forceinline__ int mq_nib_m8(int w) {
    const int t = (w & 0x0F0F0F0F) ^ 0x08080808;
    return t + (t & 0x08080808) * 0x1E;
}

/* 6-bit values (bytes 0..63) minus 32 as signed bytes: t = v ^ 32 is
 * v - 32 in 6-bit two's complement; bit 5 times 6 sets bits 6..7. */
__device__ __forceinline__ int mq_sub32(int v) {
    const int t = v ^ 0x20202020;
    return t + (t & 0x20202020) * 6;
}

/* Per format: HALVES 2 where each 16 values have their own scale; unit(): for lane group t
 * (0..3) of unit u of the chunk at p, the int8 words a[0] (values 4t..4t+3)
 * and a[1] (16+4t..16+4t+3), the scale of each half and the min term. */
template <rt_dtype T> struct mq_f;

template <> struct mq_f<RT_Q4_0> {
    enum { HALVES = 1, HAS_M = 0 };
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, int *a, float *d, float &m) {
        const uint8_t *b = p + u * 18;
        const int w = mq_w2(b + 2 + 4 * t);
        a[0] = mq_nib_m8(w);
        a[1] = mq_nib_m8(w >> 4);
        d[0] = d[1] = cuda_h2f(b);
        m = 0.0f;
    }
};

template <> struct mq_f<RT_Q4_1> {
    enum { HALVES = 1, HAS_M = 1 };
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, int *a, float *d, float &m) {
        const uint8_t *b = p + u * 20;
        const int w = mq_w2(b + 4 + 4 * t);
        a[0] = w & 0x0F0F0F0F;
        a[1] = (w >> 4) & 0x0F0F0F0F;
        d[0] = d[1] = cuda_h2f(b);
        m = cuda_h2f(b + 2);
    }
};

template <> struct mq_f<RT_Q8_0> {
    enum { HALVES = 1, HAS_M = 0 };
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, int *a, float *d, float &m) {
        const uint8_t *b = p + u * 34;
        a[0] = mq_w2(b + 2 + 4 * t);
        a[1] = mq_w2(b + 18 + 4 * t);
        d[0] = d[1] = cuda_h2f(b);
        m = 0.0f;
    }
};

template <> struct mq_f<RT_Q4_K> {
    enum { HALVES = 1, HAS_M = 1 };
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, int *a, float *d, float &m) {
        int sc, mn;
        cuda_q4k_sm(u, p + 4, sc, mn);
        const uint8_t *qs = p + 16 + 32 * (u >> 1);
        const int sh = 4 * (u & 1);
        a[0] = (mq_w2(qs + 4 * t) >> sh) & 0x0F0F0F0F;
        a[1] = (mq_w2(qs + 16 + 4 * t) >> sh) & 0x0F0F0F0F;
        d[0] = d[1] = cuda_h2f(p) * (float)sc;
        m = -cuda_h2f(p + 2) * (float)mn;
    }
};

template <> struct mq_f<RT_Q5_K> {
    enum { HALVES = 1, HAS_M = 1 };
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, int *a, float *d, float &m) {
        int sc, mn;
        cuda_q4k_sm(u, p + 4, sc, mn);
        const uint8_t *qh = p + 16, *qs = p + 48 + 32 * (u >> 1);
        const int sh = 4 * (u & 1);
        a[0] = ((mq_w2(qs + 4 * t) >> sh) & 0x0F0F0F0F) | (((mq_w2(qh + 4 * t) >> u) & 0x01010101) << 4);
        a[1] = ((mq_w2(qs + 16 + 4 * t) >> sh) & 0x0F0F0F0F) | (((mq_w2(qh + 16 + 4 * t) >> u) & 0x01010101) << 4);
        d[0] = d[1] = cuda_h2f(p) * (float)sc;
        m = -cuda_h2f(p + 2) * (float)mn;
    }
};

template <> struct mq_f<RT_Q6_K> {
    enum { HALVES = 2, HAS_M = 0 };
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, int *a, float *d, float &m) {
        const int h = u >> 2, k = u & 3, shl = k < 2 ? 0 : 4, shh = 2 * k;
        const uint8_t *ql = p + 64 * h + 32 * (k & 1), *qh = p + 128 + 32 * h;
        const int v0 = ((mq_w2(ql + 4 * t) >> shl) & 0x0F0F0F0F) | (((mq_w2(qh + 4 * t) >> shh) & 0x03030303) << 4);
        const int v1 = ((mq_w2(ql + 16 + 4 * t) >> shl) & 0x0F0F0F0F) | (((mq_w2(qh + 16 + 4 * t) >> shh) & 0x03030303) << 4);
        a[0] = mq_sub32(v0);
        a[1] = mq_sub32(v1);
        const int8_t *sc = (const int8_t *)(p + 192) + 8 * h + 2 * k;
        const float dd = cuda_h2f(p + 208);
        d[0] = dd * (float)sc[0];
        d[1] = dd * (float)sc[1];
        m = 0.0f;
    }
};

template <rt_dtype T, int NB> __host__ __device__ constexpr int mq_stage() {
    return MQ_TR * mq_rs<T>() + 16 * NB * MQ_XS + 8 * 16 * NB * 8;
}

/* ---- PTX ---------------------------------------------------------------- */

/* c = A (16 x 32, rows g / g + 8) . B (32 x 8) */
__device__ __forceinline__ void mq_mma32(int *c, const int *a, int b0, int b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}
/* c = A (16 x 16) . B (16 x 8) */
__device__ __forceinline__ void mq_mma16(int *c, int a0, int a1, int b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

/* ---- kernels ------------------------------------------------------------ */

__device__ __forceinline__ void mq_ld4(const float *p, float *v) {
    const float4 f = *(const float4 *)p;
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}
__device__ __forceinline__ void mq_ld4(const __nv_bfloat16 *p, float *v) {
    const uint2 u = *(const uint2 *)p;
    const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x), b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}

/* x -> xq / xs (see the top). 8 lanes a unit, 4 values a lane; the loop
 * is uniform per warp (the shuffles need every lane). */
template <typename X>
__global__ void k_mq_quant(const X *x, int64_t x_ld, int n, int n_pad, int in, int8_t *xq, float2 *xs) {
    CUDA_PDL_ENTER();
    const int lane = threadIdx.x & 31, sub = lane >> 3, l8 = lane & 7, U = in / 32;
    const int64_t items = (int64_t)n_pad * U, nw = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t base = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * 4; base < items; base += nw * 4) {
        const int64_t it = base + sub;
        const int tok = (int)(it / U), u = (int)(it % U);
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (it < items && tok < n) mq_ld4(x + (int64_t)tok * x_ld + u * 32 + 4 * l8, v);
        float a = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
        for (int o = 4; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        const float id = a > 0.0f ? 127.0f / a : 0.0f;
        const int q0 = __float2int_rn(v[0] * id), q1 = __float2int_rn(v[1] * id), q2 = __float2int_rn(v[2] * id),
                  q3 = __float2int_rn(v[3] * id);
        int sm = q0 + q1 + q2 + q3;
#pragma unroll
        for (int o = 4; o > 0; o >>= 1) sm += __shfl_xor_sync(0xffffffffu, sm, o);
        if (it < items) {
            *(int *)(xq + (int64_t)tok * in + u * 32 + 4 * l8) =
                (int)((uint32_t)(q0 & 255) | ((uint32_t)(q1 & 255) << 8) | ((uint32_t)(q2 & 255) << 16) | ((uint32_t)q3 << 24));
            const float d = a / 127.0f;
            if (l8 == 0) xs[(int64_t)u * n_pad + tok] = make_float2(d, d * (float)sm);
        }
    }
}

/* The tile GEMM (see the top). Grid: (token tiles, row tiles, K splits of
 * cps chunks). part: NULL (one split: y + bias stored here) or the f32
 * partials [gridDim.z, n, out]. */
template <rt_dtype T, int NB, bool YB>
__global__ void __launch_bounds__(MQ_WARPS * 32, 2) k_mmq(const char *w, int64_t ws, const int8_t *xq, const float2 *xs,
                                                       int n, int n_pad, void *y, int64_t y_ld, const float *bias,
                                                       float *part, int out, int in, int cps) {
    using F = mq_f<T>;
    constexpr int TN = 16 * NB, RS = mq_rs<T>(), STAGE = mq_stage<T, NB>();
    static_assert(MQ_WARPS * 32 == 2 * MQ_TR && 16 % (MQ_WARPS * 32 / TN) == 0, "mq_load_w / load_x thread maps");
    extern __shared__ __align__(16) uint8_t mq_sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wr = warp % MQ_WR, wn = warp / MQ_WR;
    const int T0 = blockIdx.x * TN, R0 = blockIdx.y * MQ_TR, U = in / 32;
    const int nch_all = (U + 7) / 8, c0 = blockIdx.z * cps, c1 = c0 + cps < nch_all ? c0 + cps : nch_all, nch = c1 - c0;
    auto nu_of = [&](int c) { return U - c * 8 < 8 ? U - c * 8 : 8; };
    /* this thread's W row to copy (mq_load_w), and its xq token and vectors:
     * 256 / TN threads a token, 16 vectors (256 int8) among them */
    const char *wrow = w + (int64_t)(R0 + (tid >> 1) < out ? R0 + (tid >> 1) : out - 1) * ws;
    constexpr int TPT = MQ_WARPS * 32 / TN;
    const int xt = tid / TPT, xv = tid % TPT;
    const int8_t *xrow = xq + (int64_t)(T0 + xt) * in; /* n_pad rows: always in range */
    auto load_w = [&](int st, int c) { mq_load_w<T>(mq_sm + st * STAGE, wrow, c, nu_of(c), tid); };
    auto load_x = [&](int st, int c) {
        uint8_t *sx = mq_sm + st * STAGE + MQ_TR * RS;
        const int nu = nu_of(c);
#pragma unroll
        for (int k = 0; k < 16 / TPT; k++) {
            const int v = xv + TPT * k;
            if (v < 2 * nu) mq_cp16(sx + xt * MQ_XS + v * 16, xrow + c * 256 + v * 16);
        }
        uint8_t *ss = sx + TN * MQ_XS;
        for (int i = tid; i < nu * TN / 2; i += MQ_WARPS * 32) {
            const int u = i / (TN / 2), v = i % (TN / 2);
            mq_cp16(ss + u * TN * 8 + v * 16, (const uint8_t *)(xs + (int64_t)(c * 8 + u) * n_pad + T0) + v * 16);
        }
    };
    auto row_off = [&](int r, int c) { /* a compute row's chunk start within its first shared vector */
        const int row = R0 + r < out ? R0 + r : out - 1;
        return (int)((uintptr_t)(w + (int64_t)row * ws + (int64_t)c * mq_cb_full<T>()) & 15);
    };

    float acc[2][NB][4];
#pragma unroll
    for (int s = 0; s < 2; s++)
#pragma unroll
        for (int b = 0; b < NB; b++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[s][b][e] = 0.0f;

    /* W of the first stages before the PDL wait (weights are not written
     * by the kernel before); x after it */
#pragma unroll
    for (int s = 0; s < MQ_STAGES - 1; s++)
        if (s < nch) load_w(s, c0 + s);
    CUDA_PDL_ENTER();
#pragma unroll
    for (int s = 0; s < MQ_STAGES - 1; s++) {
        if (s < nch) load_x(s, c0 + s);
        mq_commit();
    }
    for (int i = 0; i < nch; i++) {
        mq_wait<MQ_STAGES - 2>();
        __syncthreads(); /* stage i landed for all; stage i - 1 free for the next load */
        {
            const int j = i + MQ_STAGES - 1;
            if (j < nch) {
                load_w(j % MQ_STAGES, c0 + j);
                load_x(j % MQ_STAGES, c0 + j);
            }
            mq_commit();
        }
        const int c = c0 + i, nu = nu_of(c), st = i % MQ_STAGES;
        const uint8_t *sw = mq_sm + st * STAGE, *sx = sw + MQ_TR * RS;
        const float *ss = (const float *)(sx + TN * MQ_XS);
        const uint8_t *pr[2][2]; /* [strip][row g, g + 8]: the chunk's first byte in shared memory */
#pragma unroll
        for (int s = 0; s < 2; s++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = wr * 32 + s * 16 + g + 8 * h;
                pr[s][h] = sw + r * RS + row_off(r, c);
            }
#pragma unroll 2
        for (int u = 0; u < nu; u++) {
            int A[2][4];
            float d[2][2][2], m[2][2];
#pragma unroll
            for (int s = 0; s < 2; s++) {
                int lo[2], hi[2];
                F::unit(pr[s][0], u, t, lo, d[s][0], m[s][0]);
                F::unit(pr[s][1], u, t, hi, d[s][1], m[s][1]);
                A[s][0] = lo[0], A[s][1] = hi[0], A[s][2] = lo[1], A[s][3] = hi[1];
            }
#pragma unroll
            for (int b = 0; b < NB; b++) {
                const int tl = (wn * NB + b) * 8;
                const uint8_t *xb = sx + (tl + g) * MQ_XS + u * 32 + 4 * t;
                const int b0 = *(const int *)xb, b1 = *(const int *)(xb + 16);
                const float4 sc = *(const float4 *)(ss + 2 * (u * TN + tl + 2 * t)); /* dx, dx sum q of tokens 2t, 2t + 1 */
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    float v[4];
                    if (F::HALVES == 1) {
                        int cc[4];
                        mq_mma32(cc, A[s], b0, b1);
                        v[0] = d[s][0][0] * (float)cc[0], v[1] = d[s][0][0] * (float)cc[1];
                        v[2] = d[s][1][0] * (float)cc[2], v[3] = d[s][1][0] * (float)cc[3];
                    } else {
                        int c0v[4], c1v[4];
                        mq_mma16(c0v, A[s][0], A[s][1], b0);
                        mq_mma16(c1v, A[s][2], A[s][3], b1);
                        v[0] = fmaf(d[s][0][1], (float)c1v[0], d[s][0][0] * (float)c0v[0]);
                        v[1] = fmaf(d[s][0][1], (float)c1v[1], d[s][0][0] * (float)c0v[1]);
                        v[2] = fmaf(d[s][1][1], (float)c1v[2], d[s][1][0] * (float)c0v[2]);
                        v[3] = fmaf(d[s][1][1], (float)c1v[3], d[s][1][0] * (float)c0v[3]);
                    }
                    acc[s][b][0] = fmaf(v[0], sc.x, acc[s][b][0]);
                    acc[s][b][1] = fmaf(v[1], sc.z, acc[s][b][1]);
                    acc[s][b][2] = fmaf(v[2], sc.x, acc[s][b][2]);
                    acc[s][b][3] = fmaf(v[3], sc.z, acc[s][b][3]);
                    if (F::HAS_M) {
                        acc[s][b][0] = fmaf(m[s][0], sc.y, acc[s][b][0]);
                        acc[s][b][1] = fmaf(m[s][0], sc.w, acc[s][b][1]);
                        acc[s][b][2] = fmaf(m[s][1], sc.y, acc[s][b][2]);
                        acc[s][b][3] = fmaf(m[s][1], sc.w, acc[s][b][3]);
                    }
                }
            }
        }
    }
    mq_wait<0>();
#pragma unroll
    for (int s = 0; s < 2; s++)
#pragma unroll
        for (int b = 0; b < NB; b++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = R0 + wr * 32 + s * 16 + g + (e >> 1) * 8, tok = T0 + (wn * NB + b) * 8 + 2 * t + (e & 1);
                if (row >= out || tok >= n) continue;
                if (part) part[((int64_t)blockIdx.z * n + tok) * out + row] = acc[s][b][e];
                else mq_store<YB>(y, (int64_t)tok * y_ld + row, acc[s][b][e] + (bias ? bias[row] : 0.0f));
            }
}

/* ---- host --------------------------------------------------------------- */

static uint64_t g_mq_launches; /* calls that ran k_mmq (tests) */

extern "C" uint64_t cuda_mmq_launches(void) { return __atomic_load_n(&g_mq_launches, __ATOMIC_RELAXED); }

static void mq_read_env(cuda_ctx *c) {
    if (c->mmq) return;
    const char *e = getenv("VLLM_CUDA_MMQ");
    c->mmq = e && !strcmp(e, "0") ? 1 : e && !strcmp(e, "int8") ? 2 : 3;
    e = getenv("VLLM_CUDA_MMQ_MAX_N");
    const long v = e && *e ? strtol(e, NULL, 10) : MQ_MAX_N;
    c->mmq_max_n = v >= 1 && v <= (1 << 20) ? (int)v : MQ_MAX_N;
    e = getenv("VLLM_CUDA_MMQ_TN");
    c->mmq_tn = e && !strcmp(e, "32") ? 32 : 64;
    e = getenv("VLLM_CUDA_MMQ_MIN_N");
    const long mn = e && *e ? strtol(e, NULL, 10) : MQ_MIN_N;
    c->mmq_min_n = mn >= 1 && mn <= CUDA_GEMV_MAX_N + 1 ? (int)mn : MQ_MIN_N;
    e = getenv("VLLM_CUDA_MMQ_SPLIT");
    const long s = e && *e ? strtol(e, NULL, 10) : 0;
    c->mmq_split = s >= 1 && s <= 64 ? (int)s : 0;
}

static bool mq_format(rt_dtype t) {
    switch (t) {
#define X(T) case T: return true;
        CUDA_FOR_QUANT(X)
#undef X
    default: return false;
    }
}

int cuda_mmq_min_n(cuda_ctx *c) {
    mq_read_env(c);
    return c->mmq == 1 || c->mmq_max_n < c->mmq_min_n ? CUDA_GEMV_MAX_N + 1 : c->mmq_min_n;
}

bool cuda_mmq_fits(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, int64_t in, int64_t n) {
    mq_read_env(c);
    if (c->mmq == 1 || n < 1 || n > c->mmq_max_n || !mq_format(w->dtype) || in % 32 || in > INT_MAX / 2 ||
        w->shape[0] > INT_MAX || w->stride[0] % 2 || (uintptr_t)w->data % 16)
        return false;
    const int64_t n_pad = (n + 63) / 64 * 64;
    if (n_pad * in > (int64_t)INT_MAX) return false;
    if (xt == RT_F32) return x_ld % 4 == 0 && (uintptr_t)x % 16 == 0;
    return xt == RT_BF16 && x_ld % 4 == 0 && (uintptr_t)x % 8 == 0;
}

template <rt_dtype T, int NB, bool YB> static int mq_per_sm(size_t smem) {
    static int nb; /* per instance: its shared memory is fixed by T and NB */
    if (!nb && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k_mmq<T, NB, YB>, MQ_WARPS * 32, smem) != cudaSuccess) nb = 1;
    return nb > 0 ? nb : 1;
}

/* One call: the split plan, the workspace (xq [n_pad, in] | xs [in / 32,
 * n_pad] float2 | partials [S, n, out] f32 when S > 1), then k_mq_quant,
 * k_mmq and, split, k_mq_reduce. */
template <rt_dtype T, int NB, bool YB>
static int mq_launch(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *y, int64_t y_ld,
                     const float *bias, int out, int in, int n) {
    constexpr int TN = 16 * NB;
    const size_t smem = (size_t)MQ_STAGES * mq_stage<T, NB>();
    cudaError_t e = cudaFuncSetAttribute(k_mmq<T, NB, YB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return cuda_fail(e, "mmq smem opt-in", __FILE__, __LINE__);
    const int n_pad = (n + TN - 1) / TN * TN, U = in / 32, ntt = n_pad / TN, nrt = (out + MQ_TR - 1) / MQ_TR,
              nch = (U + 7) / 8;
    int cps;
    const int S = mq_splits(c->n_sm, c->mmq_split, (int64_t)ntt * nrt, nch, mq_per_sm<T, NB, YB>(smem), &cps);
    const size_t xq_b = ((size_t)n_pad * (size_t)in + 255) / 256 * 256, xs_b = ((size_t)U * n_pad * 8 + 255) / 256 * 256;
    const size_t part_b = S > 1 ? (size_t)S * (size_t)n * (size_t)out * 4 : 0;
    char *ws = (char *)cuda_ws_get(c, &c->mq, xq_b + xs_b + part_b, "mmq");
    if (!ws) return VC_ERR_OOM;
    int8_t *xq = (int8_t *)ws;
    float2 *xs = (float2 *)(ws + xq_b);
    float *part = S > 1 ? (float *)(ws + xq_b + xs_b) : NULL;
    const unsigned qb = cuda_blocks((int64_t)n_pad * U, 32); /* 8 warps x 4 units a block */
    if (xt == RT_BF16)
        cuda_launch(k_mq_quant<__nv_bfloat16>, qb, 256, 0, c->stream, (const __nv_bfloat16 *)x, x_ld, n, n_pad, in, xq, xs);
    else
        cuda_launch(k_mq_quant<float>, qb, 256, 0, c->stream, (const float *)x, x_ld, n, n_pad, in, xq, xs);
    cuda_launch(k_mmq<T, NB, YB>, dim3((unsigned)ntt, (unsigned)nrt, (unsigned)S), MQ_WARPS * 32, smem, c->stream,
                (const char *)w->data, w->stride[0], (const int8_t *)xq, (const float2 *)xs, n, n_pad, y, y_ld, bias,
                part, out, in, cps);
    if (S > 1)
        cuda_launch(k_mq_reduce<YB>, cuda_blocks((int64_t)n * out, 256), 256, 0, c->stream, (const float *)part, S, n,
                    out, y, y_ld, bias);
    CU_LAUNCHED();
    __atomic_fetch_add(&g_mq_launches, 1, __ATOMIC_RELAXED);
    return VC_OK;
}

template <rt_dtype T, bool YB>
static int mq_go(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *y, int64_t y_ld,
                 const float *bias, int out, int in, int n) {
    if (n <= 16) return mq_launch<T, 1, YB>(c, w, x, xt, x_ld, y, y_ld, bias, out, in, n);
    if (n <= 32) return mq_launch<T, 2, YB>(c, w, x, xt, x_ld, y, y_ld, bias, out, in, n);
    return mq_launch<T, 4, YB>(c, w, x, xt, x_ld, y, y_ld, bias, out, in, n);
}

int cuda_mmq(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *y, rt_dtype yt,
             int64_t y_ld, const float *bias, int64_t out, int64_t in, int64_t n) {
    /* bf16 x: W decoded to bf16 (cuda_mmq_bf.cu), but Q8_0, whose bytes meet
     * int8 x as they are (its bf16 decode goes through f32: slower, table in
     * BENCHMARKS) */
    if (c->mmq == 3 && w->dtype != RT_Q8_0 && cuda_mmq_bf_fits(w, x, xt, x_ld))
        return cuda_mmq_bf(c, w, x, x_ld, y, yt, y_ld, bias, out, in, n);
    const bool yb = yt == RT_BF16;
    switch (w->dtype) {
#define X(T)                                                                                             \
    case T:                                                                                              \
        return yb ? mq_go<T, true>(c, w, x, xt, x_ld, y, y_ld, bias, (int)out, (int)in, (int)n)          \
                  : mq_go<T, false>(c, w, x, xt, x_ld, y, y_ld, bias, (int)out, (int)in, (int)n);
        CUDA_FOR_QUANT(X)
#undef X
    default: return vc_err_set(VC_ERR_UNSUPPORTED, "cuda mmq: weight dtype %s", rt_dtype_name(w->dtype));
    }
}
