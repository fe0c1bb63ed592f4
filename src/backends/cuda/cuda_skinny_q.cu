/* cuda_skinny_q — the skinny kernel (cuda_skinny.cuh) over GGUF block
 * weights (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K): MATMUL (f32 y) and
 * MATMUL_GLU (bf16 y) of 2..16 bf16 x rows, W read once.
 *
 * Why: a quantized decode at 2-8 rows took the f32-row GEMV, which reads
 * every x row once per weight row (the bf16 GEMV's bound at 2-8 rows: 3-4x
 * its one-row time; per weight byte a 4-bit format is worse), and above 8
 * rows cuBLAS over a bf16 copy dequantized in every call (4x the weight
 * bytes written and read again).
 *
 * A chunk of 32 values is one unit of the format (a Q4_0 / Q4_1 / Q8_0
 * block, a K-quant sub-block): each lane decodes its 8 values of rows g
 * and g + 8 with the format's exact arithmetic (dq_span, as EMBED and the
 * GEMV), rounds them to bf16 (as the cuBLAS path's dequantized copy does)
 * and packs them straight into the A fragments. x rows are bf16 (the
 * backend asks for bf16 activations at these sizes when this path is on).
 * Units are visited slice after slice (the loop is not unrolled: unrolled
 * twice the K-quant kernels spilled); the warps of a block and the blocks of
 * an SM keep the loads in flight.
 */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_skinny.cuh"

template <rt_dtype T, int KS, int NT, bool GLU, typename D>
__global__ void __launch_bounds__(SK_WARPS * 32, 2) k_skinny_q(const char *w, int64_t ws, const __nv_bfloat16 *x,
                                                            int64_t x_ld, D *y, int64_t y_ld, const float *bias,
                                                            int64_t rows, int64_t in, int n, int act) {
    constexpr int G = SK_WARPS / KS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int slot = warp / KS, slice = warp % KS;
    const int64_t base = GLU ? ((int64_t)blockIdx.x * (G / 2) + slot / 2) * 16 : ((int64_t)blockIdx.x * G + slot) * 16;
    const int64_t off = GLU && (slot & 1) ? rows : 0, ra = base + g, rb = base + g + 8;
    const uint8_t *pa = (const uint8_t *)w + (ra < rows ? ra + off : 0) * ws; /* rows past the end: row 0, never stored */
    const uint8_t *pb = (const uint8_t *)w + (rb < rows ? rb + off : 0) * ws;
    const int64_t nch = in / 32;
    CUDA_PDL_ENTER();
    float acc[NT][4] = {};
    const __nv_bfloat16 *xr[NT];
    bool xv[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        xv[j] = g + 8 * j < n;
        xr[j] = x + (int64_t)(xv[j] ? g + 8 * j : 0) * x_ld + 8 * t;
    }
#pragma unroll 1
    for (int64_t ch = slice; ch < nch; ch += KS) {
        float va[8], vb[8];
        dq_span<T, 8>(pa, ch, 8 * t, va);
        dq_span<T, 8>(pb, ch, 8 * t, vb);
        const uint32_t a0[4] = {sk_pack(va[0], va[1]), sk_pack(vb[0], vb[1]), sk_pack(va[2], va[3]),
                                sk_pack(vb[2], vb[3])};
        const uint32_t a1[4] = {sk_pack(va[4], va[5]), sk_pack(vb[4], vb[5]), sk_pack(va[6], va[7]),
                                sk_pack(vb[6], vb[7])};
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const uint4 xq = xv[j] ? __ldg((const uint4 *)(xr[j] + ch * 32)) : make_uint4(0, 0, 0, 0);
            fl_mma<__nv_bfloat16>(acc[j], a0, xq.x, xq.y);
            fl_mma<__nv_bfloat16>(acc[j], a1, xq.z, xq.w);
        }
    }
    sk_epilogue<KS, NT, GLU, D>(acc, n, rows, y, y_ld, bias, act);
}

/* KS 2, 4 or 8 (GLU: 2 or 4); NT by n. */
template <rt_dtype T, bool GLU, typename D>
static void skq_launch(cuda_ctx *c, int ks, unsigned grid, const char *w, int64_t ws, const __nv_bfloat16 *x,
                       int64_t x_ld, D *y, int64_t y_ld, const float *bias, int64_t rows, int64_t in, int n,
                       int act) {
#define SKQ(K, N)                                                                                                 \
    cuda_launch(k_skinny_q<T, K, N, GLU, D>, grid, SK_WARPS * 32, 0, c->stream, w, ws, x, x_ld, y, y_ld, bias, rows, \
                in, n, act)
    const bool two = n > 8;
    if (ks <= 2) two ? SKQ(2, 2) : SKQ(2, 1);
    else if (ks == 4 || GLU) two ? SKQ(4, 2) : SKQ(4, 1);
    else if constexpr (!GLU) two ? SKQ(8, 2) : SKQ(8, 1);
#undef SKQ
}

int cuda_skinny_q_run(cuda_ctx *c, const rt_tensor *w, const void *x, int64_t x_ld, void *y, int64_t y_ld,
                      const float *bias, int64_t rows, int64_t in, int n, int act, bool glu, int ks) {
    const int64_t groups = (rows + 15) / 16 * (glu ? 2 : 1);
    if (ks < 2) ks = 2; /* one slice per group: 2-4x slower on every shape (session 10's bf16 table) */
    if (glu && ks > 4) ks = 4;
    const int64_t per = SK_WARPS / ks;
    const unsigned grid = (unsigned)((groups + per - 1) / per);
    const char *wd = (const char *)w->data;
    const __nv_bfloat16 *xb = (const __nv_bfloat16 *)x;
    switch (w->dtype) {
#define X(T)                                                                                                      \
    case T:                                                                                                       \
        if (glu) skq_launch<T, true>(c, ks, grid, wd, w->stride[0], xb, x_ld, (__nv_bfloat16 *)y, y_ld, NULL, rows, \
                                     in, n, act);                                                                 \
        else skq_launch<T, false>(c, ks, grid, wd, w->stride[0], xb, x_ld, (float *)y, y_ld, bias, rows, in, n,  \
                                  act);                                                                           \
        break;
        CUDA_FOR_QUANT(X)
#undef X
    default: return vc_err_set(VC_ERR_UNSUPPORTED, "cuda skinny: weight dtype %s", rt_dtype_name(w->dtype));
    }
    CU_LAUNCHED();
    return VC_OK;
}
