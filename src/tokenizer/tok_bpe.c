/* tok_bpe — the BPE model: initial symbols (chars, byte fallback, unk),
 * then merges by rank with a min-heap over a linked list of symbols, as
 * tokenizers' Word::merge_all does (lowest rank first, leftmost on ties). */
#include "base/err.h"
#include "tokenizer/tok_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Word cache: most words of a text repeat, and BPE on a word costs far
 * more than a lookup. Direct-mapped, 64-byte entries, striped mutexes so
 * concurrent encodes share it (a loaded tokenizer stays logically const). */
#define CACHE_SLOTS 65536
#define CACHE_STRIPES 64
#define CACHE_WORD 22
#define CACHE_IDS 8

typedef struct {
    uint64_t hash;
    uint8_t len, n; /* len 0 = empty */
    char word[CACHE_WORD];
    int32_t ids[CACHE_IDS];
} cache_entry;

struct tok_cache {
    cache_entry *e;
    pthread_mutex_t lock[CACHE_STRIPES];
};

static struct tok_cache *cache_new(void) {
    struct tok_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->e = calloc(CACHE_SLOTS, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    for (int i = 0; i < CACHE_STRIPES; i++) pthread_mutex_init(&c->lock[i], NULL);
    return c;
}

static void cache_free(struct tok_cache *c) {
    if (!c) return;
    for (int i = 0; i < CACHE_STRIPES; i++) pthread_mutex_destroy(&c->lock[i]);
    free(c->e);
    free(c);
}

/* Copies the cached ids of s into out; false on a miss. */
static bool cache_get(struct tok_cache *c, uint64_t h, const char *s, size_t n, int32_t *out, size_t *k) {
    size_t slot = h & (CACHE_SLOTS - 1);
    pthread_mutex_t *mu = &c->lock[slot % CACHE_STRIPES];
    pthread_mutex_lock(mu);
    const cache_entry *e = &c->e[slot];
    bool hit = e->len == n && e->hash == h && !memcmp(e->word, s, n);
    if (hit) {
        *k = e->n;
        memcpy(out, e->ids, e->n * sizeof *out);
    }
    pthread_mutex_unlock(mu);
    return hit;
}

static void cache_put(struct tok_cache *c, uint64_t h, const char *s, size_t n, const int32_t *ids, size_t k) {
    size_t slot = h & (CACHE_SLOTS - 1);
    pthread_mutex_t *mu = &c->lock[slot % CACHE_STRIPES];
    pthread_mutex_lock(mu);
    cache_entry *e = &c->e[slot];
    e->hash = h;
    e->len = (uint8_t)n;
    e->n = (uint8_t)k;
    memcpy(e->word, s, n);
    memcpy(e->ids, ids, k * sizeof *ids);
    pthread_mutex_unlock(mu);
}

typedef struct {
    uint32_t rank, pos;
    int32_t new_id;
} bpe_merge;

struct tok_bpe_ws {
    int32_t *id, *prev, *next;
    size_t cap;
    bpe_merge *h;
    size_t hn, hcap;
};

tok_bpe_ws *tok_bpe_ws_new(void) { return calloc(1, sizeof(tok_bpe_ws)); }

void tok_bpe_ws_free(tok_bpe_ws *w) {
    if (!w) return;
    free(w->id);
    free(w->prev);
    free(w->next);
    free(w->h);
    free(w);
}

int tok_ids_push(tok_ids *a, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

static int ws_reserve(tok_bpe_ws *w, size_t n) {
    if (n <= w->cap) return 0;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *a = realloc(w->id, cap * sizeof *a);
    if (a) w->id = a;
    int32_t *b = realloc(w->prev, cap * sizeof *b);
    if (b) w->prev = b;
    int32_t *c = realloc(w->next, cap * sizeof *c);
    if (c) w->next = c;
    if (!a || !b || !c) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    w->cap = cap;
    return 0;
}

static inline bool merge_less(const bpe_merge *a, const bpe_merge *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static int heap_push(tok_bpe_ws *w, bpe_merge m) {
    if (w->hn == w->hcap) {
        size_t cap = w->hcap ? w->hcap * 2 : 64;
        bpe_merge *h = realloc(w->h, cap * sizeof *h);
        if (!h) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
        w->h = h;
        w->hcap = cap;
    }
    size_t i = w->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(&m, &w->h[p])) break;
        w->h[i] = w->h[p];
        i = p;
    }
    w->h[i] = m;
    return 0;
}

static bpe_merge heap_pop(tok_bpe_ws *w) {
    bpe_merge top = w->h[0], last = w->h[--w->hn];
    size_t i = 0, n = w->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && merge_less(&w->h[c + 1], &w->h[c])) c++;
        if (!merge_less(&w->h[c], &last)) break;
        w->h[i] = w->h[c];
        i = c;
    }
    if (n) w->h[i] = last;
    return top;
}

static inline bool pair_lookup(const tok_model *m, int32_t a, int32_t b, uint32_t *rank, int32_t *nid) {
    uint64_t v;
    if (!tok_u64map_get(&m->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, &v)) return false;
    *rank = (uint32_t)(v >> 32);
    *nid = (int32_t)(uint32_t)v;
    return true;
}

static int push_pair(const tok_model *m, tok_bpe_ws *w, int32_t pos) {
    int32_t nx = w->next[pos];
    if (nx < 0) return 0;
    uint32_t rank;
    int32_t nid;
    if (!pair_lookup(m, w->id[pos], w->id[nx], &rank, &nid)) return 0;
    return heap_push(w, (bpe_merge){rank, (uint32_t)pos, nid});
}

