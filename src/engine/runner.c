/* runner — creation, per-request sampler state and step staging (the
 * engine thread's side); runner_queue.c runs staged steps. */
#include "engine/runner.h"

#include "base/err.h"
#include "engine/runner_int.h"
#include "runtime/ops.h"
#include "sample/batch.h"
#include "sample/from_request.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void slot_free(erun_slot *sl) {
    free(sl->ids);
    free(sl->pos);
    free(sl->slots);
    free(sl->rows);
    free(sl->slots64);
    free(sl->qsl);
    free(sl->seq_lens);
    free(sl->bt);
    free(sl->plp_req);
    free(sl->plp_pos);
    free(sl->plp_next);
    free(sl->plp_k);
    free(sl->srows);
    free(sl->hist);
    free(sl->hist_off);
    free(sl->hist_len);
    free(sl->fill_ids);
    free(sl->fill_src);
    free(sl->fill_hist);
    free(sl->fill_row);
    free(sl->tokens);
    free(sl->ranks);
    free(sl->n_lp);
    free(sl->lp_ids);
    free(sl->lp_vals);
}

/* Worst-case staging buffers: T tokens, S requests, M blocks a row. */
static int slot_alloc(erun_slot *sl, int64_t T, int64_t S, int64_t M, int32_t stride) {
    sl->ids = malloc((size_t)T * sizeof *sl->ids);
    sl->pos = malloc((size_t)T * sizeof *sl->pos);
    sl->slots = malloc((size_t)T * sizeof *sl->slots);
    sl->rows = malloc((size_t)T * sizeof *sl->rows);
    sl->slots64 = malloc((size_t)T * sizeof *sl->slots64);
    sl->qsl = malloc((size_t)(S + 1) * sizeof *sl->qsl);
    sl->seq_lens = malloc((size_t)S * sizeof *sl->seq_lens);
    sl->bt = malloc((size_t)(S * M) * sizeof *sl->bt);
    sl->plp_req = malloc((size_t)T * sizeof *sl->plp_req);
    sl->plp_pos = malloc((size_t)T * sizeof *sl->plp_pos);
    sl->plp_next = malloc((size_t)T * sizeof *sl->plp_next);
    sl->plp_k = malloc((size_t)T * sizeof *sl->plp_k);
    sl->srows = malloc((size_t)S * sizeof *sl->srows);
    sl->hist_off = malloc((size_t)S * sizeof *sl->hist_off);
    sl->hist_len = malloc((size_t)S * sizeof *sl->hist_len);
    sl->fill_ids = malloc((size_t)S * sizeof *sl->fill_ids);
    sl->fill_src = malloc((size_t)S * sizeof *sl->fill_src);
    sl->fill_hist = malloc((size_t)S * sizeof *sl->fill_hist);
    sl->fill_row = malloc((size_t)S * sizeof *sl->fill_row);
    sl->tokens = malloc((size_t)S * sizeof *sl->tokens);
    sl->ranks = malloc((size_t)S * sizeof *sl->ranks);
    sl->n_lp = malloc((size_t)S * sizeof *sl->n_lp);
    sl->lp_ids = malloc((size_t)(S * stride) * sizeof *sl->lp_ids);
    sl->lp_vals = malloc((size_t)(S * stride) * sizeof *sl->lp_vals);
    if (!sl->ids || !sl->pos || !sl->slots || !sl->rows || !sl->slots64 || !sl->qsl || !sl->seq_lens || !sl->bt ||
        !sl->plp_req || !sl->plp_pos || !sl->plp_next || !sl->plp_k || !sl->srows || !sl->hist_off ||
        !sl->hist_len || !sl->fill_ids || !sl->fill_src || !sl->fill_hist || !sl->fill_row || !sl->tokens ||
        !sl->ranks || !sl->n_lp || !sl->lp_ids || !sl->lp_vals)
        return vc_err_set(VC_ERR_OOM, "runner: out of memory");
    sl->out = (smp_batch_out){.tokens = sl->tokens, .stride = stride, .lp_ids = sl->lp_ids,
                              .lp_vals = sl->lp_vals, .ranks = sl->ranks, .n_logprobs = sl->n_lp};
    return VC_OK;
}

