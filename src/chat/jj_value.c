/* jj_value — arena, value constructors and Python semantics of values:
 * truthiness, equality, ordering, str() and repr(). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "chat/jj_eval.h"

/* ---- arena ---- */
struct jj_arena_blk {
    jj_arena_blk *next;
    size_t used, cap;
    max_align_t data[];
};

#define JJ_BLK 65536

void *jj_alloc(jj_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jj_arena_blk *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > JJ_BLK / 2 ? n : JJ_BLK;
        if (a->limit && a->total + cap > a->limit) return NULL;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        a->total += cap;
        if (n > JJ_BLK / 2 && a->head) { /* big block: keep the current head for small ones */
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void jj_arena_free(jj_arena *a) {
    jj_arena_blk *b = a->head;
    while (b) {
        jj_arena_blk *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- constructors ---- */
const jj_val jj_undef_v = {.t = JJ_UNDEF};
const jj_val jj_none_v = {.t = JJ_NONE};

jj_val jj_bool(bool b) { jj_val v = {.t = JJ_BOOL}; v.u.b = b; return v; }
jj_val jj_int(int64_t i) { jj_val v = {.t = JJ_INT}; v.u.i = i; return v; }
jj_val jj_float(double f) { jj_val v = {.t = JJ_FLOAT}; v.u.f = f; return v; }
jj_val jj_str(const char *p, size_t n) {
    jj_val v = {.t = JJ_STR};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}
jj_val jj_undef(const char *hint) {
    jj_val v = {.t = JJ_UNDEF};
    v.u.s.p = hint;
    return v;
}

static int oom(jj_ctx *c) { return jj_error(c, "template used too much memory"); }

int jj_str_dup(jj_ctx *c, const char *p, size_t n, jj_val *out) {
    char *d = jj_alloc(jj_ctx_arena(c), n + 1);
    if (!d) return oom(c);
    if (n) memcpy(d, p, n);
    *out = jj_str(d, n);
    return 0;
}

int jj_list_new(jj_ctx *c, size_t cap, bool tuple, jj_val *out) {
    jj_list *l = jj_alloc(jj_ctx_arena(c), sizeof *l);
    if (!l) return oom(c);
    if (cap) {
        l->v = jj_alloc(jj_ctx_arena(c), cap * sizeof(jj_val));
        if (!l->v) return oom(c);
    }
    l->cap = cap;
    l->tuple = tuple;
    out->t = JJ_LIST;
    out->safe = 0;
    out->u.l = l;
    return 0;
}

/* Growth copies into a new arena block; the old one is dropped with the arena. */
int jj_list_push(jj_ctx *c, jj_val *list, jj_val v) {
    jj_list *l = list->u.l;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        jj_val *nv = jj_alloc(jj_ctx_arena(c), nc * sizeof(jj_val));
        if (!nv) return oom(c);
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jj_val));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = v;
    return 0;
}

int jj_dict_new(jj_ctx *c, size_t cap, jj_val *out) {
    jj_dict *d = jj_alloc(jj_ctx_arena(c), sizeof *d);
    if (!d) return oom(c);
    if (cap) {
        d->k = jj_alloc(jj_ctx_arena(c), cap * sizeof(jj_val));
        d->v = jj_alloc(jj_ctx_arena(c), cap * sizeof(jj_val));
        if (!d->k || !d->v) return oom(c);
    }
    d->cap = cap;
    out->t = JJ_DICT;
    out->safe = 0;
    out->u.d = d;
    return 0;
}

const jj_val *jj_dict_get(const jj_dict *d, jj_val k) {
    for (size_t i = 0; i < d->n; i++)
        if (jj_eq(d->k[i], k)) return &d->v[i];
    return NULL;
}

const jj_val *jj_dict_gets(const jj_dict *d, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JJ_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, key, n) == 0)
            return &d->v[i];
    return NULL;
}

/* Python dict semantics: an equal key keeps its position, takes the new value. */
int jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v) {
    for (size_t i = 0; i < d->n; i++)
        if (jj_eq(d->k[i], k)) {
            d->v[i] = v;
            return 0;
        }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        jj_val *nk = jj_alloc(jj_ctx_arena(c), nc * sizeof(jj_val));
        jj_val *nv = jj_alloc(jj_ctx_arena(c), nc * sizeof(jj_val));
        if (!nk || !nv) return oom(c);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jj_val));
            memcpy(nv, d->v, d->n * sizeof(jj_val));
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}

