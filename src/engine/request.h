/* request — one generation request as the engine sees it, and the
 * scheduler's per-step output that the runner executes.
 *
 * Ownership: the engine creates requests (ereq_create) from a prompt and
 * sampling parameters; the scheduler owns their queues and KV sequences;
 * the runner reads the fields below for the requests a step scheduled and
 * never changes them (it returns sampled tokens to the scheduler).
 */
#ifndef ENGINE_REQUEST_H
#define ENGINE_REQUEST_H

#include "engine/kv_cache_manager.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    EREQ_WAITING = 0,
    EREQ_RUNNING,
    EREQ_PREEMPTED,        /* back in waiting after its blocks were freed */
    EREQ_FINISHED_STOPPED, /* EOS, stop token or stop string */
    EREQ_FINISHED_LENGTH,  /* max_tokens or max_model_len */
    EREQ_FINISHED_ABORTED,
    EREQ_FINISHED_ERROR
} ereq_status;

#define EREQ_MAX_STOP_IDS 16

/* Sampling and stopping parameters (vLLM's SamplingParams subset). */
typedef struct {
    float temperature;        /* 1.0; < 1e-5 greedy */
    float top_p;              /* 1.0 */
    int32_t top_k;            /* 0 / -1 off */
    float min_p;              /* 0 */
    float presence_penalty;   /* 0 */
    float frequency_penalty;  /* 0 */
    float repetition_penalty; /* 1.0 */
    uint64_t seed;
    bool has_seed;
    int32_t max_tokens;       /* 16 */
    int32_t min_tokens;       /* 0 */
    bool ignore_eos;
    int32_t eos_token_id;     /* -1: none; the engine sets the tokenizer's EOS */
    int32_t stop_token_ids[EREQ_MAX_STOP_IDS];
    int n_stop_token_ids;
    char **stop;              /* stop strings (owned by the request) */
    int n_stop;
    bool include_stop_str_in_output;
    bool skip_special_tokens; /* true */
    int32_t logprobs;         /* -1: none; k >= 0: sampled + top-k logprobs */
    int32_t prompt_logprobs;  /* -1: none */
    /* Token-level controls (deep-copied by ereq_create; NULL/0 = off). */
    int32_t *logit_bias_ids;     /* [n_logit_bias] */
    float *logit_bias_vals;      /* [n_logit_bias] added to the logits */
    int32_t n_logit_bias;
    int32_t *allowed_token_ids;  /* [n_allowed_token_ids] whitelist */
    int32_t n_allowed_token_ids;
    int32_t *bad_words_ids;      /* concatenated token sequences ... */
    int32_t *bad_words_lens;     /* [n_bad_words] their lengths */
    int32_t n_bad_words;
    /* Parallel sampling (vLLM's n): eng_add_* fans the request out into n
     * child requests (1, also when 0). */
    int32_t n;
} ereq_sampling;

ereq_sampling ereq_sampling_default(void);

typedef struct ereq {
    int64_t id;               /* engine-unique, assigned at submit */
    char *external_id;        /* caller's id (e.g. "cmpl-..."), may be NULL */
    int priority;             /* lower = more urgent (priority policy) */
    double arrival_time;      /* seconds, monotonic */
    ereq_status status;
    ereq_sampling sp;

    /* Tokens: prompt then outputs, one array. [0, num_prompt) is the prompt. */
    int32_t *tokens;
    int32_t num_tokens, cap_tokens;
    int32_t num_prompt;
    int32_t num_computed;     /* tokens whose KV is in the cache (scheduler-owned) */
    int32_t num_cached_prompt;/* prompt tokens served by the prefix cache (stats) */

    kv_seq *seq;              /* KV blocks (scheduler-owned) */
    char *cache_salt;         /* optional, prefix-cache isolation */
    uint32_t stop_reason_id;  /* stop token that finished it, if any */
    int32_t num_preemptions;
    /* Scheduler bookkeeping (read-only for everyone else): */
    int32_t num_output_placeholders; /* sampled by scheduled steps, not yet returned
                                      * by esched_update (async scheduling) */
    int32_t num_inflight;     /* scheduler outputs naming it not yet passed to
                               * esched_update: free the request only at 0 */
    bool stop_by_id;          /* stop_reason_id holds the stop token that finished it */
    int32_t stop_str_idx;     /* index in sp.stop of the stop string that finished it, -1 */
    void *user;               /* engine/front-end per-request state */
} ereq;

/* One request's share of a step. */
typedef struct {
    ereq *req;
    int32_t start;      /* == req->num_computed before this step: first position */
    int32_t num_tokens; /* tokens [start, start + num_tokens) run this step */
    bool sample;        /* this chunk reaches the end of the known tokens: sample one
                         * (start + num_tokens == num_tokens + placeholders of req) */
    /* Async scheduling: the last num_placeholder_inputs input tokens of this
     * chunk (positions >= req->num_tokens when scheduled) are not on the host
     * yet; they are the tokens sampled by the request's previous step(s),
     * which the runner keeps in its own result buffer (on the device, for a
     * device sampler) and splices in when the step starts (runner.h). 0 when the
     * previous step's tokens were returned before this schedule. */
    int32_t num_placeholder_inputs;
} esched_item;

/* What the scheduler hands the runner each step. Items are ordered as the
 * runner should lay them out in the batch; total_tokens <= budget. */
typedef struct {
    esched_item *items;
    int32_t n_items, cap_items;
    int32_t total_tokens;
    ereq **preempted;  /* requests preempted this step (their KV was freed) */
    int32_t n_preempted, cap_preempted;
    /* Requests that finished (or were aborted) since the previous schedule:
     * the runner drops their rows. Ids, since the requests may be freed. */
    int64_t *finished_ids;
    int32_t n_finished, cap_finished;
} esched_output;

/* Creation copies prompt and sampling parameters (stop strings deep-copied). */
ereq *ereq_create(int64_t id, const int32_t *prompt, int32_t n_prompt, const ereq_sampling *sp);
void ereq_free(ereq *r);
int ereq_append_token(ereq *r, int32_t tok);
int32_t ereq_num_output(const ereq *r);
bool ereq_is_finished(const ereq *r);
/* Finished and no scheduler output in flight names it: ereq_free is safe. */
bool ereq_can_free(const ereq *r);
const char *ereq_finish_reason(const ereq *r); /* "stop", "length", "abort", "error" or NULL */

#endif
