/* cuda_sample_cl — SAMPLE with one thread-block cluster per row (Hopper),
 * the default since session 6 (VLLM_CUDA_TOPP=1; 0 launches cuda_sample.cu's
 * k_sample, one block per row, for A/B).
 *
 * Why: k_sample runs a row on one SM. At small batches that is one or a
 * few SMs of 132 doing every pass over a 128k-152k row, and its top_p
 * passes (a histogram per radix level, warp-aggregated shared atomics on
 * few hot bins) took 0.8-1.5 ms a row on flat rows. Here a cluster of CL
 * CTAs (1..16; CL * rows <= the SM count: 8 at B <= 16, 2 at B = 64, 1
 * from B = 67 on 132 SMs) splits the row into CL contiguous slices, rank
 * order = id order, and the CTAs combine their partial results through
 * distributed shared memory (each reads the others' s fields after a
 * cluster barrier; a second barrier before anyone overwrites or exits).
 * At one CTA a row (the !C build) the kernel gains only on top_p rows
 * (its tail below); a row without top_p (greedy, or sampled with top_p
 * = 1, whatever its min_p / top_k / penalties) runs k_sample's row code
 * instead, sample_row_block, decided per row on the device: one CTA on
 * the kernel's own code measured slower there (session 6, B = 256: T 1
 * 311 -> 435 us, greedy 84.5 -> 91.4; same registers, 62-63, and shared
 * memory, 42 KB, so the same occupancy: one CTA an SM, as k_sample).
 * VLLM_CUDA_TOPP_BLOCKROWS=0 keeps every row on the own code (A/B).
 *
 * Per row, in the host sampler's order (same results as k_sample: the CPU
 * op's token):
 *   - penalties (rank 0; the slices' NaN -> -inf first);
 *   - every slice: NaN -> -inf, x / T, (max, lowest index): combined;
 *     greedy / all -inf / +inf rows end here (+inf: rank 0 alone);
 *   - min_p cut; top_k (rank 0: topk_stage; its candidates, when they
 *     fit, take the single-block tail on rank 0 and the row ends);
 *   - the tail over the row, all CTAs: one pass writes ev = exp(x - max)
 *     (the host's polynomial) over each slice, sums the exact fixed-point
 *     masses S and, for top_p < 1, a histogram of mass per ebin (8 bins a
 *     binade of ev, one bin for ev < 2^-24). The merged histogram gives
 *     the bin b where the descending cumulative mass reaches the target
 *     N = ceil(top_p * S); tau (the ev with weight(> tau) < N <=
 *     weight(>= tau), k_sample's radix select) lies in b, so the
 *     refinement is a radix select inside b only (2 levels of 10 bits over
 *     the low float bits; 3 levels in the floor bin), every level a pass
 *     over the slices counting only tokens in b under the prefix; then
 *     ties at tau kept lowest id first and the draw (the first token in id
 *     order whose inclusive kept mass exceeds u * S_kept), both a find
 *     over (rank, warp) segments in id order (cl_find).
 * Slice passes keep four loads in flight per thread.
 */
#include "cuda_sample.cuh"

#include <cooperative_groups.h>
#include <stdlib.h>
#include <string.h>

namespace cg = cooperative_groups;

#define CL_MAX 16   /* the largest cluster (non-portable above 8) */
#define TOPP_NB 256 /* level-0 bins of the tail's top_p select: ebin - EBIN_FLOOR (<= 199 for ev < 2) */
#define NO_BIN 0xFFFFFFFFu

static_assert(CL_MAX * NWARP <= ST, "cl_find scans (rank, warp) sums one per thread");
static_assert(TOPP_NB <= ST && TOPP_NB <= RB, "level-0 bins: one per thread, in s.mass");

/* The kernel comes in two builds: C (launched with clusters of 2 or more
 * CTAs) and !C (one CTA a row, launched plainly: the exchanges reduce to
 * the block's own shared memory). */

/* Cluster barrier: every thread of every CTA of the cluster; release /
 * acquire at cluster scope (shared and global memory). */
