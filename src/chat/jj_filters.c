/* jj_filters — Jinja2's builtin filters and tests (the ones chat templates
 * use), with transformers' tojson (ensure_ascii=False, indent, separators,
 * sort_keys). Semantics follow jinja2/filters.py and jinja2/tests.py. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "chat/jj_eval.h"

int jj_strip(jj_ctx *c, jj_val s, const jj_val *chars, bool left, bool right, jj_val *out);
int jj_case(jj_ctx *c, jj_val s, char mode, jj_val *out);
int jj_replace(jj_ctx *c, jj_val s, jj_val old, jj_val new_, int64_t count, jj_val *out);
bool jj_str_is_case(jj_val s, bool lower);

static int sb_val(jj_ctx *c, vc_strbuf *sb, jj_val *out) {
    int rc = jj_str_dup(c, sb->s ? sb->s : "", sb->len, out);
    vc_sb_free(sb);
    return rc;
}

static bool is_num(jj_val v) { return v.t == JJ_INT || v.t == JJ_FLOAT || v.t == JJ_BOOL; }

/* attribute lookup by dotted path "a.b" or integer index, as make_attrgetter */
static int attr_path(jj_ctx *c, jj_val v, jj_val attr, jj_val *out) {
    if (attr.t == JJ_INT) return jj_getitem(c, v, attr, out);
    if (attr.t != JJ_STR) return jj_error(c, "attribute must be a string");
    const char *p = attr.u.s.p, *e = p + attr.u.s.n;
    *out = v;
    while (p <= e) {
        const char *d = memchr(p, '.', (size_t)(e - p));
        if (!d) d = e;
        jj_val key;
        bool digits = d > p;
        for (const char *q = p; q < d; q++)
            if (*q < '0' || *q > '9') digits = false;
        if (digits) key = jj_int(strtoll(p, NULL, 10));
        else if (jj_str_dup(c, p, (size_t)(d - p), &key) < 0) return -1;
        if (out->t == JJ_UNDEF) return jj_error(c, "%s", out->u.s.p ? out->u.s.p : "undefined value");
        if (jj_getitem(c, *out, key, out) < 0) return -1;
        p = d + 1;
    }
    return 0;
}

static int str_of(jj_ctx *c, jj_val v, jj_val *out) { return jj_as_str(c, v, out); }

static int new_list(jj_ctx *c, size_t cap, jj_val *out) { return jj_list_new(c, cap, false, out); }

/* sort key comparison with jinja's case-insensitive default for strings */
typedef struct {
    jj_ctx *c;
    bool case_sensitive;
    int err;
} sort_env;

static int key_cmp(sort_env *e, jj_val a, jj_val b) {
    if (!e->case_sensitive && a.t == JJ_STR && b.t == JJ_STR) {
        jj_val la, lb;
        if (jj_case(e->c, a, 'l', &la) < 0 || jj_case(e->c, b, 'l', &lb) < 0) {
            e->err = -1;
            return 0;
        }
        a = la;
        b = lb;
    }
    int cmp;
    if (jj_compare(e->c, a, b, "<", &cmp) < 0) {
        e->err = -1;
        return 0;
    }
    return cmp == 2 ? 0 : cmp;
}

/* stable merge sort of items by keys */
static int sort_items(sort_env *e, jj_val *items, jj_val *keys, size_t n, bool reverse) {
    if (n < 2) return 0;
    jj_val *ti = jj_alloc(jj_ctx_arena(e->c), n * sizeof(jj_val)), *tk = jj_alloc(jj_ctx_arena(e->c), n * sizeof(jj_val));
    if (!ti || !tk) return jj_error(e->c, "template used too much memory");
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int cmp = key_cmp(e, keys[j], keys[i]);
                if (e->err) return -1;
                bool take_j = reverse ? cmp > 0 : cmp < 0;
                if (take_j) { ti[k] = items[j]; tk[k++] = keys[j++]; }
                else { ti[k] = items[i]; tk[k++] = keys[i++]; }
            }
            while (i < mid) { ti[k] = items[i]; tk[k++] = keys[i++]; }
            while (j < hi) { ti[k] = items[j]; tk[k++] = keys[j++]; }
        }
        memcpy(items, ti, n * sizeof(jj_val));
        memcpy(keys, tk, n * sizeof(jj_val));
        if (jj_step(e->c) < 0) return -1;
    }
    return 0;
}

