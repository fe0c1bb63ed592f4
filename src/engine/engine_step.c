/* engine_step — eng_step: the synchronous step (schedule -> execute ->
 * update -> outputs) and the async-scheduling pipeline over the runner's
 * execution queue (engine.h, "Async scheduling").
 *
 * VLLM_STEP_TRACE=1: a line per synchronous step on stderr with the host
 * times of its schedule, execute (the model's own trace line, printed
 * inside it, splits that) and output processing. */
#include "engine/engine_int.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Stamp first_scheduled on the requests of a new schedule. */
static void mark_scheduled(const esched_output *so, double now) {
    for (int32_t i = 0; i < so->n_items; i++) {
        eng_req *er = so->items[i].req->user;
        if (er->t.first_scheduled == 0) er->t.first_scheduled = now;
    }
}

/* A finished step's results: keep its logprobs per request, apply its
 * tokens (esched_update), then the deltas of the requests it touched. */
static int process(eng_engine *e, const esched_output *so, const smp_batch_out *res, int32_t *n_outs) {
    int32_t n_sampled = 0;
    for (int32_t i = 0; i < so->n_items; i++) {
        if (!so->items[i].sample) continue;
        ereq *r = so->items[i].req;
        eng_req *er = r->user;
        int32_t k = res->n_logprobs[n_sampled];
        if (k >= 0 && !ereq_is_finished(r)) { /* keep this row's logprobs for the request's delta */
            if (!er->lp_ids) {
                er->lp_ids = malloc((size_t)res->stride * sizeof *er->lp_ids);
                er->lp_vals = malloc((size_t)res->stride * sizeof *er->lp_vals);
                if (!er->lp_ids || !er->lp_vals) return vc_err_set(VC_ERR_OOM, "out of memory");
            }
            memcpy(er->lp_ids, res->lp_ids + (int64_t)n_sampled * res->stride, (size_t)(k + 1) * sizeof(int32_t));
            memcpy(er->lp_vals, res->lp_vals + (int64_t)n_sampled * res->stride, (size_t)(k + 1) * sizeof(float));
            er->n_lp = k + 1;
            er->lp_rank = res->ranks[n_sampled];
        }
        n_sampled++;
    }
    int rc = esched_update(e->sched, so, res->tokens, n_sampled, &e->finished);
    if (rc < 0) return rc;
    double now = vc_now_s();
    for (int32_t i = 0; i < so->n_items && rc == 0; i++)
        if (so->items[i].sample) rc = eng_emit(e, so->items[i].req, now, n_outs);
    for (int32_t i = 0; i < e->finished.n && rc == 0; i++) rc = eng_emit(e, e->finished.reqs[i], now, n_outs);
    return rc;
}

static int emit_aborted(eng_engine *e, int32_t *n_outs) {
    int rc = VC_OK;
    double now = vc_now_s();
    for (int32_t i = 0; i < e->n_aborted && rc == 0; i++) {
        ereq *r = eng_find_live(e, e->aborted[i]);
        if (r) rc = eng_emit(e, r, now, n_outs);
    }
    e->n_aborted = 0;
    return rc;
}

static int step_sync(eng_engine *e, int32_t *n_outs) {
    esched_output *so = &e->so[0];
    double t0 = vc_now_s();
    int rc = esched_schedule(e->sched, so);
    if (rc < 0) return rc;
    double t1 = vc_now_s();
    mark_scheduled(so, t1);
    for (int32_t i = 0; i < so->n_finished; i++) erun_release(e->runner, so->finished_ids[i]);
    static const smp_batch_out none = {0};
    const smp_batch_out *res = &none;
    if (so->n_items > 0) {
        rc = erun_execute(e->runner, so, e->sampled);
        if (rc < 0) return rc;
        res = erun_sample_output(e->runner);
    }
    double t2 = vc_now_s();
    rc = process(e, so, res, n_outs);
    if (vc_step_trace() && so->n_items > 0)
        fprintf(stderr, "engine step trace: %d requests: schedule %.3f ms, execute %.3f ms, outputs %.3f ms\n",
                (int)so->n_items, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (vc_now_s() - t2) * 1e3);
    return rc ? rc : emit_aborted(e, n_outs);
}

/* Async: requests that finished before a schedule may still be named by
 * the steps in flight, so their sampler state goes once those are waited. */
static int defer_release(eng_engine *e, int64_t id) {
    if (e->n_rel == e->cap_rel) {
        int32_t c = e->cap_rel ? 2 * e->cap_rel : 64;
        eng_release *r = realloc(e->rel, (size_t)c * sizeof *r);
        if (!r) return vc_err_set(VC_ERR_OOM, "out of memory");
        e->rel = r;
        e->cap_rel = c;
    }
    e->rel[e->n_rel++] = (eng_release){id, e->last_ticket};
    return VC_OK;
}

static void run_releases(eng_engine *e, int64_t waited) {
    int32_t w = 0;
    for (int32_t i = 0; i < e->n_rel; i++) {
        if (e->rel[i].after <= waited) erun_release(e->runner, e->rel[i].id);
        else e->rel[w++] = e->rel[i];
    }
    e->n_rel = w;
}

/* Schedule and submit step N (its placeholders are step N-1's tokens),
 * then wait for step N-1 and process it while step N runs. With nothing to
 * submit, the step in flight is waited for. */
static int step_async(eng_engine *e, int32_t *n_outs) {
    esched_output *so = &e->so[e->cur]; /* the other one may be in flight */
    int rc = esched_schedule(e->sched, so);
    if (rc < 0) return rc;
    mark_scheduled(so, vc_now_s());
    for (int32_t i = 0; i < so->n_finished; i++)
        if ((rc = defer_release(e, so->finished_ids[i])) < 0) return rc;
    bool submitted = false;
    if (so->n_items > 0) {
        int64_t ticket;
        rc = erun_submit(e->runner, so, &ticket);
        if (rc < 0) return rc;
        e->fl[e->n_fl++] = (eng_inflight){so, ticket};
        e->last_ticket = ticket;
        e->cur ^= 1;
        submitted = true;
    }
    if (e->n_fl == 2 || (e->n_fl == 1 && !submitted)) {
        eng_inflight f = e->fl[0];
        const smp_batch_out *res;
        rc = erun_wait(e->runner, f.ticket, &res);
        if (rc < 0) return rc;
        e->fl[0] = e->fl[1];
        e->n_fl--;
        rc = process(e, f.so, res, n_outs);
        if (rc < 0) return rc;
        run_releases(e, f.ticket);
    } else if (e->n_fl == 0) {
        run_releases(e, e->last_ticket);
    }
    return emit_aborted(e, n_outs);
}

int eng_step(eng_engine *e, eng_output **outs, int32_t *n_outs) {
    *n_outs = 0;
    *outs = e->outs;
    eng_reap(e);
    int rc = e->p.async_scheduling ? step_async(e, n_outs) : step_sync(e, n_outs);
    *outs = e->outs;
    return rc;
}
