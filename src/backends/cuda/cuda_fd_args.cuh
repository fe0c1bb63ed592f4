/* cuda_fd_args — the arguments of the paged-attention kernels of
 * cuda_paged_attn.cu (split-KV decode, k_fd) and cuda_paged_pf.cu (prefill
 * tiles, k_pf): one struct by value, byte strides, device metadata (see
 * ops.h PAGED_ATTENTION), and the launcher of the prefill kernel. */
#ifndef CUDA_FD_ARGS_CUH
#define CUDA_FD_ARGS_CUH

#include "backends/cuda/cuda_internal.h"

typedef struct {
    const char *q, *k, *v;
    char *out;
    int64_t q_s0, q_s1, o_s0, o_s1;       /* bytes */
    int64_t k_s0, k_sb, k_s1, v_s0, v_sb, v_s1; /* bytes: block, slot, kv head */
    const int32_t *bt, *qsl, *seq_lens;
    int S, max_blocks, B, num_blocks, G, h, window, n_splits, split_len;
    float scale, softcap;
    float *part;    /* [T, h, n_splits, hd] unnormalised acc */
    float *part_ml; /* [T, h, n_splits, 2] (m, l) */
    int *counters;  /* [T, kvh] finished splits (zero between launches) */
    int *flags;
    /* k_fd v2: bytes per block and per slot, the same for K and V and
     * below 2^31 (fd_v2_ok); 32-bit fields so that the offsets are 32 x 32
     * -> 64-bit multiplies. Last, so that the fields above keep their
     * offsets in the original kernel. */
    int kv_s0, kv_sb;
    int mpf; /* v2: split merge requests its first partials with the (m, l) pairs (VLLM_CUDA_FD_MPF) */
    /* Split rule. > 0: per row from its real context (fd_meta), splits of
     * at least chunk_min keys (one run per warp, FD_WARPS * U); 0: the
     * grid's split_len for every row (VLLM_CUDA_FD_SPLIT=width). */
    int chunk_min;
} fd_args;

/* cuda_paged_pf.cu: the prefill kernel over T rows (hd 64 or 128, kvt the
 * cache type: f32, f16 or bf16; the caller entered the device). Returns
 * VC_OK or a launch error (vc_err set). */
int cuda_pf_run(cuda_ctx *c, const fd_args &a, int64_t T, int64_t hd, int64_t kvh, rt_dtype kvt);

#endif
