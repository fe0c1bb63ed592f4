/* cuda_sample.cuh — the device pieces of SAMPLE shared by its two kernels
 * (private to src/backends/cuda/cuda_sample*.cu):
 *   cuda_sample.cu     k_sample: one 1024-thread block per row (the
 *                      original kernel; VLLM_CUDA_TOPP=0) and the op's entry;
 *   cuda_sample_cl.cu  k_sample_cl: one thread-block cluster per row, the
 *                      row split over its CTAs (VLLM_CUDA_TOPP=1, default).
 * Here: the block-level primitives (reductions, scans, radix select, find
 * in id order), the exact exp of the host sampler, fixed-point masses, the
 * top_k stage, the top_p candidate cut, the single-block tail, the row
 * steps both kernels run (penalty check, u, the min_p cut, the draw of a
 * +inf row) and k_sample's whole row
 * (sample_row_block: k_sample is that alone;
 * k_sample_cl's one-CTA build runs it for rows without top_p). See
 * cuda_sample.cu's comment for the algorithm and the CPU op it reproduces.
 */
#ifndef VLLM_CUDA_SAMPLE_CUH
#define VLLM_CUDA_SAMPLE_CUH

#include "cuda_internal.h"

#include <math.h>

typedef unsigned long long u64;

#define ST 1024      /* threads per row */
#define NWARP (ST / 32)
#define RB 2048      /* radix bins of the widest level */
#define PROMPT_BIT 0x40000000
#define CLAIM_BIT ((int)0x80000000u)
#define COUNT_MASK 0x3FFFFFFF

#define CAND_CAP 3072 /* top_k candidates kept in shared memory */
static_assert(RB == 2 * ST, "topk_bins scans two bins per thread");
static_assert(CAND_CAP >= RB, "topp_bins counts in s.cid");

struct samp_smem {
    union {
        u64 mass[RB];     /* radix_select's bins */
        unsigned cnt[RB]; /* topk_bins' counts */
    };
    float cx[CAND_CAP]; /* top_k candidates in id order: x, later ev */
    int cid[CAND_CAP];  /* their ids */
    u64 wsum[NWARP];
    float fred[NWARP];
    int ired[NWARP];
    u64 u0, u1, u2;
    float f0;
    int i0, sel;
    /* k_sample_cl's exchanges between the CTAs of a cluster (read by the
     * others through distributed shared memory) */
    u64 cws[NWARP];  /* cl_find: per-warp sums */
    u64 woff[NWARP]; /* cl_find: the warps' offsets in the row */
    u64 cu;          /* a per-CTA sum */
    float cf, ccut;  /* a per-CTA max; rank 0's cut after top_k */
    int ci, cdec, cres; /* its index; rank 0's top_k outcome; a find's result */
    u64 cS;             /* the row's total mass */
    int cbest;          /* a find's result over the cluster */
};

__device__ static inline u64 fx(float e) { return __double2ull_rn((double)e * 1099511627776.0); /* 2^40 */ }

