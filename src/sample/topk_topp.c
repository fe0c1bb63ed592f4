/* Random sampling of one row: temperature -> min_p -> top_k -> top_p ->
 * draw, as vLLM's Sampler.sample / apply_top_k_top_p define them, without
 * a full sort of the vocabulary:
 *
 *  - min_p keeps p_i >= min_p * p_max, i.e. x_i >= x_max + log(min_p): a
 *    threshold on the scaled logits, no softmax needed;
 *  - top_k keeps x_i >= (k-th largest x) — ties with the k-th all stay, as
 *    in vLLM — found with a k-heap behind a vector pre-test (O(V));
 *  - top_p keeps the most probable tokens until their renormalised mass
 *    reaches p (the token that crosses p stays; at least one stays). The
 *    cut is found by a radix walk over the float bits of exp(x - max):
 *    bucket masses from the top down locate the boundary bucket, and only
 *    that bucket is refined (3 levels, then a sort of what is left, which
 *    holds equal values or at most 32 tokens). O(V), no sort of the row.
 *  - the draw walks the kept tokens in id order with u * (their mass),
 *    skipping blocks of 64 by their sums.
 */
#include "sample/sample_int.h"
#include "sample/vecf.h"

#include <string.h>

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Insertion sort of ids by (ev desc, id asc); n is small. */
static void sort_small(const float *ev, int32_t *idx, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        int32_t t = idx[i];
        int64_t j = i;
        while (j > 0 && (ev[idx[j - 1]] < ev[t] || (ev[idx[j - 1]] == ev[t] && idx[j - 1] > t))) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = t;
    }
}

/* In-place heapsort of ids, ascending (qsort may allocate; a step must not). */
static void sift_ids(int32_t *a, int64_t n, int64_t j) {
    int32_t v = a[j];
    for (;;) {
        int64_t c = 2 * j + 1;
        if (c >= n) break;
        if (c + 1 < n && a[c + 1] > a[c]) c++;
        if (a[c] <= v) break;
        a[j] = a[c];
        j = c;
    }
    a[j] = v;
}

static void sort_ids(int32_t *a, int64_t n) {
    for (int64_t j = n / 2 - 1; j >= 0; j--) sift_ids(a, n, j);
    for (int64_t end = n - 1; end > 0; end--) {
        int32_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_ids(a, end, 0);
    }
}

/* Radix levels over the bits of a non-negative float <= 1. */
static const int lv_shift[3] = {20, 8, 0};
static const uint32_t lv_mask[3] = {0x3FF, 0xFFF, 0xFF};

/* Reorder idx[0..n) so that its first `return` entries are the tokens that
 * top_p keeps: descending ev (ties: lower id first) until the mass before a
 * token reaches `need`. Always keeps at least one. */
static int64_t topp_keep(smp_batch *b, const float *ev, int32_t *idx, int64_t n, double need, int level) {
    if (n <= 32 || level == 3) {
        if (n <= 32) sort_small(ev, idx, n);
        else sort_ids(idx, n); /* level 3: all values equal */
        double acc = 0;
        int64_t k = 0;
        while (k < n && (k == 0 || acc < need)) acc += ev[idx[k++]];
        return k;
    }
    const int sh = lv_shift[level];
    const uint32_t mask = lv_mask[level];
    const int64_t nb = (int64_t)mask + 1;
    memset(b->hmass, 0, (size_t)nb * sizeof *b->hmass);
    memset(b->hcnt, 0, (size_t)nb * sizeof *b->hcnt);
    for (int64_t j = 0; j < n; j++) {
        float v = ev[idx[j]];
        uint32_t k = (fbits(v) >> sh) & mask;
        b->hmass[k] += v;
        b->hcnt[k]++;
    }
    double acc = 0;
    int64_t bb = -1;
    for (int64_t k = nb - 1; k >= 0; k--) {
        if (b->hcnt[k] == 0) continue;
        if (acc + b->hmass[k] >= need) {
            bb = k;
            break;
        }
        acc += b->hmass[k];
    }
    if (bb < 0) return n; /* rounding left the target unreached: keep all */
    /* Three-way partition: above the boundary bucket | in it | below. */
    int64_t lt = 0, i = 0, gt = n;
    while (i < gt) {
        int64_t k = (int64_t)((fbits(ev[idx[i]]) >> sh) & mask);
        int32_t t = idx[i];
        if (k > bb) {
            idx[i++] = idx[lt];
            idx[lt++] = t;
        } else if (k < bb) {
            idx[i] = idx[--gt];
            idx[gt] = t;
        } else {
            i++;
        }
    }
    return lt + topp_keep(b, ev, idx + lt, gt - lt, need - acc, level + 1);
}

/* top_p over a whole row: ev [V] holds exp(x - max) (0 for filtered
 * tokens). A level-0 histogram over all of ev finds the boundary bucket;
 * tokens above it stay, tokens below go (x -inf, ev 0), and only the
 * boundary bucket's tokens are refined by topp_keep. Returns the kept mass. */
_Static_assert(VECF_N * 1024 <= SMP_HIST_BUCKETS, "level-0 histograms per lane must fit");

