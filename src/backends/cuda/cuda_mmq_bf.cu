/* cuda_mmq_bf — MATMUL over GGUF block weights for bf16 x rows: W decoded
 * to bf16 in registers, mma.sync m16n8k16 bf16 x bf16 -> f32 accumulated
 * over the whole row (the default of cuda_mmq's two kernels).
 *
 * Why: the int8 kernel (cuda_mmq.cu) pays ~4 float instructions per
 * output and 32-value unit (its int32 sums need the unit's W and x scales),
 * so its cost grows with the tokens (session 12, 8B gate|up Q4_0: 64 /
 * 82 / 119 us at 16 / 32 / 64 rows, IPC 2.5-2.7 of 4). Here the scales
 * are applied to W while it is decoded, once per value whatever the
 * tokens, and x needs no quantization; the numerics are those of cuBLAS
 * over the dequantized bf16 copy (W rounded to bf16 once; the format's
 * scale rounded to bf16 before, where the copy keeps it in f32).
 *
 * Shapes: a CTA takes MQ_TR = 128 W rows x TN = 8 NB tokens; each of its 8
 * warps one 16-row strip x all TN tokens (no decode twice). K in chunks of
 * 256 values staged by cp.async in MQ_STAGES buffers (W as in cuda_mmq.cu,
 * x rows as they are: 512 bytes a token, rows past n zero-filled). A unit
 * of 32 values is two k16 mma steps over a permuted k order: lane group t
 * takes the unit's values 4t..4t+3 in the first step and 16+4t..16+4t+3
 * in the second (pairs (4t, 4t+1) and (4t+2, 4t+3) in the fragment's two
 * k slots), so its W values come from one 32-bit word of the row (Q4_0:
 * the low and high nibbles of bytes 4t..4t+3) and its x values from one
 * 8-byte load; the sum over k does not depend on the order. Decode: a
 * byte v < 128 becomes the bf16 128 + v by one byte permute (0x43 as the
 * high byte), minus 128 + offset is exact, then times the scale (HMUL2) or
 * scale and min (HFMA2); Q8_0 through f32.
 * K split and reduction as cuda_mmq.cu (cuda_mmq.cuh).
 */
#include "backends/cuda/cuda_mmq.cuh"

#include <cuda_bf16.h>

#define MB_WARPS 8 /* x 16 rows = MQ_TR */
#define MB_XS 544  /* shared bytes per token row of a chunk: 512 + 32 (8-byte loads of 8 tokens on distinct banks) */

typedef __nv_bfloat162 bf2;

/* bf16 pair (128 + byte i, 128 + byte j) of w (bytes < 128): sel 0x4140 = bytes 0, 1; 0x4342 = 2, 3. */
__device__ __forceinline__ uint32_t mb_pair(uint32_t w, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(w), "r"(0x43u), "r"(sel));
    return r;
}
__device__ __forceinline__ bf2 mb_bf2(uint32_t u) { return *(const bf2 *)&u; }
__device__ __forceinline__ uint32_t mb_u32(bf2 v) { return *(const uint32_t *)&v; }

/* The four pairs of a word of 4 small values (bytes < 128): (b0, b1), (b2, b3) as bf16, minus off, times s. */
__device__ __forceinline__ void mb_mul(uint32_t w, bf2 off, bf2 s, uint32_t *a) {
    a[0] = mb_u32(__hmul2(__hsub2(mb_bf2(mb_pair(w, 0x4140)), off), s));
    a[1] = mb_u32(__hmul2(__hsub2(mb_bf2(mb_pair(w, 0x4342)), off), s));
}
/* ... times s plus m. */
__device__ __forceinline__ void mb_fma(uint32_t w, bf2 off, bf2 s, bf2 m, uint32_t *a) {
    a[0] = mb_u32(__hfma2(__hsub2(mb_bf2(mb_pair(w, 0x4140)), off), s, m));
    a[1] = mb_u32(__hfma2(__hsub2(mb_bf2(mb_pair(w, 0x4342)), off), s, m));
}
__device__ __forceinline__ bf2 mb_splat(float v) { return __float2bfloat162_rn(v); }
__device__ __forceinline__ bf2 mb_c(float v) { return __float2bfloat162_rn(v); } /* exact constants */

