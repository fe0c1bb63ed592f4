/* Request parameters: defaults, vLLM's validation, and the owned copy. */
#include "sample/sample_int.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

smp_req_params smp_req_params_default(void) {
    smp_req_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.top_k = 0;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.logprobs = -1;
    return p;
}

smp_req_params smp_req_params_child(const smp_req_params *parent, int32_t i) {
    smp_req_params c = *parent;
    if (c.has_seed) c.seed = parent->seed + (uint64_t)(int64_t)i;
    return c;
}

static int check_ids(const int32_t *ids, int32_t n, int64_t V, const char *what) {
    if (n < 0) return vc_err_set(VC_ERR_INVALID, "%s: negative count %d", what, n);
    if (n > 0 && !ids) return vc_err_set(VC_ERR_INVALID, "%s: %d ids but no array", what, n);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return vc_err_set(VC_ERR_INVALID, "%s contains out-of-vocab token id %d (vocab size %lld)", what,
                              ids[i], (long long)V);
    return VC_OK;
}

static int check_params(const smp_req_params *p, int64_t V, int32_t max_logprobs) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return vc_err_set(VC_ERR_INVALID, "temperature must be non-negative, got %g", (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return vc_err_set(VC_ERR_INVALID, "top_p must be in (0, 1], got %g", (double)p->top_p);
    if (p->top_k < -1)
        return vc_err_set(VC_ERR_INVALID, "top_k must be 0 (disable), -1 (disable) or at least 1, got %d", p->top_k);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return vc_err_set(VC_ERR_INVALID, "min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return vc_err_set(VC_ERR_INVALID, "presence_penalty must be in [-2, 2], got %g", (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return vc_err_set(VC_ERR_INVALID, "frequency_penalty must be in [-2, 2], got %g",
                          (double)p->frequency_penalty);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return vc_err_set(VC_ERR_INVALID, "repetition_penalty must be greater than zero, got %g",
                          (double)p->repetition_penalty);
    if (p->min_tokens < 0) return vc_err_set(VC_ERR_INVALID, "min_tokens must be non-negative, got %d", p->min_tokens);
    if (p->logprobs < -1 || p->logprobs > max_logprobs)
        return vc_err_set(VC_ERR_INVALID, "requested %d logprobs, the most allowed is %d", p->logprobs, max_logprobs);
    if (check_ids(p->stop_ids, p->n_stop_ids, V, "stop_token_ids") < 0) return VC_ERR_INVALID;
    if (p->allowed_ids && p->n_allowed == 0) return vc_err_set(VC_ERR_INVALID, "allowed_token_ids is empty");
    if (check_ids(p->allowed_ids, p->n_allowed, V, "allowed_token_ids") < 0) return VC_ERR_INVALID;
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return vc_err_set(VC_ERR_INVALID, "logit_bias: bad count %d", p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= V)
            return vc_err_set(VC_ERR_INVALID, "logit_bias contains out-of-vocab token id %d (vocab size %lld)",
                              p->logit_bias[i].token, (long long)V);
        if (!isfinite(p->logit_bias[i].bias))
            return vc_err_set(VC_ERR_INVALID, "logit_bias for token %d is not finite", p->logit_bias[i].token);
    }
    if (p->n_bad_words < 0 || (p->n_bad_words > 0 && (!p->bad_words || !p->bad_word_lens)))
        return vc_err_set(VC_ERR_INVALID, "bad_words: bad count %d", p->n_bad_words);
    int64_t total = 0;
    for (int32_t i = 0; i < p->n_bad_words; i++) {
        if (p->bad_word_lens[i] < 1) return vc_err_set(VC_ERR_INVALID, "bad_words[%d] is empty", i);
        total += p->bad_word_lens[i];
        if (total > INT32_MAX) return vc_err_set(VC_ERR_INVALID, "bad_words too long");
    }
    if (check_ids(p->bad_words, (int32_t)total, V, "bad_words") < 0) return VC_ERR_INVALID;
    return VC_OK;
}

/* Copy n elements of `size` bytes (NULL when n == 0). */
static int dup(void **dst, const void *src, int64_t n, size_t size) {
    *dst = NULL;
    if (n <= 0) return VC_OK;
    *dst = malloc((size_t)n * size);
    if (!*dst) return vc_err_set(VC_ERR_OOM, "out of memory");
    memcpy(*dst, src, (size_t)n * size);
    return VC_OK;
}

int smp_req_create(const smp_batch *b, const smp_req_params *p, smp_req **out) {
    *out = NULL;
    if (check_params(p, b->p.vocab, b->p.max_logprobs) < 0) return VC_ERR_INVALID;
    smp_req *r = calloc(1, sizeof *r);
    if (!r) return vc_err_set(VC_ERR_OOM, "out of memory");
    r->p = *p;
    int64_t nbw = 0;
    for (int32_t i = 0; i < p->n_bad_words; i++) nbw += p->bad_word_lens[i];
    if (dup((void **)&r->stop_ids, p->stop_ids, p->n_stop_ids, sizeof(int32_t)) < 0 ||
        dup((void **)&r->allowed, p->allowed_ids, p->n_allowed, sizeof(int32_t)) < 0 ||
        dup((void **)&r->bias, p->logit_bias, p->n_logit_bias, sizeof(smp_bias)) < 0 ||
        dup((void **)&r->bad_words, p->bad_words, nbw, sizeof(int32_t)) < 0 ||
        dup((void **)&r->bad_word_lens, p->bad_word_lens, p->n_bad_words, sizeof(int32_t)) < 0) {
        smp_req_free(r);
        return VC_ERR_OOM;
    }
    r->p.stop_ids = r->stop_ids;
    r->p.allowed_ids = r->allowed;
    r->p.logit_bias = r->bias;
    r->p.bad_words = r->bad_words;
    r->p.bad_word_lens = r->bad_word_lens;
    r->greedy = p->temperature < SMP_SAMPLING_EPS;
    /* vLLM raises tiny positive temperatures (numerical safety) and turns
     * the random-only filters off for greedy requests. */
    if (!r->greedy && r->p.temperature < SMP_MIN_TEMP) r->p.temperature = SMP_MIN_TEMP;
    if (r->greedy) {
        r->p.top_p = 1.0f;
        r->p.top_k = 0;
        r->p.min_p = 0.0f;
    }
    r->top_k = (r->p.top_k >= 1 && r->p.top_k < b->p.vocab) ? r->p.top_k : 0;
    r->penalties = p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
    *out = r;
    return VC_OK;
}

void smp_req_free(smp_req *r) {
    if (!r) return;
    free(r->stop_ids);
    free(r->allowed);
    free(r->bias);
    free(r->bad_words);
    free(r->bad_word_lens);
    free(r);
}

const smp_req_params *smp_req_get_params(const smp_req *r) { return &r->p; }
