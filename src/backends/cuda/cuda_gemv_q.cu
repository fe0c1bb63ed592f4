/* cuda_gemv_q — the decode GEMV over GGUF block weights (Q4_0, Q4_1, Q8_0,
 * Q4_K, Q5_K, Q6_K): MATMUL and MATMUL_GLU of 1..CUDA_GEMV_MAX_N f32 x
 * rows, W streamed once with 16-byte loads.
 *
 * Why: k_gemv_quant (cuda_matmul.cu) decodes 8 values per lane straight
 * from global memory with byte loads, so a warp has ~300 bytes in flight
 * (the 1B Q4_0 decode's matmuls streamed W at ~0.4 TB/s, session 11's
 * profile), and MATMUL_GLU over quantized W had no GEMV at all: each decode
 * step dequantized gate|up into a fresh bf16 copy for cuBLAS (65 us for the
 * 1B's 19 MB of Q4_0), an allocation a CUDA graph cannot record.
 *
 * Layout: a block of GEMV_BLOCK / 32 warps serves rows as k_gemv_half_u
 * does (KS warps per row; MATMUL_GLU: slot pairs on gate row p and up row
 * f + p, the pair's sums meet in gemv_finish_glu). Warp k of a row takes a
 * contiguous range of the row's "super-units" (one block of Q4_0 / Q4_1 /
 * Q8_0, one 256-value super-block of the K formats) and walks it in
 * segments of GQ_SEG super-units (~2 KB): the segment's bytes, from the
 * 16-byte boundary at or below its start, come in as NV 16-byte loads per
 * lane (coalesced, around L1), go to the warp's slice of shared memory, and
 * the lanes decode 8-value groups from there (dq_span: the CPU's exact
 * arithmetic) while the next segment's loads are in flight; the first
 * segment is requested before the PDL wait (weights do not depend on the
 * kernel before). Lane l takes groups l, l + 32, .. of a segment and dots
 * each with the x rows: a warp's x loads are 1 KB contiguous per row (a
 * whole 32-value unit per lane made them 32 lines per load: 2x slower
 * than the old kernel, session 11).
 *
 * Reads may run up to 15 bytes past a row's last block into the next row or
 * the allocation's tail (device allocations are 256-byte multiples); those
 * bytes are never decoded. The sum order depends on the shape and KS only
 * (not on n). VLLM_CUDA_GEMV_Q=0: the older kernels (A/B).
 */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_gemv_q.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

