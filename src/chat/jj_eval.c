/* jj_eval — walks the AST: expressions (Python operator semantics) and
 * statements (Jinja2 scoping: a for-loop iteration, macro call or `with`
 * gets a fresh scope whose parent is the enclosing one; `if` does not). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chat/jj_eval.h"

/* ---- context ---- */

int jj_error(jj_ctx *c, const char *fmt, ...) {
    if (!c->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errn, fmt, ap);
        va_end(ap);
        c->failed = true;
    }
    return -1;
}

jj_arena *jj_ctx_arena(jj_ctx *c) { return &c->arena; }
size_t jj_max_output(const jj_ctx *c) { return c->lim.max_output; }

jj_limits jj_limits_default(void) {
    jj_limits l = {.max_steps = 50000000ull, .max_output = (size_t)64 << 20, .max_arena = (size_t)512 << 20};
    return l;
}

int jj_step(jj_ctx *c) {
    if (++c->steps > c->lim.max_steps) return jj_error(c, "template exceeded its evaluation step limit");
    return 0;
}

const jj_val *jj_arg(const jj_args *a, size_t i, const char *name) {
    if (i < a->npos) return &a->pos[i];
    if (name)
        for (size_t k = 0; k < a->nkw; k++)
            if (strcmp(a->kwn[k], name) == 0) return &a->kwv[k];
    return NULL;
}

/* ---- scopes ---- */

jj_scope *jj_scope_new(jj_ctx *c, jj_scope *parent) {
    jj_scope *s = jj_alloc(&c->arena, sizeof *s);
    if (!s) {
        jj_error(c, "template used too much memory");
        return NULL;
    }
    s->parent = parent;
    return s;
}

int jj_scope_set(jj_ctx *c, jj_scope *s, const char *name, jj_val v) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) {
            s->vals[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 4;
        const char **nn = jj_alloc(&c->arena, nc * sizeof *nn);
        jj_val *nv = jj_alloc(&c->arena, nc * sizeof *nv);
        if (!nn || !nv) return jj_error(c, "template used too much memory");
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof *nn);
            memcpy(nv, s->vals, s->n * sizeof *nv);
        }
        s->names = nn;
        s->vals = nv;
        s->cap = nc;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
    return 0;
}

static const jj_val *scope_get(const jj_scope *s, const char *name) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (strcmp(s->names[i], name) == 0) return &s->vals[i];
    return NULL;
}

static int lookup(jj_ctx *c, const jj_scope *s, const char *name, jj_val *out) {
    const jj_val *v = scope_get(s, name);
    if (v) {
        *out = *v;
        return 0;
    }
    if (jj_lookup_global(name, out)) return 0;
    vc_strbuf sb = {0};
    vc_sb_printf(&sb, "'%s' is undefined", name);
    jj_val h;
    int rc = jj_str_dup(c, sb.s, sb.len, &h);
    vc_sb_free(&sb);
    if (rc < 0) return -1;
    *out = jj_undef(h.u.s.p);
    return 0;
}

/* ---- output ---- */

int jj_emit(jj_ctx *c, const char *p, size_t n) {
    if (c->out->len + n > c->lim.max_output) return jj_error(c, "template output exceeded %zu bytes", c->lim.max_output);
    vc_sb_append(c->out, p, n);
    return 0;
}

/* ---- expressions ---- */

/* index of the growable buffer whose current content is exactly a, or -1 */
static int grow_slot(const jj_ctx *c, jj_val a) {
    if (a.t != JJ_STR) return -1;
    for (int i = 0; i < 8; i++)
        if (c->grow[i].p && a.u.s.p == c->grow[i].p && a.u.s.n == c->grow[i].len) return i;
    return -1;
}

/* a + b for strings: in place when a is a growable buffer's current
 * content, else a new string (large ones get spare room for later appends). */
