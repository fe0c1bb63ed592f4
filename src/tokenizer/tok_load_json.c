/* tok_load_json — builds a tokenizer from tokenizer.json (HF tokenizers'
 * serialization) parsed with tok_json. */
#include "base/err.h"
#include "tokenizer/tok_int.h"
#include "tokenizer/tok_json.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const tj_doc *d;
    const char *what;
    vc_strbuf tmp;
} jl;

static int jl_err(jl *L, int st, const char *msg, const char *detail) {
    return vc_err_set(st, "%s: %s%s%s", L->what, msg, detail ? " " : "", detail ? detail : "");
}

/* Malloc'd copy of a string member (NULL + error when missing). */
static char *jl_dup(jl *L, uint32_t obj, const char *key, size_t *n) {
    uint32_t v = tj_get(L->d, obj, key);
    const char *s;
    size_t len;
    if (!v || tj_str(L->d, v, &L->tmp, &s, &len) < 0) {
        jl_err(L, VC_ERR_FORMAT, "missing or bad string field", key);
        return NULL;
    }
    char *r = malloc(len + 1);
    if (!r) {
        jl_err(L, VC_ERR_OOM, "out of memory", NULL);
        return NULL;
    }
    memcpy(r, s, len);
    r[len] = 0;
    if (n) *n = len;
    return r;
}

/* {"String": s} or {"Regex": r} -> compiled regex. */
static tok_regex *jl_pattern(jl *L, uint32_t obj) {
    uint32_t pat = tj_get(L->d, obj, "pattern");
    if (!pat) {
        jl_err(L, VC_ERR_FORMAT, "missing pattern", NULL);
        return NULL;
    }
    bool literal = tj_get(L->d, pat, "String") != 0;
    uint32_t v = tj_get(L->d, pat, literal ? "String" : "Regex");
    const char *s;
    size_t n;
    if (!v || tj_str(L->d, v, &L->tmp, &s, &n) < 0) {
        jl_err(L, VC_ERR_FORMAT, "pattern needs String or Regex", NULL);
        return NULL;
    }
    return tok_regex_new(s, n, literal, L->what);
}

/* The "type" field into out[32] ("" when absent). */
static void jl_type(jl *L, uint32_t obj, char out[32]) {
    uint32_t t = tj_get(L->d, obj, "type");
    const char *s;
    size_t n;
    out[0] = 0;
    if (!t || tj_str(L->d, t, &L->tmp, &s, &n) < 0) return;
    if (n > 31) n = 31;
    memcpy(out, s, n);
    out[n] = 0;
}

/* ---- normalizers ---- */

static int parse_norm(jl *L, uint32_t o, tok_norm *n, int depth);

static int parse_norm_list(jl *L, uint32_t arr, tok_norm *n, int depth) {
    n->type = TN_SEQ;
    n->n_items = tj_len(L->d, arr);
    n->items = calloc(n->n_items ? n->n_items : 1, sizeof *n->items);
    if (!n->items) return jl_err(L, VC_ERR_OOM, "out of memory", NULL);
    size_t i = 0;
    for (uint32_t c = tj_child(L->d, arr); c; c = tj_next(L->d, c), i++)
        if (parse_norm(L, c, &n->items[i], depth + 1) < 0) return -1;
    return 0;
}

