/* sched — the engine's scheduler (vLLM V1 Scheduler + AsyncScheduler).
 *
 * Pure logic, no device code. There are no prefill and decode phases: each
 * request has num_computed tokens (KV in the cache) and a target of
 * num_tokens + num_output_placeholders; every step hands requests tokens
 * toward their targets under one token budget.
 *
 * Tour — the engine loop:
 *   s = esched_create(&params)
 *   esched_add_request(s, r)        r from ereq_create; validated, queued
 *   loop:
 *     esched_schedule(s, &out)      out.items -> runner (see request.h); the
 *         runner reads each item's block table with kv_seq_block_ids(req->seq)
 *         (it only grows while the request runs), drops its rows for
 *         out.preempted and out.finished_ids
 *     runner executes out, samples one token per item with sample = true
 *     esched_update(s, &out, sampled, n, &fin)  appends tokens, checks stop
 *         token rules, frees the KV of finished requests (listed in fin)
 *     output processor (output.h) detokenizes, checks stop strings and
 *         calls esched_finish_request for a stop-string hit
 *     free requests once ereq_can_free(r)
 *   esched_free(s)
 * Async scheduling is the same loop with esched_schedule(N+1) called before
 * esched_update(N): every scheduled sample adds a placeholder token to its
 * request, so the next step already schedules the decode of a token it has
 * not seen (the runner's worker supplies it, runner.h); esched_update replaces
 * the placeholder with the real token. A synchronous loop simply never has
 * placeholders left at schedule time. Several outputs may be in flight
 * (use one esched_output per step in flight, e.g. two alternating); pass
 * them to esched_update in the order they were scheduled.
 *
 * A step (esched_schedule):
 *  1. running requests in order: tokens = min(owed, long-prefill threshold,
 *     remaining budget, max_model_len - 1 - computed); 0 tokens -> skipped.
 *     KV allocation failure -> preempt (recompute): FCFS takes the tail of
 *     running, PRIORITY the worst (priority, arrival) request; its blocks are
 *     freed, num_computed = 0, it goes to the front of waiting. When the
 *     victim is the request itself, scheduling of running requests stops.
 *  2. only if nothing was preempted: waiting requests, head first, while
 *     running < max_num_seqs and budget remains; prefix-cache lookup, then
 *     the prompt (plus outputs, for a preempted one) is cut to the budget
 *     (chunked prefill) or, with chunked prefill off, waits if it does not
 *     fit. A failed allocation stops admission (no preemption for waiting).
 *  3. computed tokens advance at once by what was scheduled.
 *
 * Stop rules (esched_update), vLLM's order: fewer than min_tokens outputs ->
 * continue; EOS (unless ignore_eos) -> stop; a stop_token_id -> stop with
 * stop_reason_id; num_tokens >= max_model_len or max_tokens outputs ->
 * length.
 *
 * Ownership: the caller creates and frees requests; the scheduler owns their
 * queue membership, status and KV sequence while they are live (added and
 * not finished). Not thread-safe: one engine thread drives it.
 */
#ifndef ENGINE_SCHED_H
#define ENGINE_SCHED_H

#include "engine/kv_cache_manager.h"
#include "engine/request.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct esched esched;

typedef enum { ESCHED_FCFS = 0, ESCHED_PRIORITY } esched_policy;

typedef struct {
    int32_t max_num_batched_tokens;       /* token budget per step (8192) */
    int32_t max_num_seqs;                 /* running requests at most (256) */
    int32_t max_model_len;                /* prompt + outputs at most (must be set) */
    int32_t long_prefill_token_threshold; /* per-request cap per step; 0 = off */
    esched_policy policy;                 /* FCFS */
    bool enable_chunked_prefill;          /* true; false needs budget >= max_model_len */
    /* The KV cache: an existing manager (borrowed, not freed; its
     * max_model_len should match), or else one made from these: */
    kv_manager *kv;
    int32_t num_blocks;                   /* including the null block */
    int32_t block_size;                   /* 16 */
    bool enable_prefix_caching;           /* true */
} esched_params;