static int str_concat(jj_ctx *c, jj_val a, jj_val b, jj_val *out) {
    size_t n = a.u.s.n + b.u.s.n;
    if (n > jj_max_output(c)) return jj_error(c, "string too large");
    int g = grow_slot(c, a);
    if (g >= 0 && n < c->grow[g].cap) {
        char *p = c->grow[g].p;
        memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n); /* b ends at or before len: no overlap */
        c->grow[g].len = n;
        p[n] = 0;
        *out = jj_str(p, n);
        return 0;
    }
    size_t cap = n >= 4096 ? 2 * n + 1 : n + 1;
    char *d = jj_alloc(&c->arena, cap);
    if (!d) return jj_error(c, "template used too much memory");
    if (a.u.s.n) memcpy(d, a.u.s.p, a.u.s.n);
    if (b.u.s.n) memcpy(d + a.u.s.n, b.u.s.p, b.u.s.n);
    if (n >= 4096) {
        if (g < 0) g = (int)(c->grow_next++ % 8);
        c->grow[g].p = d;
        c->grow[g].len = n;
        c->grow[g].cap = cap;
    }
    *out = jj_str(d, n);
    return 0;
}

static int ev(jj_ctx *c, const jj_node *n, jj_scope *s, jj_val *out);

static int undef_err(jj_ctx *c, jj_val u) {
    return jj_error(c, "%s", u.u.s.p ? u.u.s.p : "undefined value");
}

static bool num(jj_val v) { return v.t == JJ_INT || v.t == JJ_FLOAT || v.t == JJ_BOOL; }
static double fval(jj_val v) { return v.t == JJ_FLOAT ? v.u.f : v.t == JJ_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t ival(jj_val v) { return v.t == JJ_INT ? v.u.i : (int64_t)v.u.b; }

static int op_err(jj_ctx *c, const char *op, jj_val a, jj_val b) {
    if (a.t == JJ_UNDEF) return undef_err(c, a);
    if (b.t == JJ_UNDEF) return undef_err(c, b);
    return jj_error(c, "unsupported operand type(s) for %s: '%s' and '%s'", op, jj_type_name(a), jj_type_name(b));
}

static int repeat(jj_ctx *c, jj_val seq, int64_t k, jj_val *out) {
    if (k < 0) k = 0;
    /* an empty sequence repeats into an empty one at once, as Python's
     * [] * 10**17 (the loops below ran k times: found by fuzz_chat_template,
     * a 30 s timeout on "{{ tools*0*90**9 }}") */
    if (seq.t == JJ_STR ? seq.u.s.n == 0 : seq.u.l->n == 0) k = 0;
    if (seq.t == JJ_STR) {
        if (seq.u.s.n && (uint64_t)k > jj_max_output(c) / seq.u.s.n) return jj_error(c, "string repetition too large");
        size_t tot = seq.u.s.n * (size_t)k;
        char *d = jj_alloc(&c->arena, tot + 1);
        if (!d) return jj_error(c, "template used too much memory");
        for (int64_t i = 0; i < k; i++) memcpy(d + (size_t)i * seq.u.s.n, seq.u.s.p, seq.u.s.n);
        *out = jj_str(d, tot);
        return 0;
    }
    const jj_list *l = seq.u.l;
    if (l->n && (uint64_t)k > 10000000 / l->n) return jj_error(c, "list repetition too large");
    if (jj_list_new(c, l->n * (size_t)k, l->tuple, out) < 0) return -1;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < l->n; j++) out->u.l->v[out->u.l->n++] = l->v[j];
    return 0;
}