static int parse_norm(jl *L, uint32_t o, tok_norm *n, int depth) {
    if (depth > 16) return jl_err(L, VC_ERR_FORMAT, "normalizer nesting too deep", NULL);
    const tj_doc *d = L->d;
    if (tj_type_of(d, o) != TJ_OBJ) return jl_err(L, VC_ERR_FORMAT, "normalizer is not an object", NULL);
    char t[32];
    jl_type(L, o, t);
    if (!strcmp(t, "NFC")) n->type = TN_NFC;
    else if (!strcmp(t, "NFD")) n->type = TN_NFD;
    else if (!strcmp(t, "NFKC")) n->type = TN_NFKC;
    else if (!strcmp(t, "NFKD")) n->type = TN_NFKD;
    else if (!strcmp(t, "Lowercase")) n->type = TN_LOWER;
    else if (!strcmp(t, "Strip")) {
        n->type = TN_STRIP;
        n->strip_left = tj_bool(d, tj_get(d, o, "strip_left"), true);
        n->strip_right = tj_bool(d, tj_get(d, o, "strip_right"), true);
    } else if (!strcmp(t, "Replace")) {
        n->type = TN_REPLACE;
        if (!(n->pat = jl_pattern(L, o))) return -1;
        if (!(n->content = jl_dup(L, o, "content", &n->content_n))) return -1;
    } else if (!strcmp(t, "Prepend") || !strcmp(t, "Append")) {
        bool pre = t[0] == 'P';
        n->type = pre ? TN_PREPEND : TN_APPEND;
        if (!(n->content = jl_dup(L, o, pre ? "prepend" : "append", &n->content_n))) return -1;
    } else if (!strcmp(t, "Sequence")) {
        uint32_t arr = tj_get(d, o, "normalizers");
        if (!arr || tj_type_of(d, arr) != TJ_ARR) return jl_err(L, VC_ERR_FORMAT, "Sequence without normalizers", NULL);
        return parse_norm_list(L, arr, n, depth);
    } else {
        return jl_err(L, VC_ERR_UNSUPPORTED, "unsupported normalizer", t);
    }
    return 0;
}

/* ---- pre-tokenizers ---- */

static const char BYTELEVEL_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int parse_behavior(jl *L, uint32_t o, tok_behavior def, tok_behavior *b) {
    uint32_t v = tj_get(L->d, o, "behavior");
    *b = def;
    if (!v) return 0;
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (tj_str_eq(L->d, v, names[i])) {
            *b = (tok_behavior)i;
            return 0;
        }
    return jl_err(L, VC_ERR_FORMAT, "unknown split behavior", NULL);
}

static int parse_scheme(jl *L, uint32_t o, tok_prepend_scheme *s) {
    const tj_doc *d = L->d;
    uint32_t v = tj_get(d, o, "prepend_scheme");
    *s = TPS_ALWAYS;
    if (v) {
        if (tj_str_eq(d, v, "always")) *s = TPS_ALWAYS;
        else if (tj_str_eq(d, v, "first")) *s = TPS_FIRST;
        else if (tj_str_eq(d, v, "never")) *s = TPS_NEVER;
        else return jl_err(L, VC_ERR_FORMAT, "unknown prepend_scheme", NULL);
    } else if (tj_get(d, o, "add_prefix_space")) { /* older files */
        *s = tj_bool(d, tj_get(d, o, "add_prefix_space"), true) ? TPS_ALWAYS : TPS_NEVER;
    }
    return 0;
}

static int parse_repl(jl *L, uint32_t o, char *repl, size_t *n) {
    uint32_t v = tj_get(L->d, o, "replacement");
    const char *s = "\xE2\x96\x81";
    size_t len = 3;
    if (v && tj_str(L->d, v, &L->tmp, &s, &len) < 0) return jl_err(L, VC_ERR_FORMAT, "bad replacement", NULL);
    uint32_t cp;
    if (len == 0 || len > 4 || tok_utf8_len(s, len, &cp) != len)
        return jl_err(L, VC_ERR_FORMAT, "replacement must be one character", NULL);
    memcpy(repl, s, len);
    *n = len;
    return 0;
}