template <bool C> __device__ static inline void cl_sync() {
    if constexpr (C) cg::this_cluster().sync();
    else __syncthreads();
}

/* p (a field of this CTA's s) in CTA `rank` of the cluster. */
template <bool C, class T> __device__ static inline T *peer(T *p, unsigned rank) {
    if constexpr (C) return cg::this_cluster().map_shared_rank(p, rank);
    else return (void)rank, p;
}

/* h[bin] += w for the lanes of a warp with bin != NO_BIN; every lane
 * calls it. When the lanes with a bin share one (most of a peaked row: the
 * floor bin), one warp sum and one atomic; otherwise each lane adds its
 * own (spread bins: few address conflicts). hagg (VLLM_CUDA_TOPP_HIST=
 * match, A/B): k_sample's aggregation instead, lanes grouped by
 * __match_any_sync and summed per group, which measured slow on flat rows
 * (many groups a warp). w <= 2^40: two 20-bit halves, each summed over <=
 * 32 lanes in 32 bits. */
__device__ static inline void hist_add(u64 *h, unsigned bin, u64 w, bool hagg) {
    const unsigned mem = __ballot_sync(0xffffffffu, bin != NO_BIN), lane = threadIdx.x & 31;
    if (!mem) return; /* warp-uniform */
    if (hagg) {
        const unsigned grp = __match_any_sync(0xffffffffu, bin);
        const unsigned lo = __reduce_add_sync(grp, (unsigned)(w & 0xFFFFF)), hi = __reduce_add_sync(grp, (unsigned)(w >> 20));
        if (bin != NO_BIN && (int)lane == __ffs(grp) - 1) add_u64(&h[bin], ((u64)hi << 20) + lo);
        return;
    }
    const int first = __ffs(mem) - 1;
    const unsigned b0 = __shfl_sync(0xffffffffu, bin, first);
    if (__all_sync(0xffffffffu, bin == NO_BIN || bin == b0)) { /* warp-uniform */
        const u64 v = bin != NO_BIN ? w : 0;
        const unsigned lo = __reduce_add_sync(0xffffffffu, (unsigned)(v & 0xFFFFF)),
                       hi = __reduce_add_sync(0xffffffffu, (unsigned)(v >> 20));
        if ((int)lane == first) add_u64(&h[b0], ((u64)hi << 20) + lo);
    } else if (bin != NO_BIN) {
        add_u64(&h[bin], w);
    }
}

/* f(i, x[i]) over the slice [lo, hi) thread-strided (thread t: lo + t,
 * lo + t + ST, ... in the same order every pass), four loads in flight;
 * every lane runs every step (f may use warp intrinsics): past hi with
 * i = -1 and v = 0. */
template <class F> __device__ static inline void slice_for(const float *x, int lo, int hi, F f) {
    for (int b = lo; b < hi; b += 4 * ST) { /* block-uniform */
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = b + u * ST + (int)threadIdx.x;
            v[u] = i < hi ? x[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = b + u * ST + (int)threadIdx.x;
            f(i < hi ? i : -1, v[u]);
        }
    }
}

/* (max, lowest index among maxima) over the cluster: each CTA's
 * block_max_idx, combined in rank order. */
template <bool C> __device__ static void cl_max_idx(float &v, int &idx, unsigned CL, samp_smem &s) {
    block_max_idx(v, idx, s);
    if (threadIdx.x == 0) s.cf = v, s.ci = idx;
    cl_sync<C>();
    if (threadIdx.x == 0) {
        v = -INFINITY;
        idx = 0x7fffffff;
        for (unsigned r = 0; r < CL; r++) {
            const float v2 = *peer<C>(&s.cf, r);
            const int i2 = *peer<C>(&s.ci, r);
            if (v2 > v || (v2 == v && i2 < idx)) v = v2, idx = i2;
        }
        s.f0 = v, s.i0 = idx;
    }
    cl_sync<C>(); /* the peers read; s.f0 / s.i0 set */
    v = s.f0;
    idx = s.i0;
}

