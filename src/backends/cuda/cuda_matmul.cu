/* cuda_matmul — MATMUL: y[n,out] = x[n,in] f32 · W[out,in]^T (+ bias[out]).
 *
 * Two paths:
 *  - n <= CUDA_GEMV_MAX_N (decode): a GEMV kernel, KS warps per weight row
 *    (KS from the shape and the GPU: several for matrices with few rows,
 *    and for f16/bf16 grids of several waves of blocks), that decodes W
 *    on the fly (f32/f16/bf16 elements, 16-byte loads of 8
 *    halves when aligned, or 32-value units of the GGUF block formats via
 *    cuda_dequant.cuh) and dots it with up to CUDA_GEMV_MAX_N (8) f32 activation rows in f32 (at 16 rows the
 *    x reads made it slower than cuBLAS: measured on the H200).
 *    W is read from memory once per call.
 *    The f16/bf16 path (k_gemv_half_u) also serves MATMUL_GLU with the GLU
 *    in its epilogue (gate and up rows of one stacked matrix in one block).
 *  - larger n (prefill): cuBLAS, in cuda_gemm.cu.
 */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_gemv.cuh"
#include "backends/cuda/cuda_internal.h"

#include <limits.h>

#define GEMV_WARPS 4

bool cuda_matmul_supports(rt_dtype w) { return cuda_has_decoder(w); }

template <rt_dtype T>
__global__ void k_gemv_plain(const char *w, int64_t w_stride, const float *x, int64_t x_ld, float *y,
                             int64_t y_ld, const float *bias, int64_t out, int64_t in, int n) {
    CUDA_PDL_ENTER();
    int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (r >= out) return;
    const char *wr = w + r * w_stride;
    const int es = T == RT_F32 ? 4 : 2;
    float acc[CUDA_GEMV_MAX_N] = {0};
    for (int64_t k = threadIdx.x & 31; k < in; k += 32) {
        float wv = ld_plain<T>(wr + k * es);
#pragma unroll
        for (int t = 0; t < CUDA_GEMV_MAX_N; t++)
            if (t < n) acc[t] += wv * x[t * x_ld + k];
    }
    gemv_store(acc, n, r, y, y_ld, bias);
}

/* K-split GEMV (f16/bf16 with 16-byte aligned rows and x, and the GGUF
 * block formats): a block of 8 warps serves 8/KS rows, each row by KS warps
 * that take interleaved slices of its 8-value groups (group c of the row
 * is values 8c..8c+7; warp k of the row takes c = 32k + lane, + 32*KS, ...).
 * The KS partial sums meet in shared memory. KS > 1 is for matrices with
 * few rows (a decode layer of a small model has 1-3k), where one warp per
 * row leaves most of the GPU idle and far too few loads in flight; KS is
 * chosen from the shape only, so a row's result does not depend on n. */

/* acc[t] += w[8 values] . x_t[8c .. 8c+7] for the n <= CUDA_GEMV_MAX_N token rows. */
template <bool VX>
__device__ __forceinline__ void gemv_fma8(float *acc, const float *wv, const float *x, int64_t x_ld, int64_t c, int n) {
#pragma unroll
    for (int t = 0; t < CUDA_GEMV_MAX_N; t++) {
        if (t >= n) break;
        const float *xs = x + t * x_ld + c * 8;
        float s;
        if (VX) {
            float4 a = ((const float4 *)xs)[0], b = ((const float4 *)xs)[1];
            s = wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y + wv[6] * b.z +
                wv[7] * b.w;
        } else {
            s = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++) s += wv[e] * xs[e];
        }
        acc[t] += s;
    }
}