static int parse_pretok(jl *L, uint32_t o, tok_pretok *p, int depth) {
    if (depth > 16) return jl_err(L, VC_ERR_FORMAT, "pre-tokenizer nesting too deep", NULL);
    const tj_doc *d = L->d;
    if (tj_type_of(d, o) != TJ_OBJ) return jl_err(L, VC_ERR_FORMAT, "pre_tokenizer is not an object", NULL);
    char t[32];
    jl_type(L, o, t);
    if (!strcmp(t, "Split")) {
        p->type = TP_SPLIT;
        if (!(p->re = jl_pattern(L, o))) return -1;
        if (parse_behavior(L, o, TB_ISOLATED, &p->behavior) < 0) return -1;
        p->invert = tj_bool(d, tj_get(d, o, "invert"), false);
    } else if (!strcmp(t, "ByteLevel")) {
        p->type = TP_BYTELEVEL;
        p->add_prefix_space = tj_bool(d, tj_get(d, o, "add_prefix_space"), true);
        p->use_regex = tj_bool(d, tj_get(d, o, "use_regex"), true);
        if (p->use_regex && !(p->re = tok_regex_new(BYTELEVEL_RE, sizeof BYTELEVEL_RE - 1, false, L->what)))
            return -1;
    } else if (!strcmp(t, "Metaspace")) {
        p->type = TP_METASPACE;
        if (parse_repl(L, o, p->repl, &p->repl_n) < 0 || parse_scheme(L, o, &p->scheme) < 0) return -1;
        p->split = tj_bool(d, tj_get(d, o, "split"), true);
    } else if (!strcmp(t, "Digits")) {
        p->type = TP_DIGITS;
        p->individual_digits = tj_bool(d, tj_get(d, o, "individual_digits"), false);
    } else if (!strcmp(t, "Punctuation")) {
        p->type = TP_PUNCT;
        if (parse_behavior(L, o, TB_ISOLATED, &p->behavior) < 0) return -1;
    } else if (!strcmp(t, "Whitespace")) {
        /* Rust's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners */
        static const char re[] = "[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]+|"
                                 "[^\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}\\s]+";
        p->type = TP_WHITESPACE;
        p->behavior = TB_REMOVED;
        p->invert = true;
        if (!(p->re = tok_regex_new(re, sizeof re - 1, false, L->what))) return -1;
    } else if (!strcmp(t, "WhitespaceSplit")) {
        p->type = TP_WSSPLIT;
    } else if (!strcmp(t, "Sequence")) {
        uint32_t arr = tj_get(d, o, "pretokenizers");
        if (!arr || tj_type_of(d, arr) != TJ_ARR) return jl_err(L, VC_ERR_FORMAT, "Sequence without pretokenizers", NULL);
        p->type = TP_SEQ;
        p->n_items = tj_len(d, arr);
        p->items = calloc(p->n_items ? p->n_items : 1, sizeof *p->items);
        if (!p->items) return jl_err(L, VC_ERR_OOM, "out of memory", NULL);
        size_t i = 0;
        for (uint32_t c = tj_child(d, arr); c; c = tj_next(d, c), i++)
            if (parse_pretok(L, c, &p->items[i], depth + 1) < 0) return -1;
    } else {
        return jl_err(L, VC_ERR_UNSUPPORTED, "unsupported pre_tokenizer", t);
    }
    return 0;
}

/* ---- decoders ---- */

