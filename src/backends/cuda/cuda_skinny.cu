/* cuda_skinny — MATMUL and MATMUL_GLU for a few bf16 activation rows (2-16
 * tokens: batched decode) over bf16 weights, on tensor cores, streaming W
 * once like the GEMV.
 *
 * Why: the f32-row GEMV reads every x row once per weight row (3-4x its
 * one-row time at 2-8 rows, session 10), and cuBLAS, as fast on the 8B's
 * shapes, is 1.2-3.9x slower on the 0.6B's (test_cuda_gemm's speed
 * table, session 10). Here each x value feeds 16 weight rows.
 *
 * Layout and fragments: cuda_skinny.cuh. Lane (g, t) loads 16 bytes of
 * weight rows g and g + 8 and of x rows g (and g + 8 when NT = 2) per
 * 32-value chunk, so every fragment register comes straight from a 16-byte
 * load (no shared memory, no ldmatrix). W goes around L1
 * (cuda_ld_stream16), U chunks in flight per lane, the first round before
 * the PDL wait (weights do not depend on the kernel before). x rows (<= 16
 * x in bf16) stay in L1.
 *
 * f32 x rows (XF, 2..8 rows; VLLM_CUDA_SKINNY_F32X=0 turns it off): the attention output
 * that feeds Wo stays f32 in decode steps. Each x value is split into
 * bf16 hi + lo (x - hi rounded), two mma.sync steps per fragment, so the
 * product keeps ~16 bits of x (the f32-row GEMV's precision within the
 * rounding of lo) and W is still read once; x is loaded per chunk as two
 * float4 (L1 hits: the rows are shared by every warp).
 *
 * Block: SK_WARPS warps = SK_WARPS / KS groups; the KS partial 16 x 8NT
 * tiles meet in shared memory, summed in slice order (deterministic). GLU:
 * groups go in pairs, gate rows [16p, 16p + 16) and up rows f + the same,
 * and the pair's sums give y = act(gate) * up (gate and up rounded to bf16
 * first for a bf16 y, as the cuBLAS path's bf16 scratch does).
 */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_skinny.cuh"

#include <cuda_bf16.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* W chunk loads of one round: rows g and g + 8 of the group (pa, pb: the
 * rows' bytes at lane offset 16t), chunks ch + u * KS. */
template <int KS>
__device__ __forceinline__ void sk_load_w(uint4 (*q)[2], const char *pa, const char *pb, int64_t ch, int64_t nch) {
#pragma unroll
    for (int u = 0; u < SK_U; u++) {
        const int64_t c = ch + (int64_t)u * KS;
        if (c < nch) {
            q[u][0] = cuda_ld_stream16((const uint4 *)(pa + c * 64));
            q[u][1] = cuda_ld_stream16((const uint4 *)(pb + c * 64));
        } else {
            q[u][0] = q[u][1] = make_uint4(0, 0, 0, 0);
        }
    }
}

/* bf16 pair (a low, b high) of v, and of v - that pair (the rest). */
__device__ __forceinline__ void sk_split2(float a, float b, uint32_t &hi, uint32_t &lo) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    const float2 hf = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
    hi = *(const uint32_t *)&h;
    lo = *(const uint32_t *)&l;
}