static inline int32_t char_id(const tok_model *m, const char *s, size_t l, uint32_t cp) {
    if (m->cp_ids && cp < TOK_CP_DIRECT) return m->cp_ids[cp];
    return tok_strmap_get(&m->vmap, m->vocab, s, l);
}

static int bpe_word(const tok_model *m, tok_bpe_ws *w, const char *s, size_t n, tok_ids *out);

int tok_bpe_encode_word(const tok_model *m, tok_bpe_ws *w, const char *s, size_t n, tok_ids *out) {
    if (n == 0) return 0;
    if (m->ignore_merges) {
        int32_t id = tok_strmap_get(&m->vmap, m->vocab, s, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (!m->cache || n > CACHE_WORD) return bpe_word(m, w, s, n, out);
    uint64_t h = tok_hash(s, n);
    int32_t ids[CACHE_IDS];
    size_t k;
    if (cache_get(m->cache, h, s, n, ids, &k)) {
        for (size_t i = 0; i < k; i++)
            if (tok_ids_push(out, ids[i]) < 0) return -1;
        return 0;
    }
    size_t before = out->n;
    if (bpe_word(m, w, s, n, out) < 0) return -1;
    if (out->n - before <= CACHE_IDS) cache_put(m->cache, h, s, n, out->v + before, out->n - before);
    return 0;
}

static int bpe_word(const tok_model *m, tok_bpe_ws *w, const char *s, size_t n, tok_ids *out) {
    if (ws_reserve(w, n + 1) < 0) return -1;
    int32_t ns = 0;
    int32_t unk = -1;
    size_t i = 0;
    while (i < n) {
        uint32_t cp = 0;
        size_t l = tok_utf8_len(s + i, n - i, &cp);
        if (!l) l = 1, cp = 0xFFFFFFFFu; /* not reachable with validated input */
        int32_t id = cp == 0xFFFFFFFFu ? -1 : char_id(m, s + i, l, cp);
        if (id >= 0) {
            if (unk >= 0) w->id[ns++] = unk, unk = -1;
            w->id[ns++] = id;
        } else {
            bool done = false;
            if (m->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < l; k++) all = all && m->byte_ids[(uint8_t)s[i + k]] >= 0;
                if (all) {
                    /* as tokenizers does, a pending unk is not flushed here */
                    for (size_t k = 0; k < l; k++) w->id[ns++] = m->byte_ids[(uint8_t)s[i + k]];
                    done = true;
                }
            }
            if (!done && m->unk_id >= 0) {
                if (unk >= 0 && !m->fuse_unk) w->id[ns++] = unk;
                unk = m->unk_id;
            }
        }
        i += l;
    }
    if (unk >= 0) w->id[ns++] = unk;

    for (int32_t k = 0; k < ns; k++) {
        w->prev[k] = k - 1;
        w->next[k] = k + 1 < ns ? k + 1 : -1;
    }
    w->hn = 0;
    if (m->merges.n) {
        for (int32_t k = 0; k + 1 < ns; k++)
            if (push_pair(m, w, k) < 0) return -1;
        while (w->hn) {
            bpe_merge top = heap_pop(w);
            int32_t pos = (int32_t)top.pos;
            if (w->id[pos] < 0) continue; /* merged away */
            int32_t nx = w->next[pos];
            if (nx < 0) continue;
            uint32_t rank;
            int32_t nid;
            if (!pair_lookup(m, w->id[pos], w->id[nx], &rank, &nid) || nid != top.new_id) continue;
            w->id[pos] = nid;
            w->id[nx] = -1;
            w->next[pos] = w->next[nx];
            if (w->next[nx] >= 0) w->prev[w->next[nx]] = pos;
            if (w->prev[pos] >= 0 && push_pair(m, w, w->prev[pos]) < 0) return -1;
            if (push_pair(m, w, pos) < 0) return -1;
        }
    }
    for (int32_t k = 0; k >= 0 && k < ns; k = w->next[k])
        if (tok_ids_push(out, w->id[k]) < 0) return -1;
    return 0;
}

int tok_model_finish(tok_model *m) {
    for (int b = 0; b < 256; b++) {
        char code[8];
        snprintf(code, sizeof code, "<0x%02X>", b);
        m->byte_ids[b] = tok_strmap_get(&m->vmap, m->vocab, code, 6);
    }
    free(m->cp_ids);
    m->cp_ids = malloc(TOK_CP_DIRECT * sizeof(int32_t));
    if (!m->cp_ids) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    for (uint32_t cp = 0; cp < TOK_CP_DIRECT; cp++) {
        char b[2];
        size_t l;
        if (cp < 0x80) b[0] = (char)cp, l = 1;
        else b[0] = (char)(0xC0 | (cp >> 6)), b[1] = (char)(0x80 | (cp & 0x3F)), l = 2;
        m->cp_ids[cp] = tok_strmap_get(&m->vmap, m->vocab, b, l);
    }
    if (!m->cache && !(m->cache = cache_new())) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    return 0;
}

void tok_model_free(tok_model *m) {
    free(m->vocab);
    tok_strmap_free(&m->vmap);
    tok_u64map_free(&m->merges);
    free(m->cp_ids);
    cache_free(m->cache);
    memset(m, 0, sizeof *m);
}
