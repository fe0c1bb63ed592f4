/* engine — the synchronous engine core (vLLM's EngineCore + output
 * processing): schedule -> execute -> update -> detokenize, one step per
 * eng_step call.
 *
 *   eng_params p = eng_params_default(); p.model = "model.gguf";
 *   eng_engine *e = eng_create(&p);              // NULL -> vc_err_msg()
 *   int64_t id; eng_add_text(e, "Hello", &sampling, user, &id);
 *   while (eng_has_unfinished(e)) {
 *       eng_output *o; int32_t n;
 *       eng_step(e, &o, &n);                      // deltas of this step
 *       ... o[i].text, o[i].finished, o[i].finish_reason ...
 *   }
 *   eng_free(e);
 *
 * The KV cache is a block pool sized from a memory budget (kv_cache_memory
 * bytes; else, on a device that reports its memory, what keeps it under
 * gpu_memory_utilization after the weights; else kv_cache_fraction of the
 * host's available memory), logged at start-up. Not thread-safe: one thread drives an engine (the
 * async engine puts it on its own thread).
 *
 * Async scheduling (p.async_scheduling, vLLM's --async-scheduling): the
 * runner executes steps on its own worker thread, in order. eng_step
 * schedules and submits step N, then waits for step N-1 and processes its
 * outputs (update, stop checks, detokenization) while step N runs; step
 * N's placeholders (a request's token still being sampled by step N-1) are
 * filled in by the worker. The outputs an eng_step call returns are
 * therefore one step behind, and the first call returns none. Stop
 * conditions are seen one step late: the extra token a finished (or
 * aborted) request was given is discarded and its KV blocks are freed when
 * it finishes. Tokens are identical to the synchronous engine's.
 */
#ifndef ENG_ENGINE_H
#define ENG_ENGINE_H

#include "engine/output.h"
#include "engine/request.h"
#include "engine/sched.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *model;               /* .gguf or HF folder */
    rt_device device;                /* RT_DEV_CPU (default) or RT_DEV_CUDA when built with it */
    int n_threads;                   /* CPU threads, 0 = all cores */
    int tensor_parallel_size;        /* ranks the model is split over (GPUs 0..N-1, or N groups of
                                      * the CPU threads); 0/1 = no split (docs/DISTRIBUTED.md) */
    int32_t block_size;              /* 16 */
    int32_t max_num_seqs;            /* 64 */
    int32_t max_num_batched_tokens;  /* 2048 */
    int32_t max_model_len;           /* 0: the model's (capped at 8192 by default budget) */
    size_t kv_cache_memory;          /* bytes; 0: kv_cache_fraction of available memory */
    int32_t num_blocks;              /* > 0: exactly this many KV blocks (no budget); with
                                      * max_model_len 0 the context shrinks to fit them */
    double kv_cache_fraction;        /* 0.25 of host MemAvailable (CPU backend) */
    double gpu_memory_utilization;   /* 0.9: device backends size the KV cache so the
                                        device is at most this full (vLLM's flag) */
    bool enable_prefix_caching;      /* true */
    bool enable_chunked_prefill;     /* true */
    esched_policy policy;            /* FCFS */
    bool upcast_weights;             /* f32 weights (oracle tests) */
    bool async_scheduling;           /* false: see "Async scheduling" above */
} eng_params;

/* A request's timeline, monotonic seconds (vc_now_s); 0 = not reached yet.
 * vLLM's metrics derive from it (vllm/v1/metrics/stats.py):
 *   request_queue_time    = first_scheduled - arrival
 *   request_prefill_time  = first_token - first_scheduled
 *   request_decode_time   = last_token - first_token
 *   request_inference_time = last_token - first_scheduled
 *   time_to_first_token   = first_token - arrival
 *   e2e_request_latency   = finished - arrival
 * first_scheduled is the first schedule only (a preempted request keeps
 * it); first/last_token are the steps whose outputs carried its first /
 * latest tokens. */
typedef struct {
    double arrival, first_scheduled, first_token, last_token, finished;
} eng_times;

typedef struct {
    int64_t id;
    void *user;               /* as passed to eng_add_* */
    const char *text;         /* new text (NUL-terminated), may be empty */
    size_t text_len;
    const int32_t *token_ids; /* new output ids */
    int32_t n_token_ids;
    bool finished;
    const char *finish_reason; /* when finished: stop, length, abort, error */
    const char *stop_str;
    eout_usage usage;
    /* Logprobs of the token sampled this step, when the request asked
     * (sp.logprobs = k >= 0) and a token was produced: lp_ids[0]/lp_vals[0]
     * the sampled token, then the top k by logprob (descending); lp_rank
     * its rank (1 = most likely). n_lp = 0 otherwise. */
    int32_t n_lp;
    const int32_t *lp_ids;
    const float *lp_vals;
    int32_t lp_rank;
    /* Prompt logprobs, in the request's first delta only, when asked
     * (sp.prompt_logprobs = k >= 0): for prompt position p in [1, n_plp),
     * plp_ids/plp_vals[p * plp_stride + 0] is prompt token p and its
     * logprob, then the top k; plp_ranks[p] its rank. Position 0 has none
     * (rank 0). n_plp = 0 otherwise. */
    int32_t n_plp, plp_stride;
    const int32_t *plp_ids;
    const float *plp_vals;
    const int32_t *plp_ranks;
    /* Parallel sampling (sp.n > 1): id is a child's; parent_id the id
     * eng_add_* returned and index the choice (0..n-1). For n = 1,
     * parent_id == id and index 0. parent_finished: with this delta every
     * child of the parent has finished (for n = 1: finished). */
    int64_t parent_id;
    int32_t index;
    bool parent_finished;
    eng_times times; /* as of this delta; complete in the final one */
} eng_output;

typedef struct eng_engine eng_engine;

eng_params eng_params_default(void);
eng_engine *eng_create(const eng_params *p);
void eng_free(eng_engine *e);

/* Add a request (validated: clear VC_ERR_INVALID message on bad input).
 * sp->n > 1 fans out n child requests (vLLM's ParentRequest): child i has
 * the parent's parameters with seed + i when seeded, ids *id_out + 1 + i,
 * and shares the prompt's KV through the prefix cache (when on). *id_out
 * is the parent's id: eng_abort on it aborts every child. */
int eng_add_tokens(eng_engine *e, const int32_t *prompt, int32_t n, const ereq_sampling *sp, void *user,
                   int64_t *id_out);
/* Encode text with the model's tokenizer (special tokens as transformers adds). */
int eng_add_text(eng_engine *e, const char *text, const ereq_sampling *sp, void *user, int64_t *id_out);
/* Abort: the request finishes with "abort" in the next step's outputs. */
int eng_abort(eng_engine *e, int64_t id);
/* Abort every live request (shutdown). */
int eng_abort_all(eng_engine *e);
/* After a failed step: finish every live request with "error" and return
 * their final deltas (like eng_step's). */
int eng_fail_all(eng_engine *e, eng_output **outs, int32_t *n_outs);
/* One step. *outs (owned by the engine, valid until the next call) lists a
 * delta for every request that produced tokens or finished. */
int eng_step(eng_engine *e, eng_output **outs, int32_t *n_outs);
bool eng_has_unfinished(const eng_engine *e);

const mdl_config *eng_model_config(const eng_engine *e);
const tok_tokenizer *eng_tokenizer(const eng_engine *e);
int32_t eng_num_blocks(const eng_engine *e);
int32_t eng_max_model_len(const eng_engine *e);
void eng_stats(const eng_engine *e, esched_stats *out);

#endif