static int parse_dec(jl *L, uint32_t o, tok_dec *dc, int depth) {
    if (depth > 16) return jl_err(L, VC_ERR_FORMAT, "decoder nesting too deep", NULL);
    const tj_doc *d = L->d;
    if (tj_type_of(d, o) != TJ_OBJ) return jl_err(L, VC_ERR_FORMAT, "decoder is not an object", NULL);
    char t[32];
    jl_type(L, o, t);
    if (!strcmp(t, "ByteLevel")) dc->type = TD_BYTELEVEL;
    else if (!strcmp(t, "ByteFallback")) dc->type = TD_BYTEFALLBACK;
    else if (!strcmp(t, "Fuse")) dc->type = TD_FUSE;
    else if (!strcmp(t, "Replace")) {
        dc->type = TD_REPLACE;
        uint32_t pat = tj_get(d, o, "pattern");
        uint32_t sv = pat ? tj_get(d, pat, "String") : 0;
        if (!sv) return jl_err(L, VC_ERR_UNSUPPORTED, "Replace decoder needs a String pattern", NULL);
        const char *s;
        size_t n;
        if (tj_str(d, sv, &L->tmp, &s, &n) < 0) return jl_err(L, VC_ERR_FORMAT, "bad Replace pattern", NULL);
        dc->pat = malloc(n + 1);
        if (!dc->pat) return jl_err(L, VC_ERR_OOM, "out of memory", NULL);
        memcpy(dc->pat, s, n);
        dc->pat[n] = 0;
        dc->pat_n = n;
        if (!(dc->content = jl_dup(L, o, "content", &dc->content_n))) return -1;
    } else if (!strcmp(t, "Strip")) {
        dc->type = TD_STRIP;
        uint32_t cv = tj_get(d, o, "content");
        const char *s = " ";
        size_t n = 1;
        if (cv && tj_str(d, cv, &L->tmp, &s, &n) < 0) return jl_err(L, VC_ERR_FORMAT, "bad Strip content", NULL);
        uint32_t cp = ' ';
        if (n && tok_utf8_len(s, n, &cp) != n) return jl_err(L, VC_ERR_FORMAT, "Strip content must be one char", NULL);
        dc->strip_cp = cp;
        int64_t a = 0, b = 0;
        tj_i64(d, tj_get(d, o, "start"), &a);
        tj_i64(d, tj_get(d, o, "stop"), &b);
        if (a < 0 || b < 0 || a > 1 << 20 || b > 1 << 20) return jl_err(L, VC_ERR_FORMAT, "bad Strip counts", NULL);
        dc->start = (int)a;
        dc->stop = (int)b;
    } else if (!strcmp(t, "Metaspace")) {
        dc->type = TD_METASPACE;
        if (parse_repl(L, o, dc->repl, &dc->repl_n) < 0 || parse_scheme(L, o, &dc->scheme) < 0) return -1;
    } else if (!strcmp(t, "Sequence")) {
        uint32_t arr = tj_get(d, o, "decoders");
        if (!arr || tj_type_of(d, arr) != TJ_ARR) return jl_err(L, VC_ERR_FORMAT, "Sequence without decoders", NULL);
        dc->type = TD_SEQ;
        dc->n_items = tj_len(d, arr);
        dc->items = calloc(dc->n_items ? dc->n_items : 1, sizeof *dc->items);
        if (!dc->items) return jl_err(L, VC_ERR_OOM, "out of memory", NULL);
        size_t i = 0;
        for (uint32_t c = tj_child(d, arr); c; c = tj_next(d, c), i++)
            if (parse_dec(L, c, &dc->items[i], depth + 1) < 0) return -1;
    } else {
        return jl_err(L, VC_ERR_UNSUPPORTED, "unsupported decoder", t);
    }
    return 0;
}

/* ---- post-processors: reduced to ids before/after a single sequence ---- */

static int ids_append(int32_t **v, size_t *n, const int32_t *src, size_t k, bool front) {
    int32_t *nv = malloc((*n + k + 1) * sizeof *nv);
    if (!nv) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    if (front) {
        memcpy(nv, src, k * sizeof *nv);
        if (*n) memcpy(nv + k, *v, *n * sizeof *nv);
    } else {
        if (*n) memcpy(nv, *v, *n * sizeof *nv);
        memcpy(nv + *n, src, k * sizeof *nv);
    }
    free(*v);
    *v = nv;
    *n += k;
    return 0;
}

/* ["<s>", 1] (Roberta/Bert cls/sep) -> id */
static int pair_id(jl *L, uint32_t o, const char *key, int32_t *id) {
    uint32_t a = tj_get(L->d, o, key);
    int64_t v;
    if (!a || !tj_i64(L->d, tj_at(L->d, a, 1), &v) || v < 0 || v > INT32_MAX)
        return jl_err(L, VC_ERR_FORMAT, "bad post_processor token", key);
    *id = (int32_t)v;
    return 0;
}