/* block_find over the cluster: the first i of the row in id order whose
 * inclusive prefix of wf(i, x[i]) exceeds tgt, or -1 (in every CTA). Warp
 * w of rank r owns a contiguous segment of r's slice; the (rank, warp)
 * sums are scanned in that order, then the warp holding tgt scans its
 * segment. */
template <bool C, class F>
__device__ static int cl_find(const float *x, int lo, int hi, F wf, u64 tgt, unsigned rank, unsigned CL, samp_smem &s) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int seg = (hi - lo + NWARP - 1) / NWARP, a = lo + w * seg, z = a + seg < hi ? a + seg : hi;
    u64 sum = 0;
    for (int b = a; b < z; b += 128) { /* warp-uniform */
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = b + u * 32 + lane;
            v[u] = i < z ? x[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = b + u * 32 + lane;
            if (i < z) sum += wf(i, v[u]);
        }
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) s.cws[w] = sum;
    cl_sync<C>();
    u64 v = 0, tot;
    if (threadIdx.x < CL * NWARP) v = peer<C>(s.cws, threadIdx.x / NWARP)[threadIdx.x % NWARP];
    const u64 ex = block_excl_scan(v, &tot, s);
    if (threadIdx.x / NWARP == rank) s.woff[threadIdx.x % NWARP] = ex;
    if (threadIdx.x == 0) s.cres = -1;
    __syncthreads();
    u64 acc = s.woff[w];
    if (acc <= tgt && tgt < acc + sum) { /* warp-uniform */
        for (int b = a; b < z; b += 32) {
            const int i = b + lane;
            const u64 wv = i < z ? wf(i, x[i]) : 0, inc = warp_incl_scan(wv);
            const unsigned m = __ballot_sync(0xffffffffu, acc + inc > tgt);
            if (m) {
                if (lane == __ffs(m) - 1) s.cres = i;
                break;
            }
            acc += __shfl_sync(0xffffffffu, inc, 31);
        }
    }
    cl_sync<C>(); /* every CTA's result in place; the peers' s.cws read */
    if (threadIdx.x == 0) {
        int res = -1;
        for (unsigned r = 0; r < CL; r++) {
            const int t = *peer<C>(&s.cres, r);
            if (t >= 0) res = t;
        }
        s.cbest = res;
    }
    cl_sync<C>(); /* the peers' s.cres read before it is written again; s.cbest set */
    return s.cbest;
}

/* tau inside level-0 bin sel of the tail's top_p select (see the file
 * comment): the ev key with acc + weight(keys in the bin > tau) < N <=
 * acc + weight(>= tau), acc the mass of the bins above. Bins > 0 share the
 * top 12 bits of ev (= sel + EBIN_FLOOR): 2 levels of 10 bits; bin 0 holds
 * every ev with bits >> 20 <= EBIN_FLOOR: 3 levels (11, 11, 10 bits) over
 * those. *above: the mass of keys > tau; *at: of keys == tau. false when
 * no bin is selected (cluster-uniform; cannot happen given sel). */