template <int KS, int NT, bool GLU, typename D, bool XF>
__global__ void __launch_bounds__(SK_WARPS * 32, 2) k_skinny(const char *w, int64_t ws, const void *xp, int64_t x_ld,
                                                          D *y, int64_t y_ld, const float *bias, int64_t rows,
                                                          int64_t in, int n, int act) {
    static_assert(!XF || NT == 1, "f32 x rows: up to 8");
    constexpr int G = SK_WARPS / KS; /* groups per block */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int slot = warp / KS, slice = warp % KS;
    /* this warp's first row of its 16 (GLU: its pair's gate row index; the
     * up rows follow the f = rows gate rows); rows past the end read row 0,
     * and their sums are never stored */
    const int64_t base = GLU ? ((int64_t)blockIdx.x * (G / 2) + slot / 2) * 16 : ((int64_t)blockIdx.x * G + slot) * 16;
    const int64_t off = GLU && (slot & 1) ? rows : 0;
    const int64_t ra = base + g, rb = base + g + 8;
    const char *pa = w + (ra < rows ? ra + off : 0) * ws + 16 * t;
    const char *pb = w + (rb < rows ? rb + off : 0) * ws + 16 * t;
    const int64_t nch = in / 32;
    uint4 q0[SK_U][2];
    sk_load_w<KS>(q0, pa, pb, slice, nch);
    CUDA_PDL_ENTER();
    float acc[NT][4] = {};
    const __nv_bfloat16 *xr[NT];
    const float *xf = (const float *)xp;
    bool xv[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        xv[j] = g + 8 * j < n;
        xr[j] = (const __nv_bfloat16 *)xp + (int64_t)(xv[j] ? g + 8 * j : 0) * x_ld + 8 * t;
    }
    if (XF) xf += (int64_t)(xv[0] ? g : 0) * x_ld + 8 * t;
    for (int64_t ch = slice; ch < nch; ch += (int64_t)SK_U * KS) {
        uint4 xq[SK_U][NT];
        if (!XF) {
#pragma unroll
            for (int u = 0; u < SK_U; u++)
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const int64_t c = ch + (int64_t)u * KS;
                    xq[u][j] = xv[j] && c < nch ? __ldg((const uint4 *)(xr[j] + c * 32)) : make_uint4(0, 0, 0, 0);
                }
        }
        uint4 q[SK_U][2];
        const bool more = ch + (int64_t)SK_U * KS < nch;
        if (more) sk_load_w<KS>(q, pa, pb, ch + (int64_t)SK_U * KS, nch);
#pragma unroll
        for (int u = 0; u < SK_U; u++) {
            const uint32_t a0[4] = {q0[u][0].x, q0[u][1].x, q0[u][0].y, q0[u][1].y};
            const uint32_t a1[4] = {q0[u][0].z, q0[u][1].z, q0[u][0].w, q0[u][1].w};
            if (XF) {
                const int64_t c = ch + (int64_t)u * KS;
                float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;
                if (xv[0] && c < nch) {
                    v0 = __ldg((const float4 *)(xf + c * 32));
                    v1 = __ldg((const float4 *)(xf + c * 32 + 4));
                }
                uint32_t h[4], l[4];
                sk_split2(v0.x, v0.y, h[0], l[0]);
                sk_split2(v0.z, v0.w, h[1], l[1]);
                sk_split2(v1.x, v1.y, h[2], l[2]);
                sk_split2(v1.z, v1.w, h[3], l[3]);
                fl_mma<__nv_bfloat16>(acc[0], a0, h[0], h[1]);
                fl_mma<__nv_bfloat16>(acc[0], a0, l[0], l[1]);
                fl_mma<__nv_bfloat16>(acc[0], a1, h[2], h[3]);
                fl_mma<__nv_bfloat16>(acc[0], a1, l[2], l[3]);
            } else {
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    fl_mma<__nv_bfloat16>(acc[j], a0, xq[u][j].x, xq[u][j].y);
                    fl_mma<__nv_bfloat16>(acc[j], a1, xq[u][j].z, xq[u][j].w);
                }
            }
        }
        if (more) {
#pragma unroll
            for (int u = 0; u < SK_U; u++) q0[u][0] = q[u][0], q0[u][1] = q[u][1];
        }
    }
    sk_epilogue<KS, NT, GLU, D>(acc, n, rows, y, y_ld, bias, act);
}

/* Largest n this path takes (VLLM_CUDA_SKINNY: 0 off, else 2..16; default
 * 16) and a forced KS (VLLM_CUDA_SKINNY_KS: 1, 2, 4 or 8; A/B and the speed
 * table of test_cuda_gemm), read once per backend. */
static int skinny_max_n(cuda_ctx *c) {
    if (!c->skinny_max) {
        const char *e = getenv("VLLM_CUDA_SKINNY");
        int v = e && *e ? atoi(e) : 16;
        c->skinny_max = v >= 2 && v <= 16 ? v : v == 0 ? -1 : 16;
        e = getenv("VLLM_CUDA_SKINNY_KS");
        v = e && *e ? atoi(e) : 0;
        c->skinny_ks = v == 1 || v == 2 || v == 4 || v == 8 ? v : 0;
        e = getenv("VLLM_CUDA_SKINNY_F32X");
        c->skinny_f32x = !(e && !strcmp(e, "0"));
        e = getenv("VLLM_CUDA_SKINNY_QUANT");
        c->skinny_quant = e && !strcmp(e, "1");
    }
    return c->skinny_max;
}

bool cuda_skinny_on(cuda_ctx *c) { return skinny_max_n(c) > 0; }

bool cuda_skinny_quant_on(cuda_ctx *c) { return skinny_max_n(c) > 0 && c->skinny_quant; }

bool cuda_skinny_fits(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, int64_t in,
                      int64_t n, rt_dtype yt, bool glu) {
    if (n < 2 || n > skinny_max_n(c) || in % 32 || in > INT_MAX || w->shape[0] > INT_MAX || (uintptr_t)x % 16)
        return false;
    if (rt_dtype_info(w->dtype)->quantized) /* GGUF blocks: 2-byte aligned, read as bytes / u16 */
        return c->skinny_quant && cuda_has_decoder(w->dtype) && xt == RT_BF16 && x_ld % 8 == 0 &&
               (glu ? yt == RT_BF16 : yt == RT_F32) && w->stride[0] % 2 == 0 && (uintptr_t)w->data % 2 == 0;
    /* f32 rows (decode's Wo reads the attention output in f32): where the
     * f32-row GEMV is bound by them. Table (test_cuda_gemm, session 11):
     * hi / lo vs GEMV at 2 rows: 8B Wo 8.4 vs 12.0 us, QKV 18.2 vs 21.0,
     * down 31.8 vs 42.0; 0.6B Wo (in 2048) 3.5 vs 3.0, down (3072) 4.5 vs
     * 3.8; at 4 rows ahead on every shape (0.6B Wo 3.6 vs 4.4). So 3+
     * rows, or 2 over rows of 4096+; and never inside a forced GEMV count
     * (cuda_gemv_rows). */
    const bool xok = xt == RT_BF16 ? x_ld % 8 == 0
                                   : xt == RT_F32 && c->skinny_f32x && n <= 8 && (n > 2 || in >= 4096) &&
                                         x_ld % 4 == 0 && n > cuda_gemv_rows(c, w->dtype, in);
    return xok && w->dtype == RT_BF16 && w->stride[1] == 2 && w->stride[0] % 16 == 0 && (uintptr_t)w->data % 16 == 0;
}