static int parse_post(jl *L, uint32_t o, tok_tokenizer *t, int depth) {
    if (depth > 16) return jl_err(L, VC_ERR_FORMAT, "post_processor nesting too deep", NULL);
    const tj_doc *d = L->d;
    char ty[32];
    jl_type(L, o, ty);
    int32_t pre[64], suf[64];
    size_t np = 0, ns = 0;
    if (!strcmp(ty, "ByteLevel")) return 0;
    if (!strcmp(ty, "Sequence")) {
        uint32_t arr = tj_get(d, o, "processors");
        for (uint32_t c = tj_child(d, arr); c; c = tj_next(d, c))
            if (parse_post(L, c, t, depth + 1) < 0) return -1;
        return 0;
    }
    if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        if (pair_id(L, o, "cls", &pre[0]) < 0 || pair_id(L, o, "sep", &suf[0]) < 0) return -1;
        np = ns = 1;
    } else if (!strcmp(ty, "TemplateProcessing")) {
        uint32_t single = tj_get(d, o, "single"), specials = tj_get(d, o, "special_tokens");
        bool seen_seq = false;
        for (uint32_t c = tj_child(d, single); c; c = tj_next(d, c)) {
            if (tj_get(d, c, "Sequence")) {
                seen_seq = true;
                continue;
            }
            uint32_t st = tj_get(d, c, "SpecialToken");
            char *name = st ? jl_dup(L, st, "id", NULL) : NULL;
            if (!name) return jl_err(L, VC_ERR_FORMAT, "bad TemplateProcessing item", NULL);
            uint32_t entry = 0;
            for (uint32_t s = tj_child(d, specials); s; s = tj_next(d, s)) {
                const char *k;
                size_t kn;
                if (tj_key(d, s, &L->tmp, &k, &kn) == 0 && kn == strlen(name) && !memcmp(k, name, kn)) entry = s;
            }
            free(name);
            uint32_t ids = entry ? tj_get(d, entry, "ids") : 0;
            if (!ids) return jl_err(L, VC_ERR_FORMAT, "TemplateProcessing special token without ids", NULL);
            for (uint32_t e = tj_child(d, ids); e; e = tj_next(d, e)) {
                int64_t v;
                if (!tj_i64(d, e, &v) || v < 0 || v > INT32_MAX || np >= 64 || ns >= 64)
                    return jl_err(L, VC_ERR_FORMAT, "bad TemplateProcessing ids", NULL);
                if (seen_seq) suf[ns++] = (int32_t)v;
                else pre[np++] = (int32_t)v;
            }
        }
    } else {
        return jl_err(L, VC_ERR_UNSUPPORTED, "unsupported post_processor", ty);
    }
    if (ids_append(&t->post_prefix, &t->n_post_prefix, pre, np, true) < 0) return -1;
    return ids_append(&t->post_suffix, &t->n_post_suffix, suf, ns, false);
}

/* ---- model ---- */

/* ---- merges: resolved to (a, b, merged) ids in parallel, inserted in rank order ---- */

typedef struct {
    const tj_doc *d;
    const tok_model *m;
    const uint32_t *nodes;
    uint32_t lo, hi;
    int32_t *trip;    /* [3 * n_merges] */
    uint32_t bad;     /* first bad merge index + 1, 0 = none */
    bool bad_vocab;   /* a token of it is not in the vocabulary (else: malformed) */
} merge_job;

