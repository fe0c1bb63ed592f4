/* tok_json — one-pass JSON parser into a flat node array (see tok_json.h). */
#include "tokenizer/tok_json.h"

#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TJ_MAX_DEPTH 512

typedef struct {
    tj_doc *d;
    const char *p, *end;
    const char *what;
} tj_ps;

static int tj_fail(tj_ps *s, const char *msg) {
    return vc_err_set(VC_ERR_FORMAT, "%s: invalid JSON at byte %zu: %s", s->what,
                      (size_t)(s->p - s->d->buf), msg);
}

static int tj_new(tj_ps *s, uint8_t type, uint32_t *out) {
    tj_doc *d = s->d;
    if (d->n_nodes == d->cap) {
        if (d->cap >= UINT32_MAX / 2) return vc_err_set(VC_ERR_FORMAT, "%s: too many JSON nodes", s->what);
        uint32_t cap = d->cap ? d->cap * 2 : 1024;
        tj_node *nn = realloc(d->nodes, (size_t)cap * sizeof(tj_node));
        if (!nn) return vc_err_set(VC_ERR_OOM, "%s: out of memory parsing JSON", s->what);
        d->nodes = nn;
        d->cap = cap;
    }
    uint32_t i = d->n_nodes++;
    memset(&d->nodes[i], 0, sizeof(tj_node));
    d->nodes[i].type = type;
    *out = i;
    return 0;
}

static inline void tj_ws(tj_ps *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

/* Scans a string starting after its opening quote; leaves p after the
 * closing quote. */
static int tj_scan_str(tj_ps *s, uint32_t *off, uint32_t *n, uint8_t *esc) {
    const char *st = s->p;
    uint8_t e = 0;
    for (;;) {
        if (s->p >= s->end) return tj_fail(s, "unterminated string");
        char c = *s->p;
        if (c == '"') break;
        if (c == '\\') {
            e = 1;
            if (s->p + 1 >= s->end) return tj_fail(s, "unterminated escape");
            s->p += 2;
            continue;
        }
        s->p++;
    }
    *off = (uint32_t)(st - s->d->buf);
    *n = (uint32_t)(s->p - st);
    *esc = e;
    s->p++;
    return 0;
}

static int tj_value(tj_ps *s, uint32_t *out, int depth);

static int tj_container(tj_ps *s, uint32_t self, bool obj, int depth) {
    char close = obj ? '}' : ']';
    s->p++;
    tj_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    uint32_t last = 0, count = 0;
    for (;;) {
        uint32_t koff = 0, kn = 0;
        uint8_t kesc = 0;
        if (obj) {
            tj_ws(s);
            if (s->p >= s->end || *s->p != '"') return tj_fail(s, "expected object key");
            s->p++;
            if (tj_scan_str(s, &koff, &kn, &kesc) < 0) return -1;
            tj_ws(s);
            if (s->p >= s->end || *s->p != ':') return tj_fail(s, "expected ':'");
            s->p++;
        }
        uint32_t v;
        if (tj_value(s, &v, depth + 1) < 0) return -1;
        tj_node *nv = &s->d->nodes[v];
        nv->key_off = koff;
        nv->key_n = kn;
        nv->key_esc = kesc;
        if (last) s->d->nodes[last].next = v;
        else s->d->nodes[self].child = v;
        last = v;
        count++;
        tj_ws(s);
        if (s->p >= s->end) return tj_fail(s, "unterminated container");
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p == close) {
            s->p++;
            break;
        }
        return tj_fail(s, "expected ',' or closing bracket");
    }
    s->d->nodes[self].n = count;
    return 0;
}

