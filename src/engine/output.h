/* output — per-request output processing (vLLM's OutputProcessor +
 * IncrementalDetokenizer): incremental detokenization, stop strings, finish
 * reasons, usage counts and streaming deltas.
 *
 * Tour:
 *   eout_detok d;  eout_detok_tokenizer(tok, r->sp.skip_special_tokens,
 *                                       r->tokens, r->num_prompt, &d);
 *   eout_req *o = eout_req_create(r, &d);   takes d over
 *   after each esched_update (for every request the step touched, and for
 *   the finished ones):
 *     eout_delta dl;  eout_req_process(o, r, sched, &dl);
 *     stream dl.text / dl.token_ids; if dl.finished: dl.finish_reason,
 *     eout_req_text(o) is the whole (final) text, dl.usage the counts.
 *   eout_req_free(o)
 *
 * Stop strings (checked only once more than min_tokens tokens exist, in the
 * order given; the first listed string found wins, vLLM's rule): the text
 * is cut before the string (or after it with include_stop_str_in_output),
 * the request gets stop_str_idx and is finished through
 * esched_finish_request(..., EREQ_FINISHED_STOPPED) — finish_reason "stop",
 * stop reason the string. While a request runs, streamed text holds back
 * max(len(stop)) - 1 characters (none with include_stop_str_in_output), so
 * a client never sees the start of a stop string that is later cut.
 * A request stopped by EOS or a stop token id does not show that token's
 * text unless include_stop_str_in_output. Text ending in an incomplete
 * UTF-8 character is held back by the detokenizer (and dropped at the end,
 * as vLLM does).
 *
 * n > 1: the caller makes one child request (and one eout_req) per choice.
 */
#ifndef ENGINE_OUTPUT_H
#define ENGINE_OUTPUT_H

#include "engine/request.h"
#include "engine/sched.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The text source: new text for one more generated token. The tokenizer
 * version below is the real one; tests may script text. */
typedef struct {
    void *ctx;
    /* *delta: malloc'd new text (len bytes) or NULL for none. 0 or a
     * negative vc_status. */
    int (*push)(void *ctx, int32_t id, char **delta, size_t *len);
    void (*free)(void *ctx);
} eout_detok;

/* A streaming detokenizer over t, primed with the end of the prompt so the
 * first generated token decodes in context (e.g. SentencePiece's leading
 * space). VC_ERR_OOM on failure. */
int eout_detok_tokenizer(const tok_tokenizer *t, bool skip_special, const int32_t *prompt, int32_t n_prompt,
                         eout_detok *out);

typedef struct eout_req eout_req;

/* State for request r; takes *detok over (freed with the state, also on
 * failure). A detok with a NULL push produces no text (token ids only).
 * NULL + vc_err_set on out of memory. */
eout_req *eout_req_create(const ereq *r, eout_detok *detok);
void eout_req_free(eout_req *o);

typedef struct {
    int32_t prompt_tokens, completion_tokens, cached_tokens;
} eout_usage;

/* What a process call produced. Pointers stay valid until the next call on
 * the same state (token ids point into the request). */
typedef struct {
    const char *text;         /* streaming text delta (NUL-terminated) */
    size_t text_len;
    const int32_t *token_ids; /* output ids new since the last call */
    int32_t n_token_ids;
    bool finished;
    const char *finish_reason; /* "stop", "length", "abort", "error"; NULL while running */
    const char *stop_str;      /* the stop string that finished it, or NULL */
    bool has_stop_token;       /* stopped by a stop_token_id (not EOS): stop_token */
    int32_t stop_token;
    eout_usage usage;
} eout_delta;

/* Take r's output tokens that arrived since the last call: detokenize, check
 * stop strings, fill *d. On a stop-string hit r->stop_str_idx is set and,
 * when sched is not NULL, the request is finished there (a request the
 * scheduler already finished keeps its KV released and only changes to
 * "stop"). With sched NULL the caller must finish it (d->stop_str set,
 * d->finished true). Returns 0 or a negative vc_status (detokenizer). */
int eout_req_process(eout_req *o, ereq *r, esched *sched, eout_delta *d);

/* The whole output text so far (cut at a stop string), no hold-back. */
const char *eout_req_text(const eout_req *o, size_t *len);

#endif