esched_params esched_params_default(void);

/* NULL + vc_err_set on bad parameters or out of memory. */
esched *esched_create(const esched_params *p);
/* Releases the KV of requests still live (they stay the caller's to free). */
void esched_free(esched *s);

kv_manager *esched_kv(esched *s);

/* Queue a new request (status WAITING, no KV sequence, id not live).
 * Checks, each a VC_ERR_INVALID with a message: 1 <= prompt <=
 * max_model_len - 1; max_tokens >= 1; 0 <= min_tokens <= max_tokens;
 * prompt + min_tokens <= max_model_len; stop ids count; the longest it can
 * grow fits in the whole KV cache. VC_ERR_OOM when out of memory. */
int esched_add_request(esched *s, ereq *r);

/* Finish a live request now with a finished status (ABORTED for an abort,
 * STOPPED after a stop string, ERROR): its KV is freed and it leaves the
 * queues; the next esched_output lists its id in finished_ids. Safe in any
 * state: returns 1 when a live request had this id, 0 when none did (never
 * added, or already finished), VC_ERR_INVALID for a non-finished status. */
int esched_finish_request(esched *s, int64_t id, ereq_status status);
/* esched_finish_request(s, id, EREQ_FINISHED_ABORTED). */
int esched_abort(esched *s, int64_t id);
/* The live request with this id, or NULL (hashed: O(1)). */
ereq *esched_find(esched *s, int64_t id);
/* Live requests (running + waiting): the engine loop runs while > 0. */
int32_t esched_num_unfinished(const esched *s);

/* Plan one step into out (reused across steps; zero-initialise it once and
 * release with esched_output_free). VC_OK, or a negative status when out of
 * memory (nothing scheduled then). An empty step (n_items == 0) is normal
 * when nothing is runnable. */
int esched_schedule(esched *s, esched_output *out);
void esched_output_free(esched_output *out);

/* A list of requests, reused across calls (zero-initialise; free with
 * esched_req_list_free, which does not free the requests). */
typedef struct {
    ereq **reqs;
    int32_t n, cap;
} esched_req_list;
void esched_req_list_free(esched_req_list *l);

/* Apply the runner's results for out: sampled[] holds one token per item
 * with sample = true, in item order (n_sampled of them). Appends each to its
 * request (skipping requests finished meanwhile), checks the stop rules and
 * appends requests that finished to *finished (cleared first; may be NULL).
 * VC_ERR_INVALID (and no change) when n_sampled or a token is wrong,
 * VC_ERR_OOM when a token array cannot grow. */
int esched_update(esched *s, const esched_output *out, const int32_t *sampled, int32_t n_sampled,
                  esched_req_list *finished);

/* ---- metrics */

#define ESCHED_ITER_BUCKETS 13 /* 1, 8, 16, 32, ..., 16384 (vLLM's bounds) */

typedef struct {
    int32_t num_running, num_waiting;
    double kv_usage;                      /* fraction of usable blocks in use */
    int64_t num_preemptions_total;
    int64_t prefix_queries_total;         /* tokens looked up, first admissions */
    int64_t prefix_hits_total;            /* tokens found, first admissions */
    int64_t preempted_prefix_queries_total, preempted_prefix_hits_total; /* readmissions */
    int64_t num_steps;                    /* esched_schedule calls */
    /* Tokens per step (vLLM's vllm:iteration_tokens_total): steps that ran
     * tokens, counted per bucket bound ESCHED_ITER_LE (non-cumulative; the
     * last slot holds steps above the largest bound), and the tokens. */
    int64_t iter_steps, iter_tokens;
    int64_t iter_counts[ESCHED_ITER_BUCKETS + 1];
} esched_stats;

extern const int32_t ESCHED_ITER_LE[ESCHED_ITER_BUCKETS];

void esched_get_stats(const esched *s, esched_stats *out);

/* Queue access for tests and debugging: the i-th running / waiting request
 * (waiting in admission order), NULL past the end. */
ereq *esched_running_at(const esched *s, int32_t i);
ereq *esched_waiting_at(const esched *s, int32_t i);

#endif
