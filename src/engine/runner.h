/* runner — executes one scheduled step on the model (vLLM's model runner).
 *
 * Owns the paged KV storage (mdl_kv) and the host-side staging of a step:
 * from the scheduler's esched_output it lays the scheduled tokens out as
 * one varlen batch (sequence after sequence), builds positions, slot
 * mappings (kv_slot_mapping over each request's block table), query start
 * offsets, sequence lengths and block tables, runs mdl_forward_batch with
 * logits only at the rows that sample, and samples one token per such row.
 *
 *   erun_runner *r = erun_create(model, &params);
 *   erun_execute(r, &sched_out, sampled);   // sampled[i] for the i-th sampling item
 *   erun_free(r);
 *
 * Async scheduling (vLLM's --async-scheduling): an execution queue.
 *   erun_start_worker(r);                   // a worker thread runs steps in order
 *   erun_submit(r, &out_n, &t_n);           // stages step n (copies what it needs)
 *   ... schedule step n+1 with placeholders while step n runs ...
 *   erun_submit(r, &out_n1, &t_n1);         // may name step n's tokens (placeholders)
 *   erun_wait(r, t_n, &res);                // step n's sampled tokens + logprobs
 * Staging copies every input the step needs from the requests (ids,
 * positions, slots, block tables, sampler history), so the engine may
 * change requests while the step runs. An input that is a placeholder
 * (esched_item.num_placeholder_inputs, at most one per request) is the
 * token the previous step sampled for that request. With the device mirror
 * (default where the model can splice; VLLM_ASYNC_DEVICE_IDS=0 turns it
 * off) it never visits the host: the worker enqueues the step with the
 * placeholders spliced in on the device from the previous step's sampled
 * ids, and a step's ids are copied to the host behind it and awaited by
 * erun_wait, so step n+1 is queued before step n's ids reach the host.
 * Without it, the worker copies the token from the previous step's result
 * buffer when it starts the step. Either way nothing on the engine thread
 * reads a step's results before erun_wait returns them. At most two
 * steps are unwaited at once (submit refuses a third), waits go in order.
 * A request's sampler state must outlive the steps that use it: call
 * erun_release only after waiting for every step that named the request.
 *
 * Shapes (T = total tokens of the step, S = scheduled requests):
 *   ids/positions/slots [T], qsl [S+1], seq_lens [S], block_tables [S, M]
 *   with M = ceil(max_model_len / block_size), logits [n_sample, V].
 */
#ifndef ERUN_RUNNER_H
#define ERUN_RUNNER_H

#include "engine/request.h"
#include "model/model.h"
#include "sample/batch.h"

typedef struct {
    int32_t num_blocks;      /* KV blocks incl. the null block 0 */
    int32_t block_size;
    int32_t max_num_batched_tokens;
    int32_t max_num_seqs;
    int32_t max_model_len;
} erun_params;

typedef struct erun_runner erun_runner;

erun_runner *erun_create(mdl_model *m, const erun_params *p);
void erun_free(erun_runner *r);
/* The decode steps of every graph bucket up to max_rows (at most
 * max_num_seqs, 256) on the runner's KV cache, rows that write nothing:
 * their graphs recorded before serving (runner_warm.c). */
int erun_warm_decode(erun_runner *r, int32_t max_rows);
/* Runs the step on the calling thread (not while the worker runs).
 * sampled receives one token per item with sample=true, in item order. */
int erun_execute(erun_runner *r, const esched_output *so, int32_t *sampled);
/* The sampler's output of the last erun_execute (row k = k-th sampling
 * item): tokens and, for rows that asked, logprobs (layout in batch.h). */
const smp_batch_out *erun_sample_output(const erun_runner *r);
/* Prompt logprobs (requests with sp.prompt_logprobs = k >= 0): for every
 * prompt position pos >= 1 computed in a step, fn gets the logprob of
 * prompt token pos given the tokens before it: ids[0]/vals[0] that token,
 * then the top k (n = k + 1 entries), and its rank. Prefix-cache hits are
 * skipped for such requests (the scheduler), so every position comes. fn
 * runs on the thread that executes the step (the worker when it runs). */
typedef void (*erun_prompt_lp_fn)(void *ctx, const ereq *q, int32_t pos, const int32_t *ids, const float *vals,
                                  int32_t n, int32_t rank);
void erun_set_prompt_lp_cb(erun_runner *r, erun_prompt_lp_fn fn, void *ctx);
/* The execution queue (async scheduling). start: VC_ERR_RUNTIME if the
 * thread cannot start. stop: lets a running step finish, drops queued
 * ones, joins (erun_free calls it). submit: stages so as the next step and
 * queues it (*ticket = its number); VC_ERR_INVALID when two steps are
 * already unwaited or the schedule is inconsistent. wait: blocks until step
 * ticket (the oldest unwaited) completed; *out (row k = its k-th sampling
 * item) stays valid until step ticket + 3 is submitted. A failed step
 * returns its error, and every later step fails too. */
int erun_start_worker(erun_runner *r);
void erun_stop_worker(erun_runner *r);
int erun_submit(erun_runner *r, const esched_output *so, int64_t *ticket);
int erun_wait(erun_runner *r, int64_t ticket, const smp_batch_out **out);
/* Checks sampling parameters as the sampler will (clear VC_ERR_INVALID). */
int erun_validate(const erun_runner *r, const ereq_sampling *sp);
/* Drops per-request sampling state (call when a request finishes). */
void erun_release(erun_runner *r, int64_t req_id);

#endif
