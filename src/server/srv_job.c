/* srv_job — the bridge between an HTTP request and its engine children.
 *
 * The engine thread calls on_delta for every delta; it copies the delta
 * into an srv_event, appends it under the job's mutex and signals: short and
 * never blocking. The job is reference counted: the HTTP side holds one
 * reference until srv_job_release, each live child one until its final
 * delta, so whichever side lets go last frees it. */
#include "server/srv_internal.h"

#include "base/err.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void srv_event_free(srv_event *ev) {
    if (!ev) return;
    free(ev->text);
    free(ev->stop_reason);
    free(ev->lp_ids);
    free(ev->lp_vals);
    free(ev->plp_ids);
    free(ev->plp_ranks);
    free(ev->plp_vals);
    free(ev);
}

static void job_free(srv_job *j) {
    srv_event *ev = j->head;
    while (ev) {
        srv_event *nx = ev->next;
        srv_event_free(ev);
        ev = nx;
    }
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    srv_metrics_free(j->metrics);
    free(j->ch);
    free(j);
}

static srv_event *make_event(const srv_child *c, const eng_output *o) {
    srv_event *ev = calloc(1, sizeof *ev);
    if (!ev) return NULL;
    ev->idx = c->idx;
    ev->len = o->text_len;
    ev->text = malloc(o->text_len + 1);
    if (!ev->text) {
        free(ev);
        return NULL;
    }
    if (o->text_len) memcpy(ev->text, o->text, o->text_len);
    ev->text[o->text_len] = 0;
    ev->n_tokens = o->n_token_ids;
    if (o->n_lp > 0) {
        ev->lp_ids = malloc((size_t)o->n_lp * sizeof *ev->lp_ids);
        ev->lp_vals = malloc((size_t)o->n_lp * sizeof *ev->lp_vals);
        if (ev->lp_ids && ev->lp_vals) {
            memcpy(ev->lp_ids, o->lp_ids, (size_t)o->n_lp * sizeof *ev->lp_ids);
            memcpy(ev->lp_vals, o->lp_vals, (size_t)o->n_lp * sizeof *ev->lp_vals);
            ev->n_lp = o->n_lp;
        }
    }
    if (o->n_plp > 0 && o->plp_stride > 0) {
        size_t m = (size_t)o->n_plp * (size_t)o->plp_stride;
        ev->plp_ids = malloc(m * sizeof *ev->plp_ids);
        ev->plp_vals = malloc(m * sizeof *ev->plp_vals);
        ev->plp_ranks = malloc((size_t)o->n_plp * sizeof *ev->plp_ranks);
        if (ev->plp_ids && ev->plp_vals && ev->plp_ranks) {
            memcpy(ev->plp_ids, o->plp_ids, m * sizeof *ev->plp_ids);
            memcpy(ev->plp_vals, o->plp_vals, m * sizeof *ev->plp_vals);
            memcpy(ev->plp_ranks, o->plp_ranks, (size_t)o->n_plp * sizeof *ev->plp_ranks);
            ev->n_plp = o->n_plp;
            ev->plp_stride = o->plp_stride;
        }
    }
    if (o->finished) {
        ev->finish_reason = o->finish_reason ? o->finish_reason : "stop";
        if (o->stop_str) ev->stop_reason = strdup(o->stop_str);
    }
    return ev;
}

