/* cuda_flash — tensor-core prefill attention (FlashAttention-2 style) for
 * PAGED_ATTENTION over bf16/f16 caches.
 *
 * Work split. Query rows are packed per kv head g: packed row r of a tile is
 * token t0 + r / G, head g*G + r % G (G = h / kvh), so one K/V tile in
 * shared memory serves the whole GQA group. A CTA (4 warps) owns FL_M = 64
 * packed rows (QT = 64 / G tokens; rows past QT*G idle), warp w rows
 * 16w..16w+15. Grid (tiles, kvh); tiles are issued last-first, so the
 * long causal rows start early and the short ones fill the tail.
 *
 * Rows of a tile may belong to several sequences (varlen batch); the CTA
 * takes them one sequence ("segment") after the other with the same
 * accumulators: a row outside the current segment sees only masked keys,
 * which leaves its state unchanged (p = 0, correction 1). Segment rows at
 * positions pos = seq_len - q_len + i see keys lo..pos (lo = pos-window+1
 * with a window, else 0); the segment's key range is walked in tiles of
 * FL_N = 64 keys, from the smallest lo to the largest pos (causal skip).
 *
 * Per key tile: K and V rows [64][hd] (bf16/f16) come from the paged cache
 * by 16-byte cp.async (keys past the range are zero-filled so that masked
 * p = 0 never meets a NaN) into a double buffer; the next tile loads while
 * this one computes. S = Q K^T with mma.sync m16n8k16 (Q fragments kept in
 * registers, converted from the f32 q once; K via ldmatrix), f32 scores
 * scaled into the log2 domain (p = 2^(s - m) with ex2.approx), soft-capped,
 * masked only in tiles that cross a row's key range, online softmax per row
 * (the four lanes of a quad share a row), P converted to the cache dtype and
 * reused in registers as the A operand of O += P V (V via ldmatrix.trans).
 * f32 accumulation throughout; out = O / l (0 for a row with no keys).
 *
 * Measured on the H200 (test_cuda_flash, 2048-token causal prompt, hd 128,
 * bf16): 150 us per layer at 16/8 heads (115 TFLOP/s), 238 us at 32/8 (144).
 * Next steps: 32 rows per warp (BM 128, Q from shared memory) to halve the
 * ldmatrix traffic per mma, then wgmma/TMA (FA3).
 *
 * Shapes: hd 64 or 128, G <= 64, cache rows 16-byte aligned
 * (cuda_flash_eligible). Precision: q and p rounded to the cache dtype
 * (normalised error ~1e-3 vs the f32 reference); f32 caches and other
 * shapes keep the SIMT kernels of cuda_paged_attn.cu.
 */
#include "backends/cuda/cuda_flash.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

#include <type_traits>

#define FL_WARPS 4
#define FL_M 64 /* packed query rows per CTA (16 per warp) */
#define FL_N 64 /* keys per tile */
#define FL_PAD 8 /* elements of padding per smem row: ldmatrix rows hit distinct banks */

typedef struct {
    const char *q, *k, *v;
    char *out;
    int64_t q_s0, q_s1, o_s0, o_s1;             /* bytes */
    int64_t k_s0, k_sb, k_s1, v_s0, v_sb, v_s1; /* bytes: block, slot, kv head */
    const int32_t *bt, *qsl, *seq_lens;
    int64_t T;
    int S, max_blocks, B, bshift, num_blocks, G, QT, n_tiles, window; /* bshift: log2 B, or -1 */
    float scale_log2, softcap; /* scale * log2(e): scores live in the log2 domain */
    int *flags;
} fl_args;

static size_t fl_smem(int hd) { return (size_t)4 * FL_N * (hd + FL_PAD) * 2; /* 2 stages x (K, V) */ }

/* ---- PTX helpers -------------------------------------------------------- */

__device__ __forceinline__ uint32_t fl_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared; src_bytes 0 zero-fills the destination. */
__device__ __forceinline__ void fl_cp16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fl_smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void fl_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void fl_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void fl_ldsm_x4(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fl_smem_addr(p)));
}
__device__ __forceinline__ void fl_ldsm_x4_t(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fl_smem_addr(p)));
}

