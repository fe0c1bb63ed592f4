/* Scheduler queues: the deque against a plain reference array under random
 * pushes at both ends and removals (FCFS), and sorted insertion (priority). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/sched_queue.h"

static uint64_t rs = 12345;
static uint32_t rnd(uint32_t n) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rs >> 33) % n;
}

#define NR 300

static void test_deque_matches_reference(void **st) {
    (void)st;
    ereq reqs[NR];
    memset(reqs, 0, sizeof reqs);
    ereq *ref[NR];
    int32_t nref = 0, next = 0;
    esched_queue q = {0};
    for (int step = 0; step < 5000; step++) {
        uint32_t op = rnd(10);
        if (op < 4 && next < NR) {
            assert_int_equal(esched_queue_push(&q, &reqs[next]), VC_OK);
            ref[nref++] = &reqs[next++];
        } else if (op < 7 && next < NR) {
            assert_int_equal(esched_queue_push_front(&q, &reqs[next]), VC_OK);
            memmove(ref + 1, ref, sizeof *ref * (size_t)nref);
            ref[0] = &reqs[next++];
            nref++;
        } else if (nref > 0) {
            int32_t i = op == 9 ? 0 : (int32_t)rnd((uint32_t)nref);
            assert_int_equal(esched_queue_find(&q, ref[i]), i);
            esched_queue_remove_at(&q, i);
            memmove(ref + i, ref + i + 1, sizeof *ref * (size_t)(nref - i - 1));
            nref--;
        }
        if (next == NR && nref == 0) break;
        assert_int_equal(q.n, nref);
        for (int32_t i = 0; i < nref; i++) assert_ptr_equal(esched_queue_at(&q, i), ref[i]);
    }
    esched_queue_free(&q);
}

static void test_reserve_then_no_growth(void **st) {
    (void)st;
    ereq reqs[100];
    esched_queue q = {0};
    assert_int_equal(esched_queue_reserve(&q, 100), VC_OK);
    ereq **buf = q.buf;
    for (int i = 0; i < 100; i++)
        assert_int_equal(i % 2 ? esched_queue_push(&q, &reqs[i]) : esched_queue_push_front(&q, &reqs[i]), VC_OK);
    assert_ptr_equal(q.buf, buf); /* never reallocated: the scheduler relies on it */
    assert_int_equal(q.n, 100);
    esched_queue_free(&q);
}

static void test_priority_order(void **st) {
    (void)st;
    ereq reqs[200];
    memset(reqs, 0, sizeof reqs);
    esched_queue q = {0};
    q.sorted = true;
    for (int i = 0; i < 200; i++) {
        reqs[i].id = i;
        reqs[i].priority = (int)rnd(5);
        reqs[i].arrival_time = (double)rnd(50);
        assert_int_equal(rnd(2) ? esched_queue_push(&q, &reqs[i]) : esched_queue_push_front(&q, &reqs[i]), VC_OK);
    }
    for (int32_t i = 1; i < q.n; i++) assert_true(esched_prio_before(esched_queue_at(&q, i - 1), esched_queue_at(&q, i)));
    esched_queue_free(&q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deque_matches_reference),
        cmocka_unit_test(test_reserve_then_no_growth),
        cmocka_unit_test(test_priority_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
