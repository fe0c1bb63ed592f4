#include "engine/output.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

struct eout_req {
    eout_detok detok;
    char *text;         /* output text so far, NUL-terminated */
    size_t len, cap;
    size_t sent;        /* bytes of text already streamed */
    char *delta;        /* the last streamed delta, NUL-terminated */
    size_t delta_cap;
    int32_t n_seen;     /* output tokens already taken from the request */
    int32_t hold_chars; /* characters held back while running */
    bool text_done;     /* a stop string ended the text */
};

static size_t utf8_len(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

eout_req *eout_req_create(const ereq *r, eout_detok *detok) {
    eout_req *o = calloc(1, sizeof *o);
    if (!o) {
        if (detok->free) detok->free(detok->ctx);
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    o->detok = *detok;
    memset(detok, 0, sizeof *detok);
    o->text = calloc(1, 64);
    if (!o->text) {
        eout_req_free(o);
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    o->cap = 64;
    if (r->sp.n_stop > 0 && !r->sp.include_stop_str_in_output) {
        size_t most = 0;
        for (int i = 0; i < r->sp.n_stop; i++) {
            size_t n = utf8_len(r->sp.stop[i]);
            if (n > most) most = n;
        }
        o->hold_chars = most > 0 ? (int32_t)most - 1 : 0;
    }
    return o;
}

void eout_req_free(eout_req *o) {
    if (!o) return;
    if (o->detok.free) o->detok.free(o->detok.ctx);
    free(o->text);
    free(o->delta);
    free(o);
}

const char *eout_req_text(const eout_req *o, size_t *len) {
    if (len) *len = o->len;
    return o->text;
}

static int append(eout_req *o, const char *s, size_t n) {
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap * 2;
        while (cap < o->len + n + 1) cap *= 2;
        char *t = realloc(o->text, cap);
        if (!t) return vc_err_set(VC_ERR_OOM, "out of memory");
        o->text = t;
        o->cap = cap;
    }
    memcpy(o->text + o->len, s, n);
    o->len += n;
    o->text[o->len] = 0;
    return VC_OK;
}

/* Byte-level search of needle in hay[from, hlen); -1 if absent. Text may
 * contain NUL bytes, so no strstr. */
static long find(const char *hay, size_t hlen, size_t from, const char *needle, size_t nlen) {
    if (nlen == 0 || hlen < nlen) return -1;
    for (size_t i = from; i + nlen <= hlen; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, nlen)) return (long)i;
    return -1;
}

/* vLLM's check_stop_strings over the text added since `check_from`: the
 * first stop string (in list order) found in a window that overlaps the new
 * text. Returns its index and the length to cut the text to. */
static int check_stop_strings(const eout_req *o, const ereq *r, size_t check_from, size_t *cut) {
    if (o->len == check_from) return -1;
    for (int i = 0; i < r->sp.n_stop; i++) {
        const char *s = r->sp.stop[i];
        size_t sl = strlen(s);
        if (sl == 0) continue;
        /* a match must end inside the new text: start > check_from - sl */
        size_t from = check_from + 1 > sl ? check_from + 1 - sl : 0;
        long at = find(o->text, o->len, from, s, sl);
        if (at < 0) continue;
        *cut = r->sp.include_stop_str_in_output ? (size_t)at + sl : (size_t)at;
        return i;
    }
    return -1;
}

/* Start of the last `chars` characters of text[0, len) (never splitting a
 * UTF-8 sequence); len when chars == 0. */
static size_t hold_start(const char *text, size_t len, int32_t chars) {
    size_t i = len;
    while (chars > 0 && i > 0) {
        i--;
        while (i > 0 && ((unsigned char)text[i] & 0xC0) == 0x80) i--;
        chars--;
    }
    return i;
}

int eout_req_process(eout_req *o, ereq *r, esched *sched, eout_delta *d) {
    memset(d, 0, sizeof *d);
    int32_t nout = ereq_num_output(r);
    int32_t first = o->n_seen;
    d->token_ids = r->tokens + r->num_prompt + first;
    d->n_token_ids = nout - first;
    o->n_seen = nout;

    if (!o->text_done && d->n_token_ids > 0) {
        int32_t n_detok = d->n_token_ids;
        /* a stop token's own text is not shown unless asked */
        bool token_stop = r->status == EREQ_FINISHED_STOPPED && r->stop_str_idx < 0;
        if (token_stop && !r->sp.include_stop_str_in_output) n_detok--;
        size_t check_from = o->len;
        for (int32_t i = 0; i < n_detok && o->detok.push; i++) {
            char *delta = NULL;
            size_t dl = 0;
            int rc = o->detok.push(o->detok.ctx, d->token_ids[i], &delta, &dl);
            if (!rc && delta) rc = append(o, delta, dl);
            free(delta);
            if (rc) return rc;
            /* text of the first min_tokens outputs is never searched */
            if (r->sp.min_tokens > 0 && first + i + 1 <= r->sp.min_tokens) check_from = o->len;
        }
        size_t cut = 0;
        int hit = r->sp.n_stop > 0 && nout > r->sp.min_tokens ? check_stop_strings(o, r, check_from, &cut) : -1;
        if (hit >= 0) {
            o->text_done = true;
            if (cut < o->len) {
                o->len = cut;
                o->text[cut] = 0;
            }
            r->stop_str_idx = hit;
            r->stop_by_id = false;
            if (ereq_is_finished(r)) r->status = EREQ_FINISHED_STOPPED; /* e.g. length on the same token */
            else if (sched) esched_finish_request(sched, r->id, EREQ_FINISHED_STOPPED);
        }
    }

    d->finished = ereq_is_finished(r) || o->text_done;
    d->finish_reason = o->text_done ? "stop" : ereq_finish_reason(r);
    if (o->text_done) d->stop_str = r->sp.stop[r->stop_str_idx];
    if (d->finished && r->stop_by_id && !o->text_done && r->stop_str_idx < 0) {
        d->has_stop_token = true;
        d->stop_token = (int32_t)r->stop_reason_id;
    }
    /* stream everything up to the hold-back point (all of it once finished) */
    if (o->sent > o->len) o->sent = o->len; /* cannot happen: the hold-back covers any cut */
    size_t upto = d->finished ? o->len : hold_start(o->text, o->len, o->hold_chars);
    d->text = "";
    if (upto > o->sent) {
        size_t n = upto - o->sent;
        if (n + 1 > o->delta_cap) {
            char *t = realloc(o->delta, n + 1);
            if (!t) return vc_err_set(VC_ERR_OOM, "out of memory");
            o->delta = t;
            o->delta_cap = n + 1;
        }
        memcpy(o->delta, o->text + o->sent, n);
        o->delta[n] = 0;
        d->text = o->delta;
        d->text_len = n;
        o->sent = upto;
    }
    d->usage.prompt_tokens = r->num_prompt;
    d->usage.completion_tokens = nout;
    d->usage.cached_tokens = r->num_cached_prompt;
    return VC_OK;
}