static void *resolve_merges(void *arg) {
    merge_job *j = arg;
    const tj_doc *d = j->d;
    const tok_model *m = j->m;
    vc_strbuf t1 = {0}, t2 = {0}, cat = {0};
    int32_t guess = -2; /* merged tokens usually follow each other in the vocabulary */
    for (uint32_t i = j->lo; i < j->hi && !j->bad; i++) {
        uint32_t c = j->nodes[i];
        const char *a = NULL, *b = NULL;
        size_t an = 0, bn = 0;
        bool ok = false;
        if (tj_type_of(d, c) == TJ_STR) { /* "a b" */
            const char *s;
            size_t n;
            if (tj_str(d, c, &t1, &s, &n) == 0) {
                const char *sp = memchr(s, ' ', n);
                if (sp && !memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
                    a = s, an = (size_t)(sp - s), b = sp + 1, bn = n - an - 1;
                    ok = true;
                }
            }
        } else if (tj_type_of(d, c) == TJ_ARR && tj_len(d, c) == 2) { /* ["a", "b"] */
            ok = tj_str(d, tj_at(d, c, 0), &t1, &a, &an) == 0 && tj_str(d, tj_at(d, c, 1), &t2, &b, &bn) == 0;
        }
        if (!ok) {
            j->bad = i + 1;
            break;
        }
        int32_t ia = tok_strmap_get(&m->vmap, m->vocab, a, an);
        int32_t ib = tok_strmap_get(&m->vmap, m->vocab, b, bn);
        vc_sb_clear(&cat);
        vc_sb_append(&cat, a, an);
        vc_sb_append(&cat, b, bn);
        int32_t g = guess + 1, ic;
        if (g >= 0 && (size_t)g < m->n_vocab && m->vocab[g].s && m->vocab[g].n == cat.len &&
            !memcmp(m->vocab[g].s, cat.s, cat.len))
            ic = g;
        else
            ic = tok_strmap_get(&m->vmap, m->vocab, cat.s, cat.len);
        guess = ic;
        if (ia < 0 || ib < 0 || ic < 0) {
            j->bad = i + 1;
            j->bad_vocab = true;
            break;
        }
        j->trip[3 * (size_t)i] = ia;
        j->trip[3 * (size_t)i + 1] = ib;
        j->trip[3 * (size_t)i + 2] = ic;
    }
    vc_sb_free(&t1);
    vc_sb_free(&t2);
    vc_sb_free(&cat);
    return NULL;
}

static int parse_merges(jl *L, uint32_t merges, tok_model *m) {
    const tj_doc *d = L->d;
    uint32_t nm = merges ? tj_len(d, merges) : 0;
    if (tok_u64map_init(&m->merges, nm) < 0) return -1;
    if (!nm) return 0;
    uint32_t *nodes = malloc((size_t)nm * sizeof *nodes);
    int32_t *trip = malloc((size_t)nm * 3 * sizeof *trip);
    if (!nodes || !trip) {
        free(nodes);
        free(trip);
        return jl_err(L, VC_ERR_OOM, "out of memory", NULL);
    }
    uint32_t k = 0;
    for (uint32_t c = tj_child(d, merges); c && k < nm; c = tj_next(d, c)) nodes[k++] = c;
    enum { MAX_JOBS = 4 };
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nj = nm < 32768 ? 1 : (int)(ncpu < 1 ? 1 : ncpu > MAX_JOBS ? MAX_JOBS : ncpu);
    merge_job jobs[MAX_JOBS];
    pthread_t th[MAX_JOBS];
    bool started[MAX_JOBS] = {false};
    for (int i = 0; i < nj; i++) {
        jobs[i] = (merge_job){d, m, nodes, (uint32_t)((uint64_t)nm * i / nj), (uint32_t)((uint64_t)nm * (i + 1) / nj),
                              trip, 0, false};
        if (i > 0) started[i] = pthread_create(&th[i], NULL, resolve_merges, &jobs[i]) == 0;
    }
    resolve_merges(&jobs[0]);
    for (int i = 1; i < nj; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else resolve_merges(&jobs[i]); /* no thread: do it here */
    }
    int rc = 0;
    for (int i = 0; i < nj && rc == 0; i++) {
        if (!jobs[i].bad) continue;
        char idx[32];
        snprintf(idx, sizeof idx, "%u", jobs[i].bad - 1);
        rc = jl_err(L, VC_ERR_FORMAT, jobs[i].bad_vocab ? "a token of merge is not in the vocabulary: merge"
                                                        : "malformed merge (want \"a b\" or [a, b]): merge", idx);
    }
    for (uint32_t i = 0; i < nm && rc == 0; i++) {
        uint64_t key = ((uint64_t)(uint32_t)trip[3 * (size_t)i] << 32) | (uint32_t)trip[3 * (size_t)i + 1];
        if (tok_u64map_put(&m->merges, key, ((uint64_t)i << 32) | (uint32_t)trip[3 * (size_t)i + 2]) < 0) rc = -1;
    }
    free(nodes);
    free(trip);
    return rc;
}

