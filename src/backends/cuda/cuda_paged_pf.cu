/* cuda_paged_pf — PAGED_ATTENTION's prefill kernel (k_pf), for batches
 * that are mostly prompt rows (cuda_fd_run hands them over: T >= 4 rows
 * per sequence on average and T >= 64, hd 64 or 128; bf16/f16 caches with
 * f32 q usually take the tensor-core flash kernel of cuda_flash.cu first).
 * Arguments as k_fd's (cuda_fd_args.cuh). Scores and softmax in f32 with
 * expf, like the CPU reference.
 */
#include "backends/cuda/cuda_fd_args.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

/* DPL consecutive cache elements -> f32 (16-, 8- or 4-byte loads). */
template <typename KV, int DPL> __device__ __forceinline__ void fd_load(const char *p, float *f);

template <int DPL> __device__ __forceinline__ void fd_load_u16(const char *p, uint16_t *u) {
    if constexpr (DPL == 8) {
        uint4 w = *(const uint4 *)p;
        memcpy(u, &w, 16);
    } else if constexpr (DPL == 4) {
        uint2 w = *(const uint2 *)p;
        memcpy(u, &w, 8);
    } else {
        uint32_t w = *(const uint32_t *)p;
        memcpy(u, &w, 4);
    }
}

template <> __device__ __forceinline__ void fd_load<__nv_bfloat16, 8>(const char *p, float *f) {
    uint16_t u[8];
    fd_load_u16<8>(p, u);
#pragma unroll
    for (int e = 0; e < 8; e++) f[e] = __uint_as_float((uint32_t)u[e] << 16);
}
template <> __device__ __forceinline__ void fd_load<__nv_bfloat16, 4>(const char *p, float *f) {
    uint16_t u[4];
    fd_load_u16<4>(p, u);
#pragma unroll
    for (int e = 0; e < 4; e++) f[e] = __uint_as_float((uint32_t)u[e] << 16);
}
template <> __device__ __forceinline__ void fd_load<__nv_bfloat16, 2>(const char *p, float *f) {
    uint16_t u[2];
    fd_load_u16<2>(p, u);
#pragma unroll
    for (int e = 0; e < 2; e++) f[e] = __uint_as_float((uint32_t)u[e] << 16);
}
template <> __device__ __forceinline__ void fd_load<__half, 8>(const char *p, float *f) {
    uint16_t u[8];
    fd_load_u16<8>(p, u);
#pragma unroll
    for (int e = 0; e < 8; e++) f[e] = __half2float(__ushort_as_half(u[e]));
}
template <> __device__ __forceinline__ void fd_load<__half, 4>(const char *p, float *f) {
    uint16_t u[4];
    fd_load_u16<4>(p, u);
#pragma unroll
    for (int e = 0; e < 4; e++) f[e] = __half2float(__ushort_as_half(u[e]));
}
template <> __device__ __forceinline__ void fd_load<__half, 2>(const char *p, float *f) {
    uint16_t u[2];
    fd_load_u16<2>(p, u);
#pragma unroll
    for (int e = 0; e < 2; e++) f[e] = __half2float(__ushort_as_half(u[e]));
}
template <> __device__ __forceinline__ void fd_load<float, 8>(const char *p, float *f) {
    float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
template <> __device__ __forceinline__ void fd_load<float, 4>(const char *p, float *f) {
    float4 a = *(const float4 *)p;
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
}
template <> __device__ __forceinline__ void fd_load<float, 2>(const char *p, float *f) {
    float2 a = *(const float2 *)p;
    f[0] = a.x, f[1] = a.y;
}

/* Block of key j (through the block table; a bad block id is flagged and
 * block 0 read instead, so memory stays in bounds). */
__device__ __forceinline__ int fd_block(const fd_args &a, const int32_t *btrow, int j) {
    int32_t blk = btrow[j / a.B];
    if (blk < 0 || blk >= a.num_blocks) {
        atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        blk = 0;
    }
    return blk;
}

/* ---- prefill: query tiles sharing K/V tiles in shared memory ------------
 *
 * For batches that are mostly prompt rows, one CTA (8 warps) serves PF_Q =
 * 32 queries of one kv head: QT = PF_Q / G consecutive rows x the G heads
 * of the group (query qi: row r0 + qi / G, head g*G + qi % G). Rows of
 * different sequences in a tile are handled one sequence ("segment") after
 * the other. For each tile of PF_KT keys of the segment's key range, K and V
 * are loaded once into shared memory (f32; K rows padded by one float so the
 * lanes' rows fall into different banks) and every query of the CTA uses
 * them: warp w owns queries w, w+8, w+16, w+24; lane j scores key j of the
 * tile (masked to the query's lo..hi), the warp updates its online softmax
 * and accumulates P.V with lane l owning dims l*DPL..l*DPL+DPL-1.
 * hd in {64, 128}. */
#define PF_WARPS 8
#define PF_Q 32
#define PF_KT 32

static size_t pf_smem(int hd) { return (size_t)(PF_Q * hd + PF_KT * (hd + 1) + PF_KT * hd) * sizeof(float); }

template <typename KV, int DPL> __global__ void __launch_bounds__(PF_WARPS * 32) k_pf(fd_args a, int64_t T) {
    /* under PDL this kernel may start while the kernel before it (the KV
     * store of this step's rows) still runs: wait for it first */
    CUDA_PDL_ENTER();
    constexpr int HD = 32 * DPL;
    extern __shared__ float pf_sm[];
    float *qs = pf_sm, *ks = qs + PF_Q * HD, *vs = ks + PF_KT * (HD + 1);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, G = a.G, QT = PF_Q / G, g = blockIdx.x;
    const int64_t r0 = (int64_t)blockIdx.y * QT, r1 = r0 + QT < T ? r0 + QT : T;
    for (int64_t r = r0; r < r1;) {
        const int s = cuda_row_seq(a.qsl, a.S, r);
        const int q_len = a.qsl[s + 1] - a.qsl[s], sl = a.seq_lens[s];
        const int64_t seg_end = a.qsl[s + 1] < r1 ? a.qsl[s + 1] : r1;
        const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || r < a.qsl[s] || seg_end <= r;
        const int nq = bad ? 0 : (int)(seg_end - r) * G;
        if (bad && threadIdx.x == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        const int base = sl - q_len - a.qsl[s]; /* position of row i: base + i */
        const int hi_max = bad ? -1 : base + (int)(seg_end - 1);
        const int hi_min = base + (int)r;
        const int lo_min = a.window > 0 && hi_min - a.window + 1 > 0 ? hi_min - a.window + 1 : 0;
        const int32_t *btrow = a.bt + (int64_t)s * a.max_blocks;
        __syncthreads(); /* the previous segment is done with qs */
        for (int e = threadIdx.x; e < nq * HD; e += PF_WARPS * 32) {
            int qi = e / HD, d = e % HD;
            int64_t row = r + qi / G, hq = (int64_t)g * G + qi % G;
            qs[e] = ((const float *)(a.q + row * a.q_s0 + hq * a.q_s1))[d];
        }
        float m[4], l[4], acc[4][DPL];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            m[k] = -INFINITY;
            l[k] = 0.0f;
#pragma unroll
            for (int e = 0; e < DPL; e++) acc[k][e] = 0.0f;
        }
        for (int kt0 = lo_min; kt0 <= hi_max; kt0 += PF_KT) {
            const int cnt = hi_max - kt0 + 1 < PF_KT ? hi_max - kt0 + 1 : PF_KT;
            __syncthreads(); /* previous tile consumed (and qs stored) */
            for (int e = threadIdx.x; e < PF_KT * (HD / DPL); e += PF_WARPS * 32) {
                int j = e / (HD / DPL), d0 = (e % (HD / DPL)) * DPL;
                float kf[DPL], vf[DPL];
                if (j < cnt) {
                    int key = kt0 + j, blk = fd_block(a, btrow, key), slot = key % a.B;
                    fd_load<KV, DPL>(a.k + blk * a.k_s0 + slot * a.k_sb + (int64_t)g * a.k_s1 + d0 * (int)sizeof(KV), kf);
                    fd_load<KV, DPL>(a.v + blk * a.v_s0 + slot * a.v_sb + (int64_t)g * a.v_s1 + d0 * (int)sizeof(KV), vf);
                } else {
#pragma unroll
                    for (int x = 0; x < DPL; x++) kf[x] = vf[x] = 0.0f;
                }
#pragma unroll
                for (int x = 0; x < DPL; x++) {
                    ks[j * (HD + 1) + d0 + x] = kf[x];
                    vs[j * HD + d0 + x] = vf[x];
                }
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int qi = warp + PF_WARPS * k;
                if (qi >= nq) break;
                const int hi = base + (int)(r + qi / G);
                const int lo = a.window > 0 && hi - a.window + 1 > 0 ? hi - a.window + 1 : 0;
                if (kt0 > hi || kt0 + cnt - 1 < lo) continue; /* warp-uniform */
                const int key = kt0 + lane;
                const bool valid = lane < cnt && key >= lo && key <= hi;
                const float *qr = qs + qi * HD, *kr = ks + lane * (HD + 1);
                float sc = 0.0f;
#pragma unroll 8
                for (int d = 0; d < HD; d++) sc += qr[d] * kr[d];
                sc *= a.scale;
                if (a.softcap > 0.0f) sc = a.softcap * tanhf(sc / a.softcap);
                float mt = valid ? sc : -INFINITY;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
                const float mn = fmaxf(m[k], mt), corr = expf(m[k] - mn);
                float p = valid ? expf(sc - mn) : 0.0f, ps = p;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
                l[k] = l[k] * corr + ps;
                m[k] = mn;
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[k][e] *= corr;
                for (int j = 0; j < cnt; j++) {
                    float pj = __shfl_sync(0xffffffffu, p, j);
                    const float *vr = vs + j * HD + lane * DPL;
#pragma unroll
                    for (int e = 0; e < DPL; e++) acc[k][e] += pj * vr[e];
                }
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int qi = warp + PF_WARPS * k;
            if (qi >= nq) break;
            int64_t row = r + qi / G, hq = (int64_t)g * G + qi % G;
            float *o = (float *)(a.out + row * a.o_s0 + hq * a.o_s1) + lane * DPL;
#pragma unroll
            for (int e = 0; e < DPL; e++) o[e] = l[k] > 0.0f ? acc[k][e] / l[k] : 0.0f;
        }
        if (bad) { /* zero the rows of a bad segment */
            for (int64_t row = r; row < (seg_end > r ? seg_end : r + 1); row++)
                for (int e = threadIdx.x; e < G * HD; e += PF_WARPS * 32)
                    ((float *)(a.out + row * a.o_s0 + ((int64_t)g * G + e / HD) * a.o_s1))[e % HD] = 0.0f;
        }
        r = seg_end > r ? seg_end : r + 1;
    }
}

int cuda_pf_run(cuda_ctx *c, const fd_args &a, int64_t T, int64_t hd, int64_t kvh, rt_dtype kvt) {
    int QT = PF_Q / a.G;
    dim3 pgrid((unsigned)kvh, (unsigned)((T + QT - 1) / QT));
    size_t smem = pf_smem((int)hd);
    cudaError_t e = cudaSuccess;
/* The opt-in to > 48 KiB of shared memory is per device: set it at every
 * (prefill-sized, so rare) launch rather than caching it in a static. */
#define PF_GO(KV, DPL)                                                                                   \
    do {                                                                                                 \
        e = cudaFuncSetAttribute(k_pf<KV, DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);  \
        if (e == cudaSuccess) cuda_launch(k_pf<KV, DPL>, pgrid, PF_WARPS * 32, smem, c->stream, a, T);  \
    } while (0)
    if (kvt == RT_BF16) {
        if (hd == 64) PF_GO(__nv_bfloat16, 2);
        else PF_GO(__nv_bfloat16, 4);
    } else if (kvt == RT_F16) {
        if (hd == 64) PF_GO(__half, 2);
        else PF_GO(__half, 4);
    } else {
        if (hd == 64) PF_GO(float, 2);
        else PF_GO(float, 4);
    }
#undef PF_GO
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(e, "prefill attention launch", __FILE__, __LINE__);
    return VC_OK;
}