/* D (16x8 f32) += A (16x16, row) * B (16x8, col). */
template <typename KV> __device__ __forceinline__ void fl_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same<KV, __nv_bfloat16>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float fl_exp2(float x) { /* 2^x; -inf -> 0 */
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Two floats -> one register of two 16-bit values (x in the low half). */
template <typename KV> __device__ __forceinline__ uint32_t fl_pack(float x, float y) {
    uint16_t lo, hi;
    if constexpr (std::is_same<KV, __nv_bfloat16>::value) {
        lo = __bfloat16_as_ushort(__float2bfloat16_rn(x));
        hi = __bfloat16_as_ushort(__float2bfloat16_rn(y));
    } else {
        lo = __half_as_ushort(__float2half_rn(x));
        hi = __half_as_ushort(__float2half_rn(y));
    }
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* ---- the kernel --------------------------------------------------------- */

/* Sequence of row i: the last s with qsl[s] <= i. */
__device__ __forceinline__ int fl_seq(const fl_args &a, int64_t i) {
    int s0 = 0, s1 = a.S - 1;
    while (s0 < s1) {
        int mid = (s0 + s1 + 1) / 2;
        if (a.qsl[mid] <= i) s0 = mid;
        else s1 = mid - 1;
    }
    return s0;
}

/* Issue the cp.async loads of keys kt0 .. kt0+FL_N-1 (those > khi
 * zero-filled) into ks/vs [FL_N][HD+FL_PAD]. */
template <int HD>
__device__ __forceinline__ void fl_load_tile(const fl_args &a, const int32_t *btrow, int g, int kt0, int khi,
                                             uint16_t *ks, uint16_t *vs) {
    constexpr int CPR = HD / 8; /* 16-byte chunks per row */
#pragma unroll
    for (int it = 0; it < FL_N * CPR / (FL_WARPS * 32); it++) {
        const int idx = threadIdx.x + it * FL_WARPS * 32, j = idx / CPR, c = idx % CPR, key = kt0 + j;
        const char *kp = a.k, *vp = a.v;
        int nbytes = 0;
        if (key <= khi) {
            const int bi = a.bshift >= 0 ? key >> a.bshift : key / a.B;
            int32_t blk = btrow[bi];
            if (blk < 0 || blk >= a.num_blocks) { /* bad table: flag it, read block 0 */
                atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
                blk = 0;
            }
            const int slot = key - bi * a.B;
            kp += blk * a.k_s0 + slot * a.k_sb + g * a.k_s1 + c * 16;
            vp += blk * a.v_s0 + slot * a.v_sb + g * a.v_s1 + c * 16;
            nbytes = 16;
        }
        fl_cp16(ks + j * (HD + FL_PAD) + c * 8, kp, nbytes);
        fl_cp16(vs + j * (HD + FL_PAD) + c * 8, vp, nbytes);
    }
}

template <typename KV, int HD> __global__ void __launch_bounds__(FL_WARPS * 32) k_flash(fl_args a) {
    CUDA_PDL_ENTER();
    constexpr int LD = HD + FL_PAD; /* smem row pitch, elements */
    constexpr int KS = HD / 16;     /* k-steps of Q K^T */
    constexpr int NO = HD / 8;      /* n-tiles of O */
    extern __shared__ __align__(16) uint16_t fl_sm[];
    /* stage st: K at fl_sm + st * 2 * FL_N * LD, V FL_N * LD after it */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int g = blockIdx.y, G = a.G;
    const int tile = a.n_tiles - 1 - (int)blockIdx.x; /* longest rows first */
    const int64_t t0 = (int64_t)tile * a.QT, t1 = t0 + a.QT < a.T ? t0 + a.QT : a.T;

    /* This thread's two rows (gq and gq+8 of the warp's 16): token, head. */
    int64_t tok[2];
    int hq[2];
    bool live[2];
#pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
        const int r = warp * 16 + gq + 8 * h2;
        tok[h2] = t0 + r / G;
        hq[h2] = g * G + r % G;
        live[h2] = r < a.QT * G && tok[h2] < t1;
    }

    /* Q fragments (A operand, row-major 16 x HD), from f32 q. */
    uint32_t qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                float2 v = make_float2(0.0f, 0.0f);
                if (live[h2])
                    v = *(const float2 *)(a.q + tok[h2] * a.q_s0 + (int64_t)hq[h2] * a.q_s1 +
                                          (int64_t)(ks * 16 + half * 8 + 2 * tq) * 4);
                qf[ks][h2 + 2 * half] = fl_pack<KV>(v.x, v.y);
            }

    float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < NO; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    for (int64_t r = t0; r < t1;) {
        const int s = fl_seq(a, r);
        const int q_len = a.qsl[s + 1] - a.qsl[s], sl = a.seq_lens[s];
        const int64_t seg_end = a.qsl[s + 1] < t1 ? a.qsl[s + 1] : t1;
        const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || r < a.qsl[s] || seg_end <= r;
        if (bad && threadIdx.x == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        const int64_t base = (int64_t)sl - q_len - a.qsl[s]; /* position of row i: base + i */
        const int khi = bad ? -1 : (int)(base + seg_end - 1);
        const int pos_min = (int)(base + r);
        const int klo = a.window > 0 && pos_min - a.window + 1 > 0 ? pos_min - a.window + 1 : 0;
        const int32_t *btrow = a.bt + (int64_t)s * a.max_blocks;
        /* Per row: the key range it sees in this segment (empty if not in it). */
        int rhi[2], rlo[2];
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const bool in = !bad && live[h2] && tok[h2] >= r && tok[h2] < seg_end;
            rhi[h2] = in ? (int)(base + tok[h2]) : -1;
            rlo[h2] = in && a.window > 0 && rhi[h2] - a.window + 1 > 0 ? rhi[h2] - a.window + 1 : 0;
        }
        const int n_kt = khi >= klo ? (khi - klo) / FL_N + 1 : 0;
        __syncthreads(); /* the previous segment is done with the buffers */
        if (n_kt > 0) fl_load_tile<HD>(a, btrow, g, klo, khi, fl_sm, fl_sm + FL_N * LD);
        fl_cp_commit();
        for (int it = 0; it < n_kt; it++) {
            const int kt0 = klo + it * FL_N, st = it & 1;
            uint16_t *nxt = fl_sm + (st ^ 1) * 2 * FL_N * LD;
            if (it + 1 < n_kt) fl_load_tile<HD>(a, btrow, g, kt0 + FL_N, khi, nxt, nxt + FL_N * LD);
            fl_cp_commit();
            fl_cp_wait<1>(); /* tile it landed (this thread's part) */
            __syncthreads(); /* ... and everybody's */
            const uint16_t *ks = fl_sm + st * 2 * FL_N * LD, *vs = ks + FL_N * LD;

            /* S = Q K^T: 16 rows x 64 keys per warp, 8 n-tiles of 8 keys. */
            float sc[FL_N / 8][4];
#pragma unroll
            for (int j = 0; j < FL_N / 8; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
            for (int ks_ = 0; ks_ < KS; ks_++)
#pragma unroll
                for (int jp = 0; jp < FL_N / 16; jp++) { /* two n-tiles per ldmatrix.x4 */
                    const int mi = lane >> 3, rr = lane & 7;
                    uint32_t b[4];
                    fl_ldsm_x4(b, ks + (jp * 16 + (mi >> 1) * 8 + rr) * LD + ks_ * 16 + (mi & 1) * 8);
                    fl_mma<KV>(sc[2 * jp], qf[ks_], b[0], b[1]);
                    fl_mma<KV>(sc[2 * jp + 1], qf[ks_], b[2], b[3]);
                }

            /* Scale, soft-cap, mask; online softmax per row. */
            if (a.softcap > 0.0f) {
                const float pre = a.scale_log2 * 0.6931471805599453f / a.softcap, post = a.softcap * 1.4426950408889634f;
#pragma unroll
                for (int j = 0; j < FL_N / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) sc[j][e] = post * tanhf(sc[j][e] * pre);
            } else {
#pragma unroll
                for (int j = 0; j < FL_N / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) sc[j][e] *= a.scale_log2;
            }
            /* Mask only where the tile crosses a row's range (the diagonal,
             * the window edge, rows outside the segment). */
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) {
                if (kt0 >= rlo[h2] && kt0 + FL_N - 1 <= rhi[h2]) {
#pragma unroll
                    for (int j = 0; j < FL_N / 8; j++) mx[h2] = fmaxf(mx[h2], fmaxf(sc[j][2 * h2], sc[j][2 * h2 + 1]));
                } else {
#pragma unroll
                    for (int j = 0; j < FL_N / 8; j++)
#pragma unroll
                        for (int e = 2 * h2; e < 2 * h2 + 2; e++) {
                            const int key = kt0 + j * 8 + 2 * tq + (e & 1);
                            const float t = key >= rlo[h2] && key <= rhi[h2] ? sc[j][e] : -INFINITY;
                            sc[j][e] = t;
                            mx[h2] = fmaxf(mx[h2], t);
                        }
                }
            }
            float corr[2], mb[2];
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) {
                mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 1));
                mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 2));
                /* no key seen yet: keep the state (corr 1, p = exp(-inf) = 0) */
                mb[h2] = mx[h2] == -INFINITY ? 0.0f : mx[h2];
                corr[h2] = mx[h2] == -INFINITY ? 1.0f : fl_exp2(m[h2] - mx[h2]);
                m[h2] = mx[h2];
                l[h2] *= corr[h2];
            }
