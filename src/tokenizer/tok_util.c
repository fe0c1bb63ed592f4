/* tok_util — hash maps, UTF-8/Unicode helpers, the byte-level alphabet and
 * the PCRE2 regex wrapper used by the tokenizer module. */
#include "base/err.h"
#include "tokenizer/tok_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- hashing ---- */

uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    if (i < n) memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint32_t pow2_for(size_t n) {
    size_t cap = 16;
    while (cap < n * 2 + 2) cap *= 2;
    return (uint32_t)cap;
}

int tok_strmap_init(tok_strmap *m, size_t n_expected) {
    uint32_t cap = 16;
    while (cap < n_expected + n_expected / 2 + 2) cap *= 2; /* load <= 2/3 */
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    m->mask = cap - 1;
    return 0;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

static inline bool slot_eq(const tok_strslot *sl, const tok_str *table, const char *s, size_t n) {
    size_t k = n < TOK_SLOT_KEY ? n : TOK_SLOT_KEY;
    if (sl->len != (n < 255 ? n : 255) || memcmp(sl->key, s, k)) return false;
    if (n <= TOK_SLOT_KEY) return true;
    const tok_str *t = &table[sl->id1 - 1];
    return t->n == n && !memcmp(t->s + k, s + k, n - k);
}

int32_t tok_strmap_get(const tok_strmap *m, const tok_str *table, const char *s, size_t n) {
    if (!m->slots) return -1;
    uint32_t i = (uint32_t)tok_hash(s, n) & m->mask;
    for (;;) {
        const tok_strslot *sl = &m->slots[i];
        if (!sl->id1) return -1;
        if (slot_eq(sl, table, s, n)) return (int32_t)sl->id1 - 1;
        i = (i + 1) & m->mask;
    }
}

void tok_strmap_put(tok_strmap *m, const tok_str *table, int32_t id) {
    const tok_str *k = &table[id];
    uint32_t i = (uint32_t)tok_hash(k->s, k->n) & m->mask;
    for (;;) {
        tok_strslot *sl = &m->slots[i];
        if (!sl->id1 || slot_eq(sl, table, k->s, k->n)) break;
        i = (i + 1) & m->mask;
    }
    tok_strslot *sl = &m->slots[i];
    sl->id1 = (uint32_t)id + 1;
    sl->len = (uint8_t)(k->n < 255 ? k->n : 255);
    memset(sl->key, 0, TOK_SLOT_KEY);
    memcpy(sl->key, k->s, k->n < TOK_SLOT_KEY ? k->n : TOK_SLOT_KEY);
}

int tok_u64map_init(tok_u64map *m, size_t n_expected) {
    uint32_t cap = pow2_for(n_expected);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    memset(m->slots, 0xff, cap * sizeof *m->slots);
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

void tok_u64map_free(tok_u64map *m) {
    free(m->slots);
    m->slots = NULL;
    m->n = 0;
}

bool tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val) {
    if (!m->slots) return false;
    uint32_t i = (uint32_t)mix64(key) & m->mask;
    for (;;) {
        const tok_u64slot *s = &m->slots[i];
        if (s->k == key) {
            *val = s->v;
            return true;
        }
        if (s->k == UINT64_MAX) return false;
        i = (i + 1) & m->mask;
    }
}

static int u64map_grow(tok_u64map *m) {
    tok_u64map nm;
    if (tok_u64map_init(&nm, (size_t)(m->mask + 1)) < 0) return -1;
    for (uint32_t i = 0; i <= m->mask; i++)
        if (m->slots[i].k != UINT64_MAX) tok_u64map_put(&nm, m->slots[i].k, m->slots[i].v);
    tok_u64map_free(m);
    *m = nm;
    return 0;
}

int tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val) {
    if ((m->n + 1) * 2 > (size_t)m->mask + 1 && u64map_grow(m) < 0) return -1;
    uint32_t i = (uint32_t)mix64(key) & m->mask;
    for (;;) {
        tok_u64slot *s = &m->slots[i];
        if (s->k == key) {
            s->v = val;
            return 0;
        }
        if (s->k == UINT64_MAX) {
            s->k = key;
            s->v = val;
            m->n++;
            return 1;
        }
        i = (i + 1) & m->mask;
    }
}

/* ---- UTF-8 ---- */

/* Bytes of the maximal valid-so-far prefix at p (>= 1), and whether it is
 * a complete character. */
static size_t utf8_scan(const uint8_t *p, size_t n, bool *complete, uint32_t *cp) {
    uint8_t c = p[0];
    *complete = false;
    if (c < 0x80) {
        *complete = true;
        *cp = c;
        return 1;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) need = 1, v = c & 0x1F;
    else if (c == 0xE0) need = 2, lo = 0xA0, v = c & 0x0F;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2, v = c & 0x0F;
    else if (c == 0xED) need = 2, hi = 0x9F, v = c & 0x0F;
    else if (c == 0xF0) need = 3, lo = 0x90, v = c & 0x07;
    else if (c >= 0xF1 && c <= 0xF3) need = 3, v = c & 0x07;
    else if (c == 0xF4) need = 3, hi = 0x8F, v = c & 0x07;
    else return 1;
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n) return i;
        uint8_t b = p[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
        v = (v << 6) | (b & 0x3F);
    }
    *complete = true;
    *cp = v;
    return i;
}

size_t tok_utf8_len(const char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    bool ok;
    uint32_t c = 0;
    size_t l = utf8_scan((const uint8_t *)s, n, &ok, &c);
    if (!ok) return 0;
    if (cp) *cp = c;
    return l;
}

