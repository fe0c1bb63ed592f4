/* batch_par — sampling a step's rows on several threads.
 *
 * Rows are independent once each unseeded row's uniform is drawn (in row
 * order, by smp_batch_sample), so threads claim rows from a shared counter
 * and sample them with their own scratch (a lane: a clone of the batch
 * whose result arrays alias the batch's). The caller's thread works too,
 * on the batch itself. Tokens and logprobs are identical to the serial
 * loop. Why: at temperature > 0 a row costs a softmax-and-draw over the
 * whole vocabulary (~0.3 ms at V = 152k), and a GPU step of 64 rows would
 * otherwise wait ~20 ms on one host core.
 */
#include "sample/sample_int.h"

#include "base/err.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct smp_pool {
    int32_t n_workers;      /* threads started besides the caller */
    int32_t n_lanes;        /* capacity of lanes/threads */
    smp_batch **lanes;      /* [n_lanes], NULL where not made */
    pthread_t *threads;     /* [n_workers] */
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    uint64_t job;           /* generation: bumped per run */
    int32_t busy;           /* workers still on the current job */
    bool stop;
    /* the current job */
    float *logits;
    const smp_row *rows;
    const double *us;
    int32_t n;
    atomic_int next;        /* next unclaimed row */
    atomic_int rc;          /* first failure (0 = none) */
    char err[256];
} smp_pool;

typedef struct {
    smp_pool *pool;
    int32_t lane;
} worker_arg;

static void work(smp_pool *pl, smp_batch *b) {
    for (;;) {
        int32_t i = atomic_fetch_add(&pl->next, 1);
        if (i >= pl->n || atomic_load(&pl->rc) != 0) break;
        int rc = smp_sample_row(b, pl->logits + (int64_t)i * b->p.vocab, &pl->rows[i], i, pl->us[i]);
        if (rc < 0) {
            int zero = 0;
            if (atomic_compare_exchange_strong(&pl->rc, &zero, rc)) snprintf(pl->err, sizeof pl->err, "%s", vc_err_msg());
            break;
        }
    }
}

static void *worker_main(void *p) {
    worker_arg *a = p;
    smp_pool *pl = a->pool;
    smp_batch *lane = pl->lanes[a->lane];
    free(a);
    uint64_t seen = 0;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (!pl->stop && pl->job == seen) pthread_cond_wait(&pl->cv_job, &pl->mu);
        if (pl->stop) break;
        seen = pl->job;
        pthread_mutex_unlock(&pl->mu);
        work(pl, lane);
        pthread_mutex_lock(&pl->mu);
        if (--pl->busy == 0) pthread_cond_signal(&pl->cv_done);
    }
    pthread_mutex_unlock(&pl->mu);
    return NULL;
}

int smp_pool_create(smp_batch *b, int32_t n_threads) {
    if (n_threads > 256) n_threads = 256;
    smp_pool *pl = calloc(1, sizeof *pl);
    if (!pl) return vc_err_set(VC_ERR_OOM, "sampler: out of memory");
    b->pool = pl;
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->cv_job, NULL);
    pthread_cond_init(&pl->cv_done, NULL);
    int32_t w = n_threads - 1;
    pl->lanes = calloc((size_t)w, sizeof *pl->lanes);
    pl->threads = calloc((size_t)w, sizeof *pl->threads);
    if (!pl->lanes || !pl->threads) return vc_err_set(VC_ERR_OOM, "sampler: out of memory");
    pl->n_lanes = w;
    for (int32_t t = 0; t < w; t++) {
        pl->lanes[t] = smp_batch_lane_create(b);
        if (!pl->lanes[t]) return VC_ERR_OOM;
        worker_arg *a = malloc(sizeof *a);
        if (!a) return vc_err_set(VC_ERR_OOM, "sampler: out of memory");
        *a = (worker_arg){.pool = pl, .lane = t};
        if (pthread_create(&pl->threads[t], NULL, worker_main, a) != 0) {
            free(a);
            return vc_err_set(VC_ERR_RUNTIME, "sampler: cannot start a thread");
        }
        pl->n_workers = t + 1;
    }
    return VC_OK;
}

void smp_pool_free(smp_batch *b) {
    smp_pool *pl = b->pool;
    if (!pl) return;
    b->pool = NULL;
    pthread_mutex_lock(&pl->mu);
    pl->stop = true;
    pthread_cond_broadcast(&pl->cv_job);
    pthread_mutex_unlock(&pl->mu);
    for (int32_t t = 0; t < pl->n_workers; t++) pthread_join(pl->threads[t], NULL);
    for (int32_t t = 0; pl->lanes && t < pl->n_lanes; t++) smp_batch_free(pl->lanes[t]);
    pthread_mutex_destroy(&pl->mu);
    pthread_cond_destroy(&pl->cv_job);
    pthread_cond_destroy(&pl->cv_done);
    free(pl->lanes);
    free(pl->threads);
    free(pl);
}

int smp_pool_run(smp_batch *b, float *logits, const smp_row *rows, int32_t n, const double *us) {
    smp_pool *pl = b->pool;
    pthread_mutex_lock(&pl->mu);
    pl->logits = logits;
    pl->rows = rows;
    pl->us = us;
    pl->n = n;
    atomic_store(&pl->next, 0);
    atomic_store(&pl->rc, 0);
    pl->err[0] = 0;
    pl->busy = pl->n_workers;
    pl->job++;
    pthread_cond_broadcast(&pl->cv_job);
    pthread_mutex_unlock(&pl->mu);
    work(pl, b);
    pthread_mutex_lock(&pl->mu);
    while (pl->busy > 0) pthread_cond_wait(&pl->cv_done, &pl->mu);
    pthread_mutex_unlock(&pl->mu);
    int rc = atomic_load(&pl->rc);
    if (rc < 0) return vc_err_set(rc, "%s", pl->err);
    return VC_OK;
}