template <bool C>
__device__ static bool cl_refine(const float *x, int lo, int hi, int sel, u64 N, u64 acc, unsigned *key, u64 *above,
                                 u64 *at, unsigned CL, bool hagg, samp_smem &s) {
    const bool fl = sel == 0;
    unsigned prefix = fl ? 0u : ((unsigned)sel + EBIN_FLOOR) << 20;
    int hs = fl ? 32 : 20; /* the bits >= hs are fixed */
    u64 atv = 0;
    for (int l = 0; l < (fl ? 3 : 2); l++) {
        const int sh = fl ? (l == 0 ? 21 : l == 1 ? 10 : 0) : (l == 0 ? 10 : 0), nb = 1 << (hs - sh);
        for (int b = threadIdx.x; b < nb; b += ST) s.mass[b] = 0;
        __syncthreads();
        const unsigned pf = prefix;
        const int hl = hs;
        slice_for(x, lo, hi, [&](int i, float e) {
            const unsigned k = __float_as_uint(e);
            u64 w = 0;
            unsigned bin = NO_BIN;
            if (i >= 0 && (hl >= 32 || (k >> hl) == (pf >> hl)) && (!fl || (k >> 20) <= EBIN_FLOOR)) {
                w = fx(e); /* only for tokens under the prefix */
                if (w) bin = (k >> sh) & (unsigned)(nb - 1);
            }
            hist_add(s.mass, bin, w, hagg);
        });
        __syncthreads();
        cl_sync<C>(); /* every CTA's bins complete */
        /* merged bins in descending order, two per thread */
        const int b0 = nb - 1 - 2 * (int)threadIdx.x, b1 = b0 - 1;
        u64 m0 = 0, m1 = 0, tot;
        for (unsigned r = 0; r < CL; r++) {
            const u64 *pm = peer<C>(&s.mass[0], r);
            if (b0 >= 0) m0 += pm[b0];
            if (b1 >= 0) m1 += pm[b1];
        }
        if (threadIdx.x == 0) s.sel = -1;
        const u64 ex = block_excl_scan(m0 + m1, &tot, s) + acc;
        if (b0 >= 0 && ex < N && N <= ex + m0) s.sel = b0, s.u1 = ex, s.u2 = m0;
        else if (b1 >= 0 && ex + m0 < N && N <= ex + m0 + m1) s.sel = b1, s.u1 = ex + m0, s.u2 = m1;
        cl_sync<C>(); /* the peers' bins read (reset next level); s.sel set */
        const int sl = s.sel;
        acc = s.u1;
        atv = s.u2;
        __syncthreads(); /* s.sel / u1 / u2 read before they are written again */
        if (sl < 0) return false; /* cluster-uniform: the merged bins are the same everywhere */
        prefix |= (unsigned)sl << sh;
        hs = sh;
    }
    *key = prefix;
    *above = acc;
    *at = atv;
    return true;
}