/* Slices per group: enough warps for ~16 per SM, each slice >= 2 rounds of
 * SK_U chunks where the row is long enough; at most SK_WARPS (GLU: half,
 * so a block holds a gate / up pair). */
static int skinny_ks(const cuda_ctx *c, int64_t groups, int64_t in, int max_ks) {
    int ks = 1;
    while (ks < max_ks && groups * ks < 16 * (int64_t)c->n_sm && in / 32 >= (int64_t)2 * SK_U * ks * 2) ks *= 2;
    return ks;
}

template <int KS, bool GLU, typename D>
static void skinny_launch_nt(cuda_ctx *c, unsigned grid, const char *w, int64_t ws, const void *x, bool xf,
                             int64_t x_ld, D *y, int64_t y_ld, const float *bias, int64_t rows, int64_t in, int n,
                             int act) {
    if (xf)
        cuda_launch(k_skinny<KS, 1, GLU, D, true>, grid, SK_WARPS * 32, 0, c->stream, w, ws, x, x_ld, y, y_ld, bias,
                    rows, in, n, act);
    else if (n <= 8)
        cuda_launch(k_skinny<KS, 1, GLU, D, false>, grid, SK_WARPS * 32, 0, c->stream, w, ws, x, x_ld, y, y_ld, bias,
                    rows, in, n, act);
    else
        cuda_launch(k_skinny<KS, 2, GLU, D, false>, grid, SK_WARPS * 32, 0, c->stream, w, ws, x, x_ld, y, y_ld, bias,
                    rows, in, n, act);
}

template <bool GLU, typename D>
static int skinny_run(cuda_ctx *c, const rt_tensor *w, const void *x, bool xf, int64_t x_ld, D *y, int64_t y_ld,
                      const float *bias, int64_t rows, int64_t in, int n, int act) {
    const int64_t groups = (rows + 15) / 16 * (GLU ? 2 : 1);
    const int max_ks = GLU ? SK_WARPS / 2 : SK_WARPS;
    const int ks = c->skinny_ks ? (c->skinny_ks < max_ks ? c->skinny_ks : max_ks) : skinny_ks(c, groups, in, max_ks);
    if (rt_dtype_info(w->dtype)->quantized)
        return cuda_skinny_q_run(c, w, x, x_ld, y, y_ld, bias, rows, in, n, act, GLU, ks);
    const int64_t per = SK_WARPS / ks; /* groups per block */
    const unsigned grid = (unsigned)((groups + per - 1) / per);
    const char *wd = (const char *)w->data;
    const int64_t ws = w->stride[0];
    switch (ks) {
    case 1: skinny_launch_nt<1, GLU, D>(c, grid, wd, ws, x, xf, x_ld, y, y_ld, bias, rows, in, n, act); break;
    case 2: skinny_launch_nt<2, GLU, D>(c, grid, wd, ws, x, xf, x_ld, y, y_ld, bias, rows, in, n, act); break;
    case 4: skinny_launch_nt<4, GLU, D>(c, grid, wd, ws, x, xf, x_ld, y, y_ld, bias, rows, in, n, act); break;
    default:
        if (!GLU) skinny_launch_nt<8, false, D>(c, grid, wd, ws, x, xf, x_ld, y, y_ld, bias, rows, in, n, act);
        break;
    }
    CU_LAUNCHED();
    return VC_OK;
}

int cuda_skinny_matmul(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *y,
                       rt_dtype yt, int64_t y_ld, const float *bias, int64_t out, int64_t in, int n) {
    const bool xf = xt == RT_F32;
    if (yt == RT_BF16)
        return skinny_run<false>(c, w, x, xf, x_ld, (__nv_bfloat16 *)y, y_ld, bias, out, in, n, 0);
    return skinny_run<false>(c, w, x, xf, x_ld, (float *)y, y_ld, bias, out, in, n, 0);
}

int cuda_skinny_glu(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *y, rt_dtype yt,
                    int64_t y_ld, int64_t f, int64_t in, int n, int act) {
    const bool xf = xt == RT_F32;
    if (yt == RT_BF16) return skinny_run<true>(c, w, x, xf, x_ld, (__nv_bfloat16 *)y, y_ld, NULL, f, in, n, act);
    return skinny_run<true>(c, w, x, xf, x_ld, (float *)y, y_ld, NULL, f, in, n, act);
}