int jj_binop(jj_ctx *c, int op, jj_val a, jj_val b, jj_val *out) {
    static const char *const names[128] = {['+'] = "+", ['-'] = "-", ['*'] = "*", ['/'] = "/",
                                           ['F'] = "//", ['%'] = "%", ['P'] = "** or pow()"};
    const char *opn = names[op & 127] ? names[op & 127] : "?";
    if (num(a) && num(b)) {
        bool fl = a.t == JJ_FLOAT || b.t == JJ_FLOAT;
        if (op == '/') {
            if (fval(b) == 0.0) return jj_error(c, "division by zero");
            *out = jj_float(fval(a) / fval(b));
            return 0;
        }
        if (fl) {
            double x = fval(a), y = fval(b), r;
            switch (op) {
            case '+': r = x + y; break;
            case '-': r = x - y; break;
            case '*': r = x * y; break;
            case 'F':
                if (y == 0.0) return jj_error(c, "float floor division by zero");
                r = floor(x / y);
                break;
            case '%':
                if (y == 0.0) return jj_error(c, "float modulo");
                r = fmod(x, y);
                if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
                break;
            default:
                if (x == 0.0 && y < 0) return jj_error(c, "0.0 cannot be raised to a negative power");
                if (x < 0 && y != floor(y)) return jj_error(c, "complex results are not supported");
                r = pow(x, y);
                break;
            }
            *out = jj_float(r);
            return 0;
        }
        int64_t x = ival(a), y = ival(b), r;
        bool ovf = false;
        switch (op) {
        case '+': ovf = __builtin_add_overflow(x, y, &r); break;
        case '-': ovf = __builtin_sub_overflow(x, y, &r); break;
        case '*': ovf = __builtin_mul_overflow(x, y, &r); break;
        case 'F': case '%':
            if (y == 0) return jj_error(c, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                ovf = true;
                break;
            }
            r = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) r--;
            if (op == '%') r = x - r * y;
            break;
        default:
            if (y < 0) {
                if (x == 0) return jj_error(c, "0.0 cannot be raised to a negative power");
                *out = jj_float(pow((double)x, (double)y));
                return 0;
            }
            r = 1;
            for (int64_t k = 0; k < y && !ovf; k++) {
                ovf = __builtin_mul_overflow(r, x, &r);
                if (x == 0 || x == 1) break;
                if (x == -1) {
                    r = (y % 2) ? -1 : 1;
                    break;
                }
            }
            if (x == 0 && y > 0) r = 0;
        }
        if (ovf) return jj_error(c, "integer overflow in '%s'", opn);
        *out = jj_int(r);
        return 0;
    }
    if (op == '+') {
        if (a.t == JJ_STR && b.t == JJ_STR) return str_concat(c, a, b, out);
        if (a.t == JJ_LIST && b.t == JJ_LIST && a.u.l->tuple == b.u.l->tuple) {
            if (jj_list_new(c, a.u.l->n + b.u.l->n, a.u.l->tuple, out) < 0) return -1;
            for (size_t i = 0; i < a.u.l->n; i++) out->u.l->v[out->u.l->n++] = a.u.l->v[i];
            for (size_t i = 0; i < b.u.l->n; i++) out->u.l->v[out->u.l->n++] = b.u.l->v[i];
            return 0;
        }
        if (a.t == JJ_STR && b.t != JJ_UNDEF)
            return jj_error(c, "can only concatenate str (not \"%s\") to str", jj_type_name(b));
        if (a.t == JJ_LIST && b.t != JJ_UNDEF)
            return jj_error(c, "can only concatenate %s (not \"%s\") to %s", jj_type_name(a), jj_type_name(b),
                            jj_type_name(a));
    }
    if (op == '*') {
        if ((a.t == JJ_STR || a.t == JJ_LIST) && (b.t == JJ_INT || b.t == JJ_BOOL)) return repeat(c, a, ival(b), out);
        if ((b.t == JJ_STR || b.t == JJ_LIST) && (a.t == JJ_INT || a.t == JJ_BOOL)) return repeat(c, b, ival(a), out);
    }
    if (op == '%' && a.t == JJ_STR) return jj_percent_format(c, a, b, out);
    return op_err(c, opn, a, b);
}

static int contains(jj_ctx *c, jj_val item, jj_val seq, bool *res) {
    switch (seq.t) {
    case JJ_STR:
        if (item.t != JJ_STR)
            return jj_error(c, "'in <string>' requires string as left operand, not %s", jj_type_name(item));
        *res = item.u.s.n == 0 || (item.u.s.n <= seq.u.s.n && memmem(seq.u.s.p, seq.u.s.n, item.u.s.p, item.u.s.n));
        return 0;
    case JJ_LIST:
        *res = false;
        for (size_t i = 0; i < seq.u.l->n; i++)
            if (jj_eq(seq.u.l->v[i], item)) {
                *res = true;
                break;
            }
        return 0;
    case JJ_DICT: case JJ_NS:
        if (item.t == JJ_DICT || item.t == JJ_NS || (item.t == JJ_LIST && !item.u.l->tuple))
            return jj_error(c, "unhashable type: '%s'", jj_type_name(item));
        *res = jj_dict_get(seq.u.d, item) != NULL;
        return 0;
    case JJ_UNDEF: *res = false; return 0;
    case JJ_RANGE: {
        jj_list *l;
        if (jj_iterate(c, seq, &l) < 0) return -1;
        jj_val lv = {.t = JJ_LIST};
        lv.u.l = l;
        return contains(c, item, lv, res);
    }
    default: return jj_error(c, "argument of type '%s' is not iterable", jj_type_name(seq));
    }
}