/* Runs on the engine thread. */
static void on_delta(void *user, const eng_output *o) {
    srv_child *c = user;
    srv_job *j = c->job;
    double t = srv_now();
    srv_event *ev = (o->text_len || o->n_token_ids || o->finished || o->n_plp) ? make_event(c, o) : NULL;
    pthread_mutex_lock(&j->mu);
    if (o->n_token_ids > 0) {
        if (!c->got_first) {
            srv_metrics_ttft(j->metrics, t - j->t_arrival);
            c->t_first = t;
        } else {
            srv_metrics_itl(j->metrics, t - c->t_last);
        }
        c->got_first = true;
        c->t_last = t;
    }
    if (ev) {
        if (j->tail) j->tail->next = ev;
        else j->head = ev;
        j->tail = ev;
    }
    bool last = false;
    if (o->finished && c->live) {
        c->live = false;
        c->prompt_tokens = o->usage.prompt_tokens;
        c->completion_tokens = o->usage.completion_tokens;
        if (!ev) j->oom = true;
        j->n_done++;
        int32_t gt = o->usage.completion_tokens;
        srv_finished f = {.reason = o->finish_reason ? o->finish_reason : "stop", .e2e = t - j->t_arrival,
                          .tpot = gt > 1 && c->got_first ? (c->t_last - c->t_first) / (gt - 1) : -1,
                          .prompt_tokens = o->usage.prompt_tokens, .gen_tokens = gt, .max_tokens = j->max_tokens,
                          .n = j->n, .queue = -1, .prefill = -1, .decode = -1, .inference = -1};
        const eng_times *tm = &o->times;
        if (tm->first_scheduled > 0) f.queue = tm->first_scheduled - tm->arrival;
        if (tm->first_token > 0) {
            f.prefill = tm->first_token - tm->first_scheduled;
            f.decode = tm->last_token - tm->first_token;
            f.inference = tm->last_token - tm->first_scheduled;
        }
        srv_metrics_finished(j->metrics, &f);
        last = --j->refs == 0;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (last) job_free(j);
}

int srv_job_start(aeng *a, srv_metrics *m, int32_t *const *prompt_ids, const int32_t *n_prompt_ids, int n_prompts,
                  int n, const ereq_sampling *sp, srv_job **out, srv_error *err) {
    *out = NULL;
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return srv_err(err, 500, NULL, "out of memory");
    j->n_ch = n_prompts * n;
    j->ch = calloc((size_t)j->n_ch, sizeof *j->ch);
    if (!j->ch) {
        free(j);
        return srv_err(err, 500, NULL, "out of memory");
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->engine = a;
    j->metrics = srv_metrics_ref(m);
    j->t_arrival = srv_now();
    j->max_tokens = sp->max_tokens;
    j->n = n;
    for (int k = 0; k < n_prompts; k++) {
        for (int i = 0; i < n; i++) {
            srv_child *c = &j->ch[k * n + i];
            c->job = j;
            c->idx = k * n + i;
            ereq_sampling s = *sp;
            if (s.has_seed) s.seed = sp->seed + (uint64_t)i;
            pthread_mutex_lock(&j->mu);
            c->live = true;
            j->refs++;
            pthread_mutex_unlock(&j->mu);
            if (aeng_submit_tokens(a, prompt_ids[k], n_prompt_ids[k], &s, on_delta, c, &c->id) < 0) {
                if (!aeng_alive(a)) srv_err(err, 503, NULL, "the engine is not running: %s", vc_err_msg());
                else srv_err(err, 400, NULL, "%s", vc_err_msg());
                pthread_mutex_lock(&j->mu);
                c->live = false;
                j->refs--;
                pthread_mutex_unlock(&j->mu);
                srv_job_release(j);
                return -1;
            }
        }
    }
    *out = j;
    return 0;
}

bool srv_client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

srv_event *srv_job_next(srv_job *j) {
    bool t;
    return srv_job_next_timed(j, -1, &t);
}

srv_event *srv_job_next_timed(srv_job *j, int ms, bool *timed_out) {
    *timed_out = false;
    struct timespec until;
    if (ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += ms / 1000;
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&j->mu);
    while (!j->head && j->n_done < j->n_ch) {
        if (ms < 0) {
            pthread_cond_wait(&j->cv, &j->mu);
        } else if (pthread_cond_timedwait(&j->cv, &j->mu, &until) != 0) {
            *timed_out = !j->head && j->n_done < j->n_ch;
            break;
        }
    }
    srv_event *ev = j->head;
    if (ev) {
        j->head = ev->next;
        if (!j->head) j->tail = NULL;
        ev->next = NULL;
    }
    pthread_mutex_unlock(&j->mu);
    return ev;
}

void srv_job_release(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int64_t *ids = malloc((size_t)j->n_ch * sizeof *ids);
    int n_ids = 0;
    for (int i = 0; i < j->n_ch; i++)
        if (j->ch[i].live && ids) ids[n_ids++] = j->ch[i].id;
    pthread_mutex_unlock(&j->mu);
    /* Abort outside the job lock: the engine thread takes it in callbacks. */
    for (int i = 0; i < n_ids; i++) aeng_abort(j->engine, ids[i]);
    free(ids);
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (last) job_free(j);
}