erun_runner *erun_create(mdl_model *m, const erun_params *p) {
    if (p->num_blocks < 2 || p->block_size <= 0 || p->max_num_batched_tokens <= 0 || p->max_num_seqs <= 0 ||
        p->max_model_len <= 0) {
        vc_err_set(VC_ERR_INVALID, "runner: bad parameters");
        return NULL;
    }
    erun_runner *r = calloc(1, sizeof *r);
    if (!r) {
        vc_err_set(VC_ERR_OOM, "runner: out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->m = m;
    r->p = *p;
    r->vocab = mdl_get_config(m)->vocab;
    r->max_blocks = (p->max_model_len + p->block_size - 1) / p->block_size;
    int64_t T = p->max_num_batched_tokens, S = p->max_num_seqs;
    r->kv = mdl_kv_create(m, p->num_blocks, p->block_size);
    if (!r->kv) goto fail;
    smp_batch_params sbp = smp_batch_params_default();
    sbp.vocab = r->vocab;
    sbp.max_batch = (int32_t)S;
    /* Rows sample in parallel: the forward is done, so the host cores are
     * free (at V = 152k a temperature row costs ~0.3 ms on one core). */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    sbp.n_threads = cores > 16 ? 16 : cores > 1 ? (int32_t)cores : 1;
    r->sampler = smp_batch_create(&sbp);
    if (!r->sampler) goto fail;
    int32_t stride = smp_batch_output(r->sampler)->stride;
    for (int i = 0; i < ERUN_SLOTS; i++)
        if (slot_alloc(&r->slots[i], T, S, r->max_blocks, stride) < 0) goto fail;
    /* VLLM_DEVICE_SAMPLING: 0 never, 1 wherever the model can (the CPU
     * too: its op is the host sampler), auto (default) off the CPU. */
    const char *ds = getenv("VLLM_DEVICE_SAMPLING");
    bool ds_on = ds && !strcmp(ds, "1"), ds_off = ds && !strcmp(ds, "0");
    if (ds && *ds && !ds_on && !ds_off && strcmp(ds, "auto")) {
        vc_err_set(VC_ERR_INVALID, "VLLM_DEVICE_SAMPLING must be 0, 1 or auto, got '%s'", ds);
        goto fail;
    }
    r->dev_sample = !ds_off && mdl_can_sample(m) && (ds_on || mdl_device(m) != RT_DEV_CPU);
    /* VLLM_ASYNC_DEVICE_IDS: 1 (default) the device mirror wherever the
     * model can splice (the CPU too, same code path), 0 the host fill. */
    const char *ad = getenv("VLLM_ASYNC_DEVICE_IDS");
    if (ad && *ad && strcmp(ad, "0") && strcmp(ad, "1")) {
        vc_err_set(VC_ERR_INVALID, "VLLM_ASYNC_DEVICE_IDS must be 0 or 1, got '%s'", ad);
        goto fail;
    }
    r->mirror = !(ad && !strcmp(ad, "0")) && mdl_can_mirror(m);
    r->dfp = malloc((size_t)S * RT_SAMPLE_NF * sizeof *r->dfp);
    r->dip = malloc((size_t)S * RT_SAMPLE_NI * sizeof *r->dip);
    r->dus = malloc((size_t)S * sizeof *r->dus);
    r->prev_ids = malloc((size_t)S * sizeof *r->prev_ids);
    r->drow_last = malloc((size_t)S * sizeof *r->drow_last);
    r->dsp_hist = malloc((size_t)S * sizeof *r->dsp_hist);
    if (!r->dfp || !r->dip || !r->dus || !r->prev_ids || !r->drow_last || !r->dsp_hist) {
        vc_err_set(VC_ERR_OOM, "runner: out of memory");
        goto fail;
    }
    r->logits = malloc((size_t)(S * r->vocab) * sizeof *r->logits);
    r->logits_cap = S;
    r->samp_cap = 64;
    while (r->samp_cap < 4 * S) r->samp_cap *= 2;
    r->samp = malloc((size_t)r->samp_cap * sizeof *r->samp);
    if (!r->logits || !r->samp) {
        vc_err_set(VC_ERR_OOM, "runner: out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < r->samp_cap; i++) r->samp[i] = (samp_slot){-1, NULL, 0, 0};
    return r;
fail:
    erun_free(r);
    return NULL;
}

void erun_free(erun_runner *r) {
    if (!r) return;
    erun_stop_worker(r);
    for (int64_t i = 0; r->samp && i < r->samp_cap; i++)
        if (r->samp[i].id >= 0) smp_req_free(r->samp[i].s);
    free(r->samp);
    smp_batch_free(r->sampler);
    mdl_kv_free(r->kv);
    for (int i = 0; i < ERUN_SLOTS; i++) slot_free(&r->slots[i]);
    free(r->logits);
    free(r->dfp);
    free(r->dip);
    free(r->dus);
    free(r->dhist);
    free(r->prev_ids);
    free(r->drow_last);
    free(r->dsp_hist);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static uint64_t mix(int64_t id) {
    uint64_t x = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

static samp_slot *samp_find(erun_runner *r, int64_t id, bool insert) {
    uint64_t mask = (uint64_t)r->samp_cap - 1, i = mix(id) & mask;
    samp_slot *tomb = NULL;
    for (;;) {
        samp_slot *s = &r->samp[i];
        if (s->id == id) return s;
        if (s->id == -2 && !tomb) tomb = s;
        if (s->id == -1) return insert ? (tomb ? tomb : s) : NULL;
        i = (i + 1) & mask;
    }
}

static int samp_grow(erun_runner *r) {
    int64_t old_cap = r->samp_cap;
    samp_slot *old = r->samp;
    r->samp_cap *= 2;
    r->samp = malloc((size_t)r->samp_cap * sizeof *r->samp);
    if (!r->samp) {
        r->samp = old;
        r->samp_cap = old_cap;
        return vc_err_set(VC_ERR_OOM, "runner: out of memory");
    }
    for (int64_t i = 0; i < r->samp_cap; i++) r->samp[i] = (samp_slot){-1, NULL, 0, 0};
    r->samp_used = 0;
    for (int64_t i = 0; i < old_cap; i++)
        if (old[i].id >= 0) {
            *samp_find(r, old[i].id, true) = old[i];
            r->samp_used++;
        }
    free(old);
    return VC_OK;
}

/* Sampler parameters of an engine request: EOS (unless ignored) and the
 * stop ids form the min_tokens stop set. */
static int make_req(const erun_runner *r, const ereq_sampling *qs, smp_req **out) {
    int32_t eos = qs->eos_token_id;
    return smp_req_create_from_ereq(r->sampler, qs, &eos, eos >= 0 ? 1 : 0, out);
}

int erun_validate(const erun_runner *r, const ereq_sampling *sp) {
    smp_req *req = NULL;
    int rc = make_req(r, sp, &req);
    smp_req_free(req);
    return rc;
}

/* The request's sampler state (immutable parameters), created on first use. */
static samp_slot *sampler_for(erun_runner *r, const ereq *q) {
    samp_slot *s = samp_find(r, q->id, false);
    if (s) return s;
    if (2 * (r->samp_used + 1) > r->samp_cap && samp_grow(r) < 0) return NULL;
    smp_req *req = NULL;
    if (make_req(r, &q->sp, &req) < 0) return NULL;
    s = samp_find(r, q->id, true);
    *s = (samp_slot){q->id, req, 0, -1};
    r->samp_used++;
    return s;
}

const smp_batch_out *erun_sample_output(const erun_runner *r) {
    return r->last_out ? r->last_out : smp_batch_output(r->sampler);
}

void erun_set_prompt_lp_cb(erun_runner *r, erun_prompt_lp_fn fn, void *ctx) {
    r->plp_cb = fn;
    r->plp_ctx = ctx;
}

void erun_release(erun_runner *r, int64_t req_id) {
    samp_slot *s = samp_find(r, req_id, false);
    if (!s) return;
    smp_req_free(s->s);
    s->id = -2;
    s->s = NULL;
}

static int hist_reserve(erun_slot *sl, int64_t need) {
    if (need <= sl->hist_cap) return VC_OK;
    int64_t c = sl->hist_cap ? sl->hist_cap : 4096;
    while (c < need) c *= 2;
    int32_t *h = realloc(sl->hist, (size_t)c * sizeof *h);
    if (!h) return vc_err_set(VC_ERR_OOM, "runner: out of memory");
    sl->hist = h;
    sl->hist_cap = c;
    return VC_OK;
}

int erun_stage(erun_runner *r, const esched_output *so, erun_slot **out) {
    int32_t S = so->n_items, T = 0, n_rows = 0, n_fill = 0, B = r->p.block_size;
    int64_t t = r->staged + 1;
    erun_slot *sl = &r->slots[t % ERUN_SLOTS];
    if (S > r->p.max_num_seqs || so->total_tokens > r->p.max_num_batched_tokens)
        return vc_err_set(VC_ERR_INVALID, "runner: step of %d requests / %d tokens exceeds the limits", S,
                          so->total_tokens);
    /* History sizes first: one growth at most, before rows point into it. */
    int64_t hist = 0;
    for (int32_t i = 0; i < S; i++)
        if (so->items[i].sample) hist += (int64_t)so->items[i].req->num_tokens + so->items[i].num_placeholder_inputs;
    if (hist_reserve(sl, hist) < 0) return VC_ERR_OOM;
    sl->qsl[0] = 0;
    hist = 0;
    for (int32_t i = 0; i < S; i++) {
        const esched_item *it = &so->items[i];
        const ereq *q = it->req;
        int32_t nb = 0;
        const int32_t *blocks = kv_seq_block_ids(q->seq, &nb);
        int32_t end = it->start + it->num_tokens, ph = it->num_placeholder_inputs;
        /* At most one token of the request can be in flight (the engine
         * updates step t - 2 before it stages step t); a sampling chunk ends
         * at the last token, the in-flight one included. */
        bool ok = it->num_tokens > 0 && (ph == 0 || ph == 1) &&
                  (it->sample ? end == q->num_tokens + ph : ph == 0 && end <= q->num_tokens) &&
                  (int64_t)nb * B >= end && nb <= r->max_blocks && T + it->num_tokens <= r->p.max_num_batched_tokens;
        if (!ok)
            return vc_err_set(VC_ERR_INVALID, "runner: inconsistent schedule for request %lld", (long long)q->id);
        int32_t known = it->num_tokens - ph;
        memcpy(sl->ids + T, q->tokens + it->start, (size_t)known * sizeof(int32_t));
        if (ph) sl->ids[T + known] = 0; /* placeholder (a valid id until filled) */
        kv_slot_mapping(blocks, nb, B, it->start, it->num_tokens, sl->slots64 + T);
        for (int32_t j = 0; j < it->num_tokens; j++) {
            sl->pos[T + j] = it->start + j;
            sl->slots[T + j] = (int32_t)sl->slots64[T + j];
        }
        int32_t *row = sl->bt + (int64_t)i * r->max_blocks;
        memcpy(row, blocks, (size_t)nb * sizeof *row);
        for (int32_t j = nb; j < r->max_blocks; j++) row[j] = 0; /* null block */
        if (it->sample) {
            samp_slot *ss = sampler_for(r, q);
            if (!ss) return vc_err_prefix("request %lld: sampling parameters", (long long)q->id);
            int32_t k = n_rows;
            /* History: the prompt, the outputs known so far, then the
             * in-flight token (filled by the executor). */
            memcpy(sl->hist + hist, q->tokens, (size_t)q->num_tokens * sizeof(int32_t));
            sl->hist_off[k] = hist;
            sl->hist_len[k] = q->num_tokens + ph;
            sl->srows[k] = (smp_row){ss->s, NULL, q->num_prompt, NULL, q->num_tokens + ph - q->num_prompt};
            if (ph) {
                if (ss->last_ticket != t - 1)
                    return vc_err_set(VC_ERR_INVALID, "runner: request %lld has a token in flight from no step",
                                      (long long)q->id);
                sl->fill_ids[n_fill] = T + it->num_tokens - 1;
                sl->fill_hist[n_fill] = hist + q->num_tokens;
                sl->hist[hist + q->num_tokens] = 0;
                sl->fill_row[n_fill] = k;
                sl->fill_src[n_fill++] = ss->last_row;
            }
            ss->last_ticket = t;
            ss->last_row = k;
            hist += q->num_tokens + ph;
            sl->rows[n_rows++] = T + it->num_tokens - 1;
        }
        T += it->num_tokens;
        sl->qsl[i + 1] = T;
        sl->seq_lens[i] = end;
    }
    for (int32_t k = 0; k < n_rows; k++) {
        sl->srows[k].prompt = sl->hist + sl->hist_off[k];
        sl->srows[k].output = sl->hist + sl->hist_off[k] + sl->srows[k].n_prompt;
    }
    /* Prompt logprobs: rows whose next token is a prompt token, after the
     * sampling rows (the sampler reads rows [0, n_sample)). */
    sl->n_sample = n_rows;
    sl->n_plp = 0;
    if (r->plp_cb) {
        int32_t base = 0;
        for (int32_t i = 0; i < S; i++) {
            const esched_item *it = &so->items[i];
            const ereq *q = it->req;
            if (q->sp.prompt_logprobs >= 0)
                for (int32_t p = it->start; p < it->start + it->num_tokens && p < q->num_prompt - 1; p++) {
                    int32_t j = sl->n_plp++;
                    sl->rows[n_rows++] = base + (p - it->start);
                    sl->plp_req[j] = q;
                    sl->plp_pos[j] = p + 1;
                    sl->plp_next[j] = q->tokens[p + 1];
                    sl->plp_k[j] = q->sp.prompt_logprobs > 63 ? 63 : q->sp.prompt_logprobs;
                }
            base += it->num_tokens;
        }
    }
    sl->ticket = t;
    sl->S = S;
    sl->T = T;
    sl->n_fill = n_fill;
    sl->mt = 0;
    sl->pending = false;
    sl->rc = 0;
    sl->err[0] = 0;
    r->staged = t;
    *out = sl;
    return VC_OK;
}

int erun_execute(erun_runner *r, const esched_output *so, int32_t *sampled) {
    if (r->worker_on) return vc_err_set(VC_ERR_INVALID, "runner: erun_execute while the execution queue runs");
    if (so->n_items == 0) return VC_OK;
    erun_slot *sl;
    int rc = erun_stage(r, so, &sl);
    if (rc < 0) return rc;
    erun_exec_slot(r, sl);
    r->waited = r->done = r->submitted = sl->ticket;
    if (sl->rc < 0) return vc_err_set(sl->rc, "%s", sl->err);
    rc = erun_collect_slot(r, sl);
    if (rc < 0) return rc;
    memcpy(sampled, sl->tokens, (size_t)sl->n_sample * sizeof *sampled);
    r->last_out = &sl->out;
    return VC_OK;
}
