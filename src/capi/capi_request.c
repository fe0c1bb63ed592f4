/* vllm_request_*: a non-blocking request is a heap capi_call plus the
 * status and message its waiter reads. */
#include "capi/capi_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vllm_request {
    capi_call c;
    char error[512]; /* "" unless generation failed; read once done */
};

vllm_status vllm_request_submit(vllm_engine *e, const char *prompt, const vllm_sampling_params *params,
                                vllm_token_callback cb, void *user_data, vllm_request **out) {
    capi_clear_error();
    if (out) *out = NULL;
    if (!e || !prompt || !params || !cb || !out)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT,
                         "vllm_request_submit: engine, prompt, params, cb and out must not be NULL");
    ereq_sampling sp;
    vllm_status st = capi_sampling(e, params, &sp);
    if (st != VLLM_OK) return st;
    vllm_request *r = calloc(1, sizeof *r);
    if (!r) return capi_fail(VLLM_ERR_RUNTIME, "out of memory");
    if (capi_call_init(&r->c, e) < 0) {
        free(r);
        return capi_fail(VLLM_ERR_RUNTIME, "cannot create a mutex");
    }
    r->c.cb = cb;
    r->c.user = user_data;
    r->c.deliver = capi_deliver_text;
    st = capi_call_submit(&r->c, prompt, NULL, 0, &sp);
    if (st != VLLM_OK) {
        capi_call_destroy(&r->c);
        free(r);
        return st;
    }
    *out = r;
    return VLLM_OK;
}

vllm_status vllm_request_cancel(vllm_request *r) {
    capi_clear_error();
    if (!r) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_request_cancel: request is NULL");
    capi_call_abort(&r->c);
    return VLLM_OK;
}

static void finish_error(vllm_request *r) {
    if (r->c.failed && !r->error[0])
        snprintf(r->error, sizeof r->error, "generation failed: the engine stopped on an error (see the log)");
}

vllm_status vllm_request_wait(vllm_request *r) {
    capi_clear_error();
    if (!r) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_request_wait: request is NULL");
    capi_call_wait(&r->c);
    pthread_mutex_lock(&r->c.mu);
    finish_error(r);
    pthread_mutex_unlock(&r->c.mu);
    if (r->error[0]) return capi_fail(VLLM_ERR_RUNTIME, "%s", r->error);
    return VLLM_OK;
}

bool vllm_request_done(const vllm_request *r) {
    if (!r) return false;
    vllm_request *m = (vllm_request *)r; /* the lock, not the request, changes */
    pthread_mutex_lock(&m->c.mu);
    bool d = m->c.done;
    if (d) finish_error(m);
    pthread_mutex_unlock(&m->c.mu);
    return d;
}

const char *vllm_request_error(const vllm_request *r) {
    if (!r) return "";
    return vllm_request_done(r) ? r->error : "";
}

void vllm_request_free(vllm_request *r) {
    if (!r) return;
    capi_call_abort(&r->c);
    capi_call_wait(&r->c);
    capi_call_destroy(&r->c);
    free(r);
}
