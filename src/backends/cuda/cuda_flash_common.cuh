/* cuda_flash_common — what the flash kernels share: the launch arguments
 * (fl_args, filled by cuda_fl_args in cuda_flash.cu), cp.async, ldmatrix,
 * mma.sync, exp2 / packing PTX helpers, the paged K/V tile loader, q / out
 * row access and the packed-row map. Included by cuda_flash.cu (mma.sync
 * prefill kernel), cuda_flash_wg.cu (wgmma prefill kernels) and
 * cuda_flash_dec.cu (mma.sync decode kernel); CUDA C++ only.
 */
#ifndef CUDA_FLASH_COMMON_CUH
#define CUDA_FLASH_COMMON_CUH

#include "backends/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

typedef struct {
    const char *q, *k, *v;
    char *out;
    int64_t q_s0, q_s1, o_s0, o_s1;             /* bytes */
    int32_t k_s0, k_sb, k_s1, v_s0, v_sb, v_s1; /* bytes: block, slot, kv head (< 2^31, eligible) */
    const int32_t *bt, *qsl, *seq_lens;
    int64_t T;
    int S, max_blocks, B, bshift, num_blocks, G, QT, n_tiles, y0, window; /* B = 2^bshift (eligible) */
    float scale_log2, softcap; /* scale * log2(e): scores live in the log2 domain */
    int *flags;
} fl_args;

#define FL_PAD 8 /* elements of padding per smem row: ldmatrix rows hit distinct banks */

__device__ __forceinline__ uint32_t fl_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

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

/* 16 bytes global -> shared; src_bytes 0 zero-fills the destination. */
__device__ __forceinline__ void fl_cp16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void fl_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void fl_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ float fl_exp2(float x) { /* 2^x; -inf -> 0 */
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Scores of N mma C fragments into the log2 domain. Soft-capping (or an odd
 * scale) transforms them here and returns 1; else they stay as they are and
 * the returned factor (scale * log2 e) is folded into the exponent's FMA. */
template <int N> __device__ __forceinline__ float fl_log2_scores(float (*sc)[4], const fl_args &a) {
    float scl = a.scale_log2;
    if (a.softcap > 0.0f || !(scl > 0.0f)) {
        const bool cap = a.softcap > 0.0f;
        const float pre = a.scale_log2 * 0.6931471805599453f / a.softcap, post = a.softcap * 1.4426950408889634f;
#pragma unroll
        for (int j = 0; j < N; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[j][e] = cap ? post * tanhf(sc[j][e] * pre) : sc[j][e] * a.scale_log2;
        scl = 1.0f;
    }
    return scl;
}

/* Online-softmax step of one packed row of an mma.sync score tile: sc[j]
 * the NJ n-tiles' C fragments, h2 the lane's row half (elements 2*h2,
 * 2*h2+1; the row's other values sit in the quad's lanes). The row's tile
 * maximum as a tree (no chain of dependent fmax), then the running max m
 * (log2 domain: scores times scl), the exponent's offset mb, the rescale
 * factor corr of the old O and l (l *= corr). No key seen yet or no new
 * maximum keeps the state (corr 1; p = exp2(-inf) = 0 while no key is
 * seen). */
template <int NJ>
__device__ __forceinline__ void fl_row_max(const float (*sc)[4], int h2, float scl, float &m, float &l, float &mb,
                                           float &corr) {
    float mv[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) mv[j] = fmaxf(sc[j][2 * h2], sc[j][2 * h2 + 1]);
#pragma unroll
    for (int w = NJ / 2; w >= 1; w >>= 1)
#pragma unroll
        for (int j = 0; j < w; j++) mv[j] = fmaxf(mv[j], mv[j + w]);
    float mx = mv[0];
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m, mx * scl);
    mb = mn == -INFINITY ? 0.0f : mn;
    corr = mn == -INFINITY || mn == m ? 1.0f : fl_exp2(m - mn);
    m = mn;
    l *= corr;
}

/* Two floats -> one register of two 16-bit values (x in the low half), one
 * cvt.rn.{bf16,f16}x2.f32. */
template <typename KV> __device__ __forceinline__ uint32_t fl_pack(float x, float y) {
    uint32_t r;
    if constexpr (std::is_same<KV, __nv_bfloat16>::value)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));
    return r;
}

/* Issue the cp.async loads of keys kt0 .. kt0+N-1 (those > khi
 * zero-filled) by NT threads (this one: tid) into the stage at shared
 * address sdst (K [N][HD+FL_PAD], V after it), sdst already offset to this
 * thread's first row j0 = tid / (HD/8) and 16-byte chunk c = tid % (HD/8):
 * rows j0, j0 + RPI, ... The block-table reads are issued together first
 * (one latency), then the copies, without branches: a bad block id reads
 * block 0 and raises the flag once. kin / vin: byte offset of chunk c of
 * head g within a slot. */
