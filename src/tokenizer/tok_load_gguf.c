/* tok_load_gguf — tokenizer from GGUF metadata (tokenizer.ggml.*).
 *
 * "gpt2": byte-level BPE; tokenizer.ggml.pre picks the split regexes the
 * way llama.cpp does (same expressions as the models' tokenizer.json).
 * "llama": SentencePiece BPE: merges are derived from the vocabulary (every
 * split of a token into two tokens), ranked by the merged token's score,
 * ties leftmost, as llama.cpp's SPM tokenizer merges; then byte fallback
 * <0xNN> and unk. Text gets "▁" for spaces and a "▁" prefix (add_space_prefix).
 */
#include "base/err.h"
#include "model/gguf.h"
#include "tokenizer/tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_DS3_A[] = "\\p{N}{1,3}";
static const char RE_DS3_B[] = "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+";
static const char RE_DS3_C[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_DIGIT[] = "\\p{N}";

/* pre-tokenizer: Split(Isolated) for each regex, then ByteLevel. */
static int bytelevel_pretok(tok_tokenizer *t, const char *pre) {
    const char *res[3] = {0};
    size_t nre = 0;
    bool bl_regex = false;
    if (!pre || !strcmp(pre, "default") || !strcmp(pre, "gpt-2") || !strcmp(pre, "gpt2")) {
        bl_regex = true;
    } else if (!strcmp(pre, "llama3") || !strcmp(pre, "llama-v3") || !strcmp(pre, "llama-bpe") ||
               !strcmp(pre, "falcon3")) {
        res[nre++] = RE_LLAMA3;
    } else if (!strcmp(pre, "qwen2") || !strcmp(pre, "deepseek-r1-qwen") || !strcmp(pre, "qwen35")) {
        res[nre++] = RE_QWEN2;
    } else if (!strcmp(pre, "deepseek-v3")) {
        res[nre++] = RE_DS3_A, res[nre++] = RE_DS3_B, res[nre++] = RE_DS3_C;
    } else if (!strcmp(pre, "smollm") || !strcmp(pre, "starcoder") || !strcmp(pre, "refact") ||
               !strcmp(pre, "command-r")) {
        res[nre++] = RE_DIGIT;
        bl_regex = true;
    } else {
        return vc_err_set(VC_ERR_UNSUPPORTED, "%s: unsupported tokenizer.ggml.pre '%s'", t->name, pre);
    }
    tok_pretok *p = calloc(1, sizeof *p);
    if (!p) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    t->pretok = p;
    p->type = TP_SEQ;
    p->items = calloc(nre + 1, sizeof *p->items);
    if (!p->items) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    p->n_items = nre + 1;
    for (size_t i = 0; i < nre; i++) {
        p->items[i].type = TP_SPLIT;
        p->items[i].behavior = TB_ISOLATED;
        if (!(p->items[i].re = tok_regex_new(res[i], strlen(res[i]), false, t->name))) return -1;
    }
    tok_pretok *bl = &p->items[nre];
    bl->type = TP_BYTELEVEL;
    bl->use_regex = bl_regex;
    if (bl_regex && !(bl->re = tok_regex_new(RE_GPT2, strlen(RE_GPT2), false, t->name))) return -1;
    t->dec = calloc(1, sizeof *t->dec);
    if (!t->dec) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    t->dec->type = TD_BYTELEVEL;
    return 0;
}

static int gpt2_merges(tok_tokenizer *t, const gguf_ctx *g) {
    tok_model *m = &t->model;
    gguf_type et;
    uint64_t n = 0;
    if (!gguf_get_arr_info(g, "tokenizer.ggml.merges", &et, &n) || et != GGUF_TYPE_STRING)
        return vc_err_set(VC_ERR_FORMAT, "%s: tokenizer.ggml.merges missing", t->name);
    if (n >= UINT32_MAX / 4 || tok_u64map_init(&m->merges, (size_t)n) < 0)
        return vc_err_set(VC_ERR_FORMAT, "%s: bad merges", t->name);
    vc_strbuf cat = {0};
    int rc = 0;
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        gguf_str s = gguf_get_arr_str(g, "tokenizer.ggml.merges", i);
        const char *sp = s.p ? memchr(s.p, ' ', s.n) : NULL;
        if (!sp) {
            rc = vc_err_set(VC_ERR_FORMAT, "%s: merge %llu is not 'a b'", t->name, (unsigned long long)i);
            break;
        }
        size_t an = (size_t)(sp - s.p), bn = s.n - an - 1;
        int32_t a = tok_strmap_get(&m->vmap, m->vocab, s.p, an);
        int32_t b = tok_strmap_get(&m->vmap, m->vocab, sp + 1, bn);
        vc_sb_clear(&cat);
        vc_sb_append(&cat, s.p, s.n);
        memmove(cat.s + an, cat.s + an + 1, bn);
        cat.len = an + bn;
        int32_t c = tok_strmap_get(&m->vmap, m->vocab, cat.s, cat.len);
        if (a < 0 || b < 0 || c < 0) {
            rc = vc_err_set(VC_ERR_FORMAT, "%s: merge %llu uses tokens not in the vocabulary", t->name,
                            (unsigned long long)i);
            break;
        }
        rc = tok_u64map_put(&m->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, ((uint64_t)i << 32) | (uint32_t)c);
        if (rc > 0) rc = 0;
    }
    vc_sb_free(&cat);
    return rc;
}

