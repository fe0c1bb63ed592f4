#include "sample/from_request.h"

#include "base/err.h"

int smp_req_create_from_ereq(const smp_batch *b, const ereq_sampling *sp, const int32_t *eos_ids, int32_t n_eos,
                             smp_req **out) {
    *out = NULL;
    if (sp->n_stop_token_ids < 0 || sp->n_stop_token_ids > EREQ_MAX_STOP_IDS || n_eos < 0 || n_eos > 64 ||
        (n_eos > 0 && !eos_ids))
        return vc_err_set(VC_ERR_INVALID, "bad stop token id count");
    int32_t stops[EREQ_MAX_STOP_IDS + 64];
    int32_t n = 0;
    for (int i = 0; i < sp->n_stop_token_ids; i++) stops[n++] = sp->stop_token_ids[i];
    if (!sp->ignore_eos)
        for (int32_t i = 0; i < n_eos; i++) stops[n++] = eos_ids[i];
    smp_req_params p = smp_req_params_default();
    p.temperature = sp->temperature;
    p.top_p = sp->top_p;
    p.top_k = sp->top_k;
    p.min_p = sp->min_p;
    p.presence_penalty = sp->presence_penalty;
    p.frequency_penalty = sp->frequency_penalty;
    p.repetition_penalty = sp->repetition_penalty;
    p.seed = sp->seed;
    p.has_seed = sp->has_seed;
    p.min_tokens = sp->min_tokens;
    p.stop_ids = stops;
    p.n_stop_ids = n;
    p.logprobs = sp->logprobs;
    if (sp->prompt_logprobs > smp_batch_max_logprobs(b))
        return vc_err_set(VC_ERR_INVALID, "requested %d prompt logprobs, the most allowed is %d", sp->prompt_logprobs,
                          smp_batch_max_logprobs(b));
    return smp_req_create(b, &p, out);
}

smp_row smp_row_from_ereq(const smp_req *r, const ereq *e) {
    smp_row row = {r, e->tokens, e->num_prompt, e->tokens + e->num_prompt, e->num_tokens - e->num_prompt};
    return row;
}
