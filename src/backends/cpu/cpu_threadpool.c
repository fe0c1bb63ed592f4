#include "backends/cpu/cpu_threadpool.h"

#include "base/err.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Spin iterations before sleeping: ~tens of microseconds, enough to bridge
 * the gap between two ops of one decode step without burning a core while
 * the engine waits for requests. */
#define SPIN_ITERS 4000

/* job state word: generation << 32 | CLOSED | number of workers inside */
#define JOB_CLOSED (1u << 31)
#define JOB_COUNT 0x7fffffffu

struct cpu_pool {
    int n;                 /* threads incl. the caller */
    pthread_t *threads;    /* [n-1] */
    pthread_mutex_t run_mu;
    /* the current job */
    cpu_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    _Alignas(64) _Atomic int64_t next; /* next unclaimed task */
    /* Workers join a dispatch only while it is open; the caller closes it
     * once every task is claimed and waits just for the workers inside, so
     * a worker that is asleep or preempted never delays a step. */
    _Alignas(64) _Atomic uint64_t job;
    /* dispatch handshake (futex words are 32-bit) */
    _Alignas(64) _Atomic uint32_t gen; /* bumped per dispatch */
    _Atomic int n_sleeping;
    _Atomic int stop;
    _Alignas(64) _Atomic uint32_t done_word; /* bumped for a sleeping caller */
    _Atomic int main_waiting;
};

typedef struct {
    cpu_pool *p;
    int index;
} worker_arg;

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Tasks are claimed from one counter by whoever is there (the caller
 * alone, if need be, runs them all). */
static void run_tasks(cpu_pool *p, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, thread);
    }
}

static void *worker_main(void *argp) {
    worker_arg *arg = argp;
    cpu_pool *p = arg->p;
    int index = arg->index;
    free(arg);
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = atomic_load(&p->gen)) == seen) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            atomic_fetch_add(&p->n_sleeping, 1);
            if (atomic_load(&p->gen) == seen) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->n_sleeping, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&p->stop)) return NULL;
        /* join dispatch g unless it is closed (or already superseded) */
        uint64_t js = atomic_load(&p->job);
        int joined = 0;
        while ((uint32_t)(js >> 32) == g && !(js & JOB_CLOSED))
            if (atomic_compare_exchange_weak(&p->job, &js, js + 1)) {
                joined = 1;
                break;
            }
        if (!joined) continue;
        run_tasks(p, index);
        js = atomic_fetch_sub(&p->job, 1) - 1;
        if ((js & JOB_CLOSED) && !(js & JOB_COUNT) && atomic_load(&p->main_waiting)) {
            atomic_fetch_add(&p->done_word, 1);
            futex_wake(&p->done_word, 1);
        }
    }
}

static int online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

cpu_pool *cpu_pool_create(int n_threads) {
    if (n_threads <= 0) n_threads = online_cores();
    if (n_threads > 1024) n_threads = 1024;
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) goto oom;
    p->n = n_threads;
    pthread_mutex_init(&p->run_mu, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!p->threads) goto oom;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        int rc = -1;
        if (a) {
            a->p = p;
            a->index = i;
            rc = pthread_create(&p->threads[i - 1], NULL, worker_main, a);
        }
        if (rc != 0) {
            free(a);
            p->n = i; /* workers 1..i-1 exist and are joined by cpu_pool_free */
            cpu_pool_free(p);
            vc_err_set(VC_ERR_RUNTIME, "cpu pool: cannot start worker thread %d", i);
            return NULL;
        }
    }
    return p;
oom:
    if (p) {
        free(p->threads);
        free(p);
    }
    vc_err_set(VC_ERR_OOM, "cpu pool: out of memory");
    return NULL;
}

void cpu_pool_free(cpu_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen, INT_MAX);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->run_mu);
    free(p->threads);
    free(p);
}

int cpu_pool_size(const cpu_pool *p) { return p->n; }

void cpu_pool_run(cpu_pool *p, int64_t n_tasks, cpu_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (p->n == 1 || n_tasks == 1) { /* not worth waking anyone */
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->run_mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    uint32_t g = atomic_load(&p->gen) + 1;
    atomic_store(&p->job, (uint64_t)g << 32); /* open, nobody inside */
    atomic_store(&p->gen, g);                 /* publishes the job (seq_cst) */
    if (atomic_load(&p->n_sleeping) > 0) futex_wake(&p->gen, INT_MAX);
    run_tasks(p, 0);
    /* every task is claimed: close, then wait for the workers inside */
    uint64_t js = atomic_fetch_or(&p->job, JOB_CLOSED) | JOB_CLOSED;
    int spins = 0;
    while (js & JOB_COUNT) {
        if (++spins < SPIN_ITERS) {
            cpu_relax();
            js = atomic_load(&p->job);
            continue;
        }
        /* Sleep until the last worker leaves: announce, then re-check so a
         * worker that left in between is not missed (seq_cst pairs with
         * the worker's decrement-then-load). */
        uint32_t d = atomic_load(&p->done_word);
        atomic_store(&p->main_waiting, 1);
        js = atomic_load(&p->job);
        if (js & JOB_COUNT) futex_wait(&p->done_word, d);
        atomic_store(&p->main_waiting, 0);
        js = atomic_load(&p->job);
        spins = 0;
    }
    pthread_mutex_unlock(&p->run_mu);
}
