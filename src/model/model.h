/* model — a loaded decoder-only LLM and its forward pass.
 *
 *   rt_backend *be = rt_backend_create(RT_DEV_CPU, &bp);
 *   mdl_model *m = mdl_load("model.gguf", be, NULL);     // NULL -> vc_err_msg()
 *   mdl_seq *s = mdl_seq_create(m, max_ctx);             // contiguous KV cache
 *   mdl_forward(m, s, ids, n, logits, false);            // logits[V] of the last token
 *   ... mdl_forward(m, s, &next, 1, logits, false) ...
 *   mdl_seq_free(s); mdl_free(m);
 *
 * Architectures plug in through mdl_arch_impl (model_impl.h), one file per
 * family (arch_llama.c: Llama 2/3, SmolLM2, TinyLlama, Mistral, Qwen2,
 * Qwen3). Prompts longer than max_batch are processed in chunks.
 */
#ifndef MDL_MODEL_H
#define MDL_MODEL_H

#include "model/config.h"
#include "model/gguf.h"
#include "runtime/backend.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mdl_model mdl_model;
typedef struct mdl_seq mdl_seq;

/* mdl_params.kv_dtype: the model's own dtype on accelerators (vLLM's
 * --kv-cache-dtype auto: bf16 weights -> bf16 cache, f16 -> f16, f32 -> f32,
 * quantized -> f16); on the CPU backend f16 for block-quantized models
 * (llama.cpp's default) and f32 otherwise. The environment variable
 * VLLM_KV_CACHE_DTYPE (auto, f32, f16, bf16) overrides "auto". */
#define MDL_KV_AUTO (-1)
/* "auto", "float32"/"f32", "float16"/"f16"/"half", "bfloat16"/"bf16" ->
 * MDL_KV_AUTO or the dtype; anything else (e.g. vLLM's fp8 kinds) is a
 * clear VC_ERR_INVALID / VC_ERR_UNSUPPORTED. */
int mdl_parse_kv_dtype(const char *s, int *out);

typedef struct {
    int64_t max_batch;   /* tokens per forward chunk (activation buffers sized for it) */
    int kv_dtype;        /* MDL_KV_AUTO or RT_F32 / RT_F16 / RT_BF16 */
    bool upcast_weights; /* convert every weight to f32 at load: exact fp32 compute for
                            oracle tests (4-8x the memory of quantized weights) */
    /* Tensor parallelism (tp.c): tp_size ranks, rank r on tp_backends[r]
     * (tp_backends[0] must be the `be` given to mdl_load; NULL when
     * tp_size <= 1). The returned model is rank 0; it drives the other
     * ranks' threads inside mdl_forward_batch, so callers see one model. */
    int tp_size;
    rt_backend **tp_backends;
} mdl_params;

mdl_params mdl_params_default(void);
mdl_model *mdl_load(const char *path, rt_backend *be, const mdl_params *p);
void mdl_free(mdl_model *m);
const mdl_config *mdl_get_config(const mdl_model *m);
/* The GGUF file behind the model (its tokenizer lives there), else NULL. */
const gguf_ctx *mdl_get_gguf(const mdl_model *m);
const char *mdl_get_path(const mdl_model *m);
/* Bytes of weights (as stored) the forward pass reads per token. */
size_t mdl_weight_bytes(const mdl_model *m);

/* Paged KV storage for every layer: k/v [num_blocks, block_size, kvh, hd]
 * in the model's KV dtype (mdl_kv_dtype). Block ids and slots come from the
 * engine's block pool. */
typedef struct mdl_kv mdl_kv;
mdl_kv *mdl_kv_create(mdl_model *m, int32_t num_blocks, int32_t block_size);
void mdl_kv_free(mdl_kv *kv);
/* Bytes one block takes over all layers (K and V), for sizing from a budget. */
size_t mdl_kv_block_bytes(const mdl_model *m, int32_t block_size);
/* The KV cache element type chosen at load (rt_dtype: f32, f16 or bf16). */
int mdl_kv_dtype(const mdl_model *m);

/* One step of a varlen batch: S sequences, T tokens in total, laid out
 * sequence after sequence. All arrays are host memory. */
