#include "engine/async_engine.h"

#include "base/err.h"
#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Per-request callback binding, passed to the engine as its `user`. */
typedef struct {
    aeng_cb cb;
    void *user;
} binding;

struct aeng {
    eng_engine *e;
    pthread_t thread;
    pthread_mutex_t mu;  /* guards e (all eng_* calls) and the flags */
    pthread_cond_t work; /* signalled on submit / abort / stop */
    bool stop, dead, started;
    int64_t pending;     /* submissions + aborts since the thread last looked */
};

static void deliver(const eng_output *o, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        binding *b = o[i].user;
        eng_output copy = o[i];
        copy.user = b->user;
        b->cb(b->user, &copy);
        if (o[i].parent_finished) free(b); /* n > 1: the children share the binding */
    }
}

static void *engine_main(void *arg) {
    aeng *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->stop && !a->dead && a->pending == 0 && !eng_has_unfinished(a->e))
            pthread_cond_wait(&a->work, &a->mu);
        if (a->stop || a->dead) break;
        a->pending = 0;
        eng_output *o;
        int32_t n;
        int rc = eng_step(a->e, &o, &n);
        if (rc < 0) {
            VC_ERROR("engine step failed: %s", vc_err_msg());
            a->dead = true;
            if (eng_fail_all(a->e, &o, &n) == 0) {
                pthread_mutex_unlock(&a->mu);
                deliver(o, n);
                pthread_mutex_lock(&a->mu);
            }
            break;
        }
        /* Callbacks run unlocked so they may submit or abort. The deltas
         * stay valid: only this thread steps the engine. */
        pthread_mutex_unlock(&a->mu);
        deliver(o, n);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

aeng *aeng_create(const eng_params *p) {
    aeng *a = calloc(1, sizeof *a);
    if (!a) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    a->e = eng_create(p);
    if (!a->e) goto fail;
    if (pthread_create(&a->thread, NULL, engine_main, a) != 0) {
        vc_err_set(VC_ERR_RUNTIME, "cannot start the engine thread");
        goto fail;
    }
    a->started = true;
    return a;
fail:
    aeng_free(a);
    return NULL;
}

/* Abort everything still live and hand each its final delta. */
static void drain(aeng *a) {
    for (int guard = 0; guard < 1000 && eng_has_unfinished(a->e); guard++) {
        eng_output *o;
        int32_t n;
        /* Abort via a step-free path: mark all aborted, then one step reports them. */
        if (eng_abort_all(a->e) < 0 || eng_step(a->e, &o, &n) < 0) break;
        deliver(o, n);
    }
}

void aeng_free(aeng *a) {
    if (!a) return;
    if (a->started) {
        pthread_mutex_lock(&a->mu);
        a->stop = true;
        pthread_cond_signal(&a->work);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->thread, NULL);
    }
    if (a->e) drain(a);
    eng_free(a->e);
    pthread_cond_destroy(&a->work);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static int submit(aeng *a, const int32_t *prompt, int32_t n, const char *text, const ereq_sampling *sp, aeng_cb cb,
                  void *user, int64_t *id_out) {
    if (!cb) return vc_err_set(VC_ERR_INVALID, "submit: no callback");
    binding *b = malloc(sizeof *b);
    if (!b) return vc_err_set(VC_ERR_OOM, "out of memory");
    b->cb = cb;
    b->user = user;
    pthread_mutex_lock(&a->mu);
    int rc;
    if (a->dead || a->stop) {
        rc = vc_err_set(VC_ERR_RUNTIME, "the engine is not running");
    } else {
        rc = text ? eng_add_text(a->e, text, sp, b, id_out) : eng_add_tokens(a->e, prompt, n, sp, b, id_out);
        if (rc == 0) {
            a->pending++;
            pthread_cond_signal(&a->work);
        }
    }
    pthread_mutex_unlock(&a->mu);
    if (rc < 0) free(b);
    return rc;
}

int aeng_submit_tokens(aeng *a, const int32_t *prompt, int32_t n, const ereq_sampling *sp, aeng_cb cb,
                       void *user, int64_t *id_out) {
    return submit(a, prompt, n, NULL, sp, cb, user, id_out);
}

int aeng_submit_text(aeng *a, const char *text, const ereq_sampling *sp, aeng_cb cb, void *user,
                     int64_t *id_out) {
    return submit(a, NULL, 0, text, sp, cb, user, id_out);
}

int aeng_abort(aeng *a, int64_t id) {
    pthread_mutex_lock(&a->mu);
    int rc = eng_abort(a->e, id);
    a->pending++;
    pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

bool aeng_alive(const aeng *a) {
    aeng *m = (aeng *)a;
    pthread_mutex_lock(&m->mu);
    bool alive = !m->dead && !m->stop;
    pthread_mutex_unlock(&m->mu);
    return alive;
}

const mdl_config *aeng_model_config(const aeng *a) { return eng_model_config(a->e); }
const tok_tokenizer *aeng_tokenizer(const aeng *a) { return eng_tokenizer(a->e); }
int32_t aeng_max_model_len(const aeng *a) { return eng_max_model_len(a->e); }
int32_t aeng_num_blocks(const aeng *a) { return eng_num_blocks(a->e); }

void aeng_stats(aeng *a, esched_stats *out) {
    pthread_mutex_lock(&a->mu);
    eng_stats(a->e, out);
    pthread_mutex_unlock(&a->mu);
}