static int do_tojson(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *ea = jj_arg(a, 0, "ensure_ascii"), *ind = jj_arg(a, 1, "indent"),
                 *sep = jj_arg(a, 2, "separators"), *sk = jj_arg(a, 3, "sort_keys");
    jj_json_opts o = {.indent = NULL, .item_sep = ", ", .key_sep = ": ", .sort_keys = sk && jj_truthy(*sk),
                      .ensure_ascii = ea && jj_truthy(*ea)};
    char ibuf[64];
    if (ind && ind->t != JJ_NONE) {
        if (ind->t == JJ_INT) {
            int64_t k = ind->u.i < 0 ? 0 : ind->u.i > 32 ? 32 : ind->u.i;
            memset(ibuf, ' ', (size_t)k);
            ibuf[k] = 0;
            o.indent = ibuf;
        } else if (ind->t == JJ_STR && ind->u.s.n < sizeof ibuf) {
            memcpy(ibuf, ind->u.s.p, ind->u.s.n);
            ibuf[ind->u.s.n] = 0;
            o.indent = ibuf;
        } else return jj_error(c, "tojson indent must be an int or a string");
        o.item_sep = ",";
    }
    char s1[32], s2[32];
    if (sep && sep->t != JJ_NONE) {
        if (sep->t != JJ_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != JJ_STR || sep->u.l->v[1].t != JJ_STR ||
            sep->u.l->v[0].u.s.n >= sizeof s1 || sep->u.l->v[1].u.s.n >= sizeof s2)
            return jj_error(c, "tojson separators must be a pair of short strings");
        memcpy(s1, sep->u.l->v[0].u.s.p, sep->u.l->v[0].u.s.n);
        s1[sep->u.l->v[0].u.s.n] = 0;
        memcpy(s2, sep->u.l->v[1].u.s.p, sep->u.l->v[1].u.s.n);
        s2[sep->u.l->v[1].u.s.n] = 0;
        o.item_sep = s1;
        o.key_sep = s2;
    }
    vc_strbuf sb = {0};
    if (jj_to_json(c, &sb, in, &o) < 0) {
        vc_sb_free(&sb);
        return -1;
    }
    return sb_val(c, &sb, out);
}

static int do_indent(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *w = jj_arg(a, 0, "width"), *first = jj_arg(a, 1, "first"), *blank = jj_arg(a, 2, "blank");
    jj_val s = in;
    if (in.t != JJ_STR) /* jinja does `s += "\n"`, which only strings survive */
        return in.t == JJ_UNDEF ? jj_error(c, "%s", in.u.s.p ? in.u.s.p : "undefined value")
                                : jj_error(c, "can only indent strings, not %s", jj_type_name(in));
    vc_strbuf ind = {0}, sb = {0};
    if (!w) vc_sb_puts(&ind, "    ");
    else if (w->t == JJ_STR) vc_sb_append(&ind, w->u.s.p, w->u.s.n);
    else if (w->t == JJ_INT)
        for (int64_t i = 0; i < w->u.i && i < 256; i++) vc_sb_putc(&ind, ' ');
    else {
        vc_sb_free(&ind);
        return jj_error(c, "indent width must be an int or a string");
    }
    jj_val lines, s2;
    vc_strbuf tmp = {0};
    vc_sb_append(&tmp, s.u.s.p, s.u.s.n);
    vc_sb_putc(&tmp, '\n');
    if (sb_val(c, &tmp, &s2) < 0) goto fail;
    {
        jj_val m;
        jj_args none = {0};
        if (jj_getattr(c, s2, "splitlines", &m) < 0 || jj_call_method(c, m.u.m, &none, &lines) < 0) goto fail;
    }
    const jj_list *l = lines.u.l;
    for (size_t i = 0; i < l->n; i++) {
        if (i) {
            vc_sb_putc(&sb, '\n');
            if (blank && jj_truthy(*blank)) vc_sb_append(&sb, ind.s ? ind.s : "", ind.len);
            else if (l->v[i].u.s.n) vc_sb_append(&sb, ind.s ? ind.s : "", ind.len);
        }
        vc_sb_append(&sb, l->v[i].u.s.p, l->v[i].u.s.n);
    }
    if (first && jj_truthy(*first)) {
        vc_strbuf f = {0};
        vc_sb_append(&f, ind.s ? ind.s : "", ind.len);
        vc_sb_append(&f, sb.s ? sb.s : "", sb.len);
        vc_sb_free(&sb);
        sb = f;
    }
    vc_sb_free(&ind);
    return sb_val(c, &sb, out);
fail:
    vc_sb_free(&ind);
    vc_sb_free(&sb);
    return -1;
}

/* select / reject / selectattr / rejectattr */
static int do_select(jj_ctx *c, jj_val in, const jj_args *a, bool attr, bool keep, jj_val *out) {
    jj_list *l;
    if (!jj_truthy(in)) return new_list(c, 0, out); /* jinja: `if value:` before iterating */
    if (jj_iterate(c, in, &l) < 0) return -1;
    size_t ai = 0;
    jj_val attrname = jj_none_v;
    if (attr) {
        if (a->npos < 1) return jj_error(c, "missing parameter for attribute name");
        attrname = a->pos[ai++];
    }
    const char *test = NULL;
    char tname[64];
    if (ai < a->npos) {
        if (a->pos[ai].t != JJ_STR || a->pos[ai].u.s.n >= sizeof tname) return jj_error(c, "test name must be a string");
        memcpy(tname, a->pos[ai].u.s.p, a->pos[ai].u.s.n);
        tname[a->pos[ai].u.s.n] = 0;
        test = tname;
        ai++;
    }
    jj_args targs = {.pos = a->pos ? a->pos + ai : NULL, .npos = a->npos - ai};
    if (new_list(c, l->n, out) < 0) return -1;
    for (size_t i = 0; i < l->n; i++) {
        jj_val v = l->v[i];
        if (attr && attr_path(c, l->v[i], attrname, &v) < 0) return -1;
        bool r;
        if (test) {
            if (jj_apply_test(c, test, v, &targs, &r) < 0) return -1;
        } else r = jj_truthy(v);
        if (r == keep) out->u.l->v[out->u.l->n++] = l->v[i];
    }
    return 0;
}

