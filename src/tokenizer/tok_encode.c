/* tok_encode — the encode pipeline: added-token splitting (before and after
 * normalization), normalizer, pre-tokenizer, BPE, post-processor. */
#include "base/err.h"
#include "tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- added-token trie ---- */

static int trie_node(tok_trie *t, uint32_t *out) {
    if (t->n_nodes == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 256;
        int32_t *term = realloc(t->term, cap * sizeof *term);
        if (!term) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
        t->term = term;
        t->cap = cap;
    }
    t->term[t->n_nodes] = -1;
    *out = t->n_nodes++;
    return 0;
}

int tok_trie_build(tok_trie *t, const tok_tokenizer *tk, bool normalized) {
    memset(t, 0, sizeof *t);
    uint32_t root;
    if (tok_u64map_init(&t->edges, 64) < 0 || trie_node(t, &root) < 0) return -1;
    t->empty = true;
    for (size_t i = 0; i < tk->n_added; i++) {
        const tok_added *a = &tk->added[i];
        if (a->normalized != normalized) continue;
        const char *p = normalized ? tk->norm_added[i] : a->content;
        size_t n = strlen(p);
        if (!n) continue;
        uint32_t node = 0;
        for (size_t k = 0; k < n; k++) {
            uint64_t key = ((uint64_t)node << 8) | (uint8_t)p[k], child;
            if (!tok_u64map_get(&t->edges, key, &child)) {
                uint32_t c;
                if (trie_node(t, &c) < 0 || tok_u64map_put(&t->edges, key, c) < 0) return -1;
                child = c;
            }
            node = (uint32_t)child;
        }
        if (t->term[node] < 0) t->term[node] = (int32_t)i;
        t->first[(uint8_t)p[0]] = 1;
        t->empty = false;
    }
    return 0;
}

void tok_trie_free(tok_trie *t) {
    tok_u64map_free(&t->edges);
    free(t->term);
    memset(t, 0, sizeof *t);
}

/* Longest added token starting at s[0..n): its index or -1, and length. */
static int32_t trie_match(const tok_trie *t, const char *s, size_t n, size_t *len) {
    uint32_t node = 0;
    int32_t best = -1;
    for (size_t k = 0; k < n; k++) {
        uint64_t child;
        if (!tok_u64map_get(&t->edges, ((uint64_t)node << 8) | (uint8_t)s[k], &child)) break;
        node = (uint32_t)child;
        if (t->term[node] >= 0) best = t->term[node], *len = k + 1;
    }
    return best;
}

/* char before s[0..end) / at s[start..n) */
static uint32_t last_cp(const char *s, size_t end) {
    if (!end) return 0;
    size_t st = end - 1;
    while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
    uint32_t cp = 0;
    tok_utf8_len(s + st, end - st, &cp);
    return cp;
}

typedef struct {
    size_t s, e;
    int32_t added; /* index into tk->added, -1 for text */
} asplit;

typedef struct {
    asplit *v;
    size_t n, cap;
} asplits;

static void asplit_push(asplits *a, size_t s, size_t e, int32_t added) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        asplit *v = realloc(a->v, cap * sizeof *v);
        VC_ASSERT(v != NULL);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (asplit){s, e, added};
}

/* added_vocabulary.rs find_matches: non-overlapping leftmost-longest matches
 * with single_word / lstrip / rstrip handling. Splits cover s[0..n). */
