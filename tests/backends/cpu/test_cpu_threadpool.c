/* cpu_threadpool: every task runs exactly once, thread indices are in
 * range, back-to-back dispatches (and ones after the workers went to sleep)
 * complete. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backends/cpu/cpu_threadpool.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    _Atomic int *hits;
    int n_threads;
    _Atomic int bad_thread;
} job;

static void task(void *ctxp, int64_t t, int thread) {
    job *j = ctxp;
    atomic_fetch_add(&j->hits[t], 1);
    if (thread < 0 || thread >= j->n_threads) atomic_store(&j->bad_thread, 1);
}

static void run_and_check(cpu_pool *p, int64_t n) {
    job j = {.hits = calloc((size_t)n + 1, sizeof(_Atomic int)), .n_threads = cpu_pool_size(p)};
    assert_non_null(j.hits);
    cpu_pool_run(p, n, task, &j);
    for (int64_t i = 0; i < n; i++) assert_int_equal(atomic_load(&j.hits[i]), 1);
    assert_int_equal(atomic_load(&j.bad_thread), 0);
    free(j.hits);
}

static void test_pool(void **state) {
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        cpu_pool *p = cpu_pool_create(nt);
        assert_non_null(p);
        assert_int_equal(cpu_pool_size(p), nt);
        for (int rep = 0; rep < 200; rep++) run_and_check(p, 1 + rep % 37);
        run_and_check(p, 0 + 1000);
        struct timespec ts = {0, 30 * 1000 * 1000}; /* let workers reach the futex */
        nanosleep(&ts, NULL);
        run_and_check(p, 64);
        cpu_pool_free(p);
    }
    cpu_pool *p = cpu_pool_create(0); /* online cores */
    assert_non_null(p);
    assert_true(cpu_pool_size(p) >= 1);
    run_and_check(p, 10);
    cpu_pool_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pool)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