static int do_map(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    jj_list *l;
    if (!jj_truthy(in)) return new_list(c, 0, out); /* jinja: `if value:` before iterating */
    if (jj_iterate(c, in, &l) < 0) return -1;
    if (new_list(c, l->n, out) < 0) return -1;
    const jj_val *attr = jj_arg(a, (size_t)-1, "attribute"), *def = jj_arg(a, (size_t)-1, "default");
    if (attr) {
        for (size_t i = 0; i < l->n; i++) {
            jj_val v;
            if (attr_path(c, l->v[i], *attr, &v) < 0) return -1;
            if (v.t == JJ_UNDEF && def) v = *def;
            out->u.l->v[out->u.l->n++] = v;
        }
        return 0;
    }
    if (a->npos < 1 || a->pos[0].t != JJ_STR || a->pos[0].u.s.n >= 64) return jj_error(c, "map requires a filter argument");
    char fname[64];
    memcpy(fname, a->pos[0].u.s.p, a->pos[0].u.s.n);
    fname[a->pos[0].u.s.n] = 0;
    jj_args fa = {.pos = a->pos + 1, .npos = a->npos - 1, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw};
    for (size_t i = 0; i < l->n; i++) {
        jj_val v;
        if (jj_apply_filter(c, fname, l->v[i], &fa, &v) < 0) return -1;
        out->u.l->v[out->u.l->n++] = v;
    }
    return 0;
}

static int do_join(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *d = jj_arg(a, 0, "d"), *attr = jj_arg(a, 1, "attribute");
    jj_list *l;
    if (jj_iterate(c, in, &l) < 0) return -1;
    vc_strbuf sb = {0};
    for (size_t i = 0; i < l->n; i++) {
        jj_val v = l->v[i];
        if (i && d && jj_to_str(c, &sb, *d) < 0) goto fail;
        if (attr && attr_path(c, v, *attr, &v) < 0) goto fail;
        if (jj_to_str(c, &sb, v) < 0) goto fail;
        if (sb.len > jj_max_output(c)) {
            jj_error(c, "string too large");
            goto fail;
        }
    }
    return sb_val(c, &sb, out);
fail:
    vc_sb_free(&sb);
    return -1;
}

static int do_sort(jj_ctx *c, jj_val in, const jj_args *a, bool unique, jj_val *out) {
    const jj_val *rev = unique ? NULL : jj_arg(a, 0, "reverse");
    const jj_val *cs = jj_arg(a, unique ? 0 : 1, "case_sensitive");
    const jj_val *attr = jj_arg(a, unique ? 1 : 2, "attribute");
    jj_list *l;
    if (jj_iterate(c, in, &l) < 0) return -1;
    if (new_list(c, l->n, out) < 0) return -1;
    jj_val *keys = jj_alloc(jj_ctx_arena(c), (l->n + 1) * sizeof(jj_val));
    if (!keys) return jj_error(c, "template used too much memory");
    sort_env e = {.c = c, .case_sensitive = cs && jj_truthy(*cs)};
    for (size_t i = 0; i < l->n; i++) {
        jj_val k = l->v[i];
        if (attr && attr_path(c, k, *attr, &k) < 0) return -1;
        if (unique) { /* keep first of each (case-folded) key */
            if (k.t == JJ_DICT || k.t == JJ_NS || (k.t == JJ_LIST && !k.u.l->tuple))
                return jj_error(c, "unhashable type: '%s'", jj_type_name(k));
            bool seen = false;
            jj_val kk = k;
            if (!e.case_sensitive && k.t == JJ_STR && jj_case(c, k, 'l', &kk) < 0) return -1;
            for (size_t j = 0; j < out->u.l->n && !seen; j++) seen = jj_eq(keys[j], kk);
            if (!seen) {
                keys[out->u.l->n] = kk;
                out->u.l->v[out->u.l->n++] = l->v[i];
            }
            continue;
        }
        keys[i] = k;
        out->u.l->v[out->u.l->n++] = l->v[i];
    }
    if (unique) return 0;
    return sort_items(&e, out->u.l->v, keys, out->u.l->n, rev && jj_truthy(*rev));
}

static int do_minmax(jj_ctx *c, jj_val in, const jj_args *a, bool is_max, jj_val *out) {
    const jj_val *cs = jj_arg(a, 0, "case_sensitive"), *attr = jj_arg(a, 1, "attribute");
    jj_list *l;
    if (jj_iterate(c, in, &l) < 0) return -1;
    sort_env e = {.c = c, .case_sensitive = cs && jj_truthy(*cs)};
    if (l->n == 0) {
        *out = jj_undef("No aggregated item, sequence was empty.");
        return 0;
    }
    jj_val best = l->v[0], bk = best;
    if (attr && attr_path(c, best, *attr, &bk) < 0) return -1;
    for (size_t i = 1; i < l->n; i++) {
        jj_val k = l->v[i];
        if (attr && attr_path(c, k, *attr, &k) < 0) return -1;
        int cmp = key_cmp(&e, k, bk);
        if (e.err) return -1;
        if (is_max ? cmp > 0 : cmp < 0) {
            best = l->v[i];
            bk = k;
        }
    }
    *out = best;
    return 0;
}