template <rt_dtype T, int KS>
__global__ void __launch_bounds__(GEMV_BLOCK) k_gemv_half_ks(const char *w, int64_t w_stride, const float *x,
                                                             int64_t x_ld, float *y, int64_t y_ld, const float *bias,
                                                             int64_t out, int64_t in, int n) {
    CUDA_PDL_ENTER();
    constexpr int RPB = GEMV_BLOCK / 32 / KS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * RPB + warp / KS;
    float acc[CUDA_GEMV_MAX_N] = {0};
    if (r < out) {
        const uint4 *wr = (const uint4 *)(w + r * w_stride);
        const int64_t nc = in / 8, step = 32 * KS;
        int64_t c = (warp % KS) * 32 + lane;
        for (; c + step < nc; c += 2 * step) { /* two 16-byte loads in flight per lane */
            uint4 p0 = wr[c], p1 = wr[c + step];
            float w0[8], w1[8];
            const uint16_t *h0 = (const uint16_t *)&p0, *h1 = (const uint16_t *)&p1;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                w0[e] = ld_plain<T>((const char *)(h0 + e));
                w1[e] = ld_plain<T>((const char *)(h1 + e));
            }
            gemv_fma8<true>(acc, w0, x, x_ld, c, n);
            gemv_fma8<true>(acc, w1, x, x_ld, c + step, n);
        }
        if (c < nc) {
            uint4 p0 = wr[c];
            float w0[8];
            const uint16_t *h0 = (const uint16_t *)&p0;
#pragma unroll
            for (int e = 0; e < 8; e++) w0[e] = ld_plain<T>((const char *)(h0 + e));
            gemv_fma8<true>(acc, w0, x, x_ld, c, n);
        }
    }
    gemv_finish<KS>(acc, n, r, out, y, y_ld, bias);
}

/* The same K-split layout, software-pipelined: each lane keeps U 16-byte
 * weight loads in flight while it computes on the previous U, and issues
 * its first U before waiting for the previous kernel (programmatic
 * dependent launch): weights do not depend on it, only x does, so a GEMV's
 * first loads overlap the tail of the kernel before it. Weights are read
 * around L1 (used once; x stays cached) with a 256-byte L2 prefetch hint;
 * bf16 is widened by shifts. Groups are visited in the same order as
 * k_gemv_half_ks, so a row's sum is the same for the same KS. */
template <rt_dtype T> __device__ __forceinline__ void unpack8(const uint4 &p, float *w) {
    const uint32_t u[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (T == RT_BF16) {
            w[2 * i] = __uint_as_float(u[i] << 16);
            w[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
        } else {
            __half2 h = *(const __half2 *)&u[i];
            float2 f = __half22float2(h);
            w[2 * i] = f.x;
            w[2 * i + 1] = f.y;
        }
    }
}

/* gemv_fma8<true> with x through the read-only path. */
__device__ __forceinline__ void gemv_fma8_ldg(float *acc, const float *wv, const float *x, int64_t x_ld, int64_t c,
                                              int n) {
#pragma unroll
    for (int t = 0; t < CUDA_GEMV_MAX_N; t++) {
        if (t >= n) break;
        const float4 *xs = (const float4 *)(x + t * x_ld + c * 8);
        float4 a = __ldg(xs), b = __ldg(xs + 1);
        acc[t] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y + wv[6] * b.z +
                  wv[7] * b.w;
    }
}

template <rt_dtype T, int U>
__device__ __forceinline__ void gemv_load_round(uint4 *p, const uint4 *wr, int64_t c, int64_t step, int64_t nc) {
#pragma unroll
    for (int u = 0; u < U; u++) p[u] = c + u * step < nc ? cuda_ld_stream16(wr + c + u * step) : make_uint4(0, 0, 0, 0);
}

template <rt_dtype T, int KS, int U, bool GLU>
__global__ void __launch_bounds__(GEMV_BLOCK) k_gemv_half_u(const char *w, int64_t w_stride, const float *x,
                                                            int64_t x_ld, float *y, int64_t y_ld, const float *bias,
                                                            int64_t out, int64_t in, int n, int act) {
    constexpr int RPB = GEMV_BLOCK / 32 / KS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slot = warp / KS;
    const int64_t f = out / 2, p = (int64_t)blockIdx.x * (RPB / 2) + slot / 2;
    const int64_t r = GLU ? (p < f ? p + (slot & 1) * f : out) : (int64_t)blockIdx.x * RPB + slot;
    const int64_t nc = in / 8, step = 32 * KS;
    const uint4 *wr = (const uint4 *)(w + (r < out ? r : 0) * w_stride);
    int64_t c = (warp % KS) * 32 + lane;
    uint4 q0[U];
    if (r < out) gemv_load_round<T, U>(q0, wr, c, step, nc); /* before the wait: weights only */
    CUDA_PDL_ENTER();
    float acc[CUDA_GEMV_MAX_N] = {0};
    if (r < out) {
        for (; c < nc; c += U * step) {
            uint4 q[U];
            const bool more = c + U * step < nc;
            if (more) gemv_load_round<T, U>(q, wr, c + U * step, step, nc);
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (c + u * step >= nc) break;
                float wv[8];
                unpack8<T>(q0[u], wv);
                gemv_fma8_ldg(acc, wv, x, x_ld, c + u * step, n);
            }
            if (more) {
#pragma unroll
                for (int u = 0; u < U; u++) q0[u] = q[u];
            }
        }
    }
    if (GLU) gemv_finish_glu<KS>(acc, n, p, f, y, y_ld, act);
    else gemv_finish<KS>(acc, n, r, out, y, y_ld, bias);
}