/* ---- UTF-8 ---- */
size_t jj_utf8_dec(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0) { *cp = 0; return 0; }
    unsigned c0 = p[0];
    if (c0 < 0x80) { *cp = c0; return 1; }
    int len = c0 >= 0xF0 ? 4 : c0 >= 0xE0 ? 3 : c0 >= 0xC0 ? 2 : 1;
    if (len == 1 || (size_t)len > n) { *cp = 0xFFFD; return 1; }
    uint32_t v = c0 & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) { *cp = 0xFFFD; return 1; }
        v = (v << 6) | (p[i] & 0x3F);
    }
    *cp = v;
    return (size_t)len;
}

size_t jj_utf8_len(const char *p, size_t n) {
    size_t cnt = 0, i = 0;
    uint32_t cp;
    while (i < n) {
        if ((unsigned char)p[i] < 0x80) i++;
        else i += jj_utf8_dec(p + i, n - i, &cp);
        cnt++;
    }
    return cnt;
}

void jj_utf8_enc(vc_strbuf *sb, uint32_t cp) {
    char b[4];
    if (cp < 0x80) {
        vc_sb_putc(sb, (char)cp);
        return;
    }
    if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        vc_sb_append(sb, b, 2);
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        vc_sb_append(sb, b, 3);
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        vc_sb_append(sb, b, 4);
    }
}

/* Python's str.isspace(). */
bool jj_py_isspace(uint32_t c) {
    if (c < 0x80) return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ---- truthiness, equality, ordering ---- */
bool jj_truthy(jj_val v) {
    switch (v.t) {
    case JJ_UNDEF: case JJ_NONE: return false;
    case JJ_BOOL: return v.u.b;
    case JJ_INT: return v.u.i != 0;
    case JJ_FLOAT: return v.u.f != 0.0;
    case JJ_STR: return v.u.s.n != 0;
    case JJ_LIST: return v.u.l->n != 0;
    case JJ_DICT: return v.u.d->n != 0;
    case JJ_RANGE: {
        const jj_range *r = v.u.r;
        return r->step > 0 ? r->start < r->stop : r->start > r->stop;
    }
    default: return true;
    }
}

static bool is_num(jj_val v) { return v.t == JJ_BOOL || v.t == JJ_INT || v.t == JJ_FLOAT; }
static double num_f(jj_val v) {
    return v.t == JJ_FLOAT ? v.u.f : v.t == JJ_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(jj_val v) { return v.t == JJ_INT ? v.u.i : (int64_t)v.u.b; }

bool jj_eq(jj_val a, jj_val b) {
    if (is_num(a) && is_num(b)) {
        if (a.t == JJ_FLOAT || b.t == JJ_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JJ_UNDEF: case JJ_NONE: return true;
    case JJ_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case JJ_LIST:
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jj_eq(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JJ_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            const jj_val *o = jj_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !jj_eq(a.u.d->v[i], *o)) return false;
        }
        return true;
    case JJ_NS: return a.u.d == b.u.d;
    case JJ_FUNC: return a.u.fn == b.u.fn;
    case JJ_METHOD: return a.u.m == b.u.m;
    case JJ_MACRO: return a.u.mac == b.u.mac;
    case JJ_LOOP: return a.u.loop == b.u.loop;
    case JJ_RANGE:
        return a.u.r->start == b.u.r->start && a.u.r->stop == b.u.r->stop && a.u.r->step == b.u.r->step;
    default: return false;
    }
}

const char *jj_type_name(jj_val v) {
    switch (v.t) {
    case JJ_UNDEF: return "Undefined";
    case JJ_NONE: return "NoneType";
    case JJ_BOOL: return "bool";
    case JJ_INT: return "int";
    case JJ_FLOAT: return "float";
    case JJ_STR: return "str";
    case JJ_LIST: return v.u.l->tuple ? "tuple" : "list";
    case JJ_DICT: return "dict";
    case JJ_NS: return "Namespace";
    case JJ_MACRO: return "Macro";
    case JJ_LOOP: return "LoopContext";
    case JJ_RANGE: return "range";
    default: return "builtin_function_or_method";
    }
}

int jj_compare(jj_ctx *c, jj_val a, jj_val b, const char *op, int *cmp) {
    if (is_num(a) && is_num(b)) {
        if (a.t == JJ_FLOAT || b.t == JJ_FLOAT) {
            double x = num_f(a), y = num_f(b);
            *cmp = x < y ? -1 : x > y ? 1 : 0;
            if (isnan(x) || isnan(y)) *cmp = 2; /* every ordering is false */
        } else {
            int64_t x = num_i(a), y = num_i(b);
            *cmp = x < y ? -1 : x > y ? 1 : 0;
        }
        return 0;
    }
    if (a.t == JJ_STR && b.t == JJ_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = memcmp(a.u.s.p, b.u.s.p, n); /* UTF-8 byte order == code point order */
        *cmp = r ? (r < 0 ? -1 : 1) : (a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n ? 1 : 0);
        return 0;
    }
    if (a.t == JJ_LIST && b.t == JJ_LIST && a.u.l->tuple == b.u.l->tuple) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jj_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return jj_compare(c, a.u.l->v[i], b.u.l->v[i], op, cmp);
        }
        *cmp = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n ? 1 : 0;
        return 0;
    }
    if (a.t == JJ_UNDEF || b.t == JJ_UNDEF) {
        jj_val u = a.t == JJ_UNDEF ? a : b;
        return jj_error(c, "%s", u.u.s.p ? u.u.s.p : "undefined value used in comparison");
    }
    return jj_error(c, "'%s' not supported between instances of '%s' and '%s'", op, jj_type_name(a),
                    jj_type_name(b));
}