static int do_int(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *def = jj_arg(a, 0, "default");
    jj_val d = def ? *def : jj_int(0);
    switch (in.t) {
    case JJ_INT: *out = in; return 0;
    case JJ_BOOL: *out = jj_int(in.u.b); return 0;
    case JJ_FLOAT:
        if (isnan(in.u.f) || isinf(in.u.f) || fabs(in.u.f) >= 9.2e18) { *out = d; return 0; }
        *out = jj_int((int64_t)in.u.f);
        return 0;
    case JJ_STR: {
        char buf[64];
        jj_val t;
        if (jj_strip(c, in, NULL, true, true, &t) < 0) return -1;
        if (t.u.s.n == 0 || t.u.s.n >= sizeof buf) { *out = d; return 0; }
        size_t k = 0;
        for (size_t i = 0; i < t.u.s.n; i++)
            if (t.u.s.p[i] != '_') buf[k++] = t.u.s.p[i];
        buf[k] = 0;
        char *end;
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (!*end && !errno) { *out = jj_int(v); return 0; }
        if (strpbrk(buf, "xXpP")) { /* strtod reads hex floats; Python's float() does not */
            *out = d;
            return 0;
        }
        double f = strtod(buf, &end);
        if (!*end && !isnan(f) && !isinf(f) && fabs(f) < 9.2e18) { *out = jj_int((int64_t)f); return 0; }
        *out = d;
        return 0;
    }
    default: *out = d; return 0;
    }
}

static int do_float(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *def = jj_arg(a, 0, "default");
    jj_val d = def ? *def : jj_float(0.0);
    switch (in.t) {
    case JJ_INT: *out = jj_float((double)in.u.i); return 0;
    case JJ_BOOL: *out = jj_float(in.u.b); return 0;
    case JJ_FLOAT: *out = in; return 0;
    case JJ_STR: {
        char buf[64];
        jj_val t;
        if (jj_strip(c, in, NULL, true, true, &t) < 0) return -1;
        if (t.u.s.n == 0 || t.u.s.n >= sizeof buf) { *out = d; return 0; }
        size_t k = 0;
        for (size_t i = 0; i < t.u.s.n; i++)
            if (t.u.s.p[i] != '_') buf[k++] = t.u.s.p[i];
        buf[k] = 0;
        if (strpbrk(buf, "xXpP")) {
            *out = d;
            return 0;
        }
        char *end;
        double f = strtod(buf, &end);
        *out = *end ? d : jj_float(f);
        return 0;
    }
    default: *out = d; return 0;
    }
}

static int do_round(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *pr = jj_arg(a, 0, "precision"), *me = jj_arg(a, 1, "method");
    int64_t p = pr && pr->t == JJ_INT ? pr->u.i : 0;
    if (!is_num(in)) return jj_error(c, "type %s doesn't define __round__ method", jj_type_name(in));
    double x = in.t == JJ_FLOAT ? in.u.f : in.t == JJ_INT ? (double)in.u.i : in.u.b, m = pow(10.0, (double)p);
    if (me && me->t == JJ_STR && me->u.s.n == 4 && !memcmp(me->u.s.p, "ceil", 4)) *out = jj_float(ceil(x * m) / m);
    else if (me && me->t == JJ_STR && me->u.s.n == 5 && !memcmp(me->u.s.p, "floor", 5)) *out = jj_float(floor(x * m) / m);
    else if (in.t != JJ_FLOAT && p >= 0) *out = jj_int(in.t == JJ_INT ? in.u.i : in.u.b); /* round(int) is int */
    else {
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)(p < 0 ? 0 : p > 30 ? 30 : p), x); /* correctly rounded, half-even */
        *out = jj_float(p < 0 ? nearbyint(x * m) / m : strtod(buf, NULL));
    }
    return 0;
}

static int do_batch(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *n = jj_arg(a, 0, "linecount"), *fill = jj_arg(a, 1, "fill_with");
    if (!n || n->t != JJ_INT || n->u.i <= 0) return jj_error(c, "batch needs a positive count");
    jj_list *l;
    if (jj_iterate(c, in, &l) < 0 || new_list(c, 0, out) < 0) return -1;
    jj_val cur = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i % (size_t)n->u.i == 0) {
            if (new_list(c, (size_t)n->u.i, &cur) < 0 || jj_list_push(c, out, cur) < 0) return -1;
        }
        cur.u.l->v[cur.u.l->n++] = l->v[i];
    }
    if (fill && l->n % (size_t)n->u.i)
        while (cur.u.l->n < (size_t)n->u.i) cur.u.l->v[cur.u.l->n++] = *fill;
    return 0;
}

/* groupby(attribute, default=None, case_sensitive=False): sort by the
 * attribute, then one (grouper, items) tuple per run of equal keys */
static int do_groupby(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *attr = jj_arg(a, 0, "attribute"), *def = jj_arg(a, 1, "default"),
                 *cs = jj_arg(a, 2, "case_sensitive");
    if (!attr) return jj_error(c, "groupby needs an attribute");
    jj_list *l;
    if (jj_iterate(c, in, &l) < 0) return -1;
    jj_val items, keys;
    if (new_list(c, l->n, &items) < 0 || new_list(c, l->n, &keys) < 0) return -1;
    sort_env e = {.c = c, .case_sensitive = cs && jj_truthy(*cs)};
    for (size_t i = 0; i < l->n; i++) {
        jj_val k;
        if (attr_path(c, l->v[i], *attr, &k) < 0) return -1;
        if (k.t == JJ_UNDEF && def) k = *def;
        if (!e.case_sensitive && k.t == JJ_STR && jj_case(c, k, 'l', &k) < 0) return -1;
        items.u.l->v[items.u.l->n++] = l->v[i];
        keys.u.l->v[keys.u.l->n++] = k;
    }
    if (sort_items(&e, items.u.l->v, keys.u.l->v, items.u.l->n, false) < 0) return -1;
    if (new_list(c, 0, out) < 0) return -1;
    for (size_t i = 0; i < items.u.l->n;) {
        size_t j = i;
        jj_val grp, t;
        if (new_list(c, 0, &grp) < 0) return -1;
        while (j < items.u.l->n && jj_eq(keys.u.l->v[j], keys.u.l->v[i]))
            if (jj_list_push(c, &grp, items.u.l->v[j++]) < 0) return -1;
        if (jj_list_new(c, 2, true, &t) < 0) return -1;
        t.u.l->group = true;
        /* the grouper is the first item's real (not lower-cased) value */
        if (attr_path(c, items.u.l->v[i], *attr, &t.u.l->v[0]) < 0) return -1;
        if (t.u.l->v[0].t == JJ_UNDEF && def) t.u.l->v[0] = *def;
        t.u.l->v[1] = grp;
        t.u.l->n = 2;
        if (jj_list_push(c, out, t) < 0) return -1;
        i = j;
    }
    return 0;
}

