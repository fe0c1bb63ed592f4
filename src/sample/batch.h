/* batch sampler — vLLM's V1 Sampler for a batch of requests, on host memory.
 *
 * One call turns logits [B, V] (f32, one row per request sampled this step)
 * into B token ids, and, for rows that asked, logprobs. Each row goes through
 * vLLM's order (vllm/v1/sample/sampler.py):
 *
 *   raw logprobs (default logprobs mode; computed before anything below)
 *   -> NaN to -inf -> allowed_token_ids -> bad_words -> min_tokens
 *   -> logit_bias -> penalties (repetition, frequency, presence)
 *   -> greedy (temperature < 1e-5: argmax, lowest id on ties), else
 *      temperature -> min_p -> top_k -> top_p -> draw.
 *
 * Usage (the runner):
 *
 *   smp_batch_params bp = smp_batch_params_default();
 *   bp.vocab = V; bp.max_batch = 256;
 *   smp_batch *b = smp_batch_create(&bp);
 *   // once per request, when it is added:
 *   smp_req_params rp = smp_req_params_default(); rp.temperature = 0.7f; ...
 *   smp_req *r; if (smp_req_create(b, &rp, &r) < 0) -> reject (vc_err_msg())
 *   // every step:
 *   smp_row rows[n] = {{r, prompt, n_prompt, output, n_output}, ...};
 *   smp_batch_sample(b, logits, rows, n);      // logits[n, V], modified
 *   const smp_batch_out *o = smp_batch_output(b); o->tokens[i] ...
 *
 * sample/from_request.h builds the smp_req and smp_row from the engine's
 * ereq (EOS joins the min_tokens stop set unless ignore_eos).
 *
 * State. A request's parameters are validated and copied once into an
 * immutable smp_req. The history the processors need (prompt and output
 * ids) is passed per step in smp_row; nothing else persists per request.
 * Seeded requests draw from a counter-based generator keyed by (seed,
 * n_output), so a request's tokens depend only on its own seed, its logits
 * and its step — not on the batch around it, nor on preemption and
 * recompute. Unseeded requests draw from the batch sampler's generator.
 *
 * Memory. All scratch ([V] work rows, a [max_batch, max_logprobs + 1]
 * output block) is allocated at create; a step allocates nothing. Rows are
 * processed one after another on the calling thread (vectorised passes,
 * no full sort: see topk_topp.c). Roughly, per row on one core: greedy
 * 0.15 ms, T/top_k 0.5-0.7 ms, top_p 1 ms at V = 151936 (about a third
 * of that at V = 49152); tests/sample/bench_batch_sampler.c measures.
 *
 * Rows on return hold the processed logits: greedy rows after the
 * penalties, random rows after temperature and the filters (filtered
 * tokens -inf). NaN logits count as -inf. +inf logits share all the mass
 * equally (the filters are skipped); a row with nothing finite or +inf
 * yields token 0. If smp_batch_sample fails, the step's outputs are void.
 */
#ifndef SMP_BATCH_H
#define SMP_BATCH_H

#include "sample/sampler.h"

#include <stdbool.h>
#include <stdint.h>

/* Which logprobs are returned (vLLM's logprobs_mode). */
typedef enum {
    SMP_LOGPROBS_RAW = 0,    /* "raw_logprobs" (vLLM's default): log_softmax of the model's logits */
    SMP_LOGPROBS_PROCESSED,  /* "processed_logprobs": log_softmax of the logits the token was drawn
                                from (after penalties, temperature, min_p/top_k/top_p) */
    SMP_LOGITS_RAW,          /* "raw_logits": the model's logits themselves */
    SMP_LOGITS_PROCESSED     /* "processed_logits": the processed logits themselves */
} smp_logprobs_mode;

typedef struct {
    int64_t vocab;              /* V, required */
    int32_t max_batch;          /* rows per call, default 256 */
    int32_t max_logprobs;       /* largest logprobs / prompt_logprobs k accepted, default 20 */
    smp_logprobs_mode logprobs_mode;
    uint64_t seed;              /* generator for unseeded requests */
    bool has_seed;              /* false: seeded from the clock */
    int32_t n_threads;          /* rows sampled in parallel by this many threads (<= 1: the
                                   caller's thread only); results are identical either way */
} smp_batch_params;

typedef struct {
    int32_t token;
    float bias;                 /* added to the logit */
} smp_bias;

/* One request's sampling parameters (vLLM's SamplingParams, sampler part).
 * Pointers are borrowed by smp_req_create, which copies what they point to. */
typedef struct {
    float temperature;          /* >= 0, default 1; < 1e-5 greedy; (1e-5, 1e-2) raised to 1e-2 (vLLM) */
    float top_p;                /* (0, 1], default 1 (off) */
    int32_t top_k;              /* -1 or 0: off; >= 1 */
    float min_p;                /* [0, 1], default 0 (off) */
    float presence_penalty;     /* [-2, 2], default 0 */
    float frequency_penalty;    /* [-2, 2], default 0 */
    float repetition_penalty;   /* > 0, default 1 (off) */
    uint64_t seed;
    bool has_seed;              /* false: the batch sampler's generator */
    int32_t min_tokens;         /* >= 0: stop_ids banned while n_output < min_tokens */
    const int32_t *stop_ids;    /* [n_stop_ids] stop token ids, EOS included unless ignore_eos */
    int32_t n_stop_ids;
    const smp_bias *logit_bias; /* [n_logit_bias], duplicate tokens add up */
    int32_t n_logit_bias;
    const int32_t *allowed_ids; /* [n_allowed] whitelist; NULL: every token allowed */
    int32_t n_allowed;          /* >= 1 when allowed_ids is set */
    const int32_t *bad_words;   /* concatenated token sequences ... */
    const int32_t *bad_word_lens; /* [n_bad_words] their lengths (>= 1) */
    int32_t n_bad_words;
    int32_t logprobs;           /* -1: none; k >= 0: sampled token + top k, k <= max_logprobs */
} smp_req_params;

