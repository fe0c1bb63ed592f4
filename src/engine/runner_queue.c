/* runner_queue — running staged steps (forward, prompt logprobs, sampling),
 * and the execution queue that runs them in order on a worker thread for
 * async scheduling. With the device mirror (runner_int.h) a step whose ids
 * are reduced on the device is only enqueued here; erun_collect_slot gets
 * its ids. */
#include "engine/runner.h"

#include "base/err.h"
#include "engine/runner_int.h"
#include "runtime/ops.h"

#include <stdio.h>
#include <string.h>

/* Every row of the step can be sampled on the device (and some row is not
 * plain greedy, which the argmax path serves). */
static bool device_step(const erun_runner *r, const erun_slot *sl) {
    if (!r->dev_sample || sl->n_plp != 0 || sl->n_sample == 0) return false;
    for (int32_t i = 0; i < sl->n_sample; i++)
        if (!smp_row_plain_ok(&sl->srows[i])) return false;
    return true;
}

/* The step with its rows sampled on the device (mdl_forward_batch_sample):
 * the uniforms come from the host sampler's streams exactly as a host step
 * would draw them, and penalised rows send their history (the prompt only
 * when the repetition penalty reads it). */
static int exec_device_sample(erun_runner *r, erun_slot *sl, const mdl_batch *b, mdl_splice *sp) {
    int32_t n = sl->n_sample;
    int64_t nh = 0;
    for (int32_t i = 0; i < n; i++) {
        smp_plain p = smp_row_plain(&sl->srows[i]);
        if (p.penalties) nh += (p.repetition != 1.0f ? sl->srows[i].n_prompt : 0) + sl->srows[i].n_output;
    }
    if (nh > r->dhist_cap) {
        int64_t cap = nh * 2;
        int32_t *h = realloc(r->dhist, (size_t)cap * sizeof *h);
        if (!h) return vc_err_set(VC_ERR_OOM, "runner: out of memory");
        r->dhist = h;
        r->dhist_cap = cap;
    }
    smp_batch_uniforms(r->sampler, sl->srows, n, r->dus);
    nh = 0;
    for (int32_t i = 0; i < n; i++) {
        const smp_row *row = &sl->srows[i];
        smp_plain p = smp_row_plain(row);
        int32_t np = 0, no = 0, off = (int32_t)nh;
        r->drow_last[i] = -1;
        if (p.penalties) {
            np = p.repetition != 1.0f ? row->n_prompt : 0;
            no = row->n_output;
            memcpy(r->dhist + nh, row->prompt, (size_t)np * sizeof *r->dhist);
            memcpy(r->dhist + nh + np, row->output, (size_t)no * sizeof *r->dhist);
            if (no > 0) r->drow_last[i] = (int32_t)(nh + np + no - 1);
            nh += np + no;
        }
        rt_sample_row(r->dfp + (int64_t)i * RT_SAMPLE_NF, r->dip + (int64_t)i * RT_SAMPLE_NI, p.temperature, p.top_p,
                      p.min_p, p.top_k, p.repetition, p.frequency, p.presence, off, np, no, r->dus[i]);
    }
    mdl_sample_args sa = {.fparams = r->dfp, .iparams = r->dip, .hist = nh ? r->dhist : NULL, .n_hist = nh};
    int rc;
    if (r->mirror) { /* in-flight tokens are the last outputs of their rows' histories */
        for (int32_t i = 0; i < sp->n; i++) r->dsp_hist[i] = r->drow_last[sl->fill_row[i]];
        sp->hist = sp->n ? r->dsp_hist : NULL;
        rc = mdl_forward_batch_sample_async(r->m, r->kv, b, &sa, sp, &sl->mt);
        sl->pending = rc == 0;
    } else {
        rc = mdl_forward_batch_sample(r->m, r->kv, b, &sa, sl->tokens);
    }
    for (int32_t i = 0; i < n; i++) {
        sl->ranks[i] = 0; /* as the host sampler for rows without logprobs */
        sl->n_lp[i] = -1;
    }
    return rc;
}

/* The step's in-flight tokens (the previous step's samples). Device
 * mirror: a splice from the previous step's ticket (the host copies stay
 * 0); host fill: copied from its results, ours to read until it is waited
 * for. */