static int do_dictsort(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *cs = jj_arg(a, 0, "case_sensitive"), *by = jj_arg(a, 1, "by"), *rev = jj_arg(a, 2, "reverse");
    if (in.t == JJ_UNDEF) return jj_error(c, "%s", in.u.s.p ? in.u.s.p : "undefined value");
    if (in.t != JJ_DICT) return jj_error(c, "dictsort expects a mapping");
    bool by_value = by && by->t == JJ_STR && by->u.s.n == 5 && !memcmp(by->u.s.p, "value", 5);
    const jj_dict *d = in.u.d;
    if (new_list(c, d->n, out) < 0) return -1;
    jj_val *keys = jj_alloc(jj_ctx_arena(c), (d->n + 1) * sizeof(jj_val));
    if (!keys) return jj_error(c, "template used too much memory");
    for (size_t i = 0; i < d->n; i++) {
        jj_val t;
        if (jj_list_new(c, 2, true, &t) < 0) return -1;
        t.u.l->v[0] = d->k[i];
        t.u.l->v[1] = d->v[i];
        t.u.l->n = 2;
        out->u.l->v[out->u.l->n++] = t;
        keys[i] = by_value ? d->v[i] : d->k[i];
    }
    sort_env e = {.c = c, .case_sensitive = cs && jj_truthy(*cs)};
    return sort_items(&e, out->u.l->v, keys, d->n, rev && jj_truthy(*rev));
}

static int do_escape(jj_ctx *c, jj_val in, jj_val *out) {
    if (in.t == JJ_STR && in.safe) {
        *out = in;
        return 0;
    }
    jj_val s;
    if (str_of(c, in, &s) < 0) return -1;
    vc_strbuf sb = {0};
    for (size_t i = 0; i < s.u.s.n; i++) {
        switch (s.u.s.p[i]) {
        case '&': vc_sb_puts(&sb, "&amp;"); break;
        case '<': vc_sb_puts(&sb, "&lt;"); break;
        case '>': vc_sb_puts(&sb, "&gt;"); break;
        case '"': vc_sb_puts(&sb, "&#34;"); break;
        case '\'': vc_sb_puts(&sb, "&#39;"); break;
        default: vc_sb_putc(&sb, s.u.s.p[i]);
        }
    }
    if (sb_val(c, &sb, out) < 0) return -1;
    out->safe = 1;
    return 0;
}

static int do_center(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *w = jj_arg(a, 0, "width");
    int64_t width = w && w->t == JJ_INT ? w->u.i : 80;
    jj_val s;
    if (str_of(c, in, &s) < 0) return -1;
    int64_t len = (int64_t)jj_utf8_len(s.u.s.p, s.u.s.n);
    if (width <= len || width > 100000) {
        *out = s;
        return 0;
    }
    int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
    vc_strbuf sb = {0};
    for (int64_t i = 0; i < left; i++) vc_sb_putc(&sb, ' ');
    vc_sb_append(&sb, s.u.s.p, s.u.s.n);
    for (int64_t i = 0; i < pad - left; i++) vc_sb_putc(&sb, ' ');
    return sb_val(c, &sb, out);
}

static int do_title(jj_ctx *c, jj_val in, jj_val *out) {
    /* jinja: split on runs of [-\s({\[<], capitalize first char of each piece, lower the rest */
    jj_val s;
    if (str_of(c, in, &s) < 0) return -1;
    vc_strbuf sb = {0};
    bool at_start = true;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        size_t k = jj_utf8_dec(s.u.s.p + i, s.u.s.n - i, &cp);
        bool sep = jj_py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        jj_val one = jj_str(s.u.s.p + i, k), m;
        if (sep) vc_sb_append(&sb, s.u.s.p + i, k);
        else {
            if (jj_case(c, one, at_start ? 'u' : 'l', &m) < 0) {
                vc_sb_free(&sb);
                return -1;
            }
            vc_sb_append(&sb, m.u.s.p, m.u.s.n);
        }
        at_start = sep;
        i += k;
    }
    return sb_val(c, &sb, out);
}