typedef struct {
    int32_t n_tokens;            /* T <= max_batch */
    const int32_t *ids;          /* [T] */
    const int32_t *positions;    /* [T] */
    const int32_t *slots;        /* [T] KV slot of each token (block * B + offset) */
    int32_t n_seqs;              /* S */
    const int32_t *qsl;          /* [S+1] query start offsets, qsl[0]=0, qsl[S]=T */
    const int32_t *seq_lens;     /* [S] tokens in the cache after this step */
    const int32_t *block_tables; /* [S, max_blocks] row-major */
    int32_t max_blocks;
    int32_t n_logits;            /* rows that need logits */
    const int32_t *logit_rows;   /* [n_logits] token rows in [0, T) */
} mdl_batch;

/* logits (host) receives [n_logits, V]. */
int mdl_forward_batch(mdl_model *m, mdl_kv *kv, const mdl_batch *b, float *logits);
/* The same step, but the n_logits rows are reduced on the device to their
 * argmax (rt_argmax: lowest index on ties, NaN skipped) and only the ids
 * come back: ids (host) receives [n_logits]. For greedy rows without
 * logprobs or penalties: copies n_logits ints instead of n_logits x V
 * floats. */
int mdl_forward_batch_argmax(mdl_model *m, mdl_kv *kv, const mdl_batch *b, int32_t *ids);
/* The same step, with the n_logits rows sampled on the device (rt_sample,
 * runtime/ops.h: penalties, temperature, min_p, top_k, top_p, greedy rows
 * = argmax) and only the ids coming back: ids (host) receives [n_logits].
 * Row i's parameters are fparams/iparams row i in rt_sample's column
 * layout; hist holds the histories the penalties read. Needs
 * mdl_can_sample (VC_ERR_UNSUPPORTED otherwise). */
typedef struct mdl_sample_args {
    const float *fparams;   /* [n_logits, RT_SAMPLE_NF] */
    const int32_t *iparams; /* [n_logits, RT_SAMPLE_NI] */
    const int32_t *hist;    /* [n_hist] ids in [0, V) (NULL when n_hist == 0) */
    int64_t n_hist;
} mdl_sample_args;
int mdl_forward_batch_sample(mdl_model *m, mdl_kv *kv, const mdl_batch *b, const mdl_sample_args *sa, int32_t *ids);
/* The rows a decode step of T sequences is padded to for its graph
 * (model_graph.c: 1, 2, 4, then multiples of 8); a step of exactly that
 * many rows records or replays the bucket's graph. */
int32_t mdl_graph_bucket(int32_t T);
/* The model's backend has the SAMPLE op and the model runs on one rank. */
bool mdl_can_sample(const mdl_model *m);
/* The device the model runs on (rt_device). */
int mdl_device(const mdl_model *m);
/* Both in one: exactly one of logits / ids is non-NULL. */
int mdl_forward_batch_ex(mdl_model *m, mdl_kv *kv, const mdl_batch *b, float *logits, int32_t *ids);

/* Async scheduling's device mirror (model_mirror.c; vLLM's async output +
 * "combine sampled tokens"): a step is enqueued and its sampled ids are
 * collected later; the next step may be enqueued in between, its
 * placeholder ids taken on the device from the step before:
 *
 *   mdl_ticket t0, t1;
 *   mdl_forward_batch_argmax_async(m, kv, &b0, NULL, &t0);   // step 0 queued
 *   mdl_splice sp = {.prev = t0, .n = 1, .rows = &r, .src = &k};
 *   mdl_forward_batch_argmax_async(m, kv, &b1, &sp, &t1);    // b1.ids[r] := step 0's id k
 *   mdl_collect(m, t0, ids0);                                // waits for step 0's ids
 *   mdl_collect(m, t1, ids1);
 *
 * A ticket's ids stay on the device until ticket + 2 is enqueued; their
 * host copy is queued behind the step and awaited only by mdl_collect.
 * Ticket t reuses t - 2's buffers and is refused (VC_ERR_INVALID) unless
 * t - 2 was collected: no buffer is reused before its last copy was seen
 * to complete. mdl_collect may run on another thread than the enqueues,
 * concurrently with them and with other collects of the same ticket (the
 * runner's engine and worker threads). The synchronous entry points above
 * are enqueue + collect. Needs mdl_can_mirror for a splice. */