/* Float bits made monotonic as unsigned (larger float -> larger key). */
__device__ static inline unsigned okey(float v) {
    unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ static inline float from_okey(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

/* vecf_exp_neg (sample/vecf.h) operation for operation. */
__device__ static inline float exp_neg(float x) {
    if (!(x >= -87.3f)) return 0.0f;
    float n = __fadd_rn(__fmul_rn(x, 1.44269504088896341f), 12582912.0f);
    n = __fsub_rn(n, 12582912.0f);
    float r = __fsub_rn(x, __fmul_rn(n, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(n, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
    return __fmul_rn(p, __int_as_float(((int)n + 127) << 23));
}

/* (max value, lowest index among maxima) over the block. */
__device__ static inline void block_max_idx(float &v, int &idx, samp_smem &s) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        if (v2 > v || (v2 == v && i2 < idx)) v = v2, idx = i2;
    }
    if (lane == 0) s.fred[w] = v, s.ired[w] = idx;
    __syncthreads();
    if (w == 0) {
        v = s.fred[lane];
        idx = s.ired[lane];
        for (int o = 16; o > 0; o >>= 1) {
            float v2 = __shfl_xor_sync(0xffffffffu, v, o);
            int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
            if (v2 > v || (v2 == v && i2 < idx)) v = v2, idx = i2;
        }
        if (lane == 0) s.f0 = v, s.i0 = idx;
    }
    __syncthreads();
    v = s.f0;
    idx = s.i0;
    __syncthreads();
}

__device__ static inline u64 warp_incl_scan(u64 v) {
    int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        u64 n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
    }
    return v;
}

/* Exclusive prefix sum over the block in thread order; *total: the sum. */
__device__ static inline u64 block_excl_scan(u64 v, u64 *total, samp_smem &s) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    u64 inc = warp_incl_scan(v);
    if (lane == 31) s.wsum[w] = inc;
    __syncthreads();
    if (w == 0) {
        u64 ws = s.wsum[lane], wi = warp_incl_scan(ws);
        s.wsum[lane] = wi - ws;
        if (lane == 31) s.u0 = wi;
    }
    __syncthreads();
    u64 ex = s.wsum[w] + inc - v;
    *total = s.u0;
    __syncthreads();
    return ex;
}

__device__ static inline u64 block_sum(u64 v, samp_smem &s) {
    u64 total;
    (void)block_excl_scan(v, &total, s);
    return total;
}

/* *p += v in shared memory as two 32-bit atomics (a 64-bit shared atomic
 * add is a compare-and-swap loop, slow under contention): the low word,
 * its carry detected by the adder from the old value, then the high word
 * when there is anything to add. Exact once the block has synchronised. */
__device__ static inline void add_u64(u64 *p, u64 v) {
    unsigned *w = reinterpret_cast<unsigned *>(p); /* little endian: w[0] low */
    const unsigned lo = (unsigned)v, old = atomicAdd(&w[0], lo);
    unsigned hi = (unsigned)(v >> 32);
    if ((unsigned)(old + lo) < old) hi++;
    if (hi) atomicAdd(&w[1], hi);
}

/* Radix select from the top: the key tau with weight(keys > tau) < N <=
 * weight(keys >= tau), over the elements get(i, &key, &w) accepts. Returns
 * false when the total weight is below N. *above: weight of keys > tau;
 * *at: weight of keys == tau. */
template <class F>
__device__ static inline bool radix_select(int V, F get, u64 N, unsigned *key, u64 *above, u64 *at, samp_smem &s) {
    const int shifts[3] = {21, 10, 0};
    const int nbins[3] = {2048, 2048, 1024};
    unsigned prefix = 0;
    u64 acc = 0; /* weight above the current prefix */
    for (int l = 0; l < 3; l++) {
        const int sh = shifts[l], nb = nbins[l], hs = l ? shifts[l - 1] : 32;
        for (int b = threadIdx.x; b < nb; b += ST) s.mass[b] = 0;
        __syncthreads();
        /* Warp-aggregated: lanes with the same bin add their weights first
         * (rows often put most keys in a few bins; same-address shared
         * atomics would serialise). Every lane of a warp runs every
         * iteration (the loop bound and the skip are warp-uniform). */
        for (int base = 0; base < V; base += ST) {
            int i = base + (int)threadIdx.x;
            unsigned k = 0, bin = 0xFFFFFFFFu;
            u64 w = 0;
            if (i < V && get(i, &k, &w) && w != 0 && (hs >= 32 || (k >> hs) == (prefix >> hs)))
                bin = (k >> sh) & (unsigned)(nb - 1);
            else
                w = 0;
            /* below level 0 most warps hold no key under the prefix */
            if (!__any_sync(0xffffffffu, bin != 0xFFFFFFFFu)) continue; /* warp-uniform */
            unsigned grp = __match_any_sync(0xffffffffu, bin);
            /* w <= 2^40: two 20-bit halves, each summed over <= 32 lanes in 32 bits */
            unsigned lo = __reduce_add_sync(grp, (unsigned)(w & 0xFFFFF)), hi = __reduce_add_sync(grp, (unsigned)(w >> 20));
            if (bin != 0xFFFFFFFFu && (int)(threadIdx.x & 31) == __ffs(grp) - 1)
                add_u64(&s.mass[bin], ((u64)hi << 20) + lo);
        }
        __syncthreads();
        /* bins in descending order, two per thread */
        int b0 = nb - 1 - 2 * (int)threadIdx.x, b1 = b0 - 1;
        u64 m0 = b0 >= 0 ? s.mass[b0] : 0, m1 = b1 >= 0 ? s.mass[b1] : 0, tot;
        if (threadIdx.x == 0) s.sel = -1;
        __syncthreads();
        u64 ex = block_excl_scan(m0 + m1, &tot, s) + acc;
        if (ex < N && N <= ex + m0) s.sel = b0, s.u1 = ex, s.u2 = m0;
        else if (ex + m0 < N && N <= ex + m0 + m1) s.sel = b1, s.u1 = ex + m0, s.u2 = m1;
        __syncthreads();
        int sel = s.sel;
        if (sel < 0) return false; /* block-uniform */
        acc = s.u1;
        *at = s.u2;
        prefix |= (unsigned)sel << sh;
        __syncthreads();
    }
    *key = prefix;
    *above = acc;
    return true;
}

/* The first i in [0, V) whose inclusive prefix of w(i) exceeds tgt (w in id
 * order), or -1. Warp w scans a contiguous segment, lanes coalesced. */
template <class F>
__device__ static inline int block_find(int V, F wf, u64 tgt, samp_smem &s) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int seg = (V + NWARP - 1) / NWARP, lo = w * seg, hi = lo + seg < V ? lo + seg : V;
    u64 sum = 0;
    for (int i = lo + lane; i < hi; i += 32) sum += wf(i);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) s.wsum[w] = sum;
    if (threadIdx.x == 0) s.i0 = -1;
    __syncthreads();
    if (w == 0) {
        u64 ws = s.wsum[lane];
        s.wsum[lane] = warp_incl_scan(ws) - ws;
    }
    __syncthreads();
    u64 acc = s.wsum[w];
    if (acc <= tgt && tgt < acc + sum) { /* warp-uniform */
        for (int base = lo; base < hi; base += 32) {
            int i = base + lane;
            u64 v = i < hi ? wf(i) : 0, inc = warp_incl_scan(v);
            unsigned m = __ballot_sync(0xffffffffu, acc + inc > tgt);
            if (m) {
                if (lane == __ffs(m) - 1) s.i0 = i;
                break;
            }
            acc += __shfl_sync(0xffffffffu, inc, 31);
        }
    }
    __syncthreads();
    int r = s.i0;
    __syncthreads();
    return r;
}