static const float *g_scores; /* qsort context (load is not reentrant-sensitive: read-only data) */

static int by_score_desc(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (g_scores[x] != g_scores[y]) return g_scores[x] > g_scores[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int spm_merges(tok_tokenizer *t, const float *scores, const uint8_t *types) {
    tok_model *m = &t->model;
    size_t n = m->n_vocab;
    int32_t *order = malloc(n * sizeof *order);
    uint32_t *rank = malloc(n * sizeof *rank);
    if (!order || !rank) {
        free(order);
        free(rank);
        return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (types[i] == TT_NORMAL || types[i] == TT_USER) order[k++] = (int32_t)i;
    g_scores = scores;
    qsort(order, k, sizeof *order, by_score_desc);
    uint32_t r = 0;
    for (size_t i = 0; i < k; i++) {
        if (i && scores[order[i]] != scores[order[i - 1]]) r++;
        rank[order[i]] = r;
    }
    int rc = tok_u64map_init(&m->merges, k * 4);
    for (size_t i = 0; i < k && rc == 0; i++) {
        int32_t id = order[i];
        const tok_str *s = &m->vocab[id];
        for (uint32_t cut = 1; cut < s->n && rc == 0; cut++) {
            if (((unsigned char)s->s[cut] & 0xC0) == 0x80) continue;
            int32_t a = tok_strmap_get(&m->vmap, m->vocab, s->s, cut);
            int32_t b = tok_strmap_get(&m->vmap, m->vocab, s->s + cut, s->n - cut);
            if (a < 0 || b < 0) continue;
            if (!(types[a] == TT_NORMAL || types[a] == TT_USER) || !(types[b] == TT_NORMAL || types[b] == TT_USER))
                continue;
            rc = tok_u64map_put(&m->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b,
                                ((uint64_t)rank[id] << 32) | (uint32_t)id);
            if (rc > 0) rc = 0;
        }
    }
    free(order);
    free(rank);
    return rc;
}

static int spm_pipeline(tok_tokenizer *t, bool add_space_prefix) {
    static const char SP[] = "\xE2\x96\x81"; /* ▁ */
    tok_norm *n = calloc(1, sizeof *n);
    tok_dec *d = calloc(1, sizeof *d);
    if (!n || !d) {
        free(n);
        free(d);
        return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    }
    t->norm = n;
    t->dec = d;
    n->type = TN_SEQ;
    n->items = calloc(2, sizeof *n->items);
    d->type = TD_SEQ;
    d->items = calloc(4, sizeof *d->items);
    if (!n->items || !d->items) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    size_t ni = 0;
    if (add_space_prefix) {
        n->items[ni].type = TN_PREPEND;
        n->items[ni].content = strdup(SP);
        n->items[ni].content_n = 3;
        if (!n->items[ni++].content) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    }
    n->items[ni].type = TN_REPLACE;
    n->items[ni].content = strdup(SP);
    n->items[ni].content_n = 3;
    if (!n->items[ni].content || !(n->items[ni].pat = tok_regex_new(" ", 1, true, t->name)))
        return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    n->n_items = ni + 1;
    d->items[0].type = TD_REPLACE;
    d->items[0].pat = strdup(SP);
    d->items[0].pat_n = 3;
    d->items[0].content = strdup(" ");
    d->items[0].content_n = 1;
    if (!d->items[0].pat || !d->items[0].content) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    d->items[1].type = TD_BYTEFALLBACK;
    d->items[2].type = TD_FUSE;
    d->n_items = 3;
    if (add_space_prefix) {
        d->items[3].type = TD_STRIP;
        d->items[3].strip_cp = ' ';
        d->items[3].start = 1;
        d->n_items = 4;
    }
    return 0;
}

static int32_t get_id(const gguf_ctx *g, const char *key, size_t n_vocab) {
    int64_t v;
    if (!gguf_get_i64(g, key, &v) || v < 0 || (uint64_t)v >= n_vocab) return -1;
    return (int32_t)v;
}

tok_tokenizer *tok_load_gguf(const gguf_ctx *g) {
    const char *path = gguf_path(g);
    tok_tokenizer *t = tok_alloc(path ? path : "gguf");
    if (!t) return NULL;
    uint8_t *types = NULL;
    float *scores = NULL;
    const char *model = gguf_get_string(g, "tokenizer.ggml.model");
    bool spm = model && !strcmp(model, "llama");
    if (!model || (!spm && strcmp(model, "gpt2"))) {
        vc_err_set(VC_ERR_UNSUPPORTED, "%s: unsupported tokenizer.ggml.model '%s'", t->name,
                   model ? model : "(missing)");
        goto fail;
    }
    gguf_type et;
    uint64_t n = 0;
    if (!gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n) || et != GGUF_TYPE_STRING || n == 0 ||
        n >= (1u << 30)) {
        vc_err_set(VC_ERR_FORMAT, "%s: tokenizer.ggml.tokens missing or invalid", t->name);
        goto fail;
    }
    tok_model *m = &t->model;
    m->n_vocab = (size_t)n;
    size_t bytes = 0;
    for (uint64_t i = 0; i < n; i++) bytes += gguf_get_arr_str(g, "tokenizer.ggml.tokens", i).n + 1;
    m->vocab = calloc(n, sizeof *m->vocab);
    t->arena = malloc(bytes + 1);
    types = malloc(n);
    scores = calloc(n, sizeof *scores);
    if (!m->vocab || !t->arena || !types || !scores || tok_strmap_init(&m->vmap, n) < 0) {
        vc_err_set(VC_ERR_OOM, "%s: out of memory", t->name);
        goto fail;
    }
    size_t at = 0;
    bool have_types = gguf_get_arr_info(g, "tokenizer.ggml.token_type", &et, &n) && n == m->n_vocab;
    bool have_scores = gguf_get_arr_info(g, "tokenizer.ggml.scores", &et, &n) && n == m->n_vocab;
    for (uint64_t i = 0; i < m->n_vocab; i++) {
        gguf_str s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", i);
        if (!s.p && s.n) {
            vc_err_set(VC_ERR_FORMAT, "%s: bad token %llu", t->name, (unsigned long long)i);
            goto fail;
        }
        if (s.n) memcpy(t->arena + at, s.p, s.n);
        t->arena[at + s.n] = 0;
        m->vocab[i] = (tok_str){t->arena + at, (uint32_t)s.n};
        at += s.n + 1;
        int64_t ty = TT_NORMAL;
        if (have_types) gguf_get_arr_i64(g, "tokenizer.ggml.token_type", i, &ty);
        types[i] = (uint8_t)(ty >= 1 && ty <= 6 ? ty : TT_NORMAL);
        if (have_scores) gguf_get_arr_f32(g, "tokenizer.ggml.scores", i, &scores[i]);
        tok_strmap_put(&m->vmap, m->vocab, (int32_t)i);
    }
    /* control / unknown tokens are special added tokens, user-defined ones plain added tokens */
    t->added = calloc(m->n_vocab, sizeof *t->added);
    if (!t->added) {
        vc_err_set(VC_ERR_OOM, "%s: out of memory", t->name);
        goto fail;
    }
    for (size_t i = 0; i < m->n_vocab; i++) {
        if (types[i] != TT_CONTROL && types[i] != TT_UNKNOWN && types[i] != TT_USER) continue;
        if (!m->vocab[i].n) continue;
        tok_added *a = &t->added[t->n_added];
        a->content = malloc(m->vocab[i].n + 1);
        if (!a->content) {
            vc_err_set(VC_ERR_OOM, "%s: out of memory", t->name);
            goto fail;
        }
        memcpy(a->content, m->vocab[i].s, m->vocab[i].n + 1);
        a->n = m->vocab[i].n;
        a->id = (int32_t)i;
        a->special = types[i] != TT_USER;
        t->n_added++;
    }
    int32_t bos = get_id(g, "tokenizer.ggml.bos_token_id", m->n_vocab);
    int32_t eos = get_id(g, "tokenizer.ggml.eos_token_id", m->n_vocab);
    int32_t unk = get_id(g, "tokenizer.ggml.unknown_token_id", m->n_vocab);
    bool add_bos = spm, add_eos = false, add_space = spm;
    gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);
    gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos);
    gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &add_space);
    if (spm) {
        m->byte_fallback = true;
        m->fuse_unk = true;
        m->unk_id = unk >= 0 ? unk : tok_strmap_get(&m->vmap, m->vocab, "<unk>", 5);
        if (spm_merges(t, scores, types) < 0 || spm_pipeline(t, add_space) < 0) goto fail;
    } else {
        if (gpt2_merges(t, g) < 0 || bytelevel_pretok(t, gguf_get_string(g, "tokenizer.ggml.pre")) < 0) goto fail;
    }
    if (add_bos && bos >= 0) {
        t->post_prefix = malloc(sizeof(int32_t));
        if (!t->post_prefix) goto oom;
        t->post_prefix[t->n_post_prefix++] = bos;
    }
    if (add_eos && eos >= 0) {
        t->post_suffix = malloc(sizeof(int32_t));
        if (!t->post_suffix) goto oom;
        t->post_suffix[t->n_post_suffix++] = eos;
    }
    if (tok_finish(t) < 0) goto fail;
    t->bos_id = bos;
    t->pad_id = get_id(g, "tokenizer.ggml.padding_token_id", m->n_vocab);
    if (unk >= 0) t->unk_id = unk;
    if (tok_add_eos(t, eos) < 0 || tok_add_eos(t, get_id(g, "tokenizer.ggml.eot_token_id", m->n_vocab)) < 0 ||
        tok_add_eos(t, get_id(g, "tokenizer.ggml.eom_token_id", m->n_vocab)) < 0)
        goto fail;
    if (bos >= 0 && !(t->bos_str = strndup(m->vocab[bos].s, m->vocab[bos].n))) goto oom;
    if (eos >= 0 && !(t->eos_str = strndup(m->vocab[eos].s, m->vocab[eos].n))) goto oom;
    const char *ct = gguf_get_string(g, "tokenizer.chat_template");
    if (ct && !(t->chat_template = strdup(ct))) goto oom;
    free(types);
    free(scores);
    return t;
oom:
    vc_err_set(VC_ERR_OOM, "%s: out of memory", t->name);
fail:
    free(types);
    free(scores);
    tok_free(t);
    return NULL;
}