static int do_truncate(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *len = jj_arg(a, 0, "length"), *kw = jj_arg(a, 1, "killwords"), *end = jj_arg(a, 2, "end"),
                 *lee = jj_arg(a, 3, "leeway");
    int64_t L = len && len->t == JJ_INT ? len->u.i : 255, lw = lee && lee->t == JJ_INT ? lee->u.i : 5;
    jj_val s, e = end && end->t == JJ_STR ? *end : jj_str("...", 3);
    if (str_of(c, in, &s) < 0) return -1;
    jj_list *chars;
    if (jj_iterate(c, s, &chars) < 0) return -1;
    int64_t n = (int64_t)chars->n, el = (int64_t)jj_utf8_len(e.u.s.p, e.u.s.n);
    if (n <= L + lw) {
        *out = s;
        return 0;
    }
    int64_t cut = L - el < 0 ? 0 : L - el;
    size_t bytes = 0;
    for (int64_t i = 0; i < cut; i++) bytes += chars->v[i].u.s.n;
    vc_strbuf sb = {0};
    if (kw && jj_truthy(*kw)) vc_sb_append(&sb, s.u.s.p, bytes);
    else { /* drop the last (partial) word: result.rsplit(" ", 1)[0] */
        size_t b = bytes;
        while (b > 0 && s.u.s.p[b - 1] != ' ') b--;
        vc_sb_append(&sb, s.u.s.p, b ? b - 1 : bytes);
    }
    vc_sb_append(&sb, e.u.s.p, e.u.s.n);
    return sb_val(c, &sb, out);
}

static int do_sum(jj_ctx *c, jj_val in, const jj_args *a, jj_val *out) {
    const jj_val *attr = jj_arg(a, 0, "attribute"), *start = jj_arg(a, 1, "start");
    jj_list *l;
    if (jj_iterate(c, in, &l) < 0) return -1;
    jj_val acc = start ? *start : jj_int(0);
    for (size_t i = 0; i < l->n; i++) {
        jj_val v = l->v[i];
        if (attr && attr_path(c, v, *attr, &v) < 0) return -1;
        if (jj_binop(c, '+', acc, v, &acc) < 0) return -1;
    }
    *out = acc;
    return 0;
}

static int do_wordcount(jj_ctx *c, jj_val in, jj_val *out) {
    jj_val s;
    if (str_of(c, in, &s) < 0) return -1;
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += jj_utf8_dec(s.u.s.p + i, s.u.s.n - i, &cp);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp); /* Python's \w: alnum or _ */
        bool w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                 (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
        if (w && !in_word) n++;
        in_word = w;
    }
    *out = jj_int(n);
    return 0;
}