static void find_added(const tok_tokenizer *tk, const tok_trie *t, const char *s, size_t n, asplits *out) {
    out->n = 0;
    size_t start_off = 0, pos = 0;
    if (!t->empty) {
        while (pos < n) {
            if (!t->first[(uint8_t)s[pos]]) {
                pos++;
                continue;
            }
            size_t ml = 0;
            int32_t ai = trie_match(t, s + pos, n - pos, &ml);
            if (ai < 0) {
                pos++;
                continue;
            }
            size_t start = pos, stop = pos + ml;
            pos = stop;
            const tok_added *a = &tk->added[ai];
            if (a->single_word) {
                bool sp_before = start == 0 || !tok_is_alnum(last_cp(s, start));
                uint32_t nc = 0;
                bool sp_after = stop == n || (tok_utf8_len(s + stop, n - stop, &nc), !tok_is_alnum(nc));
                if (!sp_before || !sp_after) continue;
            }
            if (a->lstrip) {
                size_t ns = start;
                while (ns > 0) {
                    size_t st = ns - 1;
                    while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
                    uint32_t cp = 0;
                    tok_utf8_len(s + st, ns - st, &cp);
                    if (!tok_is_whitespace(cp)) break;
                    ns = st;
                }
                start = ns > start_off ? ns : start_off;
            }
            if (a->rstrip) {
                while (stop < n) {
                    uint32_t cp = 0;
                    size_t l = tok_utf8_len(s + stop, n - stop, &cp);
                    if (!l || !tok_is_whitespace(cp)) break;
                    stop += l;
                }
                pos = stop;
            }
            if (start_off < start) asplit_push(out, start_off, start, -1);
            asplit_push(out, start, stop, ai);
            start_off = stop;
        }
    }
    if (start_off != n) asplit_push(out, start_off, n, -1);
}

typedef struct {
    const tok_tokenizer *tk;
    tok_bpe_ws *ws;
    tok_ids *out;
    vc_strbuf norm;
    tok_pieces pieces;
    asplits nsplits;
} enc_ctx;

static int encode_text(enc_ctx *c, const char *s, size_t n, bool at_start) {
    const tok_tokenizer *tk = c->tk;
    if (tok_norm_apply(tk->norm, s, n, &c->norm) < 0) return -1;
    find_added(tk, &tk->trie_norm, c->norm.s, c->norm.len, &c->nsplits);
    for (size_t i = 0; i < c->nsplits.n; i++) {
        const asplit *sp = &c->nsplits.v[i];
        if (sp->added >= 0) {
            if (tok_ids_push(c->out, tk->added[sp->added].id) < 0) return -1;
            continue;
        }
        tok_pieces *p = &c->pieces;
        vc_sb_clear(&p->arena);
        p->n = 0;
        vc_sb_append(&p->arena, c->norm.s + sp->s, sp->e - sp->s);
        tok_pieces_push(p, 0, sp->e - sp->s, at_start && sp->s == 0);
        if (tok_pretok_apply(tk->pretok, p) < 0) return -1;
        for (size_t k = 0; k < p->n; k++)
            if (tok_bpe_encode_word(&tk->model, c->ws, p->arena.s + p->v[k].off, p->v[k].len, c->out) < 0)
                return -1;
    }
    return 0;
}

int tok_encode(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
               int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    if (!text && len) return vc_err_set(VC_ERR_INVALID, "tok_encode: NULL text");
    if (!tok_utf8_valid(text, len)) return vc_err_set(VC_ERR_INVALID, "tok_encode: text is not valid UTF-8");
    tok_ids out = {0};
    enc_ctx c = {.tk = t, .out = &out};
    asplits raw = {0};
    int rc = 0;
    c.ws = tok_bpe_ws_new();
    if (!c.ws) {
        rc = vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
        goto done;
    }
    if (add_special)
        for (size_t i = 0; i < t->n_post_prefix && rc == 0; i++) rc = tok_ids_push(&out, t->post_prefix[i]);
    if (rc < 0) goto done;
    find_added(t, &t->trie_raw, text, len, &raw);
    for (size_t i = 0; i < raw.n && rc == 0; i++) {
        if (raw.v[i].added >= 0) rc = tok_ids_push(&out, t->added[raw.v[i].added].id);
        else rc = encode_text(&c, text + raw.v[i].s, raw.v[i].e - raw.v[i].s, raw.v[i].s == 0);
    }
    if (add_special)
        for (size_t i = 0; i < t->n_post_suffix && rc == 0; i++) rc = tok_ids_push(&out, t->post_suffix[i]);
    if (rc == 0 && !out.v) rc = tok_ids_push(&out, 0), out.n = 0; /* non-NULL result */
done:
    free(raw.v);
    free(c.nsplits.v);
    vc_sb_free(&c.norm);
    tok_pieces_free(&c.pieces);
    tok_bpe_ws_free(c.ws);
    if (rc < 0) {
        free(out.v);
        return rc;
    }
    *ids = out.v;
    *n = out.n;
    return 0;
}