#pragma unroll
            for (int j = 0; j < NO; j++) {
                o[j][0] *= corr[0];
                o[j][1] *= corr[0];
                o[j][2] *= corr[1];
                o[j][3] *= corr[1];
            }
            float ls[2] = {0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < FL_N / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float p = fl_exp2(sc[j][e] - mb[e >> 1]);
                    sc[j][e] = p;
                    ls[e >> 1] += p;
                }
            l[0] += ls[0]; /* per-lane partial sums; the quad is summed at the end */
            l[1] += ls[1];

            /* O += P V: P from the score registers (A operand, 4 k-steps of 16
             * keys), V via ldmatrix.trans (two n-tiles of 8 dims per x4). */
#pragma unroll
            for (int kk = 0; kk < FL_N / 16; kk++) {
                uint32_t pa[4];
                pa[0] = fl_pack<KV>(sc[2 * kk][0], sc[2 * kk][1]);
                pa[1] = fl_pack<KV>(sc[2 * kk][2], sc[2 * kk][3]);
                pa[2] = fl_pack<KV>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
                pa[3] = fl_pack<KV>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
                for (int dp = 0; dp < NO / 2; dp++) {
                    const int mi = lane >> 3, rr = lane & 7;
                    uint32_t b[4];
                    fl_ldsm_x4_t(b, vs + (kk * 16 + (mi & 1) * 8 + rr) * LD + dp * 16 + (mi >> 1) * 8);
                    fl_mma<KV>(o[2 * dp], pa, b[0], b[1]);
                    fl_mma<KV>(o[2 * dp + 1], pa, b[2], b[3]);
                }
            }
            __syncthreads(); /* everybody done with this stage before it is refilled */
        }
        r = seg_end > r ? seg_end : r + 1;
    }
    fl_cp_wait<0>();

    /* out = O / l; l summed over the quad (each lane summed its own keys). */
#pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
        l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 1);
        l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 2);
    }
#pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
        if (!live[h2]) continue;
        const float inv = l[h2] > 0.0f ? 1.0f / l[h2] : 0.0f;
        float *orow = (float *)(a.out + tok[h2] * a.o_s0 + (int64_t)hq[h2] * a.o_s1);
#pragma unroll
        for (int j = 0; j < NO; j++)
            *(float2 *)(orow + j * 8 + 2 * tq) = make_float2(o[j][2 * h2] * inv, o[j][2 * h2 + 1] * inv);
    }
}

/* ---- host side ---------------------------------------------------------- */

bool cuda_flash_eligible(const rt_tensor *q, const rt_tensor *dst, const rt_tensor *kc, const rt_tensor *vc) {
    const int64_t h = q->shape[1], hd = q->shape[2], kvh = kc->shape[2];
    if (hd != 64 && hd != 128) return false;
    if (kc->dtype != vc->dtype || (kc->dtype != RT_BF16 && kc->dtype != RT_F16)) return false;
    if (kvh <= 0 || h % kvh || h / kvh > FL_M) return false;
    const rt_tensor *ts[2] = {kc, vc};
    for (int t = 0; t < 2; t++)
        if ((uintptr_t)ts[t]->data % 16 || ts[t]->stride[0] % 16 || ts[t]->stride[1] % 16 || ts[t]->stride[2] % 16 ||
            ts[t]->stride[3] != 2)
            return false;
    /* q and out: f32 rows read and written as float2 */
    return q->stride[2] == 4 && q->stride[1] % 8 == 0 && q->stride[0] % 8 == 0 && (uintptr_t)q->data % 8 == 0 &&
           dst->stride[2] == 4 && dst->stride[1] % 8 == 0 && dst->stride[0] % 8 == 0 && (uintptr_t)dst->data % 8 == 0;
}