int jj_apply_filter(jj_ctx *c, const char *f, jj_val in, const jj_args *a, jj_val *out) {
    if (jj_step(c) < 0) return -1;
    const jj_val *a0 = jj_arg(a, 0, NULL);
    jj_list *l;
    jj_val s;
    if (!strcmp(f, "tojson")) return do_tojson(c, in, a, out);
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        const jj_val *dv = jj_arg(a, 0, "default_value"), *b = jj_arg(a, 1, "boolean");
        bool use = in.t == JJ_UNDEF || (b && jj_truthy(*b) && !jj_truthy(in));
        *out = use ? (dv ? *dv : jj_str("", 0)) : in;
        return 0;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        switch (in.t) {
        case JJ_STR: *out = jj_int((int64_t)jj_utf8_len(in.u.s.p, in.u.s.n)); return 0;
        case JJ_LIST: *out = jj_int((int64_t)in.u.l->n); return 0;
        case JJ_DICT: case JJ_NS: *out = jj_int((int64_t)in.u.d->n); return 0;
        case JJ_UNDEF: *out = jj_int(0); return 0;
        case JJ_RANGE:
            if (jj_iterate(c, in, &l) < 0) return -1;
            *out = jj_int((int64_t)l->n);
            return 0;
        default: return jj_error(c, "object of type '%s' has no len()", jj_type_name(in));
        }
    }
    if (!strcmp(f, "trim")) {
        if (str_of(c, in, &s) < 0) return -1;
        return jj_strip(c, s, jj_arg(a, 0, "chars"), true, true, out);
    }
    if (!strcmp(f, "string")) return str_of(c, in, out);
    if (!strcmp(f, "safe")) {
        if (str_of(c, in, out) < 0) return -1;
        out->safe = 1;
        return 0;
    }
    if (!strcmp(f, "e") || !strcmp(f, "escape") || !strcmp(f, "forceescape")) {
        if (f[0] == 'f') in.safe = 0;
        return do_escape(c, in, out);
    }
    if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "capitalize")) {
        if (str_of(c, in, &s) < 0) return -1;
        return jj_case(c, s, f[0] == 'u' ? 'u' : f[0] == 'l' ? 'l' : 'c', out);
    }
    if (!strcmp(f, "title")) return do_title(c, in, out);
    if (!strcmp(f, "replace")) {
        const jj_val *b = jj_arg(a, 1, "new"), *cnt = jj_arg(a, 2, "count");
        jj_val o2, n2;
        if (!a0 || !b) return jj_error(c, "replace needs two arguments");
        if (str_of(c, in, &s) < 0 || str_of(c, *a0, &o2) < 0 || str_of(c, *b, &n2) < 0) return -1;
        return jj_replace(c, s, o2, n2, cnt && cnt->t == JJ_INT ? cnt->u.i : -1, out);
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        if (jj_iterate(c, in, &l) < 0) return -1;
        if (l->n == 0) *out = jj_undef(f[0] == 'f' ? "No first item, sequence was empty." : "No last item, sequence was empty.");
        else *out = f[0] == 'f' ? l->v[0] : l->v[l->n - 1];
        return 0;
    }
    if (!strcmp(f, "list")) {
        if (jj_iterate(c, in, &l) < 0) return -1;
        if (new_list(c, l->n, out) < 0) return -1;
        if (l->n) memcpy(out->u.l->v, l->v, l->n * sizeof(jj_val));
        out->u.l->n = l->n;
        return 0;
    }
    if (!strcmp(f, "items")) {
        if (in.t == JJ_UNDEF) return new_list(c, 0, out);
        if (in.t != JJ_DICT && in.t != JJ_NS) return jj_error(c, "Can only get item pairs from a mapping.");
        jj_val m;
        jj_args none = {0};
        jj_val dict = in;
        dict.t = JJ_DICT;
        if (jj_getattr(c, dict, "items", &m) < 0) return -1;
        return jj_call_method(c, m.u.m, &none, out);
    }
    if (!strcmp(f, "join")) return do_join(c, in, a, out);
    if (!strcmp(f, "map")) return do_map(c, in, a, out);
    if (!strcmp(f, "select")) return do_select(c, in, a, false, true, out);
    if (!strcmp(f, "reject")) return do_select(c, in, a, false, false, out);
    if (!strcmp(f, "selectattr")) return do_select(c, in, a, true, true, out);
    if (!strcmp(f, "rejectattr")) return do_select(c, in, a, true, false, out);
    if (in.t == JJ_UNDEF && (!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "abs") || !strcmp(f, "round")))
        return jj_error(c, "%s", in.u.s.p ? in.u.s.p : "undefined value"); /* Undefined.__int__ etc. fail */
    if (!strcmp(f, "int")) return do_int(c, in, a, out);
    if (!strcmp(f, "float")) return do_float(c, in, a, out);
    if (!strcmp(f, "abs")) {
        if (in.t == JJ_INT) {
            if (in.u.i == INT64_MIN) return jj_error(c, "integer overflow in abs");
            *out = jj_int(in.u.i < 0 ? -in.u.i : in.u.i);
        } else if (in.t == JJ_FLOAT) *out = jj_float(fabs(in.u.f));
        else if (in.t == JJ_BOOL) *out = jj_int(in.u.b);
        else return jj_error(c, "bad operand type for abs(): '%s'", jj_type_name(in));
        return 0;
    }
    if (!strcmp(f, "round")) return do_round(c, in, a, out);
    if (!strcmp(f, "unique")) return do_sort(c, in, a, true, out);
    if (!strcmp(f, "sort")) return do_sort(c, in, a, false, out);
    if (!strcmp(f, "min") || !strcmp(f, "max")) return do_minmax(c, in, a, f[1] == 'a', out);
    if (!strcmp(f, "sum")) return do_sum(c, in, a, out);
    if (!strcmp(f, "dictsort")) return do_dictsort(c, in, a, out);
    if (!strcmp(f, "groupby")) return do_groupby(c, in, a, out);
    if (!strcmp(f, "batch")) return do_batch(c, in, a, out);
    if (!strcmp(f, "reverse")) {
        if (in.t == JJ_STR) {
            if (jj_iterate(c, in, &l) < 0) return -1;
            vc_strbuf sb = {0};
            for (size_t i = l->n; i-- > 0;) vc_sb_append(&sb, l->v[i].u.s.p, l->v[i].u.s.n);
            return sb_val(c, &sb, out);
        }
        if (jj_iterate(c, in, &l) < 0 || new_list(c, l->n, out) < 0) return -1;
        for (size_t i = l->n; i-- > 0;) out->u.l->v[out->u.l->n++] = l->v[i];
        return 0;
    }
    if (!strcmp(f, "indent")) return do_indent(c, in, a, out);
    if (!strcmp(f, "center")) return do_center(c, in, a, out);
    if (!strcmp(f, "truncate")) return do_truncate(c, in, a, out);
    if (!strcmp(f, "wordcount")) return do_wordcount(c, in, out);
    if (!strcmp(f, "attr")) {
        if (!a0 || a0->t != JJ_STR) return jj_error(c, "attr needs a name");
        char nm[128];
        if (a0->u.s.n >= sizeof nm) return jj_error(c, "attribute name too long");
        memcpy(nm, a0->u.s.p, a0->u.s.n);
        nm[a0->u.s.n] = 0;
        if (in.t == JJ_DICT) { /* attr() never falls back to items: plain dict keys are not attributes */
            *out = jj_undef("no such attribute");
            return 0;
        }
        return jj_getattr(c, in, nm, out);
    }
    if (!strcmp(f, "format")) {
        if (str_of(c, in, &s) < 0) return -1;
        jj_val tup;
        if (jj_list_new(c, a->npos, true, &tup) < 0) return -1;
        if (a->npos) memcpy(tup.u.l->v, a->pos, a->npos * sizeof(jj_val));
        tup.u.l->n = a->npos;
        return jj_binop(c, '%', s, tup, out);
    }
    if (!strcmp(f, "pprint")) {
        vc_strbuf sb = {0};
        if (jj_to_repr(c, &sb, in) < 0) {
            vc_sb_free(&sb);
            return -1;
        }
        return sb_val(c, &sb, out);
    }
    return jj_error(c, "No filter named '%s'.", f);
}

bool jj_has_filter(const char *name) {
    static const char *const F[] = {"tojson", "default", "d", "length", "count", "trim", "string", "safe", "e",
                                    "escape", "forceescape", "upper", "lower", "capitalize", "title", "replace",
                                    "first", "last", "list", "items", "join", "map", "select", "reject",
                                    "selectattr", "rejectattr", "int", "float", "abs", "round", "unique", "sort",
                                    "min", "max", "sum", "dictsort", "batch", "reverse", "indent", "center",
                                    "truncate", "wordcount", "attr", "format", "pprint", "groupby", NULL};
    for (int i = 0; F[i]; i++)
        if (!strcmp(F[i], name)) return true;
    return false;
}