/* Per format: unit u of the chunk at p, lane group t -> a[0..1] the pairs of
 * values 4t..4t+3 (first k16 step), a[2..3] of 16+4t..16+4t+3 (second). */
template <rt_dtype T> struct mb_f;

template <> struct mb_f<RT_Q4_0> {
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, uint32_t *a) {
        const uint8_t *b = p + u * 18;
        const uint32_t w = (uint32_t)mq_w2(b + 2 + 4 * t);
        const bf2 d = mb_splat(cuda_h2f(b)), off = mb_c(136.0f);
        mb_mul(w & 0x0F0F0F0Fu, off, d, a);
        mb_mul((w >> 4) & 0x0F0F0F0Fu, off, d, a + 2);
    }
};

template <> struct mb_f<RT_Q4_1> {
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, uint32_t *a) {
        const uint8_t *b = p + u * 20;
        const uint32_t w = (uint32_t)mq_w2(b + 4 + 4 * t);
        const bf2 d = mb_splat(cuda_h2f(b)), m = mb_splat(cuda_h2f(b + 2)), off = mb_c(128.0f);
        mb_fma(w & 0x0F0F0F0Fu, off, d, m, a);
        mb_fma((w >> 4) & 0x0F0F0F0Fu, off, d, m, a + 2);
    }
};

template <> struct mb_f<RT_Q8_0> {
    static __device__ __forceinline__ void one(uint32_t w, float d, uint32_t *a) {
        const float v0 = d * (float)(int8_t)(w & 0xFF), v1 = d * (float)(int8_t)((w >> 8) & 0xFF);
        const float v2 = d * (float)(int8_t)((w >> 16) & 0xFF), v3 = d * (float)(int8_t)(w >> 24);
        a[0] = mb_u32(__floats2bfloat162_rn(v0, v1));
        a[1] = mb_u32(__floats2bfloat162_rn(v2, v3));
    }
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, uint32_t *a) {
        const uint8_t *b = p + u * 34;
        const float d = cuda_h2f(b);
        one((uint32_t)mq_w2(b + 2 + 4 * t), d, a);
        one((uint32_t)mq_w2(b + 18 + 4 * t), d, a + 2);
    }
};

template <> struct mb_f<RT_Q4_K> {
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, uint32_t *a) {
        int sc, mn;
        cuda_q4k_sm(u, p + 4, sc, mn);
        const uint8_t *qs = p + 16 + 32 * (u >> 1);
        const int sh = 4 * (u & 1);
        const bf2 d = mb_splat(cuda_h2f(p) * (float)sc), m = mb_splat(-cuda_h2f(p + 2) * (float)mn), off = mb_c(128.0f);
        mb_fma(((uint32_t)mq_w2(qs + 4 * t) >> sh) & 0x0F0F0F0Fu, off, d, m, a);
        mb_fma(((uint32_t)mq_w2(qs + 16 + 4 * t) >> sh) & 0x0F0F0F0Fu, off, d, m, a + 2);
    }
};

template <> struct mb_f<RT_Q5_K> {
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, uint32_t *a) {
        int sc, mn;
        cuda_q4k_sm(u, p + 4, sc, mn);
        const uint8_t *qh = p + 16, *qs = p + 48 + 32 * (u >> 1);
        const int sh = 4 * (u & 1);
        const bf2 d = mb_splat(cuda_h2f(p) * (float)sc), m = mb_splat(-cuda_h2f(p + 2) * (float)mn), off = mb_c(128.0f);
        const uint32_t w0 = (((uint32_t)mq_w2(qs + 4 * t) >> sh) & 0x0F0F0F0Fu) |
                            ((((uint32_t)mq_w2(qh + 4 * t) >> u) & 0x01010101u) << 4);
        const uint32_t w1 = (((uint32_t)mq_w2(qs + 16 + 4 * t) >> sh) & 0x0F0F0F0Fu) |
                            ((((uint32_t)mq_w2(qh + 16 + 4 * t) >> u) & 0x01010101u) << 4);
        mb_fma(w0, off, d, m, a);
        mb_fma(w1, off, d, m, a + 2);
    }
};