/* ---- printing ---- */

/* Python float repr: shortest round-trip digits; scientific outside 1e-4..1e16. */
void jj_repr_float(vc_strbuf *sb, double f) {
    if (isnan(f)) { vc_sb_puts(sb, "nan"); return; }
    if (isinf(f)) { vc_sb_puts(sb, f < 0 ? "-inf" : "inf"); return; }
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf = [-]d.ddde[+-]XX */
    char digits[24];
    int nd = 0, neg = buf[0] == '-';
    const char *p = buf + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) vc_sb_putc(sb, '-');
    if (exp < -4 || exp >= 16) {
        vc_sb_putc(sb, digits[0]);
        if (nd > 1) {
            vc_sb_putc(sb, '.');
            vc_sb_append(sb, digits + 1, (size_t)nd - 1);
        }
        vc_sb_printf(sb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        vc_sb_puts(sb, "0.");
        for (int i = 0; i < -exp - 1; i++) vc_sb_putc(sb, '0');
        vc_sb_append(sb, digits, (size_t)nd);
    } else {
        for (int i = 0; i <= exp; i++) vc_sb_putc(sb, i < nd ? digits[i] : '0');
        vc_sb_putc(sb, '.');
        if (nd > exp + 1) vc_sb_append(sb, digits + exp + 1, (size_t)(nd - exp - 1));
        else vc_sb_putc(sb, '0');
    }
}

/* Python's str.isprintable() per code point (Unicode categories via utf8proc). */
static bool py_printable(uint32_t cp) {
    if (cp == ' ') return true;
    if (cp < 0x7F) return cp >= 0x20;
    if (cp > 0x10FFFF) return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
    }
}

static void repr_str(vc_strbuf *sb, const char *s, size_t n) {
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = (sq && !dq) ? '"' : '\'';
    vc_sb_putc(sb, q);
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = jj_utf8_dec(s + i, n - i, &cp);
        if (cp == (uint32_t)q || cp == '\\') {
            vc_sb_putc(sb, '\\');
            vc_sb_putc(sb, (char)cp);
        } else if (cp == '\n') vc_sb_puts(sb, "\\n");
        else if (cp == '\r') vc_sb_puts(sb, "\\r");
        else if (cp == '\t') vc_sb_puts(sb, "\\t");
        else if (!py_printable(cp)) {
            if (cp < 0x100) vc_sb_printf(sb, "\\x%02x", cp);
            else if (cp < 0x10000) vc_sb_printf(sb, "\\u%04x", cp);
            else vc_sb_printf(sb, "\\U%08x", cp);
        } else vc_sb_append(sb, s + i, k);
        i += k;
    }
    vc_sb_putc(sb, q);
}

