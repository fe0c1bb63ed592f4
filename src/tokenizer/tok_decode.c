/* tok_decode — decoders (run on the list of token strings, as HF's
 * decode_chain does), tok_decode, and the streaming detokenizer. */
#include "base/err.h"
#include "tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>

void tok_dec_free(tok_dec *d) {
    if (!d) return;
    free(d->pat);
    free(d->content);
    for (size_t i = 0; i < d->n_items; i++) tok_dec_free(&d->items[i]);
    free(d->items);
    memset(d, 0, sizeof *d);
}

/* A list of owned strings. */
typedef struct {
    vc_strbuf *v;
    size_t n, cap;
} slist;

static vc_strbuf *sl_add(slist *l) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        vc_strbuf *v = realloc(l->v, cap * sizeof *v);
        VC_ASSERT(v != NULL);
        l->v = v;
        l->cap = cap;
    }
    vc_strbuf *s = &l->v[l->n++];
    memset(s, 0, sizeof *s);
    vc_sb_append(s, "", 0);
    return s;
}

static void sl_free(slist *l) {
    for (size_t i = 0; i < l->n; i++) vc_sb_free(&l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static void sl_replace(slist *l, slist *nl) {
    sl_free(l);
    *l = *nl;
    memset(nl, 0, sizeof *nl);
}

static void dec_bytelevel(slist *l) {
    vc_strbuf bytes = {0};
    vc_sb_append(&bytes, "", 0);
    for (size_t i = 0; i < l->n; i++) {
        const char *s = l->v[i].s;
        size_t n = l->v[i].len, start = bytes.len, k = 0;
        bool ok = true;
        while (k < n) {
            uint32_t cp;
            size_t cl = tok_utf8_len(s + k, n - k, &cp);
            int b = cl ? tok_cp_to_byte(cp) : -1;
            if (b < 0) {
                ok = false;
                break;
            }
            char c = (char)b;
            vc_sb_append(&bytes, &c, 1);
            k += cl;
        }
        if (!ok) {
            bytes.len = start;
            vc_sb_append(&bytes, s, n);
        }
    }
    slist nl = {0};
    vc_strbuf *o = sl_add(&nl);
    tok_utf8_lossy(o, (const uint8_t *)bytes.s, bytes.len);
    vc_sb_free(&bytes);
    sl_replace(l, &nl);
}

static void dec_replace(const tok_dec *d, slist *l) {
    if (!d->pat_n) return;
    for (size_t i = 0; i < l->n; i++) {
        vc_strbuf o = {0};
        vc_sb_append(&o, "", 0);
        const char *s = l->v[i].s;
        size_t n = l->v[i].len, k = 0, last = 0;
        while (k + d->pat_n <= n) {
            if (!memcmp(s + k, d->pat, d->pat_n)) {
                vc_sb_append(&o, s + last, k - last);
                vc_sb_append(&o, d->content, d->content_n);
                k += d->pat_n;
                last = k;
            } else {
                k++;
            }
        }
        vc_sb_append(&o, s + last, n - last);
        vc_sb_free(&l->v[i]);
        l->v[i] = o;
    }
}

static int byte_token(const vc_strbuf *s) {
    if (s->len != 6 || memcmp(s->s, "<0x", 3) || s->s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s->s[k];
        int h = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static void flush_bytes(slist *nl, vc_strbuf *pend) {
    if (!pend->len) return;
    if (tok_utf8_valid(pend->s, pend->len)) {
        vc_sb_append(sl_add(nl), pend->s, pend->len);
    } else {
        for (size_t k = 0; k < pend->len; k++) vc_sb_append(sl_add(nl), "\xEF\xBF\xBD", 3);
    }
    vc_sb_clear(pend);
}

static void dec_bytefallback(slist *l) {
    slist nl = {0};
    vc_strbuf pend = {0};
    for (size_t i = 0; i < l->n; i++) {
        int b = byte_token(&l->v[i]);
        if (b >= 0) {
            char c = (char)b;
            vc_sb_append(&pend, &c, 1);
            continue;
        }
        flush_bytes(&nl, &pend);
        vc_sb_append(sl_add(&nl), l->v[i].s, l->v[i].len);
    }
    flush_bytes(&nl, &pend);
    vc_sb_free(&pend);
    sl_replace(l, &nl);
}

static void dec_fuse(slist *l) {
    slist nl = {0};
    vc_strbuf *o = sl_add(&nl);
    for (size_t i = 0; i < l->n; i++) vc_sb_append(o, l->v[i].s, l->v[i].len);
    sl_replace(l, &nl);
}

static void dec_strip(const tok_dec *d, slist *l) {
    for (size_t i = 0; i < l->n; i++) {
        const char *s = l->v[i].s;
        size_t n = l->v[i].len, a = 0, b = n;
        for (int k = 0; k < d->start && a < n; k++) {
            uint32_t cp;
            size_t cl = tok_utf8_len(s + a, n - a, &cp);
            if (!cl || cp != d->strip_cp) break;
            a += cl;
        }
        for (int k = 0; k < d->stop && b > a; k++) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
            uint32_t cp;
            size_t cl = tok_utf8_len(s + st, b - st, &cp);
            if (!cl || cp != d->strip_cp) break;
            b = st;
        }
        memmove(l->v[i].s, s + a, b - a);
        l->v[i].len = b - a;
        l->v[i].s[b - a] = 0;
    }
}

static void dec_metaspace(const tok_dec *d, slist *l) {
    for (size_t i = 0; i < l->n; i++) {
        vc_strbuf o = {0};
        vc_sb_append(&o, "", 0);
        const char *s = l->v[i].s;
        size_t n = l->v[i].len, k = 0;
        while (k < n) {
            if (d->repl_n && k + d->repl_n <= n && !memcmp(s + k, d->repl, d->repl_n)) {
                if (!(i == 0 && d->scheme != TPS_NEVER)) vc_sb_putc(&o, ' ');
                k += d->repl_n;
            } else {
                vc_sb_putc(&o, s[k++]);
            }
        }
        vc_sb_free(&l->v[i]);
        l->v[i] = o;
    }
}

static void dec_chain(const tok_dec *d, slist *l) {
    switch (d->type) {
    case TD_BYTELEVEL: dec_bytelevel(l); break;
    case TD_REPLACE: dec_replace(d, l); break;
    case TD_BYTEFALLBACK: dec_bytefallback(l); break;
    case TD_FUSE: dec_fuse(l); break;
    case TD_STRIP: dec_strip(d, l); break;
    case TD_METASPACE: dec_metaspace(d, l); break;
    case TD_SEQ:
        for (size_t i = 0; i < d->n_items; i++) dec_chain(&d->items[i], l);
        break;
    }
}

int tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
               char **out, size_t *out_len) {
    slist l = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->n_tokens || !t->tokens[id].s) continue;
        if (skip_special && t->special[id]) continue;
        vc_sb_append(sl_add(&l), t->tokens[id].s, t->tokens[id].n);
    }
    vc_strbuf o = {0};
    vc_sb_append(&o, "", 0);
    if (t->dec) {
        dec_chain(t->dec, &l);
        for (size_t i = 0; i < l.n; i++) vc_sb_append(&o, l.v[i].s, l.v[i].len);
    } else {
        for (size_t i = 0; i < l.n; i++) {
            if (i) vc_sb_putc(&o, ' ');
            vc_sb_append(&o, l.v[i].s, l.v[i].len);
        }
    }
    sl_free(&l);
    if (out_len) *out_len = o.len;
    *out = vc_sb_steal(&o);
    return 0;
}