static int parse_model(jl *L, uint32_t mo, tok_tokenizer *t) {
    const tj_doc *d = L->d;
    tok_model *m = &t->model;
    char ty[32];
    jl_type(L, mo, ty);
    if (ty[0] && strcmp(ty, "BPE")) return jl_err(L, VC_ERR_UNSUPPORTED, "unsupported model type", ty);
    uint32_t vocab = tj_get(d, mo, "vocab"), merges = tj_get(d, mo, "merges");
    if (!vocab || tj_type_of(d, vocab) != TJ_OBJ) return jl_err(L, VC_ERR_FORMAT, "model.vocab missing", NULL);
    const char *csp = NULL;
    uint32_t v;
    if ((v = tj_get(d, mo, "continuing_subword_prefix")) && tj_len(d, v))
        csp = "continuing_subword_prefix";
    if ((v = tj_get(d, mo, "end_of_word_suffix")) && tj_len(d, v)) csp = "end_of_word_suffix";
    if (csp) return jl_err(L, VC_ERR_UNSUPPORTED, "unsupported BPE option", csp);
    double dropout = 0;
    if (tj_f64(d, tj_get(d, mo, "dropout"), &dropout) && dropout > 0)
        return jl_err(L, VC_ERR_UNSUPPORTED, "BPE dropout is not supported", NULL);

    /* ids and total key bytes */
    int64_t max_id = -1;
    size_t bytes = 0;
    for (uint32_t c = tj_child(d, vocab); c; c = tj_next(d, c)) {
        int64_t id;
        if (!tj_i64(d, c, &id) || id < 0 || id >= (1 << 30)) return jl_err(L, VC_ERR_FORMAT, "bad vocab id", NULL);
        if (id > max_id) max_id = id;
        bytes += tj_node_at(d, c)->key_n + 1;
    }
    m->n_vocab = (size_t)(max_id + 1);
    m->vocab = calloc(m->n_vocab ? m->n_vocab : 1, sizeof *m->vocab);
    char *arena = malloc(bytes + 1);
    if (!m->vocab || !arena) {
        free(arena);
        return jl_err(L, VC_ERR_OOM, "out of memory", NULL);
    }
    t->arena = arena;
    if (tok_strmap_init(&m->vmap, m->n_vocab) < 0) return -1;
    size_t at = 0;
    for (uint32_t c = tj_child(d, vocab); c; c = tj_next(d, c)) {
        int64_t id;
        tj_i64(d, c, &id);
        const char *k;
        size_t kn;
        if (tj_key(d, c, &L->tmp, &k, &kn) < 0) return jl_err(L, VC_ERR_FORMAT, "bad vocab key", NULL);
        memcpy(arena + at, k, kn);
        arena[at + kn] = 0;
        m->vocab[id] = (tok_str){arena + at, (uint32_t)kn};
        at += kn + 1;
        tok_strmap_put(&m->vmap, m->vocab, (int32_t)id);
    }

    if (parse_merges(L, merges, m) < 0) return -1;

    m->unk_id = -1;
    uint32_t unk = tj_get(d, mo, "unk_token");
    if (unk) {
        const char *s;
        size_t n;
        if (tj_str(d, unk, &L->tmp, &s, &n) == 0) m->unk_id = tok_strmap_get(&m->vmap, m->vocab, s, n);
    }
    m->fuse_unk = tj_bool(d, tj_get(d, mo, "fuse_unk"), false);
    m->byte_fallback = tj_bool(d, tj_get(d, mo, "byte_fallback"), false);
    m->ignore_merges = tj_bool(d, tj_get(d, mo, "ignore_merges"), false);
    return 0;
}

