/* sample_int — the batch sampler's internals, shared by its .c files
 * (params.c, processors.c, topk_topp.c, logprobs.c, batch.c) and tests.
 * Not part of the public API: the runner uses sample/batch.h.
 */
#ifndef SMP_SAMPLE_INT_H
#define SMP_SAMPLE_INT_H

#include "sample/batch.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define SMP_SAMPLING_EPS 1e-5f /* temperature below this: greedy */
#define SMP_MIN_TEMP 1e-2f     /* vLLM's _MAX_TEMP: smaller positive temperatures are raised to it */
#define SMP_HIST_BUCKETS 4096  /* top-p radix histogram: level 0 x 4 lanes, or level 1 */

/* A validated request: params with every pointer aimed at owned copies. */
struct smp_req {
    smp_req_params p;
    int32_t *stop_ids, *allowed, *bad_words, *bad_word_lens;
    smp_bias *bias;
    bool greedy;      /* temperature < SMP_SAMPLING_EPS */
    bool penalties;   /* any of the three penalties is not a no-op */
    int64_t top_k;    /* effective: 0 off, else 1 .. V-1 */
};

struct smp_batch {
    smp_batch_params p;
    smp_rng rng;        /* unseeded requests */
    /* Per-row scratch, reused row after row ([V] each unless noted). */
    float *raw;         /* copy of the raw row for raw logprobs */
    float *fwork;       /* allowed-ids values; top-k heap */
    float *ev;          /* exp(x - max) by token id, valid for candidates */
    int32_t *idx;       /* candidate token ids */
    uint32_t *mark;     /* penalty stamps: epoch = prompt-only, epoch + 1 = in output */
    int32_t *cnt;       /* output counts, valid where mark == epoch + 1 */
    int32_t *touched;   /* distinct tokens stamped this row */
    uint32_t epoch;
    double *hmass;      /* [SMP_HIST_BUCKETS] */
    int32_t *hcnt;      /* [SMP_HIST_BUCKETS] */
    smp_batch_out out;
    /* Parallel rows (batch_par.c): lanes[t] are clones with their own
     * scratch whose `out` aliases this one's arrays (rows write disjoint
     * entries); NULL when n_threads <= 1. is_lane: a clone (owns no out). */
    struct smp_pool *pool;
    bool is_lane;
};

/* batch.c: one row, with u the uniform an unseeded sampled row draws
 * (pre-drawn in row order so parallel rows see the serial sequence). */
int smp_sample_row(smp_batch *b, float *x, const smp_row *row, int32_t i, double u);
/* batch_par.c */
int smp_pool_create(smp_batch *b, int32_t n_threads);
void smp_pool_free(smp_batch *b);
int smp_pool_run(smp_batch *b, float *logits, const smp_row *rows, int32_t n, const double *us);
smp_batch *smp_batch_lane_create(const smp_batch *parent);

/* processors.c: each edits one row x [V] in place. */
void smp_apply_allowed(float *x, int64_t V, const int32_t *ids, int32_t n, float *save);
void smp_apply_bad_words(float *x, const smp_req *r, const int32_t *out, int32_t n_out);
void smp_apply_min_tokens(float *x, const smp_req *r, int32_t n_out);
void smp_apply_logit_bias(float *x, const smp_req *r);
/* Returns VC_ERR_INVALID for a history id outside [0, V). */
int smp_apply_penalties(smp_batch *b, float *x, const smp_req *r, const int32_t *prompt, int32_t n_prompt,
                        const int32_t *out, int32_t n_out);

/* topk_topp.c: temperature -> min_p -> top_k -> top_p -> draw with u in
 * [0, 1). Leaves the processed logits in x (filtered tokens -inf). */
int32_t smp_draw(smp_batch *b, float *x, const smp_req *r, double u);

/* rowops.c: vectorised passes over a row. */
float smp_ops_sanitize_max(float *x, int64_t V);            /* NaN -> -inf; returns the max */
float smp_ops_max(const float *x, int64_t V);               /* x without NaN */
float smp_ops_div_max(float *x, int64_t V, float T);        /* x /= T; returns the max */
int64_t smp_ops_find(const float *x, int64_t V, float v);   /* first i with x[i] == v, else 0 */
double smp_ops_exp_mask(float *x, float *ev, int64_t V, float mx, float cut);
double smp_ops_sumexp(const float *x, int64_t V, float mx);  /* NaN read as -inf */
float smp_ops_kth_largest(const float *x, int64_t V, int64_t k, float lo, float *heap);

/* logprobs.c: log_softmax stats of x [V] (NaN read as -inf): ids/vals[0]
 * get tok and its logprob, [1..k] the top k descending (ties: lowest id
 * first); *rank = #tokens whose logit >= tok's. as_logits: vals are the
 * logits themselves (vLLM's *_logits modes). */
void smp_row_logprobs(const float *x, int64_t V, int32_t tok, int32_t k, bool as_logits, int32_t *ids, float *vals,
                      int32_t *rank);

#endif
