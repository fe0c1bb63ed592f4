/* One request in flight for the C API: see capi_internal.h. */
#include "capi/capi_internal.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

int capi_call_init(capi_call *c, vllm_engine *e) {
    memset(c, 0, sizeof *c);
    c->eng = e;
    if (pthread_mutex_init(&c->mu, NULL) != 0) return -1;
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        return -1;
    }
    return 0;
}

void capi_call_destroy(capi_call *c) {
    vc_sb_free(&c->text);
    free(c->ids);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

/* The static finish reason matching the engine's string. */
static const char *static_reason(const char *r) {
    static const char *const known[] = {"stop", "length", "abort", "error"};
    for (size_t i = 0; r && i < sizeof known / sizeof *known; i++)
        if (!strcmp(r, known[i])) return known[i];
    return r ? "error" : NULL;
}

static void gather(capi_call *c, const eng_output *o) {
    if (c->keep_text && o->text_len) vc_sb_append(&c->text, o->text, o->text_len);
    if (c->keep_ids && o->n_token_ids > 0) {
        if (c->n_ids + o->n_token_ids > c->cap_ids) {
            int32_t cap = c->cap_ids ? c->cap_ids : 64;
            while (cap < c->n_ids + o->n_token_ids) cap *= 2;
            int32_t *p = realloc(c->ids, (size_t)cap * sizeof *p);
            if (!p) {
                c->oom = true;
                return;
            }
            c->ids = p;
            c->cap_ids = cap;
        }
        memcpy(c->ids + c->n_ids, o->token_ids, (size_t)o->n_token_ids * sizeof *o->token_ids);
        c->n_ids += o->n_token_ids;
    }
}

/* Engine-thread callback for every delta of the request. */
static void on_output(void *user, const eng_output *o) {
    capi_call *c = user;
    pthread_mutex_lock(&c->mu);
    gather(c, o);
    bool stopped = c->stopped;
    if (o->finished) {
        c->finish_reason = static_reason(o->finish_reason);
        c->usage = o->usage;
        c->failed = c->finish_reason && !strcmp(c->finish_reason, "error");
    }
    pthread_mutex_unlock(&c->mu);

    bool go = true;
    if (!stopped && c->deliver) go = c->deliver(c, o);

    pthread_mutex_lock(&c->mu);
    if (!go && !c->stopped) {
        c->stopped = true;
        if (!o->finished) {
            if (c->have_id)
                aeng_abort(c->eng->a, c->id); /* allowed from a callback */
            else
                c->want_abort = true;     /* the submitter aborts once it has the id */
        }
    }
    if (o->finished) {
        c->done = true; /* the last touch of c on this thread */
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

bool capi_deliver_text(capi_call *c, const eng_output *o) {
    return c->cb(o->text ? o->text : "", o->finished, c->user);
}

vllm_status capi_call_submit(capi_call *c, const char *text, const int32_t *ids, int32_t n,
                             const ereq_sampling *sp) {
    int64_t id = -1;
    int rc = text ? aeng_submit_text(c->eng->a, text, sp, on_output, c, &id)
                  : aeng_submit_tokens(c->eng->a, ids, n, sp, on_output, c, &id);
    if (rc < 0) return capi_from_vc(rc, "submit");
    pthread_mutex_lock(&c->mu);
    c->id = id;
    c->have_id = true;
    if (c->want_abort && !c->done) aeng_abort(c->eng->a, id);
    pthread_mutex_unlock(&c->mu);
    return VLLM_OK;
}

void capi_call_abort(capi_call *c) {
    pthread_mutex_lock(&c->mu);
    if (!c->done) {
        if (c->have_id)
            aeng_abort(c->eng->a, c->id);
        else
            c->want_abort = true;
    }
    pthread_mutex_unlock(&c->mu);
}

void capi_call_wait(capi_call *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}