int jj_contains(jj_ctx *c, jj_val item, jj_val seq, bool *res) { return contains(c, item, seq, res); }

static int compare_op(jj_ctx *c, const char *op, jj_val a, jj_val b, bool *res) {
    if (!strcmp(op, "==")) *res = jj_eq(a, b);
    else if (!strcmp(op, "!=")) *res = !jj_eq(a, b);
    else if (!strcmp(op, "in")) return contains(c, a, b, res);
    else if (!strcmp(op, "not in")) {
        if (contains(c, a, b, res) < 0) return -1;
        *res = !*res;
    } else {
        int cmp;
        if (jj_compare(c, a, b, op, &cmp) < 0) return -1;
        if (cmp == 2) *res = false;
        else if (!strcmp(op, "<")) *res = cmp < 0;
        else if (!strcmp(op, "<=")) *res = cmp <= 0;
        else if (!strcmp(op, ">")) *res = cmp > 0;
        else *res = cmp >= 0;
    }
    return 0;
}

int jj_compare_op(jj_ctx *c, const char *op, jj_val a, jj_val b, bool *res) { return compare_op(c, op, a, b, res); }

/* Python slice semantics, including negative steps. */
static int slice(jj_ctx *c, jj_val obj, const jj_node *n, jj_scope *s, jj_val *out) {
    jj_val parts[3] = {jj_none_v, jj_none_v, jj_none_v};
    const jj_node *pn[3] = {n->a, n->b, n->c};
    for (int k = 0; k < 3; k++) {
        if (pn[k] && ev(c, pn[k], s, &parts[k]) < 0) return -1;
        if (parts[k].t != JJ_NONE && parts[k].t != JJ_INT && parts[k].t != JJ_BOOL)
            return jj_error(c, "slice indices must be integers or None");
    }
    if (obj.t == JJ_UNDEF) return undef_err(c, obj);
    if (obj.t != JJ_STR && obj.t != JJ_LIST && obj.t != JJ_RANGE) {
        /* Jinja raises TypeError here at run time but yields Undefined when the
         * expression was constant-folded; Undefined is the harmless choice */
        *out = jj_undef("object is not subscriptable");
        return 0;
    }
    jj_list *l = NULL;
    if (jj_iterate(c, obj, &l) < 0) return -1;
    int64_t len = (int64_t)l->n;
    int64_t step = parts[2].t == JJ_NONE ? 1 : ival(parts[2]);
    if (step == 0) return jj_error(c, "slice step cannot be zero");
    int64_t lo, hi;
    if (step > 0) {
        lo = 0;
        hi = len;
    } else {
        lo = -1;
        hi = len - 1;
    }
    int64_t start = step > 0 ? lo : hi, stop = step > 0 ? hi : lo;
    if (parts[0].t != JJ_NONE) {
        start = ival(parts[0]);
        if (start < 0) start = start + len < lo ? lo : start + len;
        else if (start > hi) start = hi;
    }
    if (parts[1].t != JJ_NONE) {
        stop = ival(parts[1]);
        if (stop < 0) stop = stop + len < lo ? lo : stop + len;
        else if (stop > hi) stop = hi;
    }
    if (obj.t == JJ_RANGE) { /* range[a:b:c] is a range */
        jj_range *r = jj_alloc(&c->arena, sizeof *r);
        if (!r) return jj_error(c, "template used too much memory");
        const jj_range *o = obj.u.r;
        r->start = o->start + start * o->step;
        r->stop = o->start + stop * o->step;
        r->step = o->step * step;
        out->t = JJ_RANGE;
        out->u.r = r;
        return 0;
    }
    jj_val res;
    bool is_str = obj.t == JJ_STR;
    if (jj_list_new(c, (size_t)len, obj.t == JJ_LIST && obj.u.l->tuple, &res) < 0) return -1;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) res.u.l->v[res.u.l->n++] = l->v[i];
    if (!is_str) {
        *out = res;
        return 0;
    }
    vc_strbuf sb = {0};
    for (size_t i = 0; i < res.u.l->n; i++) vc_sb_append(&sb, res.u.l->v[i].u.s.p, res.u.l->v[i].u.s.n);
    int rc = jj_str_dup(c, sb.s ? sb.s : "", sb.len, out);
    vc_sb_free(&sb);
    return rc;
}

