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
/* Runs the step. sampled receives one token per item with sample=true, in
 * item order; logprob outputs are attached by the sampler (engine issue). */
int erun_execute(erun_runner *r, const esched_output *so, int32_t *sampled);
/* Logprobs of the last step's samples (layout in sample/batch.h). */
/* The sampler's output of the last erun_execute (row k = k-th sampling
 * item): tokens and, for rows that asked, logprobs (layout in batch.h). */
const smp_batch_out *erun_sample_output(const erun_runner *r);
/* Checks sampling parameters as the sampler will (clear VC_ERR_INVALID). */
int erun_validate(const erun_runner *r, const ereq_sampling *sp);
/* Drops per-request sampling state (call when a request finishes). */
void erun_release(erun_runner *r, int64_t req_id);

#endif