/* ---- streaming (vLLM's prefix/read offsets over the kept ids) ---- */

struct tok_stream {
    const tok_tokenizer *t;
    bool skip;
    bool byte_fallback;  /* the decoder fuses runs of <0xNN> tokens */
    tok_ids ids;         /* ids that take part in decoding (skipped specials dropped) */
    size_t prefix, read; /* ids[prefix..read) emitted context; ids[read..) pending */
};

static bool has_bytefallback(const tok_dec *d) {
    if (!d) return false;
    if (d->type == TD_BYTEFALLBACK) return true;
    for (size_t i = 0; i < d->n_items; i++)
        if (has_bytefallback(&d->items[i])) return true;
    return false;
}

tok_stream *tok_stream_create(const tok_tokenizer *t, bool skip_special) {
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) {
        vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
        return NULL;
    }
    s->t = t;
    s->skip = skip_special;
    s->byte_fallback = has_bytefallback(t->dec);
    return s;
}

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    free(s->ids.v);
    free(s);
}

static bool ends_incomplete(const char *s, size_t n) {
    return n >= 3 && !memcmp(s + n - 3, "\xEF\xBF\xBD", 3);
}

/* Emits decode(ids[prefix..]) minus decode(ids[prefix..read)) unless the
 * text ends in U+FFFD (maybe an incomplete character) and !final. The
 * window always starts at an already emitted token, so decoder effects on
 * the first token (Strip, Metaspace) cancel out in the difference. */