/* Bin of a valid x by d = mx - x (>= 0, rounded: monotone, so a larger x
 * never lands in a higher bin): the top 12 bits of d's float bits, i.e. 8
 * of a binade near the max, finer the closer to it. In [0, 2040]. */
__device__ static inline unsigned dbin(float mx, float v) { return __float_as_uint(__fsub_rn(mx, v)) >> 20; }

/* Count the valid x (>= c0, finite) per dbin and find the smallest b with
 * at least k of them in bins <= b. Returns their number C (>= k): the C
 * largest valid x, every tie of the k-th among them, each larger than any
 * valid x outside; -1 when fewer than k are valid (top_k keeps all). *bsel: b. */
__device__ static inline int topk_bins(const float *x, int V, float mx, float c0, int k, unsigned *bsel, samp_smem &s) {
    const int lane = threadIdx.x & 31;
    for (int b = threadIdx.x; b < RB; b += ST) s.cnt[b] = 0;
    __syncthreads();
    for (int base = 0; base < V; base += ST) {
        int i = base + (int)threadIdx.x;
        unsigned bin = 0xFFFFFFFFu;
        if (i < V) {
            float v = x[i];
            if (v >= c0 && v != -INFINITY) bin = dbin(mx, v);
        }
        /* warp-aggregated (most of a row shares a few bins) */
        if (!__any_sync(0xffffffffu, bin != 0xFFFFFFFFu)) continue; /* warp-uniform */
        unsigned grp = __match_any_sync(0xffffffffu, bin);
        if (bin != 0xFFFFFFFFu && lane == __ffs(grp) - 1) atomicAdd(&s.cnt[bin], (unsigned)__popc(grp));
    }
    if (threadIdx.x == 0) s.sel = -1;
    __syncthreads();
    /* bins in ascending order (smallest d first), two per thread */
    const int b0 = 2 * (int)threadIdx.x, b1 = b0 + 1;
    const u64 m0 = s.cnt[b0], m1 = s.cnt[b1], K = (u64)k;
    u64 tot, ex = block_excl_scan(m0 + m1, &tot, s);
    if (ex < K && K <= ex + m0) s.sel = b0, s.u1 = ex + m0;
    else if (ex + m0 < K && K <= ex + m0 + m1) s.sel = b1, s.u1 = ex + m0 + m1;
    __syncthreads();
    const int sel = s.sel;
    const u64 C = s.u1;
    __syncthreads();
    if (sel < 0) return -1; /* block-uniform: tot < k */
    *bsel = (unsigned)sel;
    return C > (u64)CAND_CAP ? CAND_CAP + 1 : (int)C;
}