typedef int64_t mdl_ticket; /* 1, 2, ...; 0: none */
typedef struct {
    mdl_ticket prev;     /* the last ticket enqueued: its ids are the sources */
    int32_t n;           /* entries */
    const int32_t *rows; /* [n] distinct rows of b->ids to overwrite (their host values are placeholders
                            in [0, V), e.g. 0) */
    const int32_t *src;  /* [n] rows of prev's ids (its logit-row order) */
    const int32_t *hist; /* [n] entries of sa->hist to overwrite too, or -1; NULL: none (sample only) */
} mdl_splice;
/* One rank, and the backend splices (COMBINE). */
bool mdl_can_mirror(const mdl_model *m);
/* Enqueue a step whose n_logits rows reduce to their argmax / device
 * sample (as mdl_forward_batch_argmax / _sample); sp may be NULL. */
int mdl_forward_batch_argmax_async(mdl_model *m, mdl_kv *kv, const mdl_batch *b, const mdl_splice *sp,
                                   mdl_ticket *t);
int mdl_forward_batch_sample_async(mdl_model *m, mdl_kv *kv, const mdl_batch *b, const mdl_sample_args *sa,
                                   const mdl_splice *sp, mdl_ticket *t);
/* A step whose logits go to the host (mdl_forward_batch, synchronous),
 * with its placeholders spliced (sp may be NULL; no hist entries). */
int mdl_forward_batch_splice(mdl_model *m, mdl_kv *kv, const mdl_batch *b, const mdl_splice *sp, float *logits);
/* Ids sampled on the host become ticket *t's: queued to the device so the
 * next step can splice them; already collected. n <= max_batch, ids in
 * [0, V). */
int mdl_mirror_put(mdl_model *m, const int32_t *ids, int32_t n, mdl_ticket *t);
/* Wait until ticket t's ids reached the host; ids (may be NULL) receives
 * them [n_logits]. Reports the step's device-side errors. Idempotent. */
int mdl_collect(mdl_model *m, mdl_ticket t, int32_t *ids);

/* A single sequence with a private KV cache for up to max_ctx positions
 * (the simple path used by `vllm run` and tests). */
mdl_seq *mdl_seq_create(mdl_model *m, int64_t max_ctx);
void mdl_seq_free(mdl_seq *s);
int64_t mdl_seq_len(const mdl_seq *s);
void mdl_seq_reset(mdl_seq *s);

/* Run n tokens at positions seq_len..seq_len+n-1 and append them to the
 * cache. logits (host memory) receives [V] for the last token, or [n, V]
 * when all_logits. Errors (context overflow, bad ids) return < 0. */
int mdl_forward(mdl_model *m, mdl_seq *s, const int32_t *ids, int64_t n, float *logits,
                bool all_logits);
/* The same for greedy decoding: *next = the id of the last token's largest
 * logit (lowest id on ties, as the host sampler), found on the device. */
int mdl_forward_argmax(mdl_model *m, mdl_seq *s, const int32_t *ids, int64_t n, int32_t *next);
/* One greedy step of s enqueued on the device mirror (mdl_can_mirror):
 * the token at position seq_len is *id (prev == 0) or, taken on the
 * device, the first id of ticket prev (the last ticket enqueued); its
 * argmax becomes ticket *t (mdl_collect). The sequence grows at enqueue,
 * so the next step can be queued before this one is collected: `vllm run`
 * keeps the device one step ahead of the host. The mirror's rules apply
 * (ticket t - 2 collected before t is enqueued). */
int mdl_seq_argmax_async(mdl_model *m, mdl_seq *s, const int32_t *id, mdl_ticket prev, mdl_ticket *t);
/* The same step with its token drawn on the device (mdl_can_sample: one
 * row of rt_sample's parameters in sa, no history spliced). */
int mdl_seq_sample_async(mdl_model *m, mdl_seq *s, const int32_t *id, mdl_ticket prev, const mdl_sample_args *sa,
                         mdl_ticket *t);

#endif
