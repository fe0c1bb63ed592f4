/* from_request — the engine's request types to the batch sampler's.
 *
 *   smp_req *sr;
 *   if (smp_req_create_from_ereq(b, &req->sp, eos_ids, n_eos, &sr) < 0) -> reject
 *   rows[i] = smp_row_from_ereq(sr, req);   // each step
 *
 * Kept apart from sample/batch.h so the sampler itself does not depend on
 * the engine's headers.
 */
#ifndef SMP_FROM_REQUEST_H
#define SMP_FROM_REQUEST_H

#include "engine/request.h"
#include "sample/batch.h"

/* Maps ereq_sampling onto smp_req_params: the min_tokens stop set is
 * stop_token_ids plus the model's EOS ids unless ignore_eos (vLLM's
 * all_stop_token_ids), plus logit_bias, allowed_token_ids and bad_words.
 * Validation errors as smp_req_create. */
int smp_req_create_from_ereq(const smp_batch *b, const ereq_sampling *sp, const int32_t *eos_ids, int32_t n_eos,
                             smp_req **out);

/* The step's row for a request: prompt = tokens[0, num_prompt), output =
 * the rest. Borrowed: valid while the request's token array is unchanged. */
smp_row smp_row_from_ereq(const smp_req *r, const ereq *e);

#endif
