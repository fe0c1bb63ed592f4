/* cuda_flash — tensor-core prefill attention for PAGED_ATTENTION over
 * bf16/f16 caches: the Hopper wgmma kernel (cuda_flash_wg.cu) for causal
 * hd 64/128 without soft-cap, the mma.sync kernel (cuda_flash.cu)
 * for the rest. cuda_paged_attn.cu sends prompt-heavy
 * batches here when cuda_flash_eligible() holds; f32 caches, head_dim other
 * than 64/128, block sizes that are not powers of two and decode-heavy
 * batches keep the SIMT kernels there.
 * Arguments as cuda_fd_run (see ops.h PAGED_ATTENTION); q and dst f32 or
 * both bf16 (bf16 activations). CUDA C++ only.
 */
#ifndef CUDA_FLASH_H
#define CUDA_FLASH_H

#include "backends/cuda/cuda_internal.h"

bool cuda_flash_eligible(const rt_tensor *q, const rt_tensor *dst, const rt_tensor *kc, const rt_tensor *vc);
int cuda_flash_run(cuda_ctx *c, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                   const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale, float softcap,
                   int32_t window);

/* cuda_flash_dec.cu: the tensor-core decode kernel (one warp per query row
 * and kv head) for decode-heavy calls with enough rows x kv heads
 * (VLLM_CUDA_FLASH_DEC: 0 off, 1 every eligible call) and G <= 16; the
 * caller also checks cuda_flash_eligible. */
bool cuda_flash_dec_wanted(const cuda_ctx *c, const rt_tensor *q, const rt_tensor *kc);
int cuda_flash_dec_run(cuda_ctx *c, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                       const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale, float softcap,
                       int32_t window);
/* Launches of k_flash_dec so far (tests check that it really ran). */
extern "C" uint64_t cuda_flash_dec_launches(void);

#endif