/* Many short f16/bf16 rows (the 0.6B's LM head: 151,936 rows of 1,024):
 * one wave of blocks whose warps walk rows r = w, w + W, .. (W warps in
 * the grid), NQ 16-byte loads a lane covering a whole row, the next row's
 * loads issued before this row's sums (the first row's before the PDL
 * wait). k_gemv_half_u gives such a matrix a block per 4-8 rows: ~38k
 * blocks of one round each, a barrier per block, the wave's start and end
 * every few microseconds (ncu, H200: 3.0 TB/s over the 311 MB head). Each
 * lane sums its 8-value groups in k_gemv_half_u's order (c = lane, lane +
 * 32, ..) and the warp reduces them as gemv_store: the results are those
 * of k_gemv_half_u at KS 1 bit for bit. */
template <rt_dtype T, int NQ>
__global__ void __launch_bounds__(GEMV_BLOCK) k_gemv_half_rows(const char *w, int64_t w_stride, const float *x,
                                                               int64_t x_ld, float *y, int64_t y_ld,
                                                               const float *bias, int64_t out, int n) {
    const int lane = threadIdx.x & 31;
    const int64_t nw = (int64_t)gridDim.x * (GEMV_BLOCK / 32);
    int64_t r = (int64_t)blockIdx.x * (GEMV_BLOCK / 32) + (threadIdx.x >> 5);
    uint4 q[NQ];
    if (r < out) {
        const uint4 *wr = (const uint4 *)(w + r * w_stride);
#pragma unroll
        for (int j = 0; j < NQ; j++) q[j] = cuda_ld_stream16(wr + lane + 32 * j);
    }
    CUDA_PDL_ENTER();
    for (; r < out; r += nw) {
        uint4 qn[NQ];
        const bool more = r + nw < out;
        if (more) {
            const uint4 *wn = (const uint4 *)(w + (r + nw) * w_stride);
#pragma unroll
            for (int j = 0; j < NQ; j++) qn[j] = cuda_ld_stream16(wn + lane + 32 * j);
        }
        float acc[CUDA_GEMV_MAX_N] = {0};
#pragma unroll
        for (int j = 0; j < NQ; j++) {
            float wv[8];
            unpack8<T>(q[j], wv);
            gemv_fma8_ldg(acc, wv, x, x_ld, lane + 32 * j, n);
        }
        gemv_store(acc, n, r, y, y_ld, bias);
        if (more) {
#pragma unroll
            for (int j = 0; j < NQ; j++) q[j] = qn[j];
        }
    }
}

/* Quantized rows: group c = values 8c..8c+7 (a quarter of 32-value unit
 * c/4), decoded with dq_span; x reads as two float4 when VX (x rows 16-byte
 * aligned). */
