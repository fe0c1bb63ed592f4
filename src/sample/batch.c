/* The batch sampler: scratch, generators, and the per-row pipeline. */
#include "sample/sample_int.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

smp_batch_params smp_batch_params_default(void) {
    smp_batch_params p;
    memset(&p, 0, sizeof p);
    p.max_batch = 256;
    p.max_logprobs = 20;
    p.logprobs_mode = SMP_LOGPROBS_RAW;
    return p;
}

static smp_batch *batch_alloc(const smp_batch_params *p, bool lane) {
    if (p->vocab <= 0 || p->vocab > INT32_MAX) {
        vc_err_set(VC_ERR_INVALID, "sampler: vocab size %lld out of range", (long long)p->vocab);
        return NULL;
    }
    if (p->max_batch <= 0 || p->max_logprobs < 0 || p->max_logprobs > 1 << 20) {
        vc_err_set(VC_ERR_INVALID, "sampler: bad max_batch %d or max_logprobs %d", p->max_batch, p->max_logprobs);
        return NULL;
    }
    if (p->logprobs_mode < SMP_LOGPROBS_RAW || p->logprobs_mode > SMP_LOGITS_PROCESSED) {
        vc_err_set(VC_ERR_INVALID, "sampler: unknown logprobs mode %d", (int)p->logprobs_mode);
        return NULL;
    }
    smp_batch *b = calloc(1, sizeof *b);
    if (!b) goto oom;
    b->p = *p;
    b->is_lane = lane;
    size_t V = (size_t)p->vocab, B = (size_t)p->max_batch, S = (size_t)p->max_logprobs + 1;
    b->raw = malloc(V * sizeof *b->raw);
    b->fwork = malloc(V * sizeof *b->fwork);
    b->ev = malloc(V * sizeof *b->ev);
    b->idx = malloc(V * sizeof *b->idx);
    b->mark = calloc(V, sizeof *b->mark);
    b->cnt = malloc(V * sizeof *b->cnt);
    b->touched = malloc(V * sizeof *b->touched);
    b->hmass = malloc(SMP_HIST_BUCKETS * sizeof *b->hmass);
    b->hcnt = malloc(SMP_HIST_BUCKETS * sizeof *b->hcnt);
    b->out.stride = (int32_t)S;
    if (!lane) {
        b->out.tokens = malloc(B * sizeof *b->out.tokens);
        b->out.lp_ids = malloc(B * S * sizeof *b->out.lp_ids);
        b->out.lp_vals = malloc(B * S * sizeof *b->out.lp_vals);
        b->out.ranks = malloc(B * sizeof *b->out.ranks);
        b->out.n_logprobs = malloc(B * sizeof *b->out.n_logprobs);
        if (!b->out.tokens || !b->out.lp_ids || !b->out.lp_vals || !b->out.ranks || !b->out.n_logprobs) goto oom;
    }
    if (!b->raw || !b->fwork || !b->ev || !b->idx || !b->mark || !b->cnt || !b->touched || !b->hmass || !b->hcnt)
        goto oom;
    b->epoch = 2;
    uint64_t seed = p->has_seed ? p->seed : (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)b;
    smp_rng_seed(&b->rng, seed);
    return b;
oom:
    smp_batch_free(b);
    vc_err_set(VC_ERR_OOM, "sampler: out of memory");
    return NULL;
}

smp_batch *smp_batch_create(const smp_batch_params *p) {
    smp_batch *b = batch_alloc(p, false);
    if (b && p->n_threads > 1 && smp_pool_create(b, p->n_threads) < 0) {
        smp_batch_free(b);
        return NULL;
    }
    return b;
}

smp_batch *smp_batch_lane_create(const smp_batch *parent) {
    smp_batch *l = batch_alloc(&parent->p, true);
    if (l) {
        l->out = parent->out; /* shared result arrays */
    }
    return l;
}