template <int HD, int N, int NT>
__device__ __forceinline__ void fl_load_rows(const fl_args &a, const int32_t *btrow, int kin, int vin, int kt0,
                                             int khi, uint32_t sdst, int tid) {
    constexpr int CPR = HD / 8; /* 16-byte chunks per row */
    constexpr int ITS = N * CPR / NT, RPI = NT / CPR;
    constexpr uint32_t ROW = (HD + FL_PAD) * 2, VOFF = N * ROW;
    const int key0 = kt0 + tid / CPR;
    int32_t blk[ITS];
#pragma unroll
    for (int it = 0; it < ITS; it++) {
        const int key = key0 + it * RPI;
        blk[it] = key <= khi ? btrow[key >> a.bshift] : 0;
    }
    bool bad = false;
#pragma unroll
    for (int it = 0; it < ITS; it++) {
        const int key = key0 + it * RPI;
        const bool valid = key <= khi, ok = (uint32_t)blk[it] < (uint32_t)a.num_blocks;
        bad |= valid && !ok;
        const uint32_t b = ok ? (uint32_t)blk[it] : 0u, slot = (uint32_t)(key & (a.B - 1));
        const char *kp = a.k + ((uint64_t)b * (uint32_t)a.k_s0 + (slot * (uint32_t)a.k_sb + (uint32_t)kin));
        const char *vp = a.v + ((uint64_t)b * (uint32_t)a.v_s0 + (slot * (uint32_t)a.v_sb + (uint32_t)vin));
        fl_cp16(sdst + it * RPI * ROW, kp, valid ? 16 : 0);
        fl_cp16(sdst + VOFF + it * RPI * ROW, vp, valid ? 16 : 0);
    }
    if (bad) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
}

/* Two q elements (A: f32 or bf16) at p as one register of the cache type. */
template <typename A, typename KV> __device__ __forceinline__ uint32_t fl_ld_q2(const char *p) {
    if constexpr (std::is_same<A, float>::value) {
        const float2 v = *(const float2 *)p;
        return fl_pack<KV>(v.x, v.y);
    } else {
        const uint32_t u = *(const uint32_t *)p;
        if constexpr (std::is_same<KV, __nv_bfloat16>::value) return u; /* already the operand */
        const float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)&u);
        return fl_pack<KV>(f.x, f.y);
    }
}

/* Two output elements (A: f32 or bf16) to p. */
template <typename A> __device__ __forceinline__ void fl_st_o2(char *p, float x, float y) {
    if constexpr (std::is_same<A, float>::value) *(float2 *)p = make_float2(x, y);
    else *(__nv_bfloat162 *)p = __floats2bfloat162_rn(x, y);
}

/* Packed row r of the tile starting at token t0: token and query head. */
__device__ __forceinline__ void fl_row(const fl_args &a, int g, int64_t t0, int64_t t1, int r, int64_t *tok,
                                       int *hq, bool *live) {
    *tok = t0 + r / a.G;
    *hq = g * a.G + r % a.G;
    *live = r < a.QT * a.G && *tok < t1;
}

/* The launch arguments of a PAGED_ATTENTION call (cuda_flash.cu; the
 * shapes passed cuda_flash_eligible): all but QT, n_tiles, y0. */
void cuda_fl_args(cuda_ctx *c, fl_args *a, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc,
                  const rt_tensor *vc, const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale,
                  float softcap, int32_t window);

/* The wgmma kernel (cuda_flash_wg.cu): whether it takes this call (hd 64 /
 * 128, cache blocks of 8+ slots, causal (any window) without soft-cap,
 * positive scale), and its launch
 * over a (QT = 128 / G tokens per tile, n_tiles, flags ...) set. */
bool cuda_flash_wg_eligible(int64_t hd, int64_t block_size, float scale, float softcap, int32_t window);
int cuda_flash_wg_launch(cuda_ctx *c, fl_args &a, int64_t hd, int64_t kvh, rt_dtype kv, rt_dtype at);
/* Calls that ran its warp-specialised variant (default; VLLM_CUDA_FLASH_WG=3 too)
 * so far: test_cuda_flash checks that the variant really ran (it gives a
 * call back to the wgmma kernel when TMA cannot describe the cache). */
extern "C" uint64_t cuda_flash_fa3_launches(void);

#endif
