/* cpu_threadpool — persistent workers with a low-latency parallel_for.
 *
 * The calling thread takes part, so a pool of size n has n-1 workers.
 * Tasks 0..n_tasks-1 are claimed dynamically from an atomic counter; a
 * kernel must make each task's result independent of which thread ran it
 * (that keeps outputs identical for every thread count). A worker joins a
 * dispatch only while it is open: once every task is claimed the caller
 * closes it and waits just for the workers that joined, so a sleeping or
 * preempted worker never holds up an op (the caller runs its share). Idle
 * workers spin briefly for the next dispatch (decode issues ~10 small ops
 * per layer), then sleep on a futex.
 *
 *   cpu_pool *p = cpu_pool_create(4);
 *   cpu_pool_run(p, n_tasks, fn, ctx);   // fn(ctx, task, thread_index)
 *   cpu_pool_free(p);
 *
 * One dispatch at a time per pool (cpu_pool_run serialises callers).
 */
#ifndef CPU_THREADPOOL_H
#define CPU_THREADPOOL_H

#include <stdint.h>

typedef struct cpu_pool cpu_pool;

/* thread is in [0, cpu_pool_size) and stable for the duration of one task. */
typedef void (*cpu_task_fn)(void *ctx, int64_t task, int thread);

/* n_threads <= 0: number of online cores. NULL on failure (vc_err set). */
cpu_pool *cpu_pool_create(int n_threads);
void cpu_pool_free(cpu_pool *p);
int cpu_pool_size(const cpu_pool *p);
/* Runs fn for every task and returns when all are done. */
void cpu_pool_run(cpu_pool *p, int64_t n_tasks, cpu_task_fn fn, void *ctx);

#endif