static int parse_added(jl *L, uint32_t arr, tok_tokenizer *t) {
    const tj_doc *d = L->d;
    if (!arr) return 0;
    if (tj_type_of(d, arr) != TJ_ARR) return jl_err(L, VC_ERR_FORMAT, "added_tokens is not an array", NULL);
    t->added = calloc(tj_len(d, arr) + 1, sizeof *t->added);
    if (!t->added) return jl_err(L, VC_ERR_OOM, "out of memory", NULL);
    for (uint32_t c = tj_child(d, arr); c; c = tj_next(d, c)) {
        tok_added *a = &t->added[t->n_added];
        int64_t id;
        if (!tj_i64(d, tj_get(d, c, "id"), &id) || id < 0 || id >= (1 << 30))
            return jl_err(L, VC_ERR_FORMAT, "added token without a valid id", NULL);
        if (!(a->content = jl_dup(L, c, "content", &a->n))) return -1;
        t->n_added++;
        a->id = (int32_t)id;
        a->special = tj_bool(d, tj_get(d, c, "special"), false);
        a->lstrip = tj_bool(d, tj_get(d, c, "lstrip"), false);
        a->rstrip = tj_bool(d, tj_get(d, c, "rstrip"), false);
        a->single_word = tj_bool(d, tj_get(d, c, "single_word"), false);
        a->normalized = tj_bool(d, tj_get(d, c, "normalized"), !a->special);
    }
    return 0;
}

int tok_parse_tokenizer_json(tok_tokenizer *t, const char *buf, size_t len, const char *what) {
    tj_doc d;
    vc_err_clear();
    if (tj_parse(&d, buf, len, what) < 0) return -1;
    jl L = {&d, what, {0}};
    int rc = -1;
    uint32_t v;
    if (tj_type_of(&d, 0) != TJ_OBJ) {
        jl_err(&L, VC_ERR_FORMAT, "top level is not an object", NULL);
        goto done;
    }
    uint32_t mo = tj_get(&d, 0, "model");
    if (!mo) {
        jl_err(&L, VC_ERR_FORMAT, "no model", NULL);
        goto done;
    }
    if (parse_model(&L, mo, t) < 0 || parse_added(&L, tj_get(&d, 0, "added_tokens"), t) < 0) goto done;
    if ((v = tj_get(&d, 0, "normalizer"))) {
        if (!(t->norm = calloc(1, sizeof *t->norm)) || parse_norm(&L, v, t->norm, 0) < 0) goto done;
    }
    if ((v = tj_get(&d, 0, "pre_tokenizer"))) {
        if (!(t->pretok = calloc(1, sizeof *t->pretok)) || parse_pretok(&L, v, t->pretok, 0) < 0) goto done;
    }
    if ((v = tj_get(&d, 0, "decoder"))) {
        if (!(t->dec = calloc(1, sizeof *t->dec)) || parse_dec(&L, v, t->dec, 0) < 0) goto done;
    }
    if ((v = tj_get(&d, 0, "post_processor")) && parse_post(&L, v, t, 0) < 0) goto done;
    rc = 0;
done:
    if (rc < 0 && vc_err_status() == VC_OK) vc_err_set(VC_ERR_OOM, "%s: out of memory", what);
    vc_sb_free(&L.tmp);
    tj_free(&d);
    return rc;
}