static int tj_value(tj_ps *s, uint32_t *out, int depth) {
    if (depth > TJ_MAX_DEPTH) return tj_fail(s, "nesting too deep");
    tj_ws(s);
    if (s->p >= s->end) return tj_fail(s, "unexpected end");
    char c = *s->p;
    uint32_t i;
    if (c == '{' || c == '[') {
        if (tj_new(s, c == '{' ? TJ_OBJ : TJ_ARR, &i) < 0) return -1;
        if (tj_container(s, i, c == '{', depth) < 0) return -1;
    } else if (c == '"') {
        if (tj_new(s, TJ_STR, &i) < 0) return -1;
        s->p++;
        uint32_t off, n;
        uint8_t esc;
        if (tj_scan_str(s, &off, &n, &esc) < 0) return -1;
        s->d->nodes[i].off = off;
        s->d->nodes[i].n = n;
        s->d->nodes[i].esc = esc;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        if (tj_new(s, TJ_NUM, &i) < 0) return -1;
        const char *st = s->p;
        while (s->p < s->end && (strchr("+-.eE", *s->p) || (*s->p >= '0' && *s->p <= '9'))) s->p++;
        s->d->nodes[i].off = (uint32_t)(st - s->d->buf);
        s->d->nodes[i].n = (uint32_t)(s->p - st);
    } else {
        static const struct { const char *w; uint8_t t; } lits[] = {
            {"true", TJ_TRUE}, {"false", TJ_FALSE}, {"null", TJ_NULL}};
        size_t k;
        for (k = 0; k < 3; k++) {
            size_t wl = strlen(lits[k].w);
            if ((size_t)(s->end - s->p) >= wl && !memcmp(s->p, lits[k].w, wl)) break;
        }
        if (k == 3) return tj_fail(s, "unexpected character");
        if (tj_new(s, lits[k].t, &i) < 0) return -1;
        s->p += strlen(lits[k].w);
    }
    *out = i;
    return 0;
}

int tj_parse(tj_doc *d, const char *buf, size_t len, const char *what) {
    memset(d, 0, sizeof *d);
    if (len >= UINT32_MAX) return vc_err_set(VC_ERR_FORMAT, "%s: JSON too large", what);
    d->buf = buf;
    d->len = len;
    tj_ps s = {d, buf, buf + len, what};
    uint32_t root;
    if (tj_value(&s, &root, 0) < 0) goto fail;
    tj_ws(&s);
    if (s.p != s.end) {
        tj_fail(&s, "trailing data");
        goto fail;
    }
    return 0;
fail:
    tj_free(d);
    return -1;
}

void tj_free(tj_doc *d) {
    free(d->nodes);
    memset(d, 0, sizeof *d);
}

static bool tj_raw_eq(const tj_doc *d, uint32_t off, uint32_t n, uint8_t esc, const char *s) {
    size_t sl = strlen(s);
    if (!esc) return n == sl && !memcmp(d->buf + off, s, sl);
    return false; /* keys we look up never need escapes */
}

uint32_t tj_get(const tj_doc *d, uint32_t obj, const char *key) {
    if (obj >= d->n_nodes || d->nodes[obj].type != TJ_OBJ) return 0;
    for (uint32_t c = d->nodes[obj].child; c; c = d->nodes[c].next) {
        const tj_node *n = &d->nodes[c];
        if (tj_raw_eq(d, n->key_off, n->key_n, n->key_esc, key)) return n->type == TJ_NULL ? 0 : c;
    }
    return 0;
}

uint32_t tj_at(const tj_doc *d, uint32_t arr, uint32_t idx) {
    if (arr >= d->n_nodes || d->nodes[arr].type != TJ_ARR) return 0;
    uint32_t c = d->nodes[arr].child;
    while (c && idx--) c = d->nodes[c].next;
    return c;
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int rd_hex4(const char *p, const char *end, uint32_t *out) {
    if (end - p < 4) return -1;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexv(p[k]);
        if (h < 0) return -1;
        v = v * 16 + (uint32_t)h;
    }
    *out = v;
    return 0;
}

