/* eout_detok over the tokenizer's streaming detokenizer. */
#include "engine/output.h"

#include "base/err.h"

#include <stdlib.h>

/* Prompt tokens decoded (and discarded) before the first output token: a
 * few are enough context for the decoders' first-token effects. */
#define PRIME_TOKENS 6

static int push(void *ctx, int32_t id, char **delta, size_t *len) {
    return tok_stream_push_n(ctx, id, delta, len) < 0 ? vc_err_set(VC_ERR_OOM, "detokenizer: out of memory") : 0;
}

static void free_stream(void *ctx) { tok_stream_free(ctx); }

int eout_detok_tokenizer(const tok_tokenizer *t, bool skip_special, const int32_t *prompt, int32_t n_prompt,
                         eout_detok *out) {
    out->ctx = NULL;
    out->push = NULL;
    out->free = NULL;
    tok_stream *s = tok_stream_create(t, skip_special);
    if (!s) return VC_ERR_OOM;
    int32_t from = n_prompt > PRIME_TOKENS ? n_prompt - PRIME_TOKENS : 0;
    for (int32_t i = from; i < n_prompt; i++) {
        char *d = NULL;
        size_t n;
        int rc = tok_stream_push_n(s, prompt[i], &d, &n);
        free(d);
        if (rc < 0) goto oom;
    }
    /* emit (and drop) anything held back, so output text starts clean */
    char *d = NULL;
    size_t n;
    int rc = tok_stream_flush_n(s, &d, &n);
    free(d);
    if (rc < 0) goto oom;
    out->ctx = s;
    out->push = push;
    out->free = free_stream;
    return VC_OK;
oom:
    tok_stream_free(s);
    return vc_err_set(VC_ERR_OOM, "detokenizer: out of memory");
}
