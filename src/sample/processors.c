/* The logits processors that run before greedy/random sampling, in vLLM's
 * order (batch.c calls them): allowed ids, bad words, min_tokens, logit
 * bias, penalties. Each edits one row x [V] in place. */
#include "sample/sample_int.h"

#include "base/err.h"

#include <string.h>

/* Everything but ids[] to -inf: save the allowed values, fill, restore
 * (duplicates in ids are harmless). save: [n] scratch. */
void smp_apply_allowed(float *x, int64_t V, const int32_t *ids, int32_t n, float *save) {
    for (int32_t i = 0; i < n; i++) save[i] = x[ids[i]];
    for (int64_t i = 0; i < V; i++) x[i] = -INFINITY;
    for (int32_t i = 0; i < n; i++) x[ids[i]] = save[i];
}

/* A bad word w[0..L) bans w[L-1] when the output ends with w[0..L-1)
 * (a single-token word is always banned). Only output tokens count. */
void smp_apply_bad_words(float *x, const smp_req *r, const int32_t *out, int32_t n_out) {
    const int32_t *w = r->bad_words;
    for (int32_t i = 0; i < r->p.n_bad_words; w += r->bad_word_lens[i], i++) {
        int32_t L = r->bad_word_lens[i], pre = L - 1;
        if (pre > n_out) continue;
        if (pre == 0 || memcmp(out + n_out - pre, w, (size_t)pre * sizeof *w) == 0) x[w[pre]] = -INFINITY;
    }
}

void smp_apply_min_tokens(float *x, const smp_req *r, int32_t n_out) {
    if (n_out >= r->p.min_tokens) return;
    for (int32_t i = 0; i < r->p.n_stop_ids; i++) x[r->stop_ids[i]] = -INFINITY;
}

void smp_apply_logit_bias(float *x, const smp_req *r) {
    for (int32_t i = 0; i < r->p.n_logit_bias; i++) x[r->bias[i].token] += r->bias[i].bias;
}

/* vLLM's apply_penalties: tokens seen in prompt or output get the
 * repetition penalty (positive logits * 1/rep, others * rep); then output
 * tokens lose freq * count and presence once. Distinct tokens are found
 * with stamps in b->mark (no clearing per row), so a row costs
 * O(n_prompt + n_output), not O(V). */
int smp_apply_penalties(smp_batch *b, float *x, const smp_req *r, const int32_t *prompt, int32_t n_prompt,
                        const int32_t *out, int32_t n_out) {
    const int64_t V = b->p.vocab;
    const float rep = r->p.repetition_penalty, freq = r->p.frequency_penalty, pres = r->p.presence_penalty;
    if (b->epoch >= UINT32_MAX - 2) { /* wrap: forget all stamps */
        memset(b->mark, 0, (size_t)V * sizeof *b->mark);
        b->epoch = 2;
    }
    const uint32_t e_prompt = b->epoch, e_out = b->epoch + 1;
    b->epoch += 2;
    int64_t nt = 0;
    for (int32_t i = 0; i < n_out; i++) {
        int32_t t = out[i];
        if (t < 0 || t >= V) return vc_err_set(VC_ERR_INVALID, "output token id %d out of vocab", t);
        if (b->mark[t] != e_out) {
            b->mark[t] = e_out;
            b->cnt[t] = 0;
            b->touched[nt++] = t;
        }
        b->cnt[t]++;
    }
    if (rep != 1.0f) {
        for (int32_t i = 0; i < n_prompt; i++) {
            int32_t t = prompt[i];
            if (t < 0 || t >= V) return vc_err_set(VC_ERR_INVALID, "prompt token id %d out of vocab", t);
            if (b->mark[t] != e_out && b->mark[t] != e_prompt) {
                b->mark[t] = e_prompt;
                b->touched[nt++] = t;
            }
        }
    }
    const float inv_rep = 1.0f / rep;
    for (int64_t j = 0; j < nt; j++) {
        int32_t t = b->touched[j];
        float v = x[t];
        if (rep != 1.0f) v *= v > 0.0f ? inv_rep : rep;
        if (b->mark[t] == e_out) {
            v -= freq * (float)b->cnt[t];
            v -= pres;
        }
        x[t] = v;
    }
    return VC_OK;
}