template <bool C>
__global__ void __launch_bounds__(ST) k_sample_cl(float *logits, int V, const float *fp, const int32_t *ip,
                                                  const int32_t *hist, int64_t n_hist, int32_t *cnt, int32_t *out,
                                                  bool hagg, bool brows) {
    CUDA_PDL_ENTER();
    __shared__ samp_smem s;
    if constexpr (!C) /* one CTA a row: rows without top_p run k_sample's code (brows: see the launcher) */
        if (brows && sample_row_block_wants(fp, blockIdx.x)) { /* block-uniform */
            sample_row_block(logits, V, fp, ip, hist, n_hist, cnt, out, blockIdx.x, s);
            return;
        }
    unsigned CL = 1, rank = 0;
    if constexpr (C) CL = cg::this_cluster().num_blocks(), rank = cg::this_cluster().block_rank();
    const int64_t row = blockIdx.x / CL;
    float *x = logits + row * (int64_t)V;
    const float *f = fp + row * RT_SAMPLE_NF;
    const int32_t *q = ip + row * RT_SAMPLE_NI;
    const int len = (int)(((int64_t)V + CL - 1) / CL);
    const int lo = (int64_t)rank * len < V ? (int)rank * len : V, hi = V - lo > len ? lo + len : V;
    const float T = f[RT_SAMPLE_TEMP];
    const bool greedy = !(T > 0.0f);
    const int np = q[RT_SAMPLE_N_PROMPT], no = q[RT_SAMPLE_N_OUTPUT];
    const int64_t off = q[RT_SAMPLE_HIST_OFF];
    if (pen_ok(hist, cnt, np, no, off, n_hist)) {
        slice_for(x, lo, hi, [&](int i, float v) {
            if (i >= 0 && v != v) x[i] = -INFINITY;
        });
        cl_sync<C>(); /* the row NaN-free before rank 0 reads it */
        if (rank == 0) apply_penalties(x, V, f, hist + off, np, no, cnt + row * (int64_t)V);
        cl_sync<C>(); /* the penalised row visible to every CTA */
    }
    /* NaN -> -inf (when no penalties came first), temperature and the max
     * (lowest index among maxima); -inf / T stays -inf */
    const bool div = !greedy && T != 1.0f;
    float mx = -INFINITY;
    int amx = 0x7fffffff;
    slice_for(x, lo, hi, [&](int i, float v) {
        if (i < 0) return;
        const bool nan = v != v;
        if (nan) v = -INFINITY;
        if (div) v = __fdiv_rn(v, T);
        if (div || nan) x[i] = v;
        if (v > mx || (v == mx && i < amx)) mx = v, amx = i;
    });
    cl_max_idx<C>(mx, amx, CL, s); /* a cluster barrier: every slice written */
    if (greedy || mx == -INFINITY) { /* nothing to draw from: token 0 (amx is 0 then) */
        if (rank == 0 && threadIdx.x == 0) out[row] = greedy ? amx : 0;
        return;
    }
    const double u = row_u(q);
    if (mx == INFINITY) { /* +inf logits share all the mass equally: rank 0 alone (rare) */
        if (rank == 0) inf_draw(x, V, u, amx, out, row, s);
        return;
    }
    float cut = min_p_cut(f, mx);
    const int k = q[RT_SAMPLE_TOP_K];
    const float top_p = f[RT_SAMPLE_TOP_P];
    if (k > 0) { /* rank 0: top_k over the row; its candidates take the single-block tail */
        if (rank == 0) {
            const int nc = topk_stage(x, V, mx, k, &cut, s);
            if (nc > 0) {
                const int j = sample_tail(s.cx, nc, cut, mx, top_p, u, 0, s);
                if (threadIdx.x == 0) out[row] = j < 0 ? amx : s.cid[j];
            }
            if (threadIdx.x == 0) s.cdec = nc, s.ccut = cut;
        }
        cl_sync<C>();
        const int nc = *peer<C>(&s.cdec, 0);
        cut = *peer<C>(&s.ccut, 0);
        cl_sync<C>();
        if (nc > 0) return;
    }
    /* the tail over the row, every CTA on its slice: ev, S, level-0 bins */
    const bool want_p = top_p < 1.0f;
    if (want_p)
        for (int b = threadIdx.x; b < TOPP_NB; b += ST) s.mass[b] = 0;
    __syncthreads();
    u64 S = 0;
    slice_for(x, lo, hi, [&](int i, float v) {
        float e = 0.0f;
        if (i >= 0) {
            e = ev_of(v, cut, mx);
            x[i] = e; /* from here on the row holds ev */
        }
        const u64 w = fx(e);
        S += w;
        if (want_p) { /* block-uniform */
            unsigned b = ebin(e) - EBIN_FLOOR;
            hist_add(s.mass, w ? (b < TOPP_NB ? b : TOPP_NB - 1) : NO_BIN, w, hagg);
        }
    });
    S = block_sum(S, s); /* synchronises: the bins are complete */
    if (threadIdx.x == 0) s.cu = S;
    cl_sync<C>();
    if (threadIdx.x == 0) {
        u64 t = 0;
        for (unsigned r = 0; r < CL; r++) t += *peer<C>(&s.cu, r);
        s.cS = t;
    }
    u64 N = 0;
    if (want_p) { /* the level-0 bin where the descending cumulative mass reaches N, one bin per thread */
        const int bi = TOPP_NB - 1 - (int)threadIdx.x;
        u64 m = 0, tot;
        if (bi >= 0)
            for (unsigned r = 0; r < CL; r++) m += peer<C>(&s.mass[0], r)[bi];
        if (threadIdx.x == 0) s.sel = -1;
        const u64 ex = block_excl_scan(m, &tot, s); /* synchronises: s.cS set */
        N = topp_need(top_p, s.cS);
        if (bi >= 0 && ex < N && N <= ex + m) s.sel = bi, s.u1 = ex;
    }
    cl_sync<C>(); /* the peers' bins and s.cu read; s.sel and s.cS set */
    S = s.cS;
    bool topp = false;
    float tau = 0.0f;
    int idcut = V;
    u64 Sk = S;
    if (want_p) {
        const int sel = s.sel;
        const u64 acc0 = s.u1;
        __syncthreads(); /* read before cl_refine writes them */
        unsigned key;
        u64 above, at;
        if (sel >= 0 && cl_refine<C>(x, lo, hi, sel, N, acc0, &key, &above, &at, CL, hagg, s)) {
            topp = true;
            tau = __uint_as_float(key);
            const u64 m = fx(tau), n_eq = at / m;
            u64 j = (N - above + m - 1) / m;
            if (j > n_eq) j = n_eq;
            if (j < 1) j = 1;
            if (j < n_eq) { /* ties at tau: the lowest ids stay */
                const float tv = tau;
                idcut = cl_find<C>(x, lo, hi, [&](int, float e) -> u64 { return e == tv; }, j - 1, rank, CL, s);
            }
            Sk = above + j * m;
        }
    }
    u64 tgt = (u64)(u * (double)Sk);
    if (tgt >= Sk) tgt = Sk - 1;
    const float tv = tau;
    const int ic = idcut;
    const int tok = cl_find<C>(
        x, lo, hi,
        [&](int i, float e) -> u64 {
            if (topp && (e < tv || (e == tv && i > ic))) return 0;
            return fx(e);
        },
        tgt, rank, CL, s);
    if (rank == 0 && threadIdx.x == 0) out[row] = tok >= 0 ? tok : amx;
}