template <rt_dtype T, bool VX, int KS>
__global__ void __launch_bounds__(GEMV_BLOCK) k_gemv_quant(const char *w, int64_t w_stride, const float *x,
                                                           int64_t x_ld, float *y, int64_t y_ld, const float *bias,
                                                           int64_t out, int64_t in, int n) {
    CUDA_PDL_ENTER();
    constexpr int RPB = GEMV_BLOCK / 32 / KS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * RPB + warp / KS;
    float acc[CUDA_GEMV_MAX_N] = {0};
    if (r < out) {
        const uint8_t *wr = (const uint8_t *)w + r * w_stride;
        const int64_t nc = in / 8, step = 32 * KS;
        int64_t c = (warp % KS) * 32 + lane;
        for (; c + step < nc; c += 2 * step) {
            float v0[8], v1[8];
            dq_span<T, 8>(wr, c >> 2, (int)(c & 3) * 8, v0);
            dq_span<T, 8>(wr, (c + step) >> 2, (int)((c + step) & 3) * 8, v1);
            gemv_fma8<VX>(acc, v0, x, x_ld, c, n);
            gemv_fma8<VX>(acc, v1, x, x_ld, c + step, n);
        }
        if (c < nc) {
            float v0[8];
            dq_span<T, 8>(wr, c >> 2, (int)(c & 3) * 8, v0);
            gemv_fma8<VX>(acc, v0, x, x_ld, c, n);
        }
    }
    gemv_finish<KS>(acc, n, r, out, y, y_ld, bias);
}

/* Warps per row: enough warps in total to cover the GPU (`per_sm` per SM)
 * while each warp keeps at least two groups of 8 values per lane. */
static int gemv_ks(const cuda_ctx *c, int64_t out, int64_t in, int per_sm = 32) {
    int ks = 1;
    while (ks < 8 && out * ks < per_sm * (int64_t)c->n_sm && in / 8 >= 64 * ks) ks *= 2;
    return ks;
}

/* The f16/bf16 GEMV variant (VLLM_CUDA_GEMV, read once per backend;
 * test_cuda_speed measures them all): 0 k_gemv_half_ks (2 loads in flight
 * per lane, KS for 32 warps per SM); 1 k_gemv_half_u with 2 loads per
 * round, KS for 16 warps per SM; 2 k_gemv_half_u with 4 loads per round,
 * KS for 32 warps per SM; 3 k_gemv_half_u with 2 loads per round, KS for 32
 * warps per SM; 4 (default) k_gemv_half_u with variant 1's KS where its
 * grid fits in one wave of resident blocks, else 4x that KS (gemv_ks_waves);
 * 5 and 6 k_gemv_half_u with 2x and 4x variant 1's KS on every shape. */
enum { GEMV_NVARIANTS = 7, GEMV_DEFAULT = 4 };

static int gemv_variant(cuda_ctx *c) {
    if (!c->gemv_cfg) {
        const char *e = getenv("VLLM_CUDA_GEMV");
        int v = e && *e ? atoi(e) : GEMV_DEFAULT;
        c->gemv_cfg = 1 + (v >= 0 && v < GEMV_NVARIANTS ? v : GEMV_DEFAULT);
    }
    return c->gemv_cfg - 1;
}

/* Resident blocks of GEMV_BLOCK threads per SM for a kernel (registers
 * bound it: 4 for the 64-register GEMVs), asked once per kernel. */
template <auto Kernel> static int gemv_occupancy() {
    static int nb;
    if (!nb) {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, GEMV_BLOCK, 0) != cudaSuccess || b < 1) {
            (void)cudaGetLastError();
            b = 1;
        }
        nb = b;
    }
    return nb;
}

/* KS of variants 4..6 for `items` (rows; GLU: gate/up pairs, `rows` = 2x)
 * of which a block holds per_block / KS: variant 1's KS (<= max_ks), then
 * times `mult` (variant 4: 4 when the grid needs more than one wave of
 * n_sm * occ blocks, else 1) while every lane keeps >= 2 groups of 8
 * values. Measured on the H200 (graph replay and Nsight Compute): a grid of
 * one wave (512 blocks of 8 rows for 528 slots: 4096x4096, 4096x14336)
 * streams all its rows at once and more, shorter warps only add blocks; a
 * grid of several waves (6144, 28672 and 128256 rows of 4096) loses the
 * tail of its last wave, which is a quarter as long with warps that each
 * take a quarter of a row (KS 4: 2.9 -> 3.4, 3.75 -> 4.0, 4.06 -> 4.16
 * TB/s). Depends on the shape and device only. */