/* Copy the x[i] with keep(i, x[i]) (C <= CAND_CAP of them, counted by the
 * caller with the same predicate) into s.cx / s.cid in id order: warp w
 * takes a contiguous segment, counts, then writes at its offset (a ballot
 * compaction). */
template <class P> __device__ static inline void gather_cands(const float *x, int V, P keep, samp_smem &s) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int seg = (V + NWARP - 1) / NWARP, lo = w * seg, hi = lo + seg < V ? lo + seg : V;
    const unsigned below = (1u << lane) - 1u;
    unsigned n = 0;
    for (int base = lo; base < hi; base += 32) {
        int i = base + lane;
        float v = i < hi ? x[i] : -INFINITY;
        n += (unsigned)__popc(__ballot_sync(0xffffffffu, i < hi && keep(i, v)));
    }
    if (lane == 0) s.wsum[w] = n;
    __syncthreads();
    if (w == 0) {
        u64 ws = s.wsum[lane];
        s.wsum[lane] = warp_incl_scan(ws) - ws;
    }
    __syncthreads();
    unsigned pos = (unsigned)s.wsum[w];
    for (int base = lo; base < hi; base += 32) {
        int i = base + lane;
        float v = i < hi ? x[i] : -INFINITY;
        bool p = i < hi && keep(i, v);
        unsigned m = __ballot_sync(0xffffffffu, p);
        unsigned j = pos + (unsigned)__popc(m & below);
        if (p && j < CAND_CAP) s.cx[j] = v, s.cid[j] = i;
        pos += (unsigned)__popc(m);
    }
    __syncthreads();
}

/* Integer mass target of top_p over a total S: keep while the mass before
 * a token is < top_p * S, i.e. for integer masses < ceil(top_p * S). */
__device__ static inline u64 topp_need(float top_p, u64 S) {
    double need = ceil((double)top_p * (double)S);
    return need < 1.0 ? 1 : (u64)need;
}

/* ev of a valid-or-not x, as sample_tail computes it. */
__device__ static inline float ev_of(float v, float cut, float mx) {
    return v >= cut ? exp_neg(__fsub_rn(v, mx)) : 0.0f;
}