static void put_utf8(vc_strbuf *sb, uint32_t cp) {
    char b[4];
    int n;
    if (cp < 0x80) b[0] = (char)cp, n = 1;
    else if (cp < 0x800) b[0] = (char)(0xC0 | (cp >> 6)), b[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        b[0] = (char)(0xE0 | (cp >> 12)), b[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        b[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        b[0] = (char)(0xF0 | (cp >> 18)), b[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), b[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    vc_sb_append(sb, b, (size_t)n);
}

static int tj_unescape(const char *p, size_t n, vc_strbuf *sb) {
    vc_sb_clear(sb);
    const char *end = p + n;
    while (p < end) {
        const char *q = p;
        while (q < end && *q != '\\') q++;
        if (q > p) vc_sb_append(sb, p, (size_t)(q - p));
        if (q >= end) break;
        q++;
        if (q >= end) return -1;
        char c = *q++;
        switch (c) {
        case '"': vc_sb_putc(sb, '"'); break;
        case '\\': vc_sb_putc(sb, '\\'); break;
        case '/': vc_sb_putc(sb, '/'); break;
        case 'b': vc_sb_putc(sb, '\b'); break;
        case 'f': vc_sb_putc(sb, '\f'); break;
        case 'n': vc_sb_putc(sb, '\n'); break;
        case 'r': vc_sb_putc(sb, '\r'); break;
        case 't': vc_sb_putc(sb, '\t'); break;
        case 'u': {
            uint32_t cp;
            if (rd_hex4(q, end, &cp) < 0) return -1;
            q += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                uint32_t lo;
                if (end - q >= 6 && q[0] == '\\' && q[1] == 'u' && rd_hex4(q + 2, end, &lo) == 0 &&
                    lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    q += 6;
                } else {
                    cp = 0xFFFD; /* lone surrogate */
                }
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                cp = 0xFFFD;
            }
            put_utf8(sb, cp);
            break;
        }
        default: return -1;
        }
        p = q;
    }
    if (!sb->s) vc_sb_append(sb, "", 0);
    return 0;
}

int tj_str(const tj_doc *d, uint32_t i, vc_strbuf *scratch, const char **s, size_t *n) {
    const tj_node *nd = &d->nodes[i];
    if (nd->type != TJ_STR) return -1;
    if (!nd->esc) {
        *s = d->buf + nd->off;
        *n = nd->n;
        return 0;
    }
    if (tj_unescape(d->buf + nd->off, nd->n, scratch) < 0) return -1;
    *s = scratch->s;
    *n = scratch->len;
    return 0;
}

int tj_key(const tj_doc *d, uint32_t i, vc_strbuf *scratch, const char **s, size_t *n) {
    const tj_node *nd = &d->nodes[i];
    if (!nd->key_esc) {
        *s = d->buf + nd->key_off;
        *n = nd->key_n;
        return 0;
    }
    if (tj_unescape(d->buf + nd->key_off, nd->key_n, scratch) < 0) return -1;
    *s = scratch->s;
    *n = scratch->len;
    return 0;
}

char *tj_strdup(const tj_doc *d, uint32_t i) {
    if (!i || d->nodes[i].type != TJ_STR) return NULL;
    vc_strbuf sb = {0};
    const char *s;
    size_t n;
    if (tj_str(d, i, &sb, &s, &n) < 0) {
        vc_sb_free(&sb);
        return NULL;
    }
    char *r = malloc(n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = 0;
    }
    vc_sb_free(&sb);
    return r;
}

bool tj_str_eq(const tj_doc *d, uint32_t i, const char *s) {
    if (!i || d->nodes[i].type != TJ_STR) return false;
    vc_strbuf sb = {0};
    const char *v;
    size_t n;
    bool eq = tj_str(d, i, &sb, &v, &n) == 0 && n == strlen(s) && !memcmp(v, s, n);
    vc_sb_free(&sb);
    return eq;
}

bool tj_f64(const tj_doc *d, uint32_t i, double *out) {
    if (!i || d->nodes[i].type != TJ_NUM) return false;
    char tmp[64];
    uint32_t n = d->nodes[i].n;
    if (n == 0 || n >= sizeof tmp) return false;
    memcpy(tmp, d->buf + d->nodes[i].off, n);
    tmp[n] = 0;
    char *e;
    errno = 0;
    double v = strtod(tmp, &e);
    if (*e || errno) return false;
    *out = v;
    return true;
}

bool tj_i64(const tj_doc *d, uint32_t i, int64_t *out) {
    if (!i || d->nodes[i].type != TJ_NUM) return false;
    char tmp[32];
    uint32_t n = d->nodes[i].n;
    if (n == 0 || n >= sizeof tmp) return false;
    memcpy(tmp, d->buf + d->nodes[i].off, n);
    tmp[n] = 0;
    char *e;
    errno = 0;
    long long v = strtoll(tmp, &e, 10);
    if (*e || errno) return false;
    *out = v;
    return true;
}

bool tj_bool(const tj_doc *d, uint32_t i, bool def) {
    if (!i) return def;
    if (d->nodes[i].type == TJ_TRUE) return true;
    if (d->nodes[i].type == TJ_FALSE) return false;
    return def;
}