static int gemv_ks_waves(const cuda_ctx *c, int v, int64_t items, int64_t rows, int64_t in, int per_block,
                         int max_ks, int occ) {
    int64_t nc = in / 8;
    int ks = gemv_ks(c, rows, in, 16);
    if (ks > max_ks) ks = max_ks;
    int mult = v == 5 ? 2 : 4;
    if (v == 4) {
        int64_t per = per_block / ks, blocks = (items + per - 1) / per;
        if (blocks <= (int64_t)c->n_sm * occ) mult = 1;
    }
    for (; mult > 1 && ks * 2 <= max_ks && nc >= (int64_t)64 * ks * 2; mult /= 2) ks *= 2;
    return ks;
}

/* Bytes between rows of a tensor viewed as [rows, last], 0 if not evenly spaced. */
static size_t row_stride(const rt_tensor *t) {
    if (rt_tensor_is_contiguous(t)) return rt_dtype_row_bytes(t->dtype, t->shape[t->ndim - 1]);
    if (t->ndim == 2) return (size_t)t->stride[0];
    return 0;
}

template <rt_dtype T, bool VX>
static void launch_quant(cuda_ctx *c, int ks, unsigned grid, const char *wd, int64_t ws, const float *x, int64_t x_ld,
                         float *y, int64_t y_ld, const float *bias, int64_t out, int64_t in, int n) {
    switch (ks) {
    case 1: cuda_launch(k_gemv_quant<T, VX, 1>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
    case 2: cuda_launch(k_gemv_quant<T, VX, 2>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
    case 4: cuda_launch(k_gemv_quant<T, VX, 4>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
    default: cuda_launch(k_gemv_quant<T, VX, 8>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
    }
}

template <rt_dtype T>
static void launch_half(cuda_ctx *c, int ks, unsigned grid, const char *wd, int64_t ws, const float *x, int64_t x_ld,
                        float *y, int64_t y_ld, const float *bias, int64_t out, int64_t in, int n) {
    switch (ks) {
    case 1: cuda_launch(k_gemv_half_ks<T, 1>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
    case 2: cuda_launch(k_gemv_half_ks<T, 2>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
    case 4: cuda_launch(k_gemv_half_ks<T, 4>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
    default: cuda_launch(k_gemv_half_ks<T, 8>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
    }
}

template <rt_dtype T, int U, bool GLU>
static void launch_half_u(cuda_ctx *c, int ks, unsigned grid, const char *wd, int64_t ws, const float *x,
                          int64_t x_ld, float *y, int64_t y_ld, const float *bias, int64_t out, int64_t in, int n,
                          int act) {
    switch (ks) {
    case 1: cuda_launch(k_gemv_half_u<T, 1, U, GLU>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n, act); break;
    case 2: cuda_launch(k_gemv_half_u<T, 2, U, GLU>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n, act); break;
    case 4: cuda_launch(k_gemv_half_u<T, 4, U, GLU>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n, act); break;
    default:
        if (!GLU) cuda_launch(k_gemv_half_u<T, 8, U, false>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n, act);
        break;
    }
}

/* VLLM_CUDA_GEMV_ROWS (default 1; 0: off, A/B; read at each call; a graph
 * keeps its capture's kernel): k_gemv_half_rows for f16/bf16 matrices of
 * rows of 512, 1024 or 2048 values (NQ 2, 4, 8) with at least 4 waves of
 * k_gemv_half_u's 8-row blocks. Returns whether it launched. */
template <rt_dtype T>
static bool gemv_half_rows(cuda_ctx *c, const char *wd, int64_t ws, const float *x, int64_t x_ld, float *y,
                           int64_t y_ld, const float *bias, int64_t out, int64_t in, int n) {
    const char *e = getenv("VLLM_CUDA_GEMV_ROWS");
    if (e && e[0] == '0' && e[1] == 0) return false;
    const int64_t nq = in / 8 / 32;
    if (in % 256 || (nq != 2 && nq != 4 && nq != 8)) return false;
    const int occ = nq == 8 ? gemv_occupancy<k_gemv_half_rows<T, 8>>()
                  : nq == 4 ? gemv_occupancy<k_gemv_half_rows<T, 4>>()
                            : gemv_occupancy<k_gemv_half_rows<T, 2>>();
    const int64_t wave = (int64_t)c->n_sm * occ;
    if ((out + 7) / 8 < 4 * wave) return false;
    unsigned grid = (unsigned)wave;
    if (nq == 8) cuda_launch(k_gemv_half_rows<T, 8>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, n);
    else if (nq == 4) cuda_launch(k_gemv_half_rows<T, 4>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, n);
    else cuda_launch(k_gemv_half_rows<T, 2>, grid, GEMV_BLOCK, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, n);
    return true;
}

/* f16/bf16 rows, 16-byte aligned: the variant's kernel and KS. */
template <rt_dtype T>
static void gemv_half(cuda_ctx *c, const char *wd, int64_t ws, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                      const float *bias, int64_t out, int64_t in, int n) {
    const int v = gemv_variant(c), rpb = GEMV_BLOCK / 32;
    if (v == GEMV_DEFAULT && gemv_half_rows<T>(c, wd, ws, x, x_ld, y, y_ld, bias, out, in, n)) return;
    const int ks = v >= 4 ? gemv_ks_waves(c, v, out, out, in, rpb, 8, gemv_occupancy<k_gemv_half_u<T, 1, 2, false>>())
                          : gemv_ks(c, out, in, v == 1 ? 16 : 32);
    unsigned grid = (unsigned)((out + rpb / ks - 1) / (rpb / ks));
    if (v == 0) launch_half<T>(c, ks, grid, wd, ws, x, x_ld, y, y_ld, bias, out, in, n);
    else if (v == 2) launch_half_u<T, 4, false>(c, ks, grid, wd, ws, x, x_ld, y, y_ld, bias, out, in, n, 0);
    else launch_half_u<T, 2, false>(c, ks, grid, wd, ws, x, x_ld, y, y_ld, bias, out, in, n, 0);
}

static int gemv(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                const float *bias, int64_t out, int64_t in, int n) {
    const char *wd = (const char *)w->data;
    int64_t ws = w->stride[0];
    bool vx = ((uintptr_t)x & 15) == 0 && (n == 1 || x_ld % 4 == 0);
    bool v8 = (w->dtype == RT_F16 || w->dtype == RT_BF16) && in % 8 == 0 && ws % 16 == 0 &&
              ((uintptr_t)wd & 15) == 0 && vx;
    int ks = gemv_ks(c, out, in);
    unsigned kgrid = (unsigned)((out + GEMV_BLOCK / 32 / ks - 1) / (GEMV_BLOCK / 32 / ks));
    unsigned grid = (unsigned)((out + GEMV_WARPS - 1) / GEMV_WARPS);
    if (v8 && w->dtype == RT_F16)
        gemv_half<RT_F16>(c, wd, ws, x, x_ld, y, y_ld, bias, out, in, n);
    else if (v8)
        gemv_half<RT_BF16>(c, wd, ws, x, x_ld, y, y_ld, bias, out, in, n);
    else switch (w->dtype) {
#define X(T) case T: cuda_launch(k_gemv_plain<T>, grid, 32 * GEMV_WARPS, 0, c->stream, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
        X(RT_F32) X(RT_F16) X(RT_BF16)
#undef X
#define X(T)                                                                                    \
    case T:                                                                                     \
        if (vx) launch_quant<T, true>(c, ks, kgrid, wd, ws, x, x_ld, y, y_ld, bias, out, in, n); \
        else launch_quant<T, false>(c, ks, kgrid, wd, ws, x, x_ld, y, y_ld, bias, out, in, n);   \
        break;
        CUDA_FOR_QUANT(X)
#undef X
    default: return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: weight dtype %s", rt_dtype_name(w->dtype));
    }
    CU_LAUNCHED();
    return VC_OK;
}

extern "C" int cuda_op_matmul(rt_backend *be, const rt_op_args *a) {
    if (a->src[0]->dtype == RT_BF16 || a->dst->dtype == RT_BF16) return cuda_gemm_matmul(be, a); /* bf16 acts */
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *w = a->src[1], *bias = a->src[2];
    rt_tensor *dst = a->dst;
    if (cuda_check_dev(dst, "matmul") || cuda_check_dev(x, "matmul") || cuda_check_dev(w, "matmul") ||
        (bias && cuda_check_dev(bias, "matmul")))
        return VC_ERR_INVALID;
    int64_t in = w->shape[1], out = w->shape[0], n = rt_tensor_nrows(x);
    const rt_dtype_traits *wt = rt_dtype_info(w->dtype);
    if (!cuda_matmul_supports(w->dtype))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: weight dtype %s", wt->name);
    if (in % wt->block_elems)
        return vc_err_set(VC_ERR_INVALID, "cuda matmul: in=%lld not a multiple of %s block %d", (long long)in,
                          wt->name, wt->block_elems);
    if (!wt->quantized && w->stride[1] != wt->block_bytes)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: weight rows must be contiguous");
    size_t xs = row_stride(x), ys = row_stride(dst);
    if (!xs || !ys || xs % 4 || ys % 4 || x->stride[x->ndim - 1] != 4 || dst->stride[dst->ndim - 1] != 4 ||
        (bias && !rt_tensor_is_contiguous(bias)))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: x/dst rows must be evenly strided");
    if (n == 0 || out == 0) return VC_OK;
    if (out > INT_MAX || in > INT_MAX || n > INT_MAX)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: dimension over INT_MAX");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    const float *xd = (const float *)x->data, *bd = bias ? (const float *)bias->data : NULL;
    float *yd = (float *)dst->data;
    int64_t x_ld = (int64_t)xs / 4, y_ld = (int64_t)ys / 4;
    /* f32 rows the GEMV would be bound by: the skinny kernel where it takes
     * them (VLLM_CUDA_SKINNY_F32X; cuda_skinny_fits) */
    if (cuda_skinny_fits(c, w, xd, RT_F32, x_ld, in, n, RT_F32, false))
        return cuda_skinny_matmul(c, w, xd, RT_F32, x_ld, yd, RT_F32, y_ld, bd, out, in, (int)n);
    if (cuda_gemv_q_fits(c, w, xd, x_ld, n)) /* GGUF blocks, 1..8 rows: cuda_gemv_d4.cu, else cuda_gemv_q.cu */
        return cuda_gemv_d4_fits(c, w, n) ? cuda_gemv_d4(c, w, xd, x_ld, yd, y_ld, bd, out, in, (int)n, false, 0)
                                          : cuda_gemv_q(c, w, xd, x_ld, yd, y_ld, bd, out, in, (int)n, false, 0);
    if (n <= CUDA_GEMV_MAX_N) return gemv(c, w, xd, x_ld, yd, y_ld, bd, out, in, (int)n);
    return cuda_gemm(c, w, xd, RT_F32, x_ld, yd, y_ld, bd, out, in, n);
}

/* MATMUL_GLU: decode (n <= CUDA_GEMV_MAX_N, aligned f16/bf16 rows, GEMV
 * variant > 0; or GGUF blocks, cuda_gemv_q.cu) in one GEMV with the GLU in its epilogue (KS <= 4 so a block
 * holds a gate/up pair of row slots); otherwise MATMUL into the scratch and
 * GLU of its halves. */
extern "C" int cuda_op_matmul_glu(rt_backend *be, const rt_op_args *a) {
    if (a->src[0]->dtype == RT_BF16 || a->dst->dtype == RT_BF16) return cuda_gemm_glu(be, a); /* bf16 activations */
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *w = a->src[1], *scratch = a->src[2];
    rt_tensor *dst = a->dst;
    if (cuda_check_dev(dst, "matmul_glu") || cuda_check_dev(x, "matmul_glu") || cuda_check_dev(w, "matmul_glu") ||
        cuda_check_dev(scratch, "matmul_glu"))
        return VC_ERR_INVALID;
    int64_t in = w->shape[1], out = w->shape[0], n = rt_tensor_nrows(x), f = out / 2;
    size_t xs = row_stride(x), ys = row_stride(dst);
    const char *wd = (const char *)w->data;
    bool vx = xs && ys && xs % 16 == 0 && ys % 4 == 0 && ((uintptr_t)x->data & 15) == 0 &&
              x->stride[x->ndim - 1] == 4 && dst->stride[dst->ndim - 1] == 4;
    if (vx && cuda_skinny_fits(c, w, x->data, RT_F32, (int64_t)xs / 4, in, n, RT_F32, true) && cuda_enter(c) == 0)
        return cuda_skinny_glu(c, w, x->data, RT_F32, (int64_t)xs / 4, dst->data, RT_F32, (int64_t)ys / 4, f, in, (int)n,
                               a->p.glu.act);
    if (vx && out % 2 == 0 && cuda_gemv_q_fits(c, w, (const float *)x->data, (int64_t)xs / 4, n) &&
        in % rt_dtype_info(w->dtype)->block_elems == 0 && cuda_enter(c) == 0) { /* GGUF blocks */
        const float *xd = (const float *)x->data;
        float *yd = (float *)dst->data;
        if (cuda_gemv_d4_fits(c, w, n)) /* x fits shared memory: cuda_gemv_d4.cu */
            return cuda_gemv_d4(c, w, xd, (int64_t)xs / 4, yd, (int64_t)ys / 4, NULL, out, in, (int)n, true, a->p.glu.act);
        return cuda_gemv_q(c, w, xd, (int64_t)xs / 4, yd, (int64_t)ys / 4, NULL, out, in, (int)n, true, a->p.glu.act);
    }
    bool fused = vx && n >= 1 && n <= CUDA_GEMV_MAX_N && (w->dtype == RT_F16 || w->dtype == RT_BF16) &&
                 in % 8 == 0 && w->stride[1] == 2 && w->stride[0] % 16 == 0 && ((uintptr_t)wd & 15) == 0 &&
                 out <= INT_MAX && in <= INT_MAX && cuda_enter(c) == 0 && gemv_variant(c) != 0;
    if (fused) {
        const float *xd = (const float *)x->data;
        float *yd = (float *)dst->data;
        int v = gemv_variant(c), act = a->p.glu.act, ks;
        if (v >= 4) {
            int occ = w->dtype == RT_F16 ? gemv_occupancy<k_gemv_half_u<RT_F16, 1, 2, true>>()
                                         : gemv_occupancy<k_gemv_half_u<RT_BF16, 1, 2, true>>();
            ks = gemv_ks_waves(c, v, f, out, in, GEMV_BLOCK / 32 / 2, 4, occ);
        } else {
            ks = gemv_ks(c, out, in, v == 2 || v == 3 ? 32 : 16);
            if (ks > 4) ks = 4;
        }
        int64_t pairs = GEMV_BLOCK / 32 / ks / 2;
        unsigned grid = (unsigned)((f + pairs - 1) / pairs);
        int64_t x_ld = (int64_t)xs / 4, y_ld = (int64_t)ys / 4;
        if (w->dtype == RT_F16)
            launch_half_u<RT_F16, 2, true>(c, ks, grid, wd, w->stride[0], xd, x_ld, yd, y_ld, NULL, out, in, (int)n, act);
        else
            launch_half_u<RT_BF16, 2, true>(c, ks, grid, wd, w->stride[0], xd, x_ld, yd, y_ld, NULL, out, in, (int)n, act);
        CU_LAUNCHED();
        return VC_OK;
    }
    return cuda_gemm_glu(be, a);
}
