/* cuda_sample — SAMPLE (runtime/ops.h): one token per row of logits on the
 * device, so a step copies [r] ids instead of [r, V] floats to the host.
 *
 * Two kernels (the shared device pieces in cuda_sample.cuh): by default
 * k_sample_cl (cuda_sample_cl.cu), a cluster of CTAs per row at small
 * batches, whose tail over the row splits the row between them; with
 * VLLM_CUDA_TOPP=0 (read at each call; A/B) k_sample, described here.
 *
 * k_sample: one block of 1024 threads per row, the row processed in place in global
 * memory (the logits are scratch). In the host sampler's order (the CPU op,
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

/* The top_p candidate cut (rows that reach the tail without candidates,
 * top_p < 1). One pass over the row computes every ev (ev_of) and its mass
 * fx(ev), their total S (sample_tail's S, exactly: integer sums) and, per
 * ebin, the count and mass of the tokens with mass. With N = topp_need(S),
 * b = the highest bin such that bins >= b hold mass >= N. Every token with
 * mass in bins >= b has a larger ev than any other with mass (tokens
 * without mass never count: not in a select, a tie or the draw), so for
 * the tail's radix select over ev (the tau with weight(> tau) < N <=
 * weight(>= tau)) tau lies in a bin >= b, every weight at or above it a
 * candidate's: tau, the ties at tau, the kept mass and the draw in id order
 * come out the same over the candidates (given S) as over the row. A bin
 * b < EBIN_FLOOR cannot be chosen: bins are >= it. Returns C, the number
 * of tokens with mass in bins >= b (CAND_CAP + 1 when more, or when no b
 * exists), *bsel = b, *Srow = S. Overwrites x with ev (sample_tail's
 * first pass, done here). */
__device__ static int topp_bins(float *x, int V, float mx, float cut, float top_p, unsigned *bsel, u64 *Srow,
                                samp_smem &s) {
    const int lane = threadIdx.x & 31;
    unsigned *cnt = reinterpret_cast<unsigned *>(s.cid); /* free until the gather */
    for (int b = threadIdx.x; b < RB; b += ST) s.mass[b] = 0, cnt[b] = 0;
    __syncthreads();
    u64 S = 0;
    for (int base = 0; base < V; base += ST) {
        int i = base + (int)threadIdx.x;
        unsigned bin = 0xFFFFFFFFu;
        u64 w = 0;
        if (i < V) {
            float e = ev_of(x[i], cut, mx);
            x[i] = e; /* from here on the row holds ev */
            w = fx(e);
            if (w) bin = ebin(e);
        }
        S += w;
        /* warp-aggregated as in radix_select (w <= 2^40: two 20-bit halves) */
        if (!__any_sync(0xffffffffu, bin != 0xFFFFFFFFu)) continue; /* warp-uniform */
        unsigned grp = __match_any_sync(0xffffffffu, bin);
        unsigned lo = __reduce_add_sync(grp, (unsigned)(w & 0xFFFFF)), hi = __reduce_add_sync(grp, (unsigned)(w >> 20));
        if (bin != 0xFFFFFFFFu && lane == __ffs(grp) - 1) {
            add_u64(&s.mass[bin], ((u64)hi << 20) + lo);
            atomicAdd(&cnt[bin], (unsigned)__popc(grp));
        }
    }
    S = block_sum(S, s); /* synchronises: the bins are complete */
    const u64 N = topp_need(top_p, S);
    /* bins in descending order (largest ev first), two per thread */
    const int b0 = RB - 1 - 2 * (int)threadIdx.x, b1 = b0 - 1;
    const u64 m0 = s.mass[b0], m1 = s.mass[b1], c0 = cnt[b0], c1 = cnt[b1];
    if (threadIdx.x == 0) s.sel = -1;
    u64 tot, ex = block_excl_scan(m0 + m1, &tot, s), cx = block_excl_scan(c0 + c1, &tot, s);
    if (ex < N && N <= ex + m0) s.sel = b0, s.u1 = cx + c0;
    else if (ex + m0 < N && N <= ex + m0 + m1) s.sel = b1, s.u1 = cx + c0 + c1;
    __syncthreads();
    const int sel = s.sel;
    const u64 C = s.u1;
    __syncthreads();
    *Srow = S;
    if (sel < 0) return CAND_CAP + 1; /* block-uniform: N > S (no top_p cut at all) */
    *bsel = (unsigned)sel;
    return C > (u64)CAND_CAP ? CAND_CAP + 1 : (int)C;
}