static int stream_step(tok_stream *s, bool final, char **delta, size_t *len) {
    *delta = NULL;
    *len = 0;
    if (s->read == s->ids.n) return 0;
    if (!final && s->byte_fallback) {
        /* ByteFallback decodes a whole run of byte tokens at once (an invalid
         * run becomes one U+FFFD per byte), so a run is final only once a
         * non-byte token follows it. */
        const tok_str *last = &s->t->tokens[s->ids.v[s->ids.n - 1]];
        vc_strbuf tmp = {(char *)last->s, last->n, 0};
        if (byte_token(&tmp) >= 0) return 0;
    }
    char *full = NULL, *pre = NULL;
    size_t fn = 0, pn = 0;
    tok_decode(s->t, s->ids.v + s->prefix, s->ids.n - s->prefix, s->skip, &full, &fn);
    tok_decode(s->t, s->ids.v + s->prefix, s->read - s->prefix, s->skip, &pre, &pn);
    if (!final && ends_incomplete(full, fn)) {
        free(full);
        free(pre);
        return 0; /* hold back */
    }
    /* Normally the window's text extends the context's text. It may not
     * after a flush emitted an incomplete character that later tokens
     * complete: then resynchronize on the first differing character rather
     * than stall (the output repeats that character). */
    size_t common = pn;
    if (fn < pn || memcmp(full, pre, pn)) {
        common = 0;
        while (common < fn && common < pn && full[common] == pre[common]) common++;
        while (common > 0 && ((unsigned char)full[common] & 0xC0) == 0x80) common--;
    }
    free(pre);
    memmove(full, full + common, fn - common + 1);
    if (fn == common) free(full);
    else *delta = full, *len = fn - common;
    s->prefix = s->read;
    s->read = s->ids.n;
    return 0;
}

int tok_stream_push_n(tok_stream *s, int32_t id, char **delta, size_t *len) {
    *delta = NULL;
    *len = 0;
    const tok_tokenizer *t = s->t;
    if (id < 0 || (size_t)id >= t->n_tokens || !t->tokens[id].s) return 0; /* decodes to nothing */
    if (s->skip && t->special[id]) return 0;
    if (tok_ids_push(&s->ids, id) < 0) return -1;
    return stream_step(s, false, delta, len);
}

int tok_stream_flush_n(tok_stream *s, char **delta, size_t *len) { return stream_step(s, true, delta, len); }

int tok_stream_push(tok_stream *s, int32_t id, char **delta) {
    size_t len;
    return tok_stream_push_n(s, id, delta, &len);
}

int tok_stream_flush(tok_stream *s, char **delta) {
    size_t len;
    return tok_stream_flush_n(s, delta, &len);
}
