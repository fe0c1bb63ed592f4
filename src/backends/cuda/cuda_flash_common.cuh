/* cuda_flash_common — what the two flash prefill kernels share: the launch
 * arguments (fl_args, filled by cuda_flash_run in cuda_flash.cu), cp.async,
 * exp2 / packing PTX helpers, q / out row access and the packed-row map.
 * Included by cuda_flash.cu (mma.sync kernel) and cuda_flash_wg.cu (wgmma
 * kernel); CUDA C++ only.
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

__device__ __forceinline__ uint32_t fl_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

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

/* The wgmma kernel (cuda_flash_wg.cu): whether it takes this call (hd 64 /
 * 128, cache blocks of 8+ slots, causal without window or soft-cap,
 * positive scale), and its launch
 * over a (QT = 128 / G tokens per tile, n_tiles, flags ...) set. */
bool cuda_flash_wg_eligible(int64_t hd, int64_t block_size, float scale, float softcap, int32_t window);
int cuda_flash_wg_launch(cuda_ctx *c, fl_args &a, int64_t hd, int64_t kvh, rt_dtype kv, rt_dtype at);
/* Calls that ran its warp-specialised variant (default; VLLM_CUDA_FLASH_WG=3 too)
 * so far: test_cuda_flash checks that the variant really ran (it gives a
 * call back to the wgmma kernel when TMA cannot describe the cache). */
extern "C" uint64_t cuda_flash_fa3_launches(void);

#endif
