/* cuda_sample — SAMPLE (runtime/ops.h): one token per row of logits on the
 * device, so a step copies [r] ids instead of [r, V] floats to the host.
 *
 * Two kernels (the shared device pieces in cuda_sample.cuh): by default
 * k_sample_cl (cuda_sample_cl.cu), a cluster of CTAs per row at small
 * batches, whose tail over the row splits the row between them; with
 * VLLM_CUDA_TOPP=0 (read at each call; A/B) k_sample, described here.
 *
 * k_sample: one block of 1024 threads per row, the row processed in place in global
 * memory (the logits are scratch); its code is sample_row_block in
 * cuda_sample.cuh, which k_sample_cl's one-CTA build also runs for rows
 * without top_p. In the host sampler's order (the CPU op,
 * sample/batch.c, is the oracle):
 *   NaN -> -inf; penalties (counts of the row's history in the zeroed
 *   scratch src[4], one claimer per distinct token applies them, then the
 *   counts are zeroed again); greedy: argmax, lowest id on ties; else
 *   x / T and its max; min_p cut = max + logf(min_p) (the host's logf,
 *   given); top_k: the k-th largest x among those >= the cut. For k <=
 *   CAND_CAP, one counting pass bins the valid x by d = max - x (rounded
 *   d is monotone in x; 8 bins per binade of d, so bins are fine near the
 *   max) and finds the first C >= k tokens from the top: every token a
 *   later stage can keep. When C <= CAND_CAP they are copied in id order
 *   into shared memory and all that follows (the k-th by radix select,
 *   ev, top_p, the draw) runs on them alone: tokens outside carry no mass
 *   on either path, and id order keeps the tie and draw rules unchanged.
 *   Otherwise (larger k, or ties or a flat row past the cap) the row
 *   stays in global memory and the k-th comes from a radix select over
 *   order-preserving keys (3 levels of 11/11/10 bits, a shared
 *   histogram per level, no sort); ev = exp(x - max) with the host's
 *   polynomial in round-to-nearest float ops (no FMA contraction), so ev is
 *   bit-identical to the CPU's; top_p: the same radix select over the bits
 *   of ev weighted by mass finds the value tau at which the descending
 *   cumulative mass reaches top_p * S, ties at tau kept lowest id first;
 *   the draw: the first token in id order whose inclusive cumulative mass
 *   exceeds u * S_kept.
 *   top_p without top_k candidates (no top_k, or its whole-row fallback)
 *   first tries a candidate cut of its own: one pass computes every ev, the
 *   total mass S and a count and mass per bin of ev (8 bins per binade);
 *   the highest bins holding >= the top_p target of S hold the nucleus
 *   (their ev are larger than any outside, so tau and its ties lie among
 *   them). When they are <= CAND_CAP tokens they are copied to shared
 *   memory in id order and the tail runs on them with the row's S: the
 *   same tau, kept mass and token as over the row. Otherwise (flat rows,
 *   the nucleus too wide) the tail runs on the row as before, minus its
 *   first pass (ev and S come from the cut's pass).
 *
 * Masses are fixed point (round(ev * 2^40) in 64-bit integers), so every
 * sum is exact and independent of the order threads add in: the kernel is
 * deterministic, and tokens differ from the CPU's (float/double sums) only
 * where u or the top_p target falls within rounding of a boundary. Tokens
 * with ev < 2^-41 (more than 28 nats under the max) carry no mass here.
 */
#include "cuda_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_sample.cuh"

/* k_sample: the row's code is sample_row_block (cuda_sample.cuh; k_sample_cl's
 * one-CTA build runs it too, for its rows without top_p). */
__global__ void __launch_bounds__(ST) k_sample(float *logits, int V, const float *fp, const int32_t *ip,
                                               const int32_t *hist, int64_t n_hist, int32_t *cnt, int32_t *out) {
    CUDA_PDL_ENTER();
    __shared__ samp_smem s;
    sample_row_block(logits, V, fp, ip, hist, n_hist, cnt, out, blockIdx.x, s);
}

extern "C" int cuda_op_sample(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *lg = a->src[0], *fp = a->src[1], *ip = a->src[2], *h = a->src[3], *cn = a->src[4];
    if (cuda_check_dev(a->dst, "sample") || cuda_check_dev(lg, "sample") || cuda_check_dev(fp, "sample") ||
        cuda_check_dev(ip, "sample") || (h && cuda_check_dev(h, "sample")) || (cn && cuda_check_dev(cn, "sample")))
        return VC_ERR_INVALID;
    int64_t R = lg->shape[0], V = lg->shape[1];
    if (R == 0) return VC_OK;
    if (R > 2147483647) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda sample: too many rows");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    /* VLLM_CUDA_TOPP=0: the one-block-per-row kernel (A/B), read per call */
    const char *env = getenv("VLLM_CUDA_TOPP");
    if (!(env && !strcmp(env, "0")))
        return cuda_sample_cl_launch(c, R, (int)V, (float *)lg->data, (const float *)fp->data,
                                     (const int32_t *)ip->data, h ? (const int32_t *)h->data : (const int32_t *)NULL,
                                     h ? rt_tensor_nelem(h) : (int64_t)0, cn ? (int32_t *)cn->data : (int32_t *)NULL,
                                     (int32_t *)a->dst->data);
    cuda_launch(k_sample, dim3((unsigned)R), dim3(ST), 0, c->stream, (float *)lg->data, (int)V,
                (const float *)fp->data, (const int32_t *)ip->data, h ? (const int32_t *)h->data : (const int32_t *)NULL,
                h ? rt_tensor_nelem(h) : (int64_t)0, cn ? (int32_t *)cn->data : (int32_t *)NULL,
                (int32_t *)a->dst->data);
    CU_LAUNCHED();
    return VC_OK;
}
