/* Random sampling of one row: temperature -> min_p -> top_k -> top_p ->
 * draw, as vLLM's Sampler.sample / apply_top_k_top_p define them, without
 * a full sort of the vocabulary:
 *
 *  - min_p keeps p_i >= min_p * p_max, i.e. x_i >= x_max + log(min_p): a
 *    threshold on the scaled logits, no softmax needed;
 *  - top_k keeps x_i >= (k-th largest x) — ties with the k-th all stay, as
 *    in vLLM — found by quickselect on a copy (O(V));
 *  - top_p keeps the most probable tokens until their renormalised mass
 *    reaches p (the token that crosses p stays; at least one stays). The
 *    cut is found by a radix walk over the float bits of exp(x - max):
 *    bucket masses from the top down locate the boundary bucket, and only
 *    that bucket is refined (3 levels, then a sort of what is left, which
 *    holds equal values or at most 32 tokens). O(candidates).
 *  - the draw walks the kept candidates with u * (their mass).
 */
#include "sample/sample_int.h"

#include <stdlib.h>
#include <string.h>

/* k-th largest (1-based) of a[0..n), n >= k >= 1; reorders a. No NaN. */
static float kth_largest(float *a, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1, t = k - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        float x = a[lo], y = a[mid], z = a[hi]; /* median of three */
        float pivot = x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                float s = a[i];
                a[i] = a[j];
                a[j] = s;
                i++;
                j--;
            }
        }
        if (t <= j) hi = j;
        else if (t >= i) lo = i;
        else return pivot; /* j < t < i: a[t] == pivot */
    }
    return a[t];
}

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

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
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
        else qsort(idx, (size_t)n, sizeof *idx, cmp_id); /* level 3: all values equal */
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

int32_t smp_draw(smp_batch *b, float *x, const smp_req *r, double u) {
    const int64_t V = b->p.vocab;
    const float T = r->p.temperature;
    float mx = -INFINITY;
    if (T != 1.0f) {
        for (int64_t i = 0; i < V; i++) {
            x[i] /= T;
            mx = x[i] > mx ? x[i] : mx;
        }
    } else {
        for (int64_t i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    }
    if (mx == -INFINITY) return 0; /* everything masked: nothing to draw from */
    float *ev = b->ev;
    int32_t *idx = b->idx;
    int64_t n = 0;
    if (mx == INFINITY) { /* +inf logits take all the mass, equally */
        for (int64_t i = 0; i < V; i++) {
            if (x[i] == INFINITY) {
                ev[i] = 1.0f;
                idx[n++] = (int32_t)i;
            } else {
                x[i] = -INFINITY;
            }
        }
        return idx[(int64_t)(u * (double)n)];
    }
    /* min_p, then top_k among what min_p kept. */
    float cut = -INFINITY;
    if (r->p.min_p > 0.0f) cut = mx + logf(r->p.min_p);
    if (r->top_k > 0) {
        int64_t m = 0;
        for (int64_t i = 0; i < V; i++)
            if (x[i] >= cut && x[i] > -INFINITY) b->fwork[m++] = x[i];
        if (m > r->top_k) {
            float kth = kth_largest(b->fwork, m, r->top_k);
            cut = kth > cut ? kth : cut;
        }
    }
    /* Candidates and their unnormalised probabilities. */
    const bool topp = r->p.top_p < 1.0f;
    double S = 0;
    for (int64_t i = 0; i < V; i++) {
        if (x[i] >= cut && x[i] > -INFINITY) {
            float e = expf(x[i] - mx);
            if (e > 0.0f) {
                ev[i] = e;
                idx[n++] = (int32_t)i;
                S += e;
                continue;
            }
            if (!topp) continue; /* zero mass: never drawn, logit left as is */
        }
        x[i] = -INFINITY;
    }
    if (topp) {
        int64_t kept = topp_keep(b, ev, idx, n, (double)r->p.top_p * S, 0);
        for (int64_t j = kept; j < n; j++) x[idx[j]] = -INFINITY;
        n = kept;
        S = 0;
        for (int64_t j = 0; j < n; j++) S += ev[idx[j]];
    }
    double target = u * S, acc = 0;
    for (int64_t j = 0; j < n; j++) {
        acc += ev[idx[j]];
        if (target < acc) return idx[j];
    }
    return idx[n - 1];
}