void smp_batch_free(smp_batch *b) {
    if (!b) return;
    smp_pool_free(b);
    free(b->raw);
    free(b->fwork);
    free(b->ev);
    free(b->idx);
    free(b->mark);
    free(b->cnt);
    free(b->touched);
    free(b->hmass);
    free(b->hcnt);
    if (b->is_lane) {
        free(b);
        return;
    }
    free(b->out.tokens);
    free(b->out.lp_ids);
    free(b->out.lp_vals);
    free(b->out.ranks);
    free(b->out.n_logprobs);
    free(b);
}

const smp_batch_out *smp_batch_output(const smp_batch *b) { return &b->out; }
int32_t smp_batch_max_logprobs(const smp_batch *b) { return b->p.max_logprobs; }

/* Counter-based: a fresh xoshiro state from (seed, step), one draw. The
 * seed is hashed first so that (seed, step) and (seed + 1, step - 1) differ. */
double smp_seeded_uniform(uint64_t seed, int32_t step) {
    smp_rng g;
    smp_rng_seed(&g, seed);
    uint64_t h = smp_rng_next(&g);
    smp_rng_seed(&g, h ^ ((uint64_t)(uint32_t)step * 0xD1B54A32D192ED03ull));
    return smp_rng_uniform(&g);
}

int smp_sample_row(smp_batch *b, float *x, const smp_row *row, int32_t i, double u) {
    const smp_req *r = row->req;
    const int64_t V = b->p.vocab;
    const int32_t k = r->p.logprobs;
    const bool raw = b->p.logprobs_mode == SMP_LOGPROBS_RAW || b->p.logprobs_mode == SMP_LOGITS_RAW;
    if (k >= 0 && raw) memcpy(b->raw, x, (size_t)V * sizeof *x);
    float mx = smp_ops_sanitize_max(x, V); /* NaN -> -inf; the processors keep it NaN-free */
    bool edited = false;
    if (r->p.n_allowed > 0) smp_apply_allowed(x, V, r->allowed, r->p.n_allowed, b->fwork), edited = true;
    if (r->p.n_bad_words > 0) smp_apply_bad_words(x, r, row->output, row->n_output), edited = true;
    if (r->p.min_tokens > 0) smp_apply_min_tokens(x, r, row->n_output), edited = true;
    if (r->p.n_logit_bias > 0) smp_apply_logit_bias(x, r), edited = true;
    if (r->penalties) {
        if (smp_apply_penalties(b, x, r, row->prompt, row->n_prompt, row->output, row->n_output) < 0)
            return vc_err_prefix("sampler row %d", i);
        edited = true;
    }
    int32_t tok;
    if (r->greedy) {
        if (edited) mx = smp_ops_max(x, V);
        tok = (int32_t)smp_ops_find(x, V, mx); /* lowest id among maxima */
    } else {
        if (r->p.has_seed) u = smp_seeded_uniform(r->p.seed, row->n_output);
        tok = smp_draw(b, x, r, u);
    }
    b->out.tokens[i] = tok;
    b->out.n_logprobs[i] = k;
    if (k >= 0) {
        const bool logits = b->p.logprobs_mode == SMP_LOGITS_RAW || b->p.logprobs_mode == SMP_LOGITS_PROCESSED;
        int64_t o = (int64_t)i * b->out.stride;
        smp_row_logprobs(raw ? b->raw : x, V, tok, k, logits, b->out.lp_ids + o, b->out.lp_vals + o, b->out.ranks + i);
    } else {
        b->out.ranks[i] = 0;
    }
    return VC_OK;
}

static int check_rows(const smp_batch *b, const float *logits, const smp_row *rows, int32_t n) {
    if (n < 0 || n > b->p.max_batch)
        return vc_err_set(VC_ERR_INVALID, "sampler: %d rows, at most %d", n, b->p.max_batch);
    if (n > 0 && (!logits || !rows)) return vc_err_set(VC_ERR_INVALID, "sampler: NULL logits or rows");
    for (int32_t i = 0; i < n; i++) {
        const smp_row *row = &rows[i];
        if (!row->req || row->n_prompt < 0 || row->n_output < 0 || (row->n_prompt > 0 && !row->prompt) ||
            (row->n_output > 0 && !row->output))
            return vc_err_set(VC_ERR_INVALID, "sampler row %d: missing request or history", i);
    }
    return VC_OK;
}