/* Register-bound at 2 CTAs (8 warps) per SM for hd 128: capping the
 * registers for 3 CTAs (launch bounds 128, 3: a few spills) measured the
 * same on the H200 (151 vs 150 us for a 2048-token layer). */
template <typename KV, int HD> static int fl_go(cuda_ctx *c, const fl_args &a, dim3 grid) {
    const size_t smem = fl_smem(HD);
    /* The opt-in to > 48 KiB of shared memory is per device: set it at every
     * (prefill-sized, so rare) launch. */
    cudaError_t e = cudaFuncSetAttribute(k_flash<KV, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return cuda_fail(e, "flash attention smem opt-in", __FILE__, __LINE__);
    cuda_launch(k_flash<KV, HD>, grid, FL_WARPS * 32, smem, c->stream, a);
    CU_LAUNCHED();
    return VC_OK;
}

int cuda_flash_run(cuda_ctx *c, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                   const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale, float softcap,
                   int32_t window) {
    fl_args a;
    memset(&a, 0, sizeof a);
    const int64_t T = q->shape[0], h = q->shape[1], hd = q->shape[2], kvh = kc->shape[2];
    a.q = (const char *)q->data;
    a.k = (const char *)kc->data;
    a.v = (const char *)vc->data;
    a.out = (char *)dst->data;
    a.q_s0 = q->stride[0];
    a.q_s1 = q->stride[1];
    a.o_s0 = dst->stride[0];
    a.o_s1 = dst->stride[1];
    a.k_s0 = kc->stride[0];
    a.k_sb = kc->stride[1];
    a.k_s1 = kc->stride[2];
    a.v_s0 = vc->stride[0];
    a.v_sb = vc->stride[1];
    a.v_s1 = vc->stride[2];
    a.bt = (const int32_t *)bt->data;
    a.qsl = (const int32_t *)qsl->data;
    a.seq_lens = (const int32_t *)sl->data;
    a.T = T;
    a.S = (int)bt->shape[0];
    a.max_blocks = (int)bt->shape[1];
    a.B = (int)kc->shape[1];
    a.num_blocks = (int)kc->shape[0];
    a.G = (int)(h / kvh);
    a.QT = FL_M / a.G;
    a.window = window;
    a.bshift = -1;
    for (int b = 0; b < 31; b++)
        if (a.B == 1 << b) a.bshift = b;
    a.scale_log2 = scale * 1.4426950408889634f;
    a.softcap = softcap;
    a.flags = c->d_flags;
    const int64_t tiles = (T + a.QT - 1) / a.QT;
    if ((int64_t)a.max_blocks * a.B > INT32_MAX / 2 || tiles > INT32_MAX || kvh > 65535)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda flash attention: context or batch too large");
    a.n_tiles = (int)tiles;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    dim3 grid((unsigned)tiles, (unsigned)kvh);
    if (kc->dtype == RT_BF16) return hd == 64 ? fl_go<__nv_bfloat16, 64>(c, a, grid) : fl_go<__nv_bfloat16, 128>(c, a, grid);
    return hd == 64 ? fl_go<__half, 64>(c, a, grid) : fl_go<__half, 128>(c, a, grid);
}