int jj_eval_args(jj_ctx *c, const jj_node *n, jj_scope *s, jj_args *a) {
    memset(a, 0, sizeof *a);
    if (n->nkids) {
        a->pos = jj_alloc(&c->arena, n->nkids * sizeof(jj_val));
        if (!a->pos) return jj_error(c, "template used too much memory");
        for (size_t i = 0; i < n->nkids; i++)
            if (ev(c, n->kids[i], s, &a->pos[i]) < 0) return -1;
        a->npos = n->nkids;
    }
    if (n->nkw) {
        a->kwv = jj_alloc(&c->arena, n->nkw * sizeof(jj_val));
        if (!a->kwv) return jj_error(c, "template used too much memory");
        for (size_t i = 0; i < n->nkw; i++)
            if (ev(c, n->kw[i], s, &a->kwv[i]) < 0) return -1;
        a->kwn = n->kwn;
        a->nkw = n->nkw;
    }
    return 0;
}

int jj_call_value(jj_ctx *c, jj_val f, const jj_args *a, jj_val *out) {
    switch (f.t) {
    case JJ_FUNC: return jj_call_global(c, f.u.fn, a, out);
    case JJ_METHOD: return jj_call_method(c, f.u.m, a, out);
    case JJ_MACRO: return jj_call_macro(c, f.u.mac, a, NULL, out);
    case JJ_LOOP: return jj_loop_call(c, f.u.loop, a, out);
    case JJ_UNDEF: return undef_err(c, f);
    default: return jj_error(c, "'%s' object is not callable", jj_type_name(f));
    }
}