/* ---- tests ---- */

static const char *const TESTS[] = {"defined", "undefined", "none", "boolean", "false", "true", "integer", "float",
                                    "number", "string", "mapping", "iterable", "sequence", "callable", "odd",
                                    "even", "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan",
                                    "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "sameas",
                                    "lower", "upper", "escaped", "filter", "test", NULL};

bool jj_has_test(const char *name) {
    for (int i = 0; TESTS[i]; i++)
        if (!strcmp(TESTS[i], name)) return true;
    return false;
}

int jj_apply_test(jj_ctx *c, const char *t, jj_val v, const jj_args *a, bool *r) {
    const jj_val *a0 = jj_arg(a, 0, NULL);
    jj_val x;
    if (!strcmp(t, "defined")) *r = v.t != JJ_UNDEF;
    else if (!strcmp(t, "undefined")) *r = v.t == JJ_UNDEF;
    else if (!strcmp(t, "none")) *r = v.t == JJ_NONE;
    else if (!strcmp(t, "boolean")) *r = v.t == JJ_BOOL;
    else if (!strcmp(t, "false")) *r = v.t == JJ_BOOL && !v.u.b;
    else if (!strcmp(t, "true")) *r = v.t == JJ_BOOL && v.u.b;
    else if (!strcmp(t, "integer")) *r = v.t == JJ_INT;
    else if (!strcmp(t, "float")) *r = v.t == JJ_FLOAT;
    else if (!strcmp(t, "number")) *r = is_num(v);
    else if (!strcmp(t, "string")) *r = v.t == JJ_STR;
    else if (!strcmp(t, "mapping")) *r = v.t == JJ_DICT;
    else if (!strcmp(t, "iterable")) *r = v.t == JJ_STR || v.t == JJ_LIST || v.t == JJ_DICT || v.t == JJ_UNDEF || v.t == JJ_RANGE;
    else if (!strcmp(t, "sequence")) *r = v.t == JJ_STR || v.t == JJ_LIST || v.t == JJ_DICT || v.t == JJ_UNDEF || v.t == JJ_RANGE;
    else if (!strcmp(t, "callable")) *r = v.t == JJ_FUNC || v.t == JJ_METHOD || v.t == JJ_MACRO || v.t == JJ_UNDEF;
    else if (!strcmp(t, "odd") || !strcmp(t, "even")) { /* value % 2 == 1 (or 0) */
        if (jj_binop(c, '%', v, jj_int(2), &x) < 0) return -1;
        *r = jj_eq(x, jj_int(t[0] == 'o' ? 1 : 0));
    } else if (!strcmp(t, "divisibleby")) {
        if (!a0) return jj_error(c, "divisibleby needs an argument");
        if (jj_binop(c, '%', v, *a0, &x) < 0) return -1;
        *r = !jj_truthy(x);
    } else if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==") || !strcmp(t, "ne") || !strcmp(t, "!=")) {
        if (!a0) return jj_error(c, "test '%s' needs an argument", t);
        *r = jj_eq(v, *a0) == (t[0] != 'n' && t[0] != '!');
    } else if (!strcmp(t, "sameas")) {
        if (!a0) return jj_error(c, "sameas needs an argument");
        *r = (v.t == a0->t && (v.t == JJ_NONE || v.t == JJ_UNDEF || (v.t == JJ_BOOL && v.u.b == a0->u.b))) ||
             ((v.t == JJ_LIST || v.t == JJ_DICT || v.t == JJ_NS) && v.t == a0->t && v.u.l == a0->u.l);
    } else if (!strcmp(t, "lt") || !strcmp(t, "lessthan") || !strcmp(t, "<") || !strcmp(t, "le") || !strcmp(t, "<=") ||
               !strcmp(t, "gt") || !strcmp(t, "greaterthan") || !strcmp(t, ">") || !strcmp(t, "ge") || !strcmp(t, ">=")) {
        if (!a0) return jj_error(c, "test '%s' needs an argument", t);
        const char *op = (t[0] == 'l' || t[0] == '<') ? ((t[1] == 'e' || t[1] == '=') ? "<=" : "<")
                                                      : ((t[1] == 'e' || t[1] == '=') ? ">=" : ">");
        return jj_compare_op(c, op, v, *a0, r);
    } else if (!strcmp(t, "in")) {
        if (!a0) return jj_error(c, "in test needs an argument");
        return jj_contains(c, v, *a0, r);
    } else if (!strcmp(t, "lower") || !strcmp(t, "upper")) { /* str(value).islower() */
        if (jj_as_str(c, v, &x) < 0) return -1;
        *r = jj_str_is_case(x, t[0] == 'l');
    } else if (!strcmp(t, "escaped")) *r = v.t == JJ_STR && v.safe;
    else if (!strcmp(t, "filter") || !strcmp(t, "test")) {
        char nm[64];
        if (v.t != JJ_STR || v.u.s.n >= sizeof nm) {
            *r = false;
            return 0;
        }
        memcpy(nm, v.u.s.p, v.u.s.n);
        nm[v.u.s.n] = 0;
        *r = t[0] == 'f' ? jj_has_filter(nm) : jj_has_test(nm);
    } else return jj_error(c, "No test named '%s'.", t);
    return 0;
}
