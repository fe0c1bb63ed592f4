/* capi_internal — shared plumbing of the public C library (include/vllm.h).
 *
 *   capi.c          errors, defaults, load/free, complete / stream / tokens, extras
 *   capi_call.c     one request in flight: the engine-thread callback that
 *                   gathers text and ids, forwards deltas, honours "stop",
 *                   and the wait for its end
 *   capi_request.c  vllm_request_* (a heap capi_call with a handle)
 *   capi_chat.c     vllm_chat / vllm_chat_stream (OpenAI JSON <-> template)
 *
 * A request's capi_call must outlive its last engine callback: the callback
 * sets `done` (under mu) as the very last thing it does, and whoever owns the
 * call waits for `done` before freeing it.
 */
#ifndef CAPI_INTERNAL_H
#define CAPI_INTERNAL_H

#include "vllm.h"

#include "base/strbuf.h"
#include "chat/chat.h"
#include "engine/async_engine.h"

#include <pthread.h>

struct vllm_engine {
    aeng *a;
    const tok_tokenizer *tok;   /* NULL: token-id prompts only */
    chat_template *tmpl;        /* NULL: none, or it failed to parse (tmpl_err) */
    char *tmpl_err;
    char *model_name;           /* basename of the model path (chat "model") */
    char *tool_parser, *reasoning_parser; /* as given; NULL for none */
    int32_t block_size;
};

typedef struct capi_call capi_call;
/* Forwards one engine delta to the caller; false = stop (abort). Runs on the
 * engine thread, unlocked. */
typedef bool (*capi_deliver_fn)(capi_call *c, const eng_output *o);

struct capi_call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    vllm_engine *eng;
    int64_t id;
    bool have_id, want_abort, stopped, done;
    /* Delivery: deliver (or NULL for none) with the user's callback. */
    capi_deliver_fn deliver;
    vllm_token_callback cb;
    void *user;
    void *ext;               /* deliver's own state (chat stream) */
    /* Gathered (when keep_text / keep_ids): */
    bool keep_text, keep_ids;
    vc_strbuf text;
    int32_t *ids;
    int32_t n_ids, cap_ids;
    bool oom;
    /* The end: */
    const char *finish_reason; /* static string */
    eout_usage usage;
    bool failed;               /* finish_reason "error" */
};

/* Thread-local error: set the message, return the status. */
vllm_status capi_fail(vllm_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Map a negative vc_status (message in vc_err_msg()) to a vllm_status. */
vllm_status capi_from_vc(int rc, const char *ctx);
void capi_clear_error(void);

/* v5 sampling params -> the engine's (stop strings borrowed from p: valid
 * until the submit returns, which copies them). */
vllm_status capi_sampling(const vllm_engine *e, const vllm_sampling_params *p, ereq_sampling *out);

int capi_call_init(capi_call *c, vllm_engine *e);
void capi_call_destroy(capi_call *c);
/* Submit text (add_special as transformers) or ids; on success the call is live. */
vllm_status capi_call_submit(capi_call *c, const char *text, const int32_t *ids, int32_t n,
                             const ereq_sampling *sp);
void capi_call_abort(capi_call *c);
void capi_call_wait(capi_call *c);
/* The default deliver: the user's callback with the text delta. */
bool capi_deliver_text(capi_call *c, const eng_output *o);

#endif