static int fill_inputs(erun_runner *r, erun_slot *sl, mdl_splice *sp) {
    *sp = (mdl_splice){0};
    if (!sl->n_fill) return VC_OK;
    const erun_slot *prev = &r->slots[(sl->ticket - 1) % ERUN_SLOTS];
    if (prev->ticket != sl->ticket - 1) return vc_err_set(VC_ERR_INVALID, "runner: previous step not resident");
    if (prev->rc < 0) return vc_err_set(VC_ERR_RUNTIME, "runner: the previous step failed");
    if (r->mirror) {
        if (prev->mt <= 0) return vc_err_set(VC_ERR_INVALID, "runner: the previous step left no sampled ids");
        *sp = (mdl_splice){.prev = prev->mt, .n = sl->n_fill, .rows = sl->fill_ids, .src = sl->fill_src};
        return VC_OK;
    }
    for (int32_t i = 0; i < sl->n_fill; i++) {
        int32_t tok = prev->tokens[sl->fill_src[i]];
        sl->ids[sl->fill_ids[i]] = tok;
        if (sl->fill_hist[i] >= 0) sl->hist[sl->fill_hist[i]] = tok;
    }
    return VC_OK;
}

/* Device mirror, a step sampled on the host: its rows' histories need the
 * in-flight tokens on the host (seen through mdl_collect, never read while
 * their copy may be in flight). */
static int fill_host_history(erun_runner *r, erun_slot *sl, const mdl_splice *sp) {
    if (!r->mirror || sp->n == 0) return VC_OK;
    int rc = mdl_collect(r->m, sp->prev, r->prev_ids);
    if (rc < 0) return rc;
    for (int32_t i = 0; i < sl->n_fill; i++) {
        int32_t tok = r->prev_ids[sl->fill_src[i]];
        sl->ids[sl->fill_ids[i]] = tok;
        if (sl->fill_hist[i] >= 0) sl->hist[sl->fill_hist[i]] = tok;
    }
    return VC_OK;
}

static int exec_slot(erun_runner *r, erun_slot *sl) {
    mdl_splice sp;
    int rc = fill_inputs(r, sl, &sp);
    if (rc < 0) return rc;
    int32_t n_logits = sl->n_sample + sl->n_plp;
    if (n_logits > r->logits_cap) {
        float *l = realloc(r->logits, (size_t)n_logits * (size_t)r->vocab * sizeof *l);
        if (!l) return vc_err_set(VC_ERR_OOM, "runner: out of memory for prompt logprobs");
        r->logits = l;
        r->logits_cap = n_logits;
    }
    mdl_batch b = {.n_tokens = sl->T, .ids = sl->ids, .positions = sl->pos, .slots = sl->slots, .n_seqs = sl->S,
                   .qsl = sl->qsl, .seq_lens = sl->seq_lens, .block_tables = sl->bt, .max_blocks = r->max_blocks,
                   .n_logits = n_logits, .logit_rows = sl->rows};
    /* Only plain greedy rows: the argmax is taken where the logits are (on
     * the GPU, [n] ids come back instead of [n, V] floats). */
    bool argmax_only = sl->n_plp == 0 && sl->n_sample > 0;
    for (int32_t i = 0; argmax_only && i < sl->n_sample; i++) argmax_only = smp_row_plain_greedy(&sl->srows[i]);
    if (argmax_only) {
        if (r->mirror) {
            rc = mdl_forward_batch_argmax_async(r->m, r->kv, &b, &sp, &sl->mt);
            sl->pending = rc == 0;
        } else {
            rc = mdl_forward_batch_argmax(r->m, r->kv, &b, sl->tokens);
        }
        for (int32_t i = 0; i < sl->n_sample; i++) {
            sl->ranks[i] = 1;
            sl->n_lp[i] = -1;
        }
        return rc;
    }
    if (device_step(r, sl)) return exec_device_sample(r, sl, &b, &sp);
    rc = r->mirror ? mdl_forward_batch_splice(r->m, r->kv, &b, &sp, r->logits)
                   : mdl_forward_batch(r->m, r->kv, &b, r->logits);
    if (rc == 0) rc = fill_host_history(r, sl, &sp);
    if (rc < 0) return rc;
    for (int32_t j = 0; j < sl->n_plp; j++) {
        int32_t k = sl->plp_k[j], rank = 0, ids[64];
        float vals[64];
        rc = smp_prompt_logprobs(r->logits + (int64_t)(sl->n_sample + j) * r->vocab, 1, r->vocab, &sl->plp_next[j],
                                 k, ids, vals, &rank);
        if (rc < 0) return rc;
        r->plp_cb(r->plp_ctx, sl->plp_req[j], sl->plp_pos[j], ids, vals, k + 1, rank);
    }
    if (sl->n_sample == 0) return VC_OK;
    rc = smp_batch_sample(r->sampler, r->logits, sl->srows, sl->n_sample);
    if (rc < 0) return rc;
    /* The sampler's output is overwritten by the next step: keep a copy. */
    const smp_batch_out *o = smp_batch_output(r->sampler);
    int32_t n = sl->n_sample;
    memcpy(sl->tokens, o->tokens, (size_t)n * sizeof *sl->tokens);
    memcpy(sl->ranks, o->ranks, (size_t)n * sizeof *sl->ranks);
    memcpy(sl->n_lp, o->n_logprobs, (size_t)n * sizeof *sl->n_lp);
    for (int32_t i = 0; i < n; i++)
        if (o->n_logprobs[i] >= 0) {
            int64_t off = (int64_t)i * o->stride;
            memcpy(sl->lp_ids + off, o->lp_ids + off, (size_t)(o->n_logprobs[i] + 1) * sizeof *sl->lp_ids);
            memcpy(sl->lp_vals + off, o->lp_vals + off, (size_t)(o->n_logprobs[i] + 1) * sizeof *sl->lp_vals);
        }
    /* The next step may splice these on the device. */
    return r->mirror ? mdl_mirror_put(r->m, sl->tokens, n, &sl->mt) : VC_OK;
}