static int sample_rows(smp_batch *b, float *logits, const smp_row *rows, int32_t n, const double *us) {
    if (b->pool && n > 1) return smp_pool_run(b, logits, rows, n, us);
    int rc = VC_OK;
    for (int32_t i = 0; i < n && rc == VC_OK; i++)
        rc = smp_sample_row(b, logits + (int64_t)i * b->p.vocab, &rows[i], i, us[i]);
    return rc;
}

int smp_batch_sample(smp_batch *b, float *logits, const smp_row *rows, int32_t n) {
    int rc = check_rows(b, logits, rows, n);
    if (rc < 0) return rc;
    /* Unseeded sampled rows take the batch generator's draws in row order,
     * whichever thread then samples the row. */
    double us_small[64], *us = n <= 64 ? us_small : malloc((size_t)n * sizeof *us);
    if (!us) return vc_err_set(VC_ERR_OOM, "sampler: out of memory");
    for (int32_t i = 0; i < n; i++) {
        const smp_req *r = rows[i].req;
        us[i] = !r->greedy && !r->p.has_seed ? smp_rng_uniform(&b->rng) : 0.0;
    }
    rc = sample_rows(b, logits, rows, n, us);
    if (us != us_small) free(us);
    return rc;
}

int smp_batch_sample_us(smp_batch *b, float *logits, const smp_row *rows, int32_t n, const double *us) {
    int rc = check_rows(b, logits, rows, n);
    if (rc < 0) return rc;
    for (int32_t i = 0; i < n; i++)
        if (rows[i].req->p.has_seed)
            return vc_err_set(VC_ERR_INVALID, "sampler row %d: given uniforms need unseeded requests", i);
    return sample_rows(b, logits, rows, n, us);
}

void smp_batch_uniforms(smp_batch *b, const smp_row *rows, int32_t n, double *us) {
    for (int32_t i = 0; i < n; i++) {
        const smp_req *r = rows[i].req;
        if (r->greedy) us[i] = 0.0;
        else if (r->p.has_seed) us[i] = smp_seeded_uniform(r->p.seed, rows[i].n_output);
        else us[i] = smp_rng_uniform(&b->rng);
    }
}

bool smp_row_plain_ok(const smp_row *row) {
    const smp_req *r = row->req;
    return r->p.logprobs < 0 && r->p.n_allowed == 0 && r->p.n_bad_words == 0 && r->p.n_logit_bias == 0 &&
           !(r->p.min_tokens > 0 && r->p.n_stop_ids > 0 && row->n_output < r->p.min_tokens);
}

smp_plain smp_row_plain(const smp_row *row) {
    const smp_req *r = row->req;
    smp_plain p = {.temperature = r->greedy ? 0.0f : r->p.temperature, .top_p = r->p.top_p, .min_p = r->p.min_p,
                   .repetition = r->p.repetition_penalty, .frequency = r->p.frequency_penalty,
                   .presence = r->p.presence_penalty, .top_k = (int32_t)r->top_k, .penalties = r->penalties};
    return p;
}

int smp_req_create_plain(const smp_batch *b, const smp_plain *p, smp_req **out) {
    smp_req_params rp = smp_req_params_default();
    rp.temperature = p->temperature;
    rp.top_p = p->top_p;
    rp.min_p = p->min_p;
    rp.top_k = p->top_k;
    rp.repetition_penalty = p->repetition;
    rp.frequency_penalty = p->frequency;
    rp.presence_penalty = p->presence;
    return smp_req_create(b, &rp, out);
}

bool smp_row_plain_greedy(const smp_row *row) {
    const smp_req *r = row->req;
    return r->greedy && r->p.logprobs < 0 && !r->penalties && r->p.n_allowed == 0 && r->p.n_bad_words == 0 &&
           r->p.n_logit_bias == 0 && !(r->p.min_tokens > 0 && r->p.n_stop_ids > 0 && row->n_output < r->p.min_tokens);
}
