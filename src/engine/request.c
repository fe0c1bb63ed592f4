#include "engine/request.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

ereq_sampling ereq_sampling_default(void) {
    ereq_sampling s;
    memset(&s, 0, sizeof s);
    s.temperature = 1.0f;
    s.top_p = 1.0f;
    s.repetition_penalty = 1.0f;
    s.max_tokens = 16;
    s.skip_special_tokens = true;
    s.logprobs = -1;
    s.prompt_logprobs = -1;
    s.eos_token_id = -1;
    s.n = 1;
    return s;
}

static void *dup_mem(const void *p, size_t n) {
    if (!p) return NULL;
    void *d = malloc(n);
    if (d) memcpy(d, p, n);
    return d;
}

ereq *ereq_create(int64_t id, const int32_t *prompt, int32_t n_prompt, const ereq_sampling *sp) {
    if (n_prompt <= 0) {
        vc_err_set(VC_ERR_INVALID, "empty prompt");
        return NULL;
    }
    ereq *r = calloc(1, sizeof *r);
    if (!r) goto oom;
    r->id = id;
    r->sp = *sp;
    r->sp.stop = NULL;
    r->sp.n_stop = 0;
    r->sp.logit_bias_ids = NULL;
    r->sp.logit_bias_vals = NULL;
    r->sp.allowed_token_ids = NULL;
    r->sp.bad_words_ids = NULL;
    r->sp.bad_words_lens = NULL;
    if (sp->n_logit_bias < 0 || sp->n_allowed_token_ids < 0 || sp->n_bad_words < 0 ||
        (sp->n_logit_bias > 0 && (!sp->logit_bias_ids || !sp->logit_bias_vals)) ||
        (sp->n_allowed_token_ids > 0 && !sp->allowed_token_ids) ||
        (sp->n_bad_words > 0 && (!sp->bad_words_ids || !sp->bad_words_lens))) {
        ereq_free(r);
        vc_err_set(VC_ERR_INVALID, "malformed token list in sampling parameters");
        return NULL;
    }
    if (sp->n_logit_bias > 0) {
        if (!(r->sp.logit_bias_ids = dup_mem(sp->logit_bias_ids, (size_t)sp->n_logit_bias * sizeof(int32_t))) ||
            !(r->sp.logit_bias_vals = dup_mem(sp->logit_bias_vals, (size_t)sp->n_logit_bias * sizeof(float))))
            goto oom;
    }
    if (sp->n_allowed_token_ids > 0 &&
        !(r->sp.allowed_token_ids = dup_mem(sp->allowed_token_ids, (size_t)sp->n_allowed_token_ids * sizeof(int32_t))))
        goto oom;
    if (sp->n_bad_words > 0) {
        size_t total = 0;
        for (int32_t i = 0; i < sp->n_bad_words; i++) {
            if (sp->bad_words_lens[i] <= 0) {
                ereq_free(r);
                vc_err_set(VC_ERR_INVALID, "bad_words: empty word");
                return NULL;
            }
            total += (size_t)sp->bad_words_lens[i];
        }
        if (!(r->sp.bad_words_lens = dup_mem(sp->bad_words_lens, (size_t)sp->n_bad_words * sizeof(int32_t))) ||
            !(r->sp.bad_words_ids = dup_mem(sp->bad_words_ids, total * sizeof(int32_t))))
            goto oom;
    }
    r->cap_tokens = n_prompt + (sp->max_tokens > 0 ? sp->max_tokens : 16) + 1;
    r->tokens = malloc((size_t)r->cap_tokens * sizeof *r->tokens);
    if (!r->tokens) goto oom;
    memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    r->num_tokens = r->num_prompt = n_prompt;
    if (sp->n_stop > 0) {
        r->sp.stop = calloc((size_t)sp->n_stop, sizeof *r->sp.stop);
        if (!r->sp.stop) goto oom;
        for (int i = 0; i < sp->n_stop; i++) {
            r->sp.stop[i] = strdup(sp->stop[i]);
            if (!r->sp.stop[i]) goto oom;
            r->sp.n_stop++;
        }
    }
    r->status = EREQ_WAITING;
    r->stop_str_idx = -1;
    return r;
oom:
    ereq_free(r);
    vc_err_set(VC_ERR_OOM, "out of memory");
    return NULL;
}

void ereq_free(ereq *r) {
    if (!r) return;
    for (int i = 0; i < r->sp.n_stop; i++) free(r->sp.stop[i]);
    free(r->sp.stop);
    free(r->sp.logit_bias_ids);
    free(r->sp.logit_bias_vals);
    free(r->sp.allowed_token_ids);
    free(r->sp.bad_words_ids);
    free(r->sp.bad_words_lens);
    free(r->tokens);
    free(r->external_id);
    free(r->cache_salt);
    free(r);
}

int ereq_append_token(ereq *r, int32_t tok) {
    if (r->num_tokens == r->cap_tokens) {
        int32_t cap = r->cap_tokens * 2;
        int32_t *t = realloc(r->tokens, (size_t)cap * sizeof *t);
        if (!t) return vc_err_set(VC_ERR_OOM, "out of memory");
        r->tokens = t;
        r->cap_tokens = cap;
    }
    r->tokens[r->num_tokens++] = tok;
    return VC_OK;
}

int32_t ereq_num_output(const ereq *r) { return r->num_tokens - r->num_prompt; }

bool ereq_is_finished(const ereq *r) { return r->status >= EREQ_FINISHED_STOPPED; }

bool ereq_can_free(const ereq *r) { return ereq_is_finished(r) && r->num_inflight == 0; }

const char *ereq_finish_reason(const ereq *r) {
    switch (r->status) {
    case EREQ_FINISHED_STOPPED: return "stop";
    case EREQ_FINISHED_LENGTH: return "length";
    case EREQ_FINISHED_ABORTED: return "abort";
    case EREQ_FINISHED_ERROR: return "error";
    default: return NULL;
    }
}