static double topp_apply(smp_batch *b, float *x, float *ev, int64_t V, double need) {
    const int sh = lv_shift[0];
    const int64_t nb = (int64_t)lv_mask[0] + 1;
    /* One histogram per vector lane, so that neighbouring tokens (often in
     * the same bucket) do not wait on each other's read-modify-write. */
    double *hm = b->hmass;
    memset(hm, 0, (size_t)(nb * VECF_N) * sizeof *hm);
    int64_t i = 0;
    for (; i + VECF_N <= V; i += VECF_N) {
        vecf e = vecf_load(ev + i);
        veci k = (veci)e >> sh; /* e >= 0: the sign bit is clear */
        for (int l = 0; l < VECF_N; l++) hm[l * nb + k[l]] += e[l]; /* e == 0 adds nothing to bucket 0 */
    }
    for (; i < V; i++) hm[fbits(ev[i]) >> sh] += ev[i];
    for (int l = 1; l < VECF_N; l++)
        for (int64_t k = 0; k < nb; k++) hm[k] += hm[l * nb + k];
    double acc = 0;
    int64_t bb = -1;
    for (int64_t k = nb - 1; k >= 0; k--) {
        if (hm[k] == 0) continue;
        if (acc + hm[k] >= need) {
            bb = k;
            break;
        }
        acc += hm[k];
    }
    if (bb < 0) return acc; /* rounding left the target unreached: keep all */
    /* bucket bb holds the floats in [lo, hi) */
    float lo, hi;
    uint32_t ulo = (uint32_t)bb << sh, uhi = (uint32_t)(bb + 1) << sh;
    memcpy(&lo, &ulo, sizeof lo);
    memcpy(&hi, &uhi, sizeof hi);
    const vecf vlo = vecf_set(lo), vhi = vecf_set(hi), zero = vecf_set(0.0f), ninf = vecf_set(-INFINITY);
    int32_t *idx = b->idx;
    int64_t m = 0;
    for (i = 0; i + VECF_N <= V; i += VECF_N) {
        vecf e = vecf_load(ev + i);
        veci drop = e < vlo;
        if (veci_any(drop)) {
            vecf_store(ev + i, vecf_sel(drop, zero, e));
            vecf_store(x + i, vecf_sel(drop, ninf, vecf_load(x + i)));
        }
        if (veci_any((e >= vlo) & (e < vhi)))
            for (int l = 0; l < VECF_N; l++)
                if (e[l] >= lo && e[l] < hi) idx[m++] = (int32_t)(i + l);
    }
    for (; i < V; i++) {
        if (ev[i] < lo) ev[i] = 0.0f, x[i] = -INFINITY;
        else if (ev[i] < hi) idx[m++] = (int32_t)i;
    }
    int64_t kept = topp_keep(b, ev, idx, m, need - acc, 1);
    for (int64_t j = 0; j < kept; j++) acc += ev[idx[j]];
    for (int64_t j = kept; j < m; j++) ev[idx[j]] = 0.0f, x[idx[j]] = -INFINITY;
    return acc;
}

int32_t smp_draw(smp_batch *b, float *x, const smp_req *r, double u) {
    const int64_t V = b->p.vocab;
    const float T = r->p.temperature;
    float mx = T != 1.0f ? smp_ops_div_max(x, V, T) : smp_ops_max(x, V);
    if (mx == -INFINITY) return 0; /* everything masked: nothing to draw from */
    float *ev = b->ev;
    if (mx == INFINITY) { /* +inf logits take all the mass, equally */
        int64_t n = 0;
        for (int64_t i = 0; i < V; i++) {
            if (x[i] == INFINITY) b->idx[n++] = (int32_t)i;
            else x[i] = -INFINITY;
        }
        return b->idx[(int64_t)(u * (double)n)];
    }
    /* min_p, then top_k among what min_p kept: both are thresholds. */
    float cut = -INFINITY;
    if (r->p.min_p > 0.0f) cut = mx + logf(r->p.min_p);
    if (r->top_k > 0) {
        float kth = smp_ops_kth_largest(x, V, r->top_k, cut, b->fwork);
        cut = kth > cut ? kth : cut;
    }
    double S = smp_ops_exp_mask(x, ev, V, mx, cut);
    if (r->p.top_p < 1.0f) {
        if (r->top_k > 0 && r->top_k <= 4096) {
            /* few candidates: list them and refine from level 0 */
            int64_t n = 0, i = 0;
            const vecf zero = vecf_set(0.0f);
            for (; i + VECF_N <= V; i += VECF_N) {
                vecf e = vecf_load(ev + i);
                if (veci_any(e > zero))
                    for (int l = 0; l < VECF_N; l++)
                        if (e[l] > 0.0f) b->idx[n++] = (int32_t)(i + l);
            }
            for (; i < V; i++)
                if (ev[i] > 0.0f) b->idx[n++] = (int32_t)i;
            int64_t kept = topp_keep(b, ev, b->idx, n, (double)r->p.top_p * S, 0);
            S = 0;
            for (int64_t j = 0; j < kept; j++) S += ev[b->idx[j]];
            for (int64_t j = kept; j < n; j++) ev[b->idx[j]] = 0.0f, x[b->idx[j]] = -INFINITY;
        } else {
            S = topp_apply(b, x, ev, V, (double)r->p.top_p * S);
        }
    }
    /* Inverse CDF in token order, skipping blocks of 64 by their sums. */
    const double target = u * S;
    double acc = 0;
    int64_t i = 0;
    for (; i + 64 <= V; i += 64) {
        vecf s = vecf_load(ev + i);
        for (int j = VECF_N; j < 64; j += VECF_N) s += vecf_load(ev + i + j);
        double bs = vecf_hsum(s);
        if (acc + bs <= target) {
            acc += bs;
            continue;
        }
        for (int j = 0; j < 64; j++) {
            acc += ev[i + j];
            if (target < acc && ev[i + j] > 0.0f) return (int32_t)(i + j);
        }
    }
    for (; i < V; i++) {
        acc += ev[i];
        if (target < acc && ev[i] > 0.0f) return (int32_t)i;
    }
    return (int32_t)smp_ops_find(x, V, mx); /* rounding ran past the end: the top token */
}