/* Bin of an ev with mass: its top 12 float bits (8 bins per binade of ev,
 * ev <= 1 -> <= 1016), all ev < 2^-24 (over 16.6 nats under the max) in
 * one bin. Monotone: a token in a higher bin has a strictly larger ev. The
 * floor only merges bins (a nucleus reaching that far is thousands of
 * tokens on an LM's row: the fallback either way), so most of a peaked row
 * shares a bin and the warp-aggregated histogram needs few atomics. */
#define EBIN_FLOOR ((127u - 24u) << 3)
__device__ static inline unsigned ebin(float e) {
    unsigned b = __float_as_uint(e) >> 20;
    return b > EBIN_FLOOR ? b : EBIN_FLOOR;
}

/* From the final cut on: ev, top_p and the draw over xv [n] (the row, or
 * candidates in id order: the top_k ones, every token that can carry mass,
 * or the top_p ones, every token that can be kept). Overwrites xv with ev
 * (cut and mx give it), unless Srow > 0: then xv holds ev already and Srow
 * is the row's total mass (topp_bins' pass; the top_p target is a fraction
 * of it even when xv holds candidates only). Returns the drawn index into
 * xv, or -1 (rounding ran past the end). */
__device__ static inline int sample_tail(float *xv, int n, float cut, float mx, float top_p, double u, u64 Srow,
                                  samp_smem &s) {
    u64 S = Srow;
    if (!S) { /* Srow > 0 whenever given: the max's ev is 1 */
        for (int i = threadIdx.x; i < n; i += ST) {
            float e = ev_of(xv[i], cut, mx);
            xv[i] = e; /* from here on xv holds ev */
            S += fx(e);
        }
        S = block_sum(S, s);
    }
    bool topp = false;
    float tau = 0.0f;
    int idcut = n;
    u64 Sk = S;
    if (top_p < 1.0f) {
        const u64 N = topp_need(top_p, S);
        unsigned key;
        u64 above, at;
        bool found = radix_select(
            n,
            [&](int i, unsigned *kk, u64 *w) {
                float e = xv[i];
                *kk = __float_as_uint(e);
                *w = fx(e);
                return true;
            },
            N, &key, &above, &at, s);
        if (found) {
            topp = true;
            tau = __uint_as_float(key);
            u64 m = fx(tau), n_eq = at / m, j = (N - above + m - 1) / m;
            if (j > n_eq) j = n_eq;
            if (j < 1) j = 1;
            if (j < n_eq) { /* ties at tau: the lowest ids stay */
                const float tv = tau;
                idcut = block_find(n, [&](int i) -> u64 { return xv[i] == tv; }, j - 1, s);
            }
            Sk = above + j * m;
        }
    }
    u64 tgt = (u64)(u * (double)Sk);
    if (tgt >= Sk) tgt = Sk - 1;
    const float tv = tau;
    const int ic = idcut;
    return block_find(
        n,
        [&](int i) -> u64 {
            float e = xv[i];
            if (topp && (e < tv || (e == tv && i > ic))) return 0;
            return fx(e);
        },
        tgt, s);
}

/* top_k (k > 0) after the max mx and the min_p cut *cut, over the row x
 * [V] (read only): raises *cut to the k-th largest x. For k <= CAND_CAP,
 * one counting pass (topk_bins) finds the C >= k largest valid x; when
 * they fit they are copied to s.cx / s.cid in id order and C is returned
 * (the tail then runs on them: tokens outside carry no mass), with *cut
 * from a radix select over them. Otherwise (larger k, or ties or a flat
 * row past the cap) the k-th comes from a radix select over the row and 0
 * is returned (the tail runs on the row). Block-uniform. */