static int ev(jj_ctx *c, const jj_node *n, jj_scope *s, jj_val *out) {
    if (jj_step(c) < 0) return -1;
    jj_val a, b;
    switch (n->k) {
    case JN_LIT: *out = n->lit; return 0;
    case JN_NAME: return lookup(c, s, n->name, out);
    case JN_LIST: case JN_TUPLE:
        if (jj_list_new(c, n->nkids, n->k == JN_TUPLE, out) < 0) return -1;
        for (size_t i = 0; i < n->nkids; i++) {
            if (ev(c, n->kids[i], s, &out->u.l->v[i]) < 0) return -1;
            out->u.l->n++;
        }
        return 0;
    case JN_DICT:
        if (jj_dict_new(c, n->nkids, out) < 0) return -1;
        for (size_t i = 0; i < n->nkids; i++) {
            if (ev(c, n->kids[i], s, &a) < 0 || ev(c, n->kw[i], s, &b) < 0) return -1;
            if (a.t == JJ_LIST && !a.u.l->tuple) return jj_error(c, "unhashable type: 'list'");
            if (a.t == JJ_DICT) return jj_error(c, "unhashable type: 'dict'");
            if (jj_dict_set(c, out->u.d, a, b) < 0) return -1;
        }
        return 0;
    case JN_GETATTR:
        if (ev(c, n->a, s, &a) < 0) return -1;
        return jj_getattr(c, a, n->name, out);
    case JN_GETITEM:
        if (ev(c, n->a, s, &a) < 0) return -1;
        if (n->b->k == JN_SLICE) return slice(c, a, n->b, s, out);
        if (ev(c, n->b, s, &b) < 0) return -1;
        return jj_getitem(c, a, b, out);
    case JN_CALL: {
        jj_args args;
        if (ev(c, n->a, s, &a) < 0) return -1;
        if (a.t == JJ_UNDEF) return undef_err(c, a);
        if (jj_eval_args(c, n, s, &args) < 0) return -1;
        return jj_call_value(c, a, &args, out);
    }
    case JN_FILTER: {
        jj_args args;
        if (ev(c, n->a, s, &a) < 0 || jj_eval_args(c, n, s, &args) < 0) return -1;
        return jj_apply_filter(c, n->name, a, &args, out);
    }
    case JN_TEST: {
        jj_args args;
        bool r;
        if (ev(c, n->a, s, &a) < 0 || jj_eval_args(c, n, s, &args) < 0) return -1;
        if (jj_apply_test(c, n->name, a, &args, &r) < 0) return -1;
        *out = jj_bool(n->op ? !r : r);
        return 0;
    }
    case JN_BINOP:
        if (ev(c, n->a, s, &a) < 0 || ev(c, n->b, s, &b) < 0) return -1;
        return jj_binop(c, n->op, a, b, out);
    case JN_NEG: case JN_POS:
        if (ev(c, n->a, s, &a) < 0) return -1;
        if (a.t == JJ_UNDEF) return undef_err(c, a);
        if (!num(a)) return jj_error(c, "bad operand type for unary %c: '%s'", n->k == JN_NEG ? '-' : '+', jj_type_name(a));
        if (n->k == JN_POS) *out = a.t == JJ_BOOL ? jj_int(a.u.b) : a;
        else if (a.t == JJ_FLOAT) *out = jj_float(-a.u.f);
        else if (ival(a) == INT64_MIN) return jj_error(c, "integer overflow in unary -");
        else *out = jj_int(-ival(a));
        return 0;
    case JN_NOT:
        if (ev(c, n->a, s, &a) < 0) return -1;
        *out = jj_bool(!jj_truthy(a));
        return 0;
    case JN_AND: case JN_OR:
        if (ev(c, n->a, s, &a) < 0) return -1;
        if ((n->k == JN_AND) != jj_truthy(a)) {
            *out = a;
            return 0;
        }
        return ev(c, n->b, s, out);
    case JN_COND:
        if (ev(c, n->b, s, &a) < 0) return -1;
        if (jj_truthy(a)) return ev(c, n->a, s, out);
        if (n->c) return ev(c, n->c, s, out);
        *out = jj_undef("the inline if-expression evaluated to false and no else section was defined");
        return 0;
    case JN_COMPARE: {
        if (ev(c, n->a, s, &a) < 0) return -1;
        bool r = true;
        for (size_t i = 0; i < n->nkids && r; i++) {
            if (ev(c, n->kids[i], s, &b) < 0) return -1;
            if (compare_op(c, n->kwn[i], a, b, &r) < 0) return -1;
            a = b;
        }
        *out = jj_bool(r);
        return 0;
    }
    case JN_CONCAT: {
        if (ev(c, n->kids[0], s, &a) < 0) return -1;
        if (grow_slot(c, a) >= 0) {
            /* accumulating onto the growable buffer: append part by part */
            for (size_t i = 1; i < n->nkids; i++) {
                if (ev(c, n->kids[i], s, &b) < 0 || jj_as_str(c, b, &b) < 0) return -1;
                if (str_concat(c, a, b, &a) < 0) return -1;
            }
            *out = a;
            return 0;
        }
        vc_strbuf sb = {0};
        if (jj_to_str(c, &sb, a) < 0) {
            vc_sb_free(&sb);
            return -1;
        }
        for (size_t i = 1; i < n->nkids; i++) {
            if (ev(c, n->kids[i], s, &a) < 0 || jj_to_str(c, &sb, a) < 0) {
                vc_sb_free(&sb);
                return -1;
            }
            if (sb.len > jj_max_output(c)) {
                vc_sb_free(&sb);
                return jj_error(c, "string too large");
            }
        }
        int rc = str_concat(c, jj_str(sb.s ? sb.s : "", sb.len), jj_str("", 0), out);
        vc_sb_free(&sb);
        return rc;
    }
    default: return jj_error(c, "internal: statement used as expression");
    }
}

int jj_eval(jj_ctx *c, const jj_node *n, jj_scope *s, jj_val *out) { return ev(c, n, s, out); }
