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
 * The KV cache is a block pool sized from a memory budget
 * (kv_cache_memory bytes, else kv_cache_fraction of available memory),
 * logged at start-up. Not thread-safe: one thread drives an engine (the
 * async engine puts it on its own thread).
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
    int32_t block_size;              /* 16 */
    int32_t max_num_seqs;            /* 64 */
    int32_t max_num_batched_tokens;  /* 2048 */
    int32_t max_model_len;           /* 0: the model's (capped at 8192 by default budget) */
    size_t kv_cache_memory;          /* bytes; 0: kv_cache_fraction of available memory */
    int32_t num_blocks;              /* > 0: exactly this many KV blocks (no budget); with
                                      * max_model_len 0 the context shrinks to fit them */
    double kv_cache_fraction;        /* 0.25 */
    bool enable_prefix_caching;      /* true */
    bool enable_chunked_prefill;     /* true */
    esched_policy policy;            /* FCFS */
    bool upcast_weights;             /* f32 weights (oracle tests) */
} eng_params;

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
} eng_output;

typedef struct eng_engine eng_engine;

eng_params eng_params_default(void);
eng_engine *eng_create(const eng_params *p);
void eng_free(eng_engine *e);

/* Add a request (validated: clear VC_ERR_INVALID message on bad input). */
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