bool tok_utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = tok_utf8_len(s + i, n - i, NULL);
        if (!l) return false;
        i += l;
    }
    return true;
}

void tok_utf8_lossy(vc_strbuf *sb, const uint8_t *p, size_t n) {
    size_t i = 0, run = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        bool ok;
        uint32_t cp;
        size_t l = utf8_scan(p + i, n - i, &ok, &cp);
        if (ok) {
            i += l;
            continue;
        }
        vc_sb_append(sb, (const char *)p + run, i - run);
        vc_sb_append(sb, "\xEF\xBF\xBD", 3);
        i += l;
        run = i;
    }
    vc_sb_append(sb, (const char *)p + run, n - run);
}

bool tok_is_whitespace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

bool tok_is_numeric(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool tok_is_alnum(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || tok_is_numeric(c);
}

bool tok_is_punct(uint32_t c) {
    if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                         (c >= 123 && c <= 126);
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* ---- GPT-2 byte alphabet: printable bytes map to themselves, the other
 * 68 to U+0100.. in byte order. ---- */
static uint16_t g_b2c[256];
static int16_t g_c2b[324];
static pthread_once_t g_bytemap_once = PTHREAD_ONCE_INIT;

static void bytemap_init(void) {
    int n = 0;
    for (int i = 0; i < 324; i++) g_c2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        g_b2c[b] = (uint16_t)(keep ? b : 256 + n++);
        g_c2b[g_b2c[b]] = (int16_t)b;
    }
}

uint32_t tok_byte_to_cp(uint8_t b) {
    pthread_once(&g_bytemap_once, bytemap_init);
    return g_b2c[b];
}

int tok_cp_to_byte(uint32_t cp) {
    pthread_once(&g_bytemap_once, bytemap_init);
    return cp < 324 ? g_c2b[cp] : -1;
}

/* ---- regex ---- */

struct tok_regex {
    pcre2_code *code;
};

/* Oniguruma (what HF uses) reads \p{Han} as the Script property; PCRE2
 * reads a bare script name as Script_Extensions (U+3002 would be Han).
 * Rewrite \p{Name} / \P{Name} to \p{sc:Name} unless Name is a general
 * category or already qualified. */
static bool is_gc_name(const char *s, size_t n) {
    static const char *gc[] = {"L", "Lu", "Ll", "Lt", "Lm", "Lo", "L&", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl",
                               "No", "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So",
                               "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf", "Cs", "Co", "Cn", "Any", "Xan", "Xsp",
                               "Xwd", "Xuc", "Xps"};
    size_t a = (n && s[0] == '^') ? 1 : 0;
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++)
        if (strlen(gc[i]) == n - a && !memcmp(gc[i], s + a, n - a)) return true;
    return memchr(s, ':', n) || memchr(s, '=', n);
}

static void rewrite_scripts(const char *pat, size_t n, vc_strbuf *out) {
    size_t i = 0;
    while (i < n) {
        if (pat[i] == '\\' && i + 1 < n) {
            if ((pat[i + 1] == 'p' || pat[i + 1] == 'P') && i + 2 < n && pat[i + 2] == '{') {
                const char *close = memchr(pat + i + 3, '}', n - i - 3);
                if (close) {
                    size_t nl = (size_t)(close - (pat + i + 3));
                    vc_sb_append(out, pat + i, 3);
                    if (!is_gc_name(pat + i + 3, nl)) vc_sb_puts(out, "sc:");
                    vc_sb_append(out, pat + i + 3, nl + 1);
                    i += 3 + nl + 1;
                    continue;
                }
            }
            vc_sb_append(out, pat + i, 2); /* keep any other escape intact */
            i += 2;
            continue;
        }
        vc_sb_putc(out, pat[i++]);
    }
    vc_sb_append(out, "", 0);
}

tok_regex *tok_regex_new(const char *pat, size_t n, bool literal, const char *what) {
    int errc;
    PCRE2_SIZE erroff;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    vc_strbuf rw = {0};
    if (!literal) {
        rewrite_scripts(pat, n, &rw);
        pat = rw.s;
        n = rw.len;
    }
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pat, n, opts, &errc, &erroff, NULL);
    vc_sb_free(&rw);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errc, msg, sizeof msg);
        vc_err_set(VC_ERR_FORMAT, "%s: bad regex at offset %zu: %s", what, (size_t)erroff, (char *)msg);
        return NULL;
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter on failure */
    tok_regex *re = malloc(sizeof *re);
    if (!re) {
        pcre2_code_free(code);
        vc_err_set(VC_ERR_OOM, "%s: out of memory", what);
        return NULL;
    }
    re->code = code;
    return re;
}

void tok_regex_free(tok_regex *re) {
    if (!re) return;
    pcre2_code_free(re->code);
    free(re);
}

/* One match-data block per thread (ovector for 64 groups; extra groups
 * only truncate the captures we never read). */
static pthread_key_t g_md_key;
static pthread_once_t g_md_once = PTHREAD_ONCE_INIT;
static void md_free(void *p) { pcre2_match_data_free(p); }
static void md_init(void) { pthread_key_create(&g_md_key, md_free); }

int tok_regex_find(const tok_regex *re, const char *s, size_t n, size_t from, size_t *ms, size_t *me) {
    pthread_once(&g_md_once, md_init);
    pcre2_match_data *md = pthread_getspecific(g_md_key);
    if (!md) {
        md = pcre2_match_data_create(64, NULL);
        if (!md) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
        pthread_setspecific(g_md_key, md);
    }
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0 && rc != 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return vc_err_set(VC_ERR_RUNTIME, "tokenizer: regex match failed: %s", (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}
