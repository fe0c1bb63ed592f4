#include "sample/from_request.h"

#include "base/err.h"

#include <stdlib.h>

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
    if (sp->n_logit_bias < 0 || (sp->n_logit_bias > 0 && (!sp->logit_bias_ids || !sp->logit_bias_vals)))
        return vc_err_set(VC_ERR_INVALID, "logit_bias: bad count %d", sp->n_logit_bias);
    smp_bias *bias = NULL;
    if (sp->n_logit_bias > 0) {
        bias = malloc((size_t)sp->n_logit_bias * sizeof *bias);
        if (!bias) return vc_err_set(VC_ERR_OOM, "out of memory");
        for (int32_t i = 0; i < sp->n_logit_bias; i++) bias[i] = (smp_bias){sp->logit_bias_ids[i], sp->logit_bias_vals[i]};
        p.logit_bias = bias;
        p.n_logit_bias = sp->n_logit_bias;
    }
    p.allowed_ids = sp->n_allowed_token_ids > 0 ? sp->allowed_token_ids : NULL;
    p.n_allowed = sp->n_allowed_token_ids;
    p.bad_words = sp->bad_words_ids;
    p.bad_word_lens = sp->bad_words_lens;
    p.n_bad_words = sp->n_bad_words;
    int rc = smp_req_create(b, &p, out); /* copies bias */
    free(bias);
    return rc;
}

smp_row smp_row_from_ereq(const smp_req *r, const ereq *e) {
    smp_row row = {r, e->tokens, e->num_prompt, e->tokens + e->num_prompt, e->num_tokens - e->num_prompt};
    return row;
}