void erun_exec_slot(erun_runner *r, erun_slot *sl) {
    sl->mt = 0;
    sl->pending = false;
    sl->rc = exec_slot(r, sl);
    if (sl->rc < 0) snprintf(sl->err, sizeof sl->err, "%s", vc_err_msg());
}

int erun_collect_slot(erun_runner *r, erun_slot *sl) {
    if (!sl->pending) return VC_OK;
    sl->pending = false;
    return mdl_collect(r->m, sl->mt, sl->tokens);
}

/* The worker: runs submitted steps strictly in order. After a failure the
 * later steps fail too without running (their inputs may depend on it). */
static void *worker_main(void *arg) {
    erun_runner *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && r->done == r->submitted) pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop) break;
        erun_slot *sl = &r->slots[(r->done + 1) % ERUN_SLOTS];
        const erun_slot *prev = &r->slots[r->done % ERUN_SLOTS];
        bool failed = r->done > 0 && prev->ticket == r->done && prev->rc < 0;
        pthread_mutex_unlock(&r->mu);
        if (failed) {
            sl->rc = VC_ERR_RUNTIME;
            snprintf(sl->err, sizeof sl->err, "runner: an earlier step failed");
        } else {
            erun_exec_slot(r, sl);
        }
        pthread_mutex_lock(&r->mu);
        r->done++;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int erun_start_worker(erun_runner *r) {
    if (r->worker_on) return VC_OK;
    pthread_mutex_lock(&r->mu);
    r->stop = false;
    r->submitted = r->done = r->staged;
    r->waited = r->staged;
    pthread_mutex_unlock(&r->mu);
    if (pthread_create(&r->worker, NULL, worker_main, r) != 0)
        return vc_err_set(VC_ERR_RUNTIME, "runner: cannot start the execution thread");
    r->worker_on = true;
    return VC_OK;
}

void erun_stop_worker(erun_runner *r) {
    if (!r->worker_on) return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->worker, NULL); /* a step already running finishes first */
    r->worker_on = false;
    /* Steps enqueued but never waited for: see their copies complete (the
     * model reuses their buffers only then). */
    for (int64_t t = r->waited + 1; t <= r->done; t++) (void)erun_collect_slot(r, &r->slots[t % ERUN_SLOTS]);
    r->done = r->submitted = r->waited = r->staged;
}

int erun_submit(erun_runner *r, const esched_output *so, int64_t *ticket) {
    if (!r->worker_on) return vc_err_set(VC_ERR_INVALID, "runner: no execution queue");
    if (r->staged - r->waited > 1)
        return vc_err_set(VC_ERR_INVALID, "runner: wait for step %lld before submitting another",
                          (long long)(r->waited + 1));
    erun_slot *sl;
    int rc = erun_stage(r, so, &sl);
    if (rc < 0) return rc;
    pthread_mutex_lock(&r->mu);
    r->submitted = sl->ticket;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    *ticket = sl->ticket;
    return VC_OK;
}

int erun_wait(erun_runner *r, int64_t ticket, const smp_batch_out **out) {
    if (!r->worker_on || ticket != r->waited + 1 || ticket > r->staged)
        return vc_err_set(VC_ERR_INVALID, "runner: wait for step %lld out of order", (long long)ticket);
    pthread_mutex_lock(&r->mu);
    while (r->done < ticket) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    r->waited = ticket;
    erun_slot *sl = &r->slots[ticket % ERUN_SLOTS];
    if (sl->rc < 0) return vc_err_set(sl->rc, "%s", sl->err);
    /* The step's ids reach the host only now. A failure here is not
     * recorded in sl->rc (the worker reads that): eng_step fails anyway. */
    int rc = erun_collect_slot(r, sl);
    if (rc < 0) return rc;
    *out = &sl->out;
    return VC_OK;
}