template <rt_dtype T, int KS, bool GLU>
__global__ void __launch_bounds__(GEMV_BLOCK) k_gemv_q(const char *w, int64_t ws, const float *x, int64_t x_ld,
                                                       float *y, int64_t y_ld, const float *bias, int64_t out,
                                                       int64_t in, int n, int act) {
    using F = gq_fmt<T>;
    constexpr int NV = gq_nv<T>(), RPB = GEMV_BLOCK / 32 / KS;
    __shared__ uint4 sbuf[GEMV_BLOCK / 32][NV * 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slot = warp / KS, kk = warp % KS;
    const int64_t f = out / 2, p = (int64_t)blockIdx.x * (RPB / 2) + slot / 2;
    const int64_t r = GLU ? (p < f ? p + (slot & 1) * f : out) : (int64_t)blockIdx.x * RPB + slot;
    const int64_t nsu = in / F::SV, s1 = (kk + 1) * nsu / KS;
    int64_t s = kk * nsu / KS;
    const char *row = w + (r < out ? r : 0) * ws;
    uint4 q[NV];
    if (r < out && s < s1) gq_load<T>(q, row, s, s1 - s < F::SEG ? s1 - s : F::SEG, lane);
    CUDA_PDL_ENTER();
    float acc[CUDA_GEMV_MAX_N] = {0};
    if (r < out) {
        uint4 *buf = sbuf[warp];
        while (s < s1) {
            const int64_t m = s1 - s < F::SEG ? s1 - s : F::SEG, sn = s + m;
            const int off = (int)((uintptr_t)(row + s * F::SB) & 15);
            __syncwarp();
#pragma unroll
            for (int j = 0; j < NV; j++) buf[lane + 32 * j] = q[j];
            __syncwarp();
            if (sn < s1) gq_load<T>(q, row, sn, s1 - sn < F::SEG ? s1 - sn : F::SEG, lane);
            const uint8_t *sb = (const uint8_t *)buf + off;
            const int ng = (int)m * (F::SV / 8);
            const float *xs = x + s * F::SV;
#pragma unroll 4
            for (int c = lane; c < ng; c += 32) { /* consecutive lanes: consecutive 8-value groups (x coalesced) */
                float v[8];
                dq_span<T, 8>(sb, c >> 2, (c & 3) * 8, v);
#pragma unroll
                for (int t = 0; t < CUDA_GEMV_MAX_N; t++) {
                    if (t >= n) break;
                    const float4 *xv = (const float4 *)(xs + t * x_ld + c * 8);
                    const float4 a = __ldg(xv), b = __ldg(xv + 1);
                    acc[t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z +
                              v[7] * b.w;
                }
            }
            s = sn;
        }
    }
    if (GLU) gemv_finish_glu<KS>(acc, n, p, f, y, y_ld, act);
    else gemv_finish<KS>(acc, n, r, out, y, y_ld, bias);
}

bool cuda_gemv_q_fits(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, int64_t n) {
    if (!c->gemv_q) {
        const char *e = getenv("VLLM_CUDA_GEMV_Q");
        c->gemv_q = e && !strcmp(e, "0") ? 1 : 2;
    }
    return c->gemv_q == 2 && n >= 1 && n <= CUDA_GEMV_MAX_N && rt_dtype_info(w->dtype)->quantized &&
           cuda_has_decoder(w->dtype) && (uintptr_t)x % 16 == 0 && (n == 1 || x_ld % 4 == 0) &&
           w->shape[0] <= INT_MAX && w->shape[1] <= INT_MAX && w->stride[0] % 2 == 0 && (uintptr_t)w->data % 16 == 0;
}

/* Warps per row: enough warps for ~32 per SM while each keeps a quarter
 * segment or more of its row. */
template <rt_dtype T> static int gq_ks(const cuda_ctx *c, int64_t rows, int64_t in, int max_ks) {
    const int64_t nsu = in / gq_fmt<T>::SV;
    int ks = 1;
    while (ks < max_ks && rows * ks < 32 * (int64_t)c->n_sm && nsu / (2 * ks) >= gq_fmt<T>::SEG / 4) ks *= 2;
    return ks;
}

template <rt_dtype T, bool GLU>
static void gq_launch(cuda_ctx *c, const char *w, int64_t ws, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                      const float *bias, int64_t out, int64_t in, int n, int act) {
    const int ks = gq_ks<T>(c, out, in, GLU ? 4 : 8), rpb = GEMV_BLOCK / 32 / ks;
    const unsigned grid = GLU ? (unsigned)((out / 2 + rpb / 2 - 1) / (rpb / 2)) : (unsigned)((out + rpb - 1) / rpb);
#define GQ(K) cuda_launch(k_gemv_q<T, K, GLU>, grid, GEMV_BLOCK, 0, c->stream, w, ws, x, x_ld, y, y_ld, bias, out, in, n, act)
    switch (ks) {
    case 1: GQ(1); break;
    case 2: GQ(2); break;
    case 4: GQ(4); break;
    default:
        if constexpr (!GLU) GQ(8);
        break;
    }
#undef GQ
}

int cuda_gemv_q(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                const float *bias, int64_t out, int64_t in, int n, bool glu, int act) {
    const char *wd = (const char *)w->data;
    const int64_t ws = w->stride[0];
    switch (w->dtype) {
#define X(T)                                                                                   \
    case T:                                                                                    \
        if (glu) gq_launch<T, true>(c, wd, ws, x, x_ld, y, y_ld, NULL, out, in, n, act);       \
        else gq_launch<T, false>(c, wd, ws, x, x_ld, y, y_ld, bias, out, in, n, act);          \
        break;
        CUDA_FOR_QUANT(X)
#undef X
    default: return vc_err_set(VC_ERR_UNSUPPORTED, "cuda gemv: weight dtype %s", rt_dtype_name(w->dtype));
    }
    CU_LAUNCHED();
    return VC_OK;
}