static int print_val(jj_ctx *c, vc_strbuf *sb, jj_val v, bool repr, int depth) {
    if (depth > 100) return jj_error(c, "value nested too deeply to print");
    switch (v.t) {
    case JJ_UNDEF: if (repr) vc_sb_puts(sb, "Undefined"); return 0;
    case JJ_NONE: vc_sb_puts(sb, "None"); return 0;
    case JJ_BOOL: vc_sb_puts(sb, v.u.b ? "True" : "False"); return 0;
    case JJ_INT: vc_sb_printf(sb, "%lld", (long long)v.u.i); return 0;
    case JJ_FLOAT: jj_repr_float(sb, v.u.f); return 0;
    case JJ_STR:
        if (repr) repr_str(sb, v.u.s.p, v.u.s.n);
        else vc_sb_append(sb, v.u.s.p, v.u.s.n);
        return 0;
    case JJ_LIST: {
        const jj_list *l = v.u.l;
        vc_sb_putc(sb, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) vc_sb_puts(sb, ", ");
            if (print_val(c, sb, l->v[i], true, depth + 1) < 0) return -1;
        }
        if (l->tuple && l->n == 1) vc_sb_putc(sb, ',');
        vc_sb_putc(sb, l->tuple ? ')' : ']');
        return 0;
    }
    case JJ_DICT: case JJ_NS: {
        const jj_dict *d = v.u.d;
        vc_sb_puts(sb, v.t == JJ_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) vc_sb_puts(sb, ", ");
            if (print_val(c, sb, d->k[i], true, depth + 1) < 0) return -1;
            vc_sb_puts(sb, ": ");
            if (print_val(c, sb, d->v[i], true, depth + 1) < 0) return -1;
        }
        vc_sb_puts(sb, v.t == JJ_NS ? "}>" : "}");
        return 0;
    }
    case JJ_RANGE:
        if (v.u.r->step == 1) vc_sb_printf(sb, "range(%lld, %lld)", (long long)v.u.r->start, (long long)v.u.r->stop);
        else vc_sb_printf(sb, "range(%lld, %lld, %lld)", (long long)v.u.r->start, (long long)v.u.r->stop,
                          (long long)v.u.r->step);
        return 0;
    case JJ_MACRO: return jj_macro_repr(sb, v.u.mac);
    case JJ_LOOP: {
        jj_val idx, len;
        if (jj_loop_attr(c, v.u.loop, "index", &idx) < 0 || jj_loop_attr(c, v.u.loop, "length", &len) < 0)
            return -1;
        vc_sb_printf(sb, "<LoopContext %lld/%lld>", (long long)idx.u.i, (long long)len.u.i);
        return 0;
    }
    case JJ_METHOD: vc_sb_printf(sb, "<built-in method %s>", v.u.m->name); return 0;
    default: vc_sb_puts(sb, "<built-in function>"); return 0;
    }
}

int jj_to_str(jj_ctx *c, vc_strbuf *sb, jj_val v) { return print_val(c, sb, v, false, 0); }
int jj_to_repr(jj_ctx *c, vc_strbuf *sb, jj_val v) { return print_val(c, sb, v, true, 0); }

int jj_as_str(jj_ctx *c, jj_val v, jj_val *out) {
    if (v.t == JJ_STR) {
        *out = v;
        return 0;
    }
    if (v.t == JJ_UNDEF) {
        *out = jj_str("", 0);
        return 0;
    }
    vc_strbuf sb = {0};
    int rc = jj_to_str(c, &sb, v);
    if (rc == 0) rc = jj_str_dup(c, sb.s ? sb.s : "", sb.len, out);
    vc_sb_free(&sb);
    return rc;
}

int jj_iterate(jj_ctx *c, jj_val v, jj_list **out) {
    jj_val l = {0};
    switch (v.t) {
    case JJ_LIST: *out = v.u.l; return 0;
    case JJ_UNDEF:
        if (jj_list_new(c, 0, false, &l) < 0) return -1;
        *out = l.u.l;
        return 0;
    case JJ_DICT: case JJ_NS:
        if (v.t == JJ_NS) return jj_error(c, "'Namespace' object is not iterable");
        if (jj_list_new(c, v.u.d->n, false, &l) < 0) return -1;
        for (size_t i = 0; i < v.u.d->n; i++) l.u.l->v[i] = v.u.d->k[i];
        l.u.l->n = v.u.d->n;
        *out = l.u.l;
        return 0;
    case JJ_STR: {
        size_t n = jj_utf8_len(v.u.s.p, v.u.s.n);
        if (jj_list_new(c, n, false, &l) < 0) return -1;
        size_t i = 0;
        while (i < v.u.s.n) {
            uint32_t cp;
            size_t k = jj_utf8_dec(v.u.s.p + i, v.u.s.n - i, &cp);
            l.u.l->v[l.u.l->n++] = jj_str(v.u.s.p + i, k);
            i += k;
        }
        *out = l.u.l;
        return 0;
    }
    case JJ_RANGE: {
        const jj_range *r = v.u.r;
        int64_t cnt = 0;
        if (r->step > 0 && r->start < r->stop) cnt = (r->stop - r->start + r->step - 1) / r->step;
        else if (r->step < 0 && r->start > r->stop) cnt = (r->start - r->stop - r->step - 1) / -r->step;
        if (cnt > 10000000) return jj_error(c, "range too large");
        if (jj_list_new(c, (size_t)cnt, false, &l) < 0) return -1;
        for (int64_t i = 0; i < cnt; i++) l.u.l->v[i] = jj_int(r->start + i * r->step);
        l.u.l->n = (size_t)cnt;
        *out = l.u.l;
        return 0;
    }
    default: return jj_error(c, "'%s' object is not iterable", jj_type_name(v));
    }
}
