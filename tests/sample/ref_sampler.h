/* ref_sampler — a straightforward double-precision model of vLLM's
 * sampler for the batch-sampler tests: full sorts, dense counts, no
 * shortcuts. Header-only (static), included by tests/sample/test_batch_*.c.
 */
#ifndef REF_SAMPLER_H
#define REF_SAMPLER_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sample/batch.h"

/* Deterministic test randomness (independent of the sampler's RNG). */
static uint64_t ref_rand_state = 88172645463325252ull;
static __attribute__((unused)) uint64_t ref_rand(void) {
    uint64_t x = ref_rand_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return ref_rand_state = x;
}
static double ref_unif(void) { return (double)(ref_rand() >> 11) / 9007199254740992.0; }
static __attribute__((unused)) double ref_normal(void) {
    double u = ref_unif() + 1e-300, v = ref_unif();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}
static __attribute__((unused)) void ref_fill_logits(float *x, int64_t V, double scale) {
    for (int64_t i = 0; i < V; i++) x[i] = (float)(ref_normal() * scale);
}

/* Processors before sampling, on a double copy of the raw row. */
static __attribute__((unused)) void ref_process(const float *raw, int64_t V, const smp_req_params *p, const int32_t *prompt, int32_t n_prompt,
                        const int32_t *out, int32_t n_out, double *l) {
    for (int64_t i = 0; i < V; i++) l[i] = isnan(raw[i]) ? -INFINITY : (double)raw[i];
    if (p->allowed_ids) {
        char *ok = calloc((size_t)V, 1);
        for (int32_t i = 0; i < p->n_allowed; i++) ok[p->allowed_ids[i]] = 1;
        for (int64_t i = 0; i < V; i++)
            if (!ok[i]) l[i] = -INFINITY;
        free(ok);
    }
    const int32_t *w = p->bad_words;
    for (int32_t i = 0; i < p->n_bad_words; w += p->bad_word_lens[i], i++) {
        int32_t L = p->bad_word_lens[i];
        if (L - 1 > n_out) continue;
        int match = 1;
        for (int32_t j = 0; j < L - 1; j++)
            if (out[n_out - (L - 1) + j] != w[j]) match = 0;
        if (match) l[w[L - 1]] = -INFINITY;
    }
    if (n_out < p->min_tokens)
        for (int32_t i = 0; i < p->n_stop_ids; i++) l[p->stop_ids[i]] = -INFINITY;
    for (int32_t i = 0; i < p->n_logit_bias; i++) l[p->logit_bias[i].token] += p->logit_bias[i].bias;
    int *cnt = calloc((size_t)V, sizeof *cnt);
    char *seen = calloc((size_t)V, 1);
    for (int32_t i = 0; i < n_out; i++) cnt[out[i]]++, seen[out[i]] = 1;
    for (int32_t i = 0; i < n_prompt; i++) seen[prompt[i]] = 1;
    for (int64_t i = 0; i < V; i++) {
        if (seen[i]) l[i] = l[i] > 0 ? l[i] / p->repetition_penalty : l[i] * p->repetition_penalty;
        l[i] -= p->frequency_penalty * cnt[i];
        if (cnt[i] > 0) l[i] -= p->presence_penalty;
    }
    free(cnt);
    free(seen);
}

static const double *ref_sort_key;
static __attribute__((unused)) int ref_cmp_desc(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (ref_sort_key[x] > ref_sort_key[y]) return -1;
    if (ref_sort_key[x] < ref_sort_key[y]) return 1;
    return (x > y) - (x < y);
}

/* Final distribution q[V] (sums to 1) of a random row from processed l:
 * temperature -> min_p -> top_k (ties kept) -> top_p (ties: lower id
 * first). Returns the number of kept tokens. */
static __attribute__((unused)) int64_t ref_filter(const double *l, int64_t V, const smp_req_params *p, double *q) {
    double T = p->temperature < 1e-2 ? 1e-2 : p->temperature;
    double mx = -INFINITY;
    for (int64_t i = 0; i < V; i++) mx = fmax(mx, l[i] / T);
    double s = 0;
    for (int64_t i = 0; i < V; i++) s += q[i] = exp(l[i] / T - mx);
    for (int64_t i = 0; i < V; i++) q[i] /= s;
    double qmax = 0;
    for (int64_t i = 0; i < V; i++) qmax = fmax(qmax, q[i]);
    if (p->min_p > 0)
        for (int64_t i = 0; i < V; i++)
            if (q[i] < p->min_p * qmax) q[i] = 0;
    int32_t *ord = malloc((size_t)V * sizeof *ord);
    for (int64_t i = 0; i < V; i++) ord[i] = (int32_t)i;
    ref_sort_key = q;
    qsort(ord, (size_t)V, sizeof *ord, ref_cmp_desc);
    if (p->top_k > 0 && p->top_k < V) {
        double kth = q[ord[p->top_k - 1]];
        for (int64_t i = 0; i < V; i++)
            if (q[i] < kth) q[i] = 0;
    }
    s = 0;
    for (int64_t i = 0; i < V; i++) s += q[i];
    for (int64_t i = 0; i < V; i++) q[i] /= s;
    if (p->top_p < 1) {
        double acc = 0;
        for (int64_t j = 0; j < V; j++) {
            if (j > 0 && acc >= p->top_p) q[ord[j]] = 0;
            else acc += q[ord[j]];
        }
        s = 0;
        for (int64_t i = 0; i < V; i++) s += q[i];
        for (int64_t i = 0; i < V; i++) q[i] /= s;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++) n += q[i] > 0;
    free(ord);
    return n;
}

/* log_softmax in double. */
static __attribute__((unused)) void ref_log_softmax(const float *x, int64_t V, double *lp) {
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < V; i++) mx = fmax(mx, isnan(x[i]) ? -INFINITY : x[i]);
    for (int64_t i = 0; i < V; i++) s += isnan(x[i]) ? 0 : exp(x[i] - mx);
    for (int64_t i = 0; i < V; i++) lp[i] = (isnan(x[i]) ? -INFINITY : x[i]) - mx - log(s);
}

#endif