template <> struct mb_f<RT_Q6_K> {
    static __device__ __forceinline__ void unit(const uint8_t *p, int u, int t, uint32_t *a) {
        const int h = u >> 2, k = u & 3, shl = k < 2 ? 0 : 4, shh = 2 * k;
        const uint8_t *ql = p + 64 * h + 32 * (k & 1), *qh = p + 128 + 32 * h;
        const uint32_t v0 = (((uint32_t)mq_w2(ql + 4 * t) >> shl) & 0x0F0F0F0Fu) |
                            ((((uint32_t)mq_w2(qh + 4 * t) >> shh) & 0x03030303u) << 4);
        const uint32_t v1 = (((uint32_t)mq_w2(ql + 16 + 4 * t) >> shl) & 0x0F0F0F0Fu) |
                            ((((uint32_t)mq_w2(qh + 16 + 4 * t) >> shh) & 0x03030303u) << 4);
        const int8_t *sc = (const int8_t *)(p + 192) + 8 * h + 2 * k;
        const float dd = cuda_h2f(p + 208);
        const bf2 off = mb_c(160.0f);
        mb_mul(v0, off, mb_splat(dd * (float)sc[0]), a);
        mb_mul(v1, off, mb_splat(dd * (float)sc[1]), a + 2);
    }
};