__device__ static inline int topk_stage(const float *x, int V, float mx, int k, float *cut, samp_smem &s) {
    const float c0 = *cut;
    if (k <= CAND_CAP) { /* few candidates: one counting pass, then shared memory */
        unsigned b;
        int C = topk_bins(x, V, mx, c0, k, &b, s);
        if (C < 0) return 0; /* fewer than k valid: top_k keeps all */
        if (C <= CAND_CAP) {
            gather_cands(x, V, [&](int, float v) { return v >= c0 && v != -INFINITY && dbin(mx, v) <= b; }, s);
            /* the k-th largest of the row is the k-th largest candidate */
            unsigned key;
            u64 above, at;
            if (radix_select(
                    C,
                    [&](int j, unsigned *kk, u64 *w) {
                        *kk = okey(s.cx[j]);
                        *w = 1;
                        return true;
                    },
                    (u64)k, &key, &above, &at, s)) {
                float kth = from_okey(key);
                *cut = kth > c0 ? kth : c0;
            }
            return C;
        }
    }
    unsigned key;
    u64 above, at;
    bool found = radix_select(
        V,
        [&](int i, unsigned *kk, u64 *w) {
            float v = x[i];
            if (!(v >= c0) || v == -INFINITY) return false;
            *kk = okey(v);
            *w = 1;
            return true;
        },
        (u64)k, &key, &above, &at, s);
    if (found) {
        float kth = from_okey(key);
        *cut = kth > c0 ? kth : c0;
    }
    return 0;
}