__global__ void __launch_bounds__(ST) k_sample(float *logits, int V, const float *fp, const int32_t *ip,
                                               const int32_t *hist, int64_t n_hist, int32_t *cnt, int32_t *out) {
    CUDA_PDL_ENTER();
    __shared__ samp_smem s;
    const int64_t row = blockIdx.x;
    float *x = logits + row * (int64_t)V;
    const float *f = fp + row * RT_SAMPLE_NF;
    const int32_t *q = ip + row * RT_SAMPLE_NI;
    const float T = f[RT_SAMPLE_TEMP];
    const bool greedy = !(T > 0.0f);
    const int np = q[RT_SAMPLE_N_PROMPT], no = q[RT_SAMPLE_N_OUTPUT];
    const int64_t off = q[RT_SAMPLE_HIST_OFF];
    if (hist && cnt && np >= 0 && no >= 0 && np + no > 0 && off >= 0 && off + np + no <= n_hist) {
        for (int i = threadIdx.x; i < V; i += ST) {
            float v = x[i];
            if (v != v) x[i] = -INFINITY;
        }
        __syncthreads();
        apply_penalties(x, V, f, hist + off, np, no, cnt + row * (int64_t)V);
    }
    __syncthreads();
    /* NaN -> -inf (when no penalties came first), temperature and the max
     * (lowest index among maxima); -inf / T stays -inf */
    const bool div = !greedy && T != 1.0f;
    float mx = -INFINITY;
    int amx = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += ST) {
        float v = x[i];
        const bool nan = v != v;
        if (nan) v = -INFINITY;
        if (div) v = __fdiv_rn(v, T);
        if (div || nan) x[i] = v;
        if (v > mx || (v == mx && i < amx)) mx = v, amx = i;
    }
    block_max_idx(mx, amx, s);
    if (greedy || mx == -INFINITY) { /* nothing to draw from: token 0 (amx is 0 then) */
        if (threadIdx.x == 0) out[row] = greedy ? amx : 0;
        return;
    }
    uint64_t ubits = (uint64_t)(uint32_t)q[RT_SAMPLE_U_LO] | (uint64_t)(uint32_t)q[RT_SAMPLE_U_HI] << 32;
    const double u = __longlong_as_double((long long)ubits);
    if (mx == INFINITY) { /* +inf logits share all the mass equally */
        u64 n = 0;
        for (int i = threadIdx.x; i < V; i += ST) n += x[i] == INFINITY;
        n = block_sum(n, s);
        u64 j = (u64)(u * (double)n);
        if (j >= n) j = n - 1;
        int tok = block_find(V, [&](int i) -> u64 { return x[i] == INFINITY; }, j, s);
        if (threadIdx.x == 0) out[row] = tok >= 0 ? tok : amx;
        return;
    }
    float cut = -INFINITY;
    if (f[RT_SAMPLE_MIN_P] > 0.0f) cut = __fadd_rn(mx, f[RT_SAMPLE_LOG_MIN_P]);
    const int k = q[RT_SAMPLE_TOP_K];
    float *xv = x; /* what sample_tail works on: the row, or the candidates */
    int n = V;
    bool cands = false;
    if (k > 0) {
        const int C = topk_stage(x, V, mx, k, &cut, s);
        if (C > 0) xv = s.cx, n = C, cands = true;
    }
    const float top_p = f[RT_SAMPLE_TOP_P];
    u64 Srow = 0;
    if (!cands && top_p < 1.0f) { /* top_p without top_k candidates: try the top_p cut */
        unsigned b;
        u64 S;
        int C = topp_bins(x, V, mx, cut, top_p, &b, &S, s); /* x holds ev now */
        if (C <= CAND_CAP) {
            gather_cands(x, V, [&](int, float e) { return fx(e) != 0 && ebin(e) >= b; }, s);
            xv = s.cx;
            n = C;
            cands = true;
        } /* else the nucleus is wider than the cap (flat rows): the whole row */
        Srow = S; /* either way xv holds ev and S is known */
    }
    int j = sample_tail(xv, n, cut, mx, top_p, u, Srow, s);
    if (threadIdx.x == 0) out[row] = j < 0 ? amx : cands ? s.cid[j] : j;
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