/* c += A (16 x 16, rows g / g + 8) . B (16 x 8) */
__device__ __forceinline__ void mb_mma(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <rt_dtype T, int NB> __host__ __device__ constexpr int mb_stage() { return MQ_TR * mq_rs<T>() + 8 * NB * MB_XS; }

/* Grid (token tiles, row tiles, K splits of cps chunks); ST stages; part as k_mmq. */
template <rt_dtype T, int NB, int ST, bool YB>
__global__ void __launch_bounds__(MB_WARPS * 32) k_mmq_bf(const char *w, int64_t ws, const __nv_bfloat16 *x,
                                                          int64_t x_ld, int n, void *y, int64_t y_ld,
                                                          const float *bias, float *part, int out, int in, int cps) {
    constexpr int TN = 8 * NB, RS = mq_rs<T>(), STAGE = mb_stage<T, NB>();
    static_assert(MB_WARPS * 32 == 2 * MQ_TR && TN >= 8 && 32 % (MB_WARPS * 32 / TN) == 0, "mq_load_w / load_x thread maps");
    extern __shared__ __align__(16) uint8_t mb_sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int T0 = blockIdx.x * TN, R0 = blockIdx.y * MQ_TR, U = in / 32;
    const int nch_all = (U + 7) / 8, c0 = blockIdx.z * cps, c1 = c0 + cps < nch_all ? c0 + cps : nch_all, nch = c1 - c0;
    auto nu_of = [&](int c) { return U - c * 8 < 8 ? U - c * 8 : 8; };
    /* this thread's W row to copy (mq_load_w), and its x token and vectors:
     * 256 / TN threads a token, 32 vectors (a chunk of 256 bf16) among them */
    const char *wrow = w + (int64_t)(R0 + (tid >> 1) < out ? R0 + (tid >> 1) : out - 1) * ws;
    constexpr int TPT = MB_WARPS * 32 / TN;
    const int xt = tid / TPT, xv = tid % TPT;
    const bool x_in = T0 + xt < n;
    const __nv_bfloat16 *xrow = x_in ? x + (int64_t)(T0 + xt) * x_ld : x;
    auto load_x = [&](int st, int c) {
        uint8_t *sx = mb_sm + st * STAGE + MQ_TR * RS + xt * MB_XS;
        const int nv = 4 * nu_of(c); /* 16-byte vectors of a token's chunk */
#pragma unroll
        for (int k = 0; k < 32 / TPT; k++) {
            const int v = xv + TPT * k;
            if (v < nv) mq_cp16z(sx + v * 16, x_in ? xrow + c * 256 + v * 8 : x, x_in ? 16 : 0);
        }
    };
    auto load_w = [&](int st, int c) { mq_load_w<T>(mb_sm + st * STAGE, wrow, c, nu_of(c), tid); };
    auto row_off = [&](int r, int c) { /* a compute row's chunk start within its first shared vector */
        const int row = R0 + r < out ? R0 + r : out - 1;
        return (int)((uintptr_t)(w + (int64_t)row * ws + (int64_t)c * mq_cb_full<T>()) & 15);
    };

    float acc[NB][4];
#pragma unroll
    for (int b = 0; b < NB; b++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[b][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < ST - 1; s++)
        if (s < nch) load_w(s, c0 + s);
    CUDA_PDL_ENTER();
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < nch) load_x(s, c0 + s);
        mq_commit();
    }
    const int r0 = warp * 16 + g;
    for (int i = 0; i < nch; i++) {
        mq_wait<ST - 2>();
        __syncthreads(); /* stage i landed for all; stage i - 1 free for the next load */
        {
            const int j = i + ST - 1;
            if (j < nch) {
                load_w(j % ST, c0 + j);
                load_x(j % ST, c0 + j);
            }
            mq_commit();
        }
        const int c = c0 + i, nu = nu_of(c), st = i % ST;
        const uint8_t *sw = mb_sm + st * STAGE, *sx = sw + MQ_TR * RS;
        const uint8_t *p0 = sw + r0 * RS + row_off(r0, c), *p1 = sw + (r0 + 8) * RS + row_off(r0 + 8, c);
        const uint8_t *xr = sx + g * MB_XS + 8 * t;
#pragma unroll 2
        for (int u = 0; u < nu; u++) {
            uint32_t a[4], b[4]; /* rows g, g + 8: pairs of values 4t.., 16 + 4t.. */
            mb_f<T>::unit(p0, u, t, a);
            mb_f<T>::unit(p1, u, t, b);
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
                const uint8_t *xp = xr + nb * 8 * MB_XS + u * 64;
                const uint2 x0 = *(const uint2 *)xp, x1 = *(const uint2 *)(xp + 32);
                mb_mma(acc[nb], a[0], b[0], a[1], b[1], x0.x, x0.y);
                mb_mma(acc[nb], a[2], b[2], a[3], b[3], x1.x, x1.y);
            }
        }
    }
    mq_wait<0>();
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = R0 + r0 + (e >> 1) * 8, tok = T0 + nb * 8 + 2 * t + (e & 1);
            if (row >= out || tok >= n) continue;
            if (part) part[((int64_t)blockIdx.z * n + tok) * out + row] = acc[nb][e];
            else mq_store<YB>(y, (int64_t)tok * y_ld + row, acc[nb][e] + (bias ? bias[row] : 0.0f));
        }
}

/* ---- host --------------------------------------------------------------- */

static uint64_t g_mb_launches; /* calls that ran k_mmq_bf (tests) */

extern "C" uint64_t cuda_mmq_bf_launches(void) { return __atomic_load_n(&g_mb_launches, __ATOMIC_RELAXED); }

bool cuda_mmq_bf_fits(const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld) {
    (void)w;
    return xt == RT_BF16 && x_ld % 8 == 0 && (uintptr_t)x % 16 == 0;
}

template <rt_dtype T, int NB, int ST, bool YB> static int mb_per_sm(size_t smem) {
    static int nb; /* per instance: its shared memory is fixed by T, NB and ST */
    if (!nb && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k_mmq_bf<T, NB, ST, YB>, MB_WARPS * 32, smem) !=
                   cudaSuccess)
        nb = 1;
    return nb > 0 ? nb : 1;
}