/* Penalties of one row (sample/processors.c smp_apply_penalties). */
__device__ static inline void apply_penalties(float *x, int V, const float *f, const int32_t *h, int np, int no, int32_t *cnt) {
    const float rep = f[RT_SAMPLE_REP], freq = f[RT_SAMPLE_FREQ], pres = f[RT_SAMPLE_PRES];
    for (int i = threadIdx.x; i < no; i += ST) {
        int t = h[np + i];
        if (t >= 0 && t < V) atomicAdd(&cnt[t], 1);
    }
    for (int i = threadIdx.x; i < np; i += ST) {
        int t = h[i];
        if (t >= 0 && t < V) atomicOr(&cnt[t], PROMPT_BIT);
    }
    __syncthreads();
    const float inv_rep = __fdiv_rn(1.0f, rep);
    for (int i = threadIdx.x; i < np + no; i += ST) {
        int t = h[i];
        if (t < 0 || t >= V) continue;
        int old = atomicOr(&cnt[t], CLAIM_BIT);
        if (old & CLAIM_BIT) continue; /* another thread has this token */
        int c = old & COUNT_MASK;
        float v = x[t];
        if (rep != 1.0f) v = __fmul_rn(v, v > 0.0f ? inv_rep : rep);
        if (c > 0) {
            v = __fsub_rn(v, __fmul_rn(freq, (float)c));
            v = __fsub_rn(v, pres);
        }
        x[t] = v;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < np + no; i += ST) {
        int t = h[i];
        if (t >= 0 && t < V) cnt[t] = 0;
    }
}
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
__device__ static inline int topp_bins(float *x, int V, float mx, float cut, float top_p, unsigned *bsel, u64 *Srow,
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

/* The row steps both kernels share, in the host sampler's order (k_sample
 * runs them over the whole row, k_sample_cl over each CTA's slice). */

/* Whether the row's history hist[off .. off+np+no) is usable for the
 * penalties (and the count scratch cnt is there). */
__device__ static inline bool pen_ok(const int32_t *hist, const int32_t *cnt, int np, int no, int64_t off,
                                     int64_t n_hist) {
    return hist && cnt && np >= 0 && no >= 0 && np + no > 0 && off >= 0 && off + np + no <= n_hist;
}

/* The row's uniform u in [0, 1): the host's double in two int32 slots. */
__device__ static inline double row_u(const int32_t *q) {
    uint64_t ubits = (uint64_t)(uint32_t)q[RT_SAMPLE_U_LO] | (uint64_t)(uint32_t)q[RT_SAMPLE_U_HI] << 32;
    return __longlong_as_double((long long)ubits);
}

/* The min_p cut: max + logf(min_p) (the host's logf, given), or -inf. */
__device__ static inline float min_p_cut(const float *f, float mx) {
    float cut = -INFINITY;
    if (f[RT_SAMPLE_MIN_P] > 0.0f) cut = __fadd_rn(mx, f[RT_SAMPLE_LOG_MIN_P]);
    return cut;
}

/* A row whose max is +inf (this block, the whole row x [V]): the +inf
 * logits share all the mass equally, so the draw takes the j-th of the n
 * of them in id order, j = floor(u * n) (at most n - 1); thread 0 writes
 * it (amx if none is found) to out[row]. */
__device__ static inline void inf_draw(const float *x, int V, double u, int amx, int32_t *out, int64_t row,
                                       samp_smem &s) {
    u64 n = 0;
    for (int i = threadIdx.x; i < V; i += ST) n += x[i] == INFINITY;
    n = block_sum(n, s);
    u64 j = (u64)(u * (double)n);
    if (j >= n) j = n - 1;
    int tok = block_find(V, [&](int i) -> u64 { return x[i] == INFINITY; }, j, s);
    if (threadIdx.x == 0) out[row] = tok >= 0 ? tok : amx;
}

/* k_sample's row (cuda_sample.cu's comment): row `row` of the batch on
 * this block of ST threads, s its shared memory. Also k_sample_cl's
 * one-CTA build runs it for the rows that do not take its top_p tail
 * (sample_row_block_wants). */
__device__ static inline void sample_row_block(float *logits, int V, const float *fp, const int32_t *ip,
                                               const int32_t *hist, int64_t n_hist, int32_t *cnt, int32_t *out,
                                               int64_t row, samp_smem &s) {
    float *x = logits + row * (int64_t)V;
    const float *f = fp + row * RT_SAMPLE_NF;
    const int32_t *q = ip + row * RT_SAMPLE_NI;
    const float T = f[RT_SAMPLE_TEMP];
    const bool greedy = !(T > 0.0f);
    const int np = q[RT_SAMPLE_N_PROMPT], no = q[RT_SAMPLE_N_OUTPUT];
    const int64_t off = q[RT_SAMPLE_HIST_OFF];
    if (pen_ok(hist, cnt, np, no, off, n_hist)) {
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
    const double u = row_u(q);
    if (mx == INFINITY) { /* +inf logits share all the mass equally */
        inf_draw(x, V, u, amx, out, row, s);
        return;
    }
    float cut = min_p_cut(f, mx);
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

/* Whether k_sample_cl's one-CTA build hands row `row` to sample_row_block:
 * every row without top_p (greedy; temperature with or without min_p /
 * top_k / penalties): the cluster kernel's gain is its top_p tail; for
 * the rest, one CTA a row runs the same passes as k_sample, and measured
 * slower (session 6, B = 256: T 1 311 -> 435 us, greedy 84.5 -> 91.4). */
__device__ static inline bool sample_row_block_wants(const float *fp, int64_t row) {
    const float *f = fp + row * RT_SAMPLE_NF;
    return !(f[RT_SAMPLE_TEMP] > 0.0f) || !(f[RT_SAMPLE_TOP_P] < 1.0f);
}

/* cuda_sample_cl.cu: k_sample_cl over R rows of V logits on c's stream
 * (a cluster of CTAs per row, sized by R or VLLM_CUDA_TOPP_CL). VC_OK or
 * a negative status with vc_err set. */
int cuda_sample_cl_launch(cuda_ctx *c, int64_t R, int V, float *logits, const float *fp, const int32_t *ip,
                          const int32_t *hist, int64_t n_hist, int32_t *cnt, int32_t *out);

#endif