typedef struct smp_batch smp_batch;
typedef struct smp_req smp_req;

/* A row of the step: the request and its history (prompt then outputs so
 * far; borrowed for the call). n_output is the step index of the draw. */
typedef struct {
    const smp_req *req;
    const int32_t *prompt;      /* [n_prompt], used by repetition_penalty */
    int32_t n_prompt;
    const int32_t *output;      /* [n_output], penalties, bad_words, min_tokens */
    int32_t n_output;
} smp_row;

/* Results of the last smp_batch_sample, owned by the sampler (valid until the
 * next call). Logprob block layout follows vLLM's LogprobsTensors: row i
 * holds, at [i * stride + 0], the sampled token and, at [1 .. n_logprobs[i]],
 * the top tokens by logprob, descending (lowest id first among equals). */
typedef struct {
    int32_t *tokens;            /* [B] */
    int32_t stride;             /* max_logprobs + 1 */
    int32_t *lp_ids;            /* [B, stride] */
    float *lp_vals;             /* [B, stride] */
    int32_t *ranks;             /* [B] rank of the sampled token: #tokens with logprob >= its own */
    int32_t *n_logprobs;        /* [B] k for the row; -1 when it asked none */
} smp_batch_out;

smp_batch_params smp_batch_params_default(void);
smp_batch *smp_batch_create(const smp_batch_params *p);
void smp_batch_free(smp_batch *b);

smp_req_params smp_req_params_default(void);
/* Validate p against vLLM's ranges and the vocab (clear vc_err message and
 * VC_ERR_INVALID on failure), then copy it into *out. */
int smp_req_create(const smp_batch *b, const smp_req_params *p, smp_req **out);
void smp_req_free(smp_req *r);
const smp_req_params *smp_req_get_params(const smp_req *r); /* pointers point into r */

/* n > 1: child i (0-based) of a parallel-sampling request gets the parent's
 * parameters with seed + i when the parent is seeded (vLLM's semantics). */
smp_req_params smp_req_params_child(const smp_req_params *parent, int32_t i);

/* Sample rows[0..n) from logits [n, V] (processed in place). n <= max_batch.
 * Returns VC_OK, or VC_ERR_INVALID for a bad call (n, NULL req, history ids
 * out of range). */
int smp_batch_sample(smp_batch *b, float *logits, const smp_row *rows, int32_t n);
/* True when the row's token is simply the argmax of the model's logits
 * (greedy, no logprobs, penalties, logit_bias, allowed/bad words, or an
 * active min_tokens): the runner may then take the argmax on the device
 * and skip copying the logits (same token: lowest id among maxima). */
bool smp_row_plain_greedy(const smp_row *row);
const smp_batch_out *smp_batch_output(const smp_batch *b);

/* Sampling elsewhere (on the device: rt_sample in runtime/ops.h).
 *
 * A row qualifies (smp_row_plain_ok) when it needs only penalties,
 * temperature, min_p, top_k and top_p: no logprobs, allowed ids, bad words,
 * logit bias, nor an active min_tokens ban. smp_row_plain gives its
 * effective parameters. smp_batch_uniforms hands out the step's uniforms
 * exactly as smp_batch_sample would draw them (seeded rows: their
 * (seed, step) draw; unseeded sampled rows: the batch generator's next
 * draws in row order; greedy rows: 0), so a step sampled elsewhere consumes
 * the generator as a host-sampled step does. smp_batch_sample_us is
 * smp_batch_sample with those uniforms given (each row's seed is then not
 * consulted): the oracle of the device op. */
typedef struct {
    float temperature;   /* 0: greedy; else the effective one (>= 1e-2) */
    float top_p, min_p;  /* 1 / 0: off */
    float repetition, frequency, presence;
    int32_t top_k;       /* 0: off, else 1 .. V-1 */
    bool penalties;      /* any penalty is not a no-op */
} smp_plain;

bool smp_row_plain_ok(const smp_row *row);
smp_plain smp_row_plain(const smp_row *row);
void smp_batch_uniforms(smp_batch *b, const smp_row *rows, int32_t n, double *us);
int smp_batch_sample_us(smp_batch *b, float *logits, const smp_row *rows, int32_t n, const double *us);
/* A request for smp_batch_sample_us from plain parameters (no seed). */
int smp_req_create_plain(const smp_batch *b, const smp_plain *p, smp_req **out);

int32_t smp_batch_max_logprobs(const smp_batch *b);

/* Prompt logprobs (raw): row p of logits [P, V] is the prediction for
 * next_ids[p]. For each p writes its logprob and rank, then the top k
 * (k <= 0 allowed: none) into ids/vals [P, k + 1] laid out like
 * smp_batch_out. Logits are not modified. Returns VC_OK or VC_ERR_INVALID. */
int smp_prompt_logprobs(const float *logits, int32_t P, int64_t V, const int32_t *next_ids, int32_t k,
                        int32_t *ids, float *vals, int32_t *ranks);

/* The uniform draw in [0, 1) a seeded request uses at step n_output. */
double smp_seeded_uniform(uint64_t seed, int32_t step);

#endif
