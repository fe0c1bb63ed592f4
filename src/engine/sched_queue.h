/* sched_queue — the scheduler's request queues (private to sched.c).
 *
 * esched_queue is a deque of ereq pointers: buf[head, head + n) in order.
 * FCFS pushes new requests at the back and preempted ones at the front;
 * PRIORITY keeps the queue sorted by (priority, arrival_time, id) and both
 * pushes insert in order (vLLM's heap, made deterministic).
 */
#ifndef ENGINE_SCHED_QUEUE_H
#define ENGINE_SCHED_QUEUE_H

#include "engine/request.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    ereq **buf;
    int32_t head, n, cap;
    bool sorted; /* priority order */
} esched_queue;

void esched_queue_free(esched_queue *q);
/* Capacity such that up to `total` entries can be pushed at either end
 * without allocating. VC_ERR_OOM on failure. */
int esched_queue_reserve(esched_queue *q, int32_t total);
static inline ereq *esched_queue_at(const esched_queue *q, int32_t i) { return q->buf[q->head + i]; }
/* Back (FCFS) or in order (priority). VC_ERR_OOM on growth failure. */
int esched_queue_push(esched_queue *q, ereq *r);
/* Front (FCFS) or in order (priority). */
int esched_queue_push_front(esched_queue *q, ereq *r);
void esched_queue_remove_at(esched_queue *q, int32_t i);
int32_t esched_queue_find(const esched_queue *q, const ereq *r); /* index or -1 */
/* True when a goes before b under the priority policy. */
bool esched_prio_before(const ereq *a, const ereq *b);

#endif
