#include "engine/sched_queue.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

void esched_queue_free(esched_queue *q) {
    free(q->buf);
    q->buf = NULL;
    q->head = q->n = q->cap = 0;
}

bool esched_prio_before(const ereq *a, const ereq *b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    if (a->arrival_time != b->arrival_time) return a->arrival_time < b->arrival_time;
    return a->id < b->id;
}

/* Make room for one more with at least one free slot on each side, the
 * live range centred so that pushes at either end stay amortised O(1). */
static int reserve(esched_queue *q) {
    if (q->head > 0 && q->head + q->n < q->cap) return VC_OK;
    int32_t cap = q->cap;
    if (q->n + 2 > cap / 2) cap = cap ? cap * 2 : 16;
    ereq **b = cap == q->cap ? q->buf : malloc((size_t)cap * sizeof *b);
    if (!b) return vc_err_set(VC_ERR_OOM, "out of memory");
    int32_t head = (cap - q->n) / 2;
    if (q->n) memmove(b + head, q->buf + q->head, (size_t)q->n * sizeof *b);
    if (b != q->buf) free(q->buf);
    q->buf = b;
    q->cap = cap;
    q->head = head;
    return VC_OK;
}

int esched_queue_reserve(esched_queue *q, int32_t total) {
    /* reserve() keeps cap >= 2 * (n + 2) without growing once this holds. */
    int32_t want = 2 * (total + 2);
    if (q->cap >= want) return VC_OK;
    ereq **b = malloc((size_t)want * sizeof *b);
    if (!b) return vc_err_set(VC_ERR_OOM, "out of memory");
    int32_t head = (want - q->n) / 2;
    if (q->n) memmove(b + head, q->buf + q->head, (size_t)q->n * sizeof *b);
    free(q->buf);
    q->buf = b;
    q->cap = want;
    q->head = head;
    return VC_OK;
}

static int insert_at(esched_queue *q, int32_t i, ereq *r) {
    int rc = reserve(q);
    if (rc) return rc;
    ereq **p = q->buf + q->head;
    if (i < q->n / 2) { /* shift the shorter side */
        memmove(p - 1, p, (size_t)i * sizeof *p);
        q->head--;
    } else {
        memmove(p + i + 1, p + i, (size_t)(q->n - i) * sizeof *p);
    }
    q->buf[q->head + i] = r;
    q->n++;
    return VC_OK;
}

static int32_t sorted_pos(const esched_queue *q, const ereq *r) {
    int32_t lo = 0, hi = q->n;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (esched_prio_before(esched_queue_at(q, mid), r)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int esched_queue_push(esched_queue *q, ereq *r) {
    return insert_at(q, q->sorted ? sorted_pos(q, r) : q->n, r);
}

int esched_queue_push_front(esched_queue *q, ereq *r) {
    return insert_at(q, q->sorted ? sorted_pos(q, r) : 0, r);
}

void esched_queue_remove_at(esched_queue *q, int32_t i) {
    VC_ASSERT(i >= 0 && i < q->n);
    ereq **p = q->buf + q->head;
    if (i < q->n / 2) {
        memmove(p + 1, p, (size_t)i * sizeof *p);
        q->head++;
    } else {
        memmove(p + i, p + i + 1, (size_t)(q->n - i - 1) * sizeof *p);
    }
    q->n--;
}

int32_t esched_queue_find(const esched_queue *q, const ereq *r) {
    for (int32_t i = 0; i < q->n; i++)
        if (esched_queue_at(q, i) == r) return i;
    return -1;
}