/* Whether clusters of cl CTAs of k_sample_cl can run on device dev (the
 * occupancy query, once per device and size). */
static bool cl_fits(int dev, int cl) {
    static signed char known[16][CL_MAX + 1]; /* 0 unknown, 1 yes, -1 no */
    if (cl <= 1) return true;
    if (dev < 0 || dev >= 16) return cl <= 8;
    if (!known[dev][cl]) {
        if (cl > 8) (void)cudaFuncSetAttribute(k_sample_cl<true>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        known[dev][cl] = cuda_cluster_occupancy(k_sample_cl<true>, (unsigned)cl, ST, 0) > 0 ? 1 : -1;
    }
    return known[dev][cl] > 0;
}

int cuda_sample_cl_launch(cuda_ctx *c, int64_t R, int V, float *logits, const float *fp, const int32_t *ip,
                          const int32_t *hist, int64_t n_hist, int32_t *cnt, int32_t *out) {
    /* cluster size: VLLM_CUDA_TOPP_CL forces one (1..16); else the largest
     * of 8, 4, 2, 1 with R * CL <= the SM count */
    const char *env = getenv("VLLM_CUDA_TOPP_CL"), *hv = getenv("VLLM_CUDA_TOPP_HIST"),
               *bv = getenv("VLLM_CUDA_TOPP_BLOCKROWS");
    const bool hagg = hv && !strcmp(hv, "match");
    /* one CTA a row: rows without top_p take k_sample's code (sample_row_block)
     * unless VLLM_CUDA_TOPP_BLOCKROWS=0 (A/B: every row on this kernel's own) */
    const bool brows = !(bv && !strcmp(bv, "0"));
    int cl = env && *env ? atoi(env) : 0;
    if (cl < 1) {
        cl = 8;
        while (cl > 1 && R * cl > c->n_sm) cl /= 2;
    }
    if (cl > CL_MAX) cl = CL_MAX;
    while (cl > 1 && (!cl_fits(c->device, cl) || R * cl > 2147483647)) cl--;
    if (cl == 1) { /* one CTA a row: the plain build */
        cuda_launch(k_sample_cl<false>, dim3((unsigned)R), dim3(ST), 0, c->stream, logits, V, fp, ip, hist, n_hist, cnt,
                    out, hagg, brows);
        CU_LAUNCHED();
        return VC_OK;
    }
    cudaError_t e = cuda_launch_cluster(k_sample_cl<true>, dim3((unsigned)(R * cl)), dim3(ST), 0, c->stream,
                                        (unsigned)cl, logits, V, fp, ip, hist, n_hist, cnt, out, hagg, false);
    if (e != cudaSuccess)
        return vc_err_set(VC_ERR_RUNTIME, "cuda sample: cluster launch (%d CTAs a row): %s", cl, cudaGetErrorString(e));
    return VC_OK;
}