template <rt_dtype T, int NB, int ST, bool YB>
static int mb_launch(cuda_ctx *c, const rt_tensor *w, const __nv_bfloat16 *x, int64_t x_ld, void *y, int64_t y_ld,
                     const float *bias, int out, int in, int n) {
    constexpr int TN = 8 * NB;
    const size_t smem = (size_t)ST * mb_stage<T, NB>();
    cudaError_t e = cudaFuncSetAttribute(k_mmq_bf<T, NB, ST, YB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return cuda_fail(e, "mmq bf smem opt-in", __FILE__, __LINE__);
    const int ntt = (n + TN - 1) / TN, nrt = (out + MQ_TR - 1) / MQ_TR, nch = (in / 32 + 7) / 8;
    int cps;
    const int S = mq_splits(c->n_sm, c->mmq_split, (int64_t)ntt * nrt, nch, mb_per_sm<T, NB, ST, YB>(smem), &cps);
    float *part = NULL;
    if (S > 1) {
        part = (float *)cuda_ws_get(c, &c->mq, (size_t)S * (size_t)n * (size_t)out * 4, "mmq");
        if (!part) return VC_ERR_OOM;
    }
    cuda_launch(k_mmq_bf<T, NB, ST, YB>, dim3((unsigned)ntt, (unsigned)nrt, (unsigned)S), MB_WARPS * 32, smem, c->stream,
                (const char *)w->data, w->stride[0], x, x_ld, n, y, y_ld, bias, part, out, in, cps);
    if (S > 1)
        cuda_launch(k_mq_reduce<YB>, cuda_blocks((int64_t)n * out, 256), 256, 0, c->stream, (const float *)part, S, n,
                    out, y, y_ld, bias);
    CU_LAUNCHED();
    __atomic_fetch_add(&g_mb_launches, 1, __ATOMIC_RELAXED);
    return VC_OK;
}

/* Token tile by rows: 8 and 16 (3 stages, two CTAs an SM), 32 (2 stages: two
 * CTAs an SM), then 64 (3 stages, one CTA an SM; 172 KB for Q4_0) in tiles
 * of 64. Session 12's table (8B shapes, Q4_K, us): at 64 rows gate|up
 * 125.5 in one tile of 64 vs 144.7 in two of 32 (2 stages) vs 182.3 (3
 * stages); at 16 / 32 rows the tile sizes here are at least as fast as the
 * others. VLLM_CUDA_MMQ_TN=32: tiles of 32 above 32 rows too (A/B). */
template <rt_dtype T, bool YB>
static int mb_go(cuda_ctx *c, const rt_tensor *w, const __nv_bfloat16 *x, int64_t x_ld, void *y, int64_t y_ld,
                 const float *bias, int out, int in, int n) {
    if (n <= 8) return mb_launch<T, 1, 3, YB>(c, w, x, x_ld, y, y_ld, bias, out, in, n);
    if (n <= 16) return mb_launch<T, 2, 3, YB>(c, w, x, x_ld, y, y_ld, bias, out, in, n);
    if (n <= 32 || c->mmq_tn == 32) return mb_launch<T, 4, 2, YB>(c, w, x, x_ld, y, y_ld, bias, out, in, n);
    return mb_launch<T, 8, 3, YB>(c, w, x, x_ld, y, y_ld, bias, out, in, n);
}

int cuda_mmq_bf(cuda_ctx *c, const rt_tensor *w, const void *x, int64_t x_ld, void *y, rt_dtype yt, int64_t y_ld,
                const float *bias, int64_t out, int64_t in, int64_t n) {
    const __nv_bfloat16 *xb = (const __nv_bfloat16 *)x;
    const bool yb = yt == RT_BF16;
    switch (w->dtype) {
#define X(T)                                                                                          \
    case T:                                                                                           \
        return yb ? mb_go<T, true>(c, w, xb, x_ld, y, y_ld, bias, (int)out, (int)in, (int)n)          \
                  : mb_go<T, false>(c, w, xb, x_ld, y, y_ld, bias, (int)out, (int)in, (int)n);
        CUDA_FOR_QUANT(X)
#undef X
    default: return vc_err_set(VC_ERR_UNSUPPORTED, "cuda mmq: weight dtype %s", rt_dtype_name(w->dtype));
    }
}
