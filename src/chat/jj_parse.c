/* jj_parse — tokens -> AST, following Jinja2's grammar (parser.py):
 *   condexpr: or ('if' or ('else' condexpr)?)*
 *   or/and/not, compare (== != < <= > >= in, not in), + -, ~, * / // %,
 *   **, unary - +, primary with postfix (.x [i] [a:b:c] (args)) and
 *   filters/tests (|f(args), is [not] t args).
 * Statements: if/elif/else, for (target in iter [if cond]) / else, set
 * (expression, tuple, namespace attribute, block), macro, call, filter,
 * with, break, continue, generation (transformers' tag; renders its body). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chat/jj.h"

typedef struct {
    jj_program *prog;
    jj_tok *t;
    size_t i, n;
    int depth;
    const char *const *ends; /* end tags the innermost open block waits for */
    char *err;
    size_t errn;
    bool failed;
} parser;

static jj_node *perr(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static jj_node *perr(parser *P, const char *fmt, ...) {
    if (P->failed) return NULL;
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(P->err, P->errn, "template syntax error (line %d): %s", P->t[P->i].line, m);
    P->failed = true;
    return NULL;
}

static jj_tok *cur(parser *P) { return &P->t[P->i]; }
static jj_tok *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static void adv(parser *P) {
    if (P->i + 1 < P->n) P->i++;
}

static bool tok_is(const jj_tok *t, jj_tok_type ty, const char *s) {
    if (t->t != ty) return false;
    if (!s) return true;
    size_t n = strlen(s);
    return t->n == n && memcmp(t->p, s, n) == 0;
}
static bool is_op(parser *P, const char *s) { return tok_is(cur(P), JT_OP, s); }
static bool is_name(parser *P, const char *s) { return tok_is(cur(P), JT_NAME, s); }
static bool skip_op(parser *P, const char *s) {
    if (!is_op(P, s)) return false;
    adv(P);
    return true;
}
static bool skip_name(parser *P, const char *s) {
    if (!is_name(P, s)) return false;
    adv(P);
    return true;
}

static const char *tok_desc(parser *P, const jj_tok *t) {
    static _Thread_local char b[64];
    switch (t->t) {
    case JT_EOF: return "'end of template'";
    case JT_VAR_END: return "'end of print statement'";
    case JT_BLOCK_END: return "'end of statement block'";
    case JT_STRING: return "'string'";
    case JT_INT: return "'integer'";
    case JT_FLOAT: return "'float'";
    default: break;
    }
    (void)P;
    snprintf(b, sizeof b, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->p);
    return b;
}

static bool expect_op(parser *P, const char *s) {
    if (skip_op(P, s)) return true;
    perr(P, "expected token '%s', got %s", s, tok_desc(P, cur(P)));
    return false;
}

static jj_node *node(parser *P, jj_node_kind k) {
    jj_node *n = jj_alloc(&P->prog->arena, sizeof *n);
    if (!n) return perr(P, "out of memory");
    n->k = k;
    n->line = cur(P)->line;
    return n;
}

static const char *tokstr(parser *P, const jj_tok *t) {
    char *s = jj_alloc(&P->prog->arena, t->n + 1);
    if (!s) {
        perr(P, "out of memory");
        return NULL;
    }
    memcpy(s, t->p, t->n);
    return s;
}

/* growable node list in the program arena */
typedef struct {
    jj_node **v;
    const char **names;
    size_t n, cap;
} nlist;

static bool nl_push(parser *P, nlist *l, jj_node *x, const char *name) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        jj_node **nv = jj_alloc(&P->prog->arena, nc * sizeof *nv);
        const char **nn = jj_alloc(&P->prog->arena, nc * sizeof *nn);
        if (!nv || !nn) {
            perr(P, "out of memory");
            return false;
        }
        if (l->n) {
            memcpy(nv, l->v, l->n * sizeof *nv);
            memcpy(nn, l->names, l->n * sizeof *nn);
        }
        l->v = nv;
        l->names = nn;
        l->cap = nc;
    }
    l->v[l->n] = x;
    l->names[l->n] = name;
    l->n++;
    return true;
}

static jj_node *p_expr(parser *P, bool with_cond);
static jj_node *p_unary(parser *P, bool with_filter);
static jj_node *p_primary(parser *P);
static jj_node *p_postfix(parser *P, jj_node *n);
static jj_node *p_filter_expr(parser *P, jj_node *n);

static bool enter(parser *P) {
    if (++P->depth > JJ_MAX_NEST) {
        perr(P, "template nested too deeply");
        return false;
    }
    return true;
}

static bool tuple_end(parser *P, const char *extra) {
    jj_tok *t = cur(P);
    if (t->t == JT_VAR_END || t->t == JT_BLOCK_END || t->t == JT_EOF || is_op(P, ")")) return true;
    return extra && is_name(P, extra);
}

/* parse_tuple: `a`, `a, b`, `(a, b)`; simplified = names/primaries only */
static jj_node *p_tuple(parser *P, bool simplified, bool with_cond, const char *extra, bool parens) {
    nlist items = {0};
    bool is_tuple = false;
    int line = cur(P)->line;
    for (;;) {
        if (items.n && !expect_op(P, ",")) return NULL;
        if (tuple_end(P, extra)) break;
        jj_node *x = simplified ? p_primary(P) : p_expr(P, with_cond);
        if (!x || !nl_push(P, &items, x, NULL)) return NULL;
        if (is_op(P, ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        if (!parens) return perr(P, "Expected an expression, got %s", tok_desc(P, cur(P)));
    }
    jj_node *n = node(P, JN_TUPLE);
    if (!n) return NULL;
    n->line = line;
    n->kids = items.v;
    n->nkids = items.n;
    return n;
}

/* call arguments after '(' : positional and name=value */
static bool p_args(parser *P, jj_node *n) {
    nlist pos = {0}, kw = {0};
    if (!expect_op(P, "(")) return false;
    while (!is_op(P, ")")) {
        if (pos.n || kw.n)
            if (!expect_op(P, ",")) return false;
        if (is_op(P, ")")) break;
        if (is_op(P, "*") || is_op(P, "**")) {
            perr(P, "*args / **kwargs in calls are not supported");
            return false;
        }
        if (cur(P)->t == JT_NAME && tok_is(peek(P, 1), JT_OP, "=")) {
            const char *name = tokstr(P, cur(P));
            adv(P);
            adv(P);
            jj_node *v = p_expr(P, true);
            if (!name || !v || !nl_push(P, &kw, v, name)) return false;
        } else {
            if (kw.n) {
                perr(P, "positional argument after keyword argument");
                return false;
            }
            jj_node *v = p_expr(P, true);
            if (!v || !nl_push(P, &pos, v, NULL)) return false;
        }
    }
    adv(P);
    n->kids = pos.v;
    n->nkids = pos.n;
    n->kw = kw.v;
    n->kwn = kw.names;
    n->nkw = kw.n;
    return true;
}

static const char *dotted_name(parser *P) {
    if (cur(P)->t != JT_NAME) {
        perr(P, "expected token 'name', got %s", tok_desc(P, cur(P)));
        return NULL;
    }
    vc_strbuf sb = {0};
    vc_sb_append(&sb, cur(P)->p, cur(P)->n);
    adv(P);
    while (is_op(P, ".") && peek(P, 1)->t == JT_NAME) {
        adv(P);
        vc_sb_putc(&sb, '.');
        vc_sb_append(&sb, cur(P)->p, cur(P)->n);
        adv(P);
    }
    char *s = jj_alloc(&P->prog->arena, sb.len + 1);
    if (s) memcpy(s, sb.s, sb.len);
    vc_sb_free(&sb);
    if (!s) perr(P, "out of memory");
    return s;
}

static jj_node *p_filter(parser *P, jj_node *in) {
    while (skip_op(P, "|")) {
        jj_node *f = node(P, JN_FILTER);
        if (!f) return NULL;
        f->a = in;
        if (!(f->name = dotted_name(P))) return NULL;
        if (is_op(P, "(") && !p_args(P, f)) return NULL;
        in = f;
    }
    return in;
}

static jj_node *p_test(parser *P, jj_node *in) {
    adv(P); /* 'is' */
    jj_node *t = node(P, JN_TEST);
    if (!t) return NULL;
    t->a = in;
    t->op = skip_name(P, "not");
    if (!(t->name = dotted_name(P))) return NULL;
    jj_tok *c = cur(P);
    if (is_op(P, "(")) {
        if (!p_args(P, t)) return NULL;
    } else if ((c->t == JT_NAME || c->t == JT_STRING || c->t == JT_INT || c->t == JT_FLOAT || is_op(P, "(") ||
                is_op(P, "[") || is_op(P, "{")) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) return perr(P, "You cannot chain multiple tests with is");
        jj_node *arg = p_primary(P);
        if (!arg || !(arg = p_postfix(P, arg))) return NULL;
        t->kids = jj_alloc(&P->prog->arena, sizeof(jj_node *));
        if (!t->kids) return perr(P, "out of memory");
        t->kids[0] = arg;
        t->nkids = 1;
    }
    return t;
}

static jj_node *p_filter_expr(parser *P, jj_node *n) {
    for (;;) {
        if (!n) return NULL;
        if (is_op(P, "|")) n = p_filter(P, n);
        else if (is_name(P, "is")) n = p_test(P, n);
        else if (is_op(P, "(")) {
            jj_node *c = node(P, JN_CALL);
            if (!c) return NULL;
            c->a = n;
            if (!p_args(P, c)) return NULL;
            n = c;
        } else return n;
    }
}

static jj_node *p_subscript_arg(parser *P) {
    jj_node *parts[3] = {NULL, NULL, NULL};
    if (!is_op(P, ":")) {
        jj_node *x = p_expr(P, true);
        if (!x || !is_op(P, ":")) return x;
        parts[0] = x;
    }
    adv(P); /* ':' */
    if (!is_op(P, "]") && !is_op(P, ",") && !is_op(P, ":"))
        if (!(parts[1] = p_expr(P, true))) return NULL;
    if (skip_op(P, ":"))
        if (!is_op(P, "]") && !is_op(P, ","))
            if (!(parts[2] = p_expr(P, true))) return NULL;
    jj_node *s = node(P, JN_SLICE);
    if (!s) return NULL;
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

static jj_node *p_postfix(parser *P, jj_node *n) {
    for (;;) {
        if (!n) return NULL;
        if (skip_op(P, ".")) {
            jj_tok *t = cur(P);
            if (t->t == JT_NAME) {
                jj_node *g = node(P, JN_GETATTR);
                if (!g) return NULL;
                g->a = n;
                if (!(g->name = tokstr(P, t))) return NULL;
                adv(P);
                n = g;
            } else if (t->t == JT_INT) {
                jj_node *g = node(P, JN_GETITEM), *k = node(P, JN_LIT);
                if (!g || !k) return NULL;
                k->lit = jj_int(t->i);
                g->a = n;
                g->b = k;
                adv(P);
                n = g;
            } else return perr(P, "expected name or number after '.'");
        } else if (skip_op(P, "[")) {
            nlist idx = {0};
            while (!is_op(P, "]")) {
                if (idx.n && !expect_op(P, ",")) return NULL;
                if (is_op(P, "]")) break;
                jj_node *x = p_subscript_arg(P);
                if (!x || !nl_push(P, &idx, x, NULL)) return NULL;
            }
            adv(P);
            if (idx.n == 0) return perr(P, "expected a subscript");
            jj_node *g = node(P, JN_GETITEM);
            if (!g) return NULL;
            g->a = n;
            if (idx.n == 1) g->b = idx.v[0];
            else {
                jj_node *tup = node(P, JN_TUPLE);
                if (!tup) return NULL;
                tup->kids = idx.v;
                tup->nkids = idx.n;
                g->b = tup;
            }
            n = g;
        } else if (is_op(P, "(")) {
            jj_node *c = node(P, JN_CALL);
            if (!c) return NULL;
            c->a = n;
            if (!p_args(P, c)) return NULL;
            n = c;
        } else return n;
    }
}

static jj_node *p_primary(parser *P) {
    if (!enter(P)) return NULL;
    jj_tok *t = cur(P);
    jj_node *n = NULL;
    if (t->t == JT_NAME) {
        n = node(P, JN_LIT);
        if (!n) return NULL;
        if (tok_is(t, JT_NAME, "true") || tok_is(t, JT_NAME, "True")) n->lit = jj_bool(true);
        else if (tok_is(t, JT_NAME, "false") || tok_is(t, JT_NAME, "False")) n->lit = jj_bool(false);
        else if (tok_is(t, JT_NAME, "none") || tok_is(t, JT_NAME, "None")) n->lit = jj_none_v;
        else {
            n->k = JN_NAME;
            if (!(n->name = tokstr(P, t))) return NULL;
        }
        adv(P);
    } else if (t->t == JT_STRING) {
        n = node(P, JN_LIT);
        if (!n) return NULL;
        vc_strbuf sb = {0};
        while (cur(P)->t == JT_STRING) {
            vc_sb_append(&sb, cur(P)->p, cur(P)->n);
            adv(P);
        }
        char *s = jj_alloc(&P->prog->arena, sb.len + 1);
        if (s && sb.len) memcpy(s, sb.s, sb.len);
        n->lit = jj_str(s, sb.len);
        vc_sb_free(&sb);
        if (!s) return perr(P, "out of memory");
    } else if (t->t == JT_INT || t->t == JT_FLOAT) {
        n = node(P, JN_LIT);
        if (!n) return NULL;
        n->lit = t->t == JT_INT ? jj_int(t->i) : jj_float(t->f);
        adv(P);
    } else if (skip_op(P, "(")) {
        n = p_tuple(P, false, true, NULL, true);
        if (n && !expect_op(P, ")")) n = NULL;
    } else if (skip_op(P, "[")) {
        nlist items = {0};
        while (!is_op(P, "]")) {
            if (items.n && !expect_op(P, ",")) return NULL;
            if (is_op(P, "]")) break;
            jj_node *x = p_expr(P, true);
            if (!x || !nl_push(P, &items, x, NULL)) return NULL;
        }
        adv(P);
        if (!(n = node(P, JN_LIST))) return NULL;
        n->kids = items.v;
        n->nkids = items.n;
    } else if (skip_op(P, "{")) {
        nlist ks = {0}, vs = {0};
        while (!is_op(P, "}")) {
            if (ks.n && !expect_op(P, ",")) return NULL;
            if (is_op(P, "}")) break;
            jj_node *k = p_expr(P, true);
            if (!k || !expect_op(P, ":")) return NULL;
            jj_node *v = p_expr(P, true);
            if (!v || !nl_push(P, &ks, k, NULL) || !nl_push(P, &vs, v, NULL)) return NULL;
        }
        adv(P);
        if (!(n = node(P, JN_DICT))) return NULL;
        n->kids = ks.v;
        n->kw = vs.v;
        n->nkids = n->nkw = ks.n;
    } else {
        n = perr(P, "unexpected %s", tok_desc(P, t));
    }
    P->depth--;
    return n;
}

static jj_node *p_unary(parser *P, bool with_filter) {
    if (!enter(P)) return NULL;
    jj_node *n;
    if (is_op(P, "-") || is_op(P, "+")) {
        n = node(P, is_op(P, "-") ? JN_NEG : JN_POS);
        if (!n) return NULL;
        adv(P);
        if (!(n->a = p_unary(P, false))) return NULL;
    } else n = p_primary(P);
    n = p_postfix(P, n);
    if (with_filter) n = p_filter_expr(P, n);
    P->depth--;
    return n;
}

static jj_node *binop(parser *P, int op, jj_node *a, jj_node *b) {
    if (!a || !b) return NULL;
    jj_node *n = node(P, JN_BINOP);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jj_node *p_pow(parser *P) {
    jj_node *n = p_unary(P, true);
    while (n && skip_op(P, "**")) n = binop(P, 'P', n, p_unary(P, true));
    return n;
}

static jj_node *p_math2(parser *P) {
    jj_node *n = p_pow(P);
    for (;;) {
        if (!n) return NULL;
        if (skip_op(P, "*")) n = binop(P, '*', n, p_pow(P));
        else if (skip_op(P, "/")) n = binop(P, '/', n, p_pow(P));
        else if (skip_op(P, "//")) n = binop(P, 'F', n, p_pow(P));
        else if (skip_op(P, "%")) n = binop(P, '%', n, p_pow(P));
        else return n;
    }
}

static jj_node *p_concat(parser *P) {
    jj_node *n = p_math2(P);
    if (!n || !is_op(P, "~")) return n;
    nlist parts = {0};
    if (!nl_push(P, &parts, n, NULL)) return NULL;
    while (skip_op(P, "~")) {
        jj_node *x = p_math2(P);
        if (!x || !nl_push(P, &parts, x, NULL)) return NULL;
    }
    jj_node *c = node(P, JN_CONCAT);
    if (!c) return NULL;
    c->kids = parts.v;
    c->nkids = parts.n;
    return c;
}

static jj_node *p_math1(parser *P) {
    jj_node *n = p_concat(P);
    for (;;) {
        if (!n) return NULL;
        if (skip_op(P, "+")) n = binop(P, '+', n, p_concat(P));
        else if (skip_op(P, "-")) n = binop(P, '-', n, p_concat(P));
        else return n;
    }
}

/* Comparison chain: a op1 b op2 c; ops stored in kwn, operands in kids[1..]. */
static jj_node *p_compare(parser *P) {
    jj_node *first = p_math1(P);
    if (!first) return NULL;
    nlist ops = {0};
    static const char *const cmp_ops[] = {"==", "!=", "<", "<=", ">", ">=", NULL};
    for (;;) {
        const char *op = NULL;
        for (int k = 0; cmp_ops[k]; k++)
            if (is_op(P, cmp_ops[k])) op = cmp_ops[k];
        if (op) adv(P);
        else if (skip_name(P, "in")) op = "in";
        else if (is_name(P, "not") && tok_is(peek(P, 1), JT_NAME, "in")) {
            adv(P);
            adv(P);
            op = "not in";
        } else break;
        jj_node *x = p_math1(P);
        if (!x || !nl_push(P, &ops, x, op)) return NULL;
    }
    if (!ops.n) return first;
    jj_node *c = node(P, JN_COMPARE);
    if (!c) return NULL;
    c->a = first;
    c->kids = ops.v;
    c->kwn = ops.names;
    c->nkids = ops.n;
    return c;
}

static jj_node *p_not(parser *P) {
    if (is_name(P, "not")) {
        if (!enter(P)) return NULL;
        jj_node *n = node(P, JN_NOT);
        if (!n) return NULL;
        adv(P);
        n->a = p_not(P);
        P->depth--;
        return n->a ? n : NULL;
    }
    return p_compare(P);
}

static jj_node *p_and(parser *P) {
    jj_node *n = p_not(P);
    while (n && skip_name(P, "and")) {
        jj_node *x = node(P, JN_AND);
        if (!x) return NULL;
        x->a = n;
        if (!(x->b = p_not(P))) return NULL;
        n = x;
    }
    return n;
}

static jj_node *p_or(parser *P) {
    jj_node *n = p_and(P);
    while (n && skip_name(P, "or")) {
        jj_node *x = node(P, JN_OR);
        if (!x) return NULL;
        x->a = n;
        if (!(x->b = p_and(P))) return NULL;
        n = x;
    }
    return n;
}

static jj_node *p_expr(parser *P, bool with_cond) {
    if (!enter(P)) return NULL;
    jj_node *n = p_or(P);
    while (with_cond && n && skip_name(P, "if")) {
        jj_node *c = node(P, JN_COND);
        if (!c) return NULL;
        c->a = n;
        if (!(c->b = p_or(P))) return NULL;
        if (skip_name(P, "else") && !(c->c = p_expr(P, true))) return NULL;
        n = c;
    }
    P->depth--;
    return n;
}

/* ---- statements ---- */

static jj_node *p_body(parser *P, const char *const *ends);

static bool expect_block_end(parser *P) {
    if (cur(P)->t == JT_BLOCK_END) {
        adv(P);
        return true;
    }
    perr(P, "expected token 'end of statement block', got %s", tok_desc(P, cur(P)));
    return false;
}

/* assignment target: name, (a, b), a, b ; with_ns allows ns.attr */
static bool p_target(parser *P, jj_node *st, bool with_ns, const char *extra) {
    nlist names = {0};
    if (with_ns && cur(P)->t == JT_NAME && tok_is(peek(P, 1), JT_OP, ".") && peek(P, 2)->t == JT_NAME) {
        st->name = tokstr(P, cur(P));
        adv(P);
        adv(P);
        const char *attr = tokstr(P, cur(P));
        adv(P);
        if (!st->name || !attr || !nl_push(P, &names, NULL, attr)) return false;
        st->op = 2;
        st->kwn = names.names;
        st->nkw = 1;
        return true;
    }
    bool parens = skip_op(P, "(");
    bool tuple = parens;
    for (;;) {
        if (cur(P)->t != JT_NAME) {
            perr(P, "Expected an expression, got %s", tok_desc(P, cur(P)));
            return false;
        }
        const char *nm = tokstr(P, cur(P));
        if (!nm || !nl_push(P, &names, NULL, nm)) return false;
        adv(P);
        if (!skip_op(P, ",")) break;
        tuple = true;
        if (parens && is_op(P, ")")) break;
        if (!parens && (is_op(P, "=") || (extra && is_name(P, extra)) || cur(P)->t == JT_BLOCK_END)) break;
    }
    if (parens && !expect_op(P, ")")) return false;
    st->op = tuple ? 1 : 0;
    st->kwn = names.names;
    st->nkw = names.n;
    return true;
}

static jj_node *p_for(parser *P) {
    jj_node *n = node(P, JN_FOR);
    if (!n || !p_target(P, n, false, "in")) return NULL;
    if (!skip_name(P, "in")) return perr(P, "expected 'in' in for loop");
    if (!(n->a = p_tuple(P, false, false, "recursive", false))) return NULL;
    if (skip_name(P, "if") && !(n->c = p_expr(P, true))) return NULL;
    n->recursive = skip_name(P, "recursive");
    if (!expect_block_end(P)) return NULL;
    static const char *const ends[] = {"endfor", "else", NULL};
    if (!(n->b = p_body(P, ends))) return NULL;
    if (skip_name(P, "else")) {
        if (!expect_block_end(P)) return NULL;
        static const char *const ends2[] = {"endfor", NULL};
        if (!(n->else_body = p_body(P, ends2))) return NULL;
    }
    adv(P); /* endfor */
    return expect_block_end(P) ? n : NULL;
}

static jj_node *p_if(parser *P) {
    jj_node *n = node(P, JN_IF);
    if (!n || !(n->a = p_tuple(P, false, false, NULL, false)) || !expect_block_end(P)) return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (!(n->b = p_body(P, ends))) return NULL;
    jj_node *last = n;
    for (;;) {
        if (skip_name(P, "elif")) {
            jj_node *e = node(P, JN_IF);
            if (!e || !(e->a = p_tuple(P, false, false, NULL, false)) || !expect_block_end(P)) return NULL;
            if (!(e->b = p_body(P, ends))) return NULL;
            last->else_body = e;
            last = e;
        } else if (skip_name(P, "else")) {
            static const char *const ends2[] = {"endif", NULL};
            if (!expect_block_end(P) || !(last->else_body = p_body(P, ends2))) return NULL;
        } else break;
    }
    adv(P); /* endif */
    return expect_block_end(P) ? n : NULL;
}

/* filter chain applied to the name "\x01body" (filter blocks, block sets) */
static jj_node *p_filter_chain(parser *P) {
    jj_node *in = node(P, JN_NAME);
    if (!in) return NULL;
    in->name = "\x01body";
    return p_filter(P, in);
}

static jj_node *p_set(parser *P) {
    jj_node *n = node(P, JN_SET);
    if (!n || !p_target(P, n, true, NULL)) return NULL;
    if (skip_op(P, "=")) {
        if (!(n->a = p_tuple(P, false, true, NULL, false))) return NULL;
        return expect_block_end(P) ? n : NULL;
    }
    n->k = JN_SET_BLOCK;
    if (n->op == 1) return perr(P, "block set needs a single target");
    if (is_op(P, "|") && !(n->a = p_filter_chain(P))) return NULL;
    if (!expect_block_end(P)) return NULL;
    static const char *const ends[] = {"endset", NULL};
    if (!(n->b = p_body(P, ends))) return NULL;
    adv(P);
    return expect_block_end(P) ? n : NULL;
}

/* macro params: (a, b=default, ...) */
static bool p_params(parser *P, jj_node *n) {
    nlist ps = {0};
    if (!expect_op(P, "(")) return false;
    while (!is_op(P, ")")) {
        if (ps.n && !expect_op(P, ",")) return false;
        if (is_op(P, ")")) break;
        if (cur(P)->t != JT_NAME) {
            perr(P, "expected parameter name, got %s", tok_desc(P, cur(P)));
            return false;
        }
        const char *nm = tokstr(P, cur(P));
        adv(P);
        jj_node *def = NULL;
        if (skip_op(P, "=") && !(def = p_expr(P, true))) return false;
        if (!nm || !nl_push(P, &ps, def, nm)) return false;
    }
    adv(P);
    n->kw = ps.v;
    n->kwn = ps.names;
    n->nkw = ps.n;
    return true;
}

static jj_node *p_macro(parser *P) {
    jj_node *n = node(P, JN_MACRO);
    if (!n) return NULL;
    if (cur(P)->t != JT_NAME) return perr(P, "expected token 'name', got %s", tok_desc(P, cur(P)));
    if (!(n->name = tokstr(P, cur(P)))) return NULL;
    adv(P);
    if (!p_params(P, n) || !expect_block_end(P)) return NULL;
    static const char *const ends[] = {"endmacro", NULL};
    if (!(n->b = p_body(P, ends))) return NULL;
    adv(P);
    if (cur(P)->t == JT_NAME) adv(P); /* {% endmacro name %} */
    return expect_block_end(P) ? n : NULL;
}

static jj_node *p_callblock(parser *P) {
    jj_node *n = node(P, JN_CALLBLOCK);
    if (!n) return NULL;
    if (is_op(P, "(") && !p_params(P, n)) return NULL;
    if (!(n->a = p_expr(P, true))) return NULL;
    if (n->a->k != JN_CALL) return perr(P, "expected call");
    if (!expect_block_end(P)) return NULL;
    static const char *const ends[] = {"endcall", NULL};
    if (!(n->b = p_body(P, ends))) return NULL;
    adv(P);
    return expect_block_end(P) ? n : NULL;
}

static jj_node *p_statement(parser *P) {
    adv(P); /* BLOCK_BEGIN */
    jj_tok *t = cur(P);
    if (t->t != JT_NAME) return perr(P, "tag name expected");
    if (!enter(P)) return NULL;
    jj_node *n = NULL;
    adv(P);
    if (tok_is(t, JT_NAME, "for")) n = p_for(P);
    else if (tok_is(t, JT_NAME, "if")) n = p_if(P);
    else if (tok_is(t, JT_NAME, "set")) n = p_set(P);
    else if (tok_is(t, JT_NAME, "macro")) n = p_macro(P);
    else if (tok_is(t, JT_NAME, "call")) n = p_callblock(P);
    else if (tok_is(t, JT_NAME, "break") || tok_is(t, JT_NAME, "continue")) {
        n = node(P, tok_is(t, JT_NAME, "break") ? JN_BREAK : JN_CONTINUE);
        if (n && !expect_block_end(P)) n = NULL;
    } else if (tok_is(t, JT_NAME, "filter")) {
        n = node(P, JN_FILTERBLOCK);
        static const char *const ends[] = {"endfilter", NULL};
        P->i--; /* p_filter wants to see a '|' : fake it by parsing the name directly */
        if (n) {
            jj_node *in = node(P, JN_NAME);
            if (!in) return NULL;
            in->name = "\x01body";
            adv(P);
            jj_node *f = in;
            do {
                jj_node *x = node(P, JN_FILTER);
                if (!x) return NULL;
                x->a = f;
                if (!(x->name = dotted_name(P))) return NULL;
                if (is_op(P, "(") && !p_args(P, x)) return NULL;
                f = x;
            } while (skip_op(P, "|"));
            n->a = f;
            if (!expect_block_end(P) || !(n->b = p_body(P, ends))) return NULL;
            adv(P);
            if (!expect_block_end(P)) n = NULL;
        }
    } else if (tok_is(t, JT_NAME, "with")) {
        n = node(P, JN_WITH);
        nlist vs = {0};
        while (n && cur(P)->t != JT_BLOCK_END) {
            if (vs.n && !expect_op(P, ",")) return NULL;
            if (cur(P)->t != JT_NAME) return perr(P, "expected name in with");
            const char *nm = tokstr(P, cur(P));
            adv(P);
            if (!expect_op(P, "=")) return NULL;
            jj_node *v = p_expr(P, true);
            if (!nm || !v || !nl_push(P, &vs, v, nm)) return NULL;
        }
        static const char *const ends[] = {"endwith", NULL};
        if (n) {
            n->kw = vs.v;
            n->kwn = vs.names;
            n->nkw = vs.n;
            if (!expect_block_end(P) || !(n->b = p_body(P, ends))) return NULL;
            adv(P);
            if (!expect_block_end(P)) n = NULL;
        }
    } else if (tok_is(t, JT_NAME, "generation")) {
        /* transformers' AssistantTracker tag: the body renders unchanged */
        static const char *const ends[] = {"endgeneration", NULL};
        if (expect_block_end(P) && (n = p_body(P, ends)) != NULL) {
            adv(P);
            if (!expect_block_end(P)) n = NULL;
        }
    } else {
        P->i--;
        char want[200] = "";
        if (P->ends) {
            const char *inner = P->ends[0];
            size_t l = (size_t)snprintf(want, sizeof want, " Jinja was looking for the following tags: ");
            for (int k = 0; P->ends[k] && l < sizeof want; k++) {
                l += (size_t)snprintf(want + l, sizeof want - l, "%s'%s'", k ? " or " : "", P->ends[k]);
                if (!strncmp(P->ends[k], "end", 3)) inner = P->ends[k] + 3;
            }
            if (l < sizeof want)
                snprintf(want + l, sizeof want - l, ". The innermost block that needs to be closed is '%s'.", inner);
        }
        n = perr(P, "Encountered unknown tag '%.*s'.%s", (int)(t->n < 60 ? t->n : 60), t->p, want);
    }
    P->depth--;
    return n;
}

/* statements until a {% name %} with name in ends (left as current token) */
static jj_node *p_body(parser *P, const char *const *ends) {
    jj_node *body = node(P, JN_BODY);
    if (!body) return NULL;
    nlist st = {0};
    const char *const *saved_ends = P->ends;
    P->ends = ends;
    for (;;) {
        jj_tok *t = cur(P);
        jj_node *x = NULL;
        if (t->t == JT_EOF) {
            if (ends) {
                char want[160] = "";
                const char *inner = ends[0];
                for (int k = 0; ends[k]; k++) {
                    size_t l = strlen(want);
                    snprintf(want + l, sizeof want - l, "%s'%s'", k ? " or " : "", ends[k]);
                    if (!strncmp(ends[k], "end", 3)) inner = ends[k] + 3;
                }
                return perr(P, "Unexpected end of template. Jinja was looking for the following tags: %s. "
                               "The innermost block that needs to be closed is '%s'.", want, inner);
            }
            break;
        } else if (t->t == JT_DATA) {
            if (!(x = node(P, JN_TEXT))) return NULL;
            x->lit = jj_str(t->p, t->n);
            adv(P);
        } else if (t->t == JT_VAR_BEGIN) {
            adv(P);
            if (!(x = node(P, JN_OUTPUT)) || !(x->a = p_tuple(P, false, true, NULL, false))) return NULL;
            if (cur(P)->t != JT_VAR_END)
                return perr(P, "expected token 'end of print statement', got %s", tok_desc(P, cur(P)));
            adv(P);
        } else if (t->t == JT_BLOCK_BEGIN) {
            jj_tok *nm = peek(P, 1);
            if (ends && nm->t == JT_NAME)
                for (int k = 0; ends[k]; k++)
                    if (tok_is(nm, JT_NAME, ends[k])) {
                        adv(P);
                        goto done;
                    }
            if (!(x = p_statement(P))) return NULL;
        } else return perr(P, "unexpected %s", tok_desc(P, t));
        if (!nl_push(P, &st, x, NULL)) return NULL;
    }
done:
    P->ends = saved_ends;
    body->kids = st.v;
    body->nkids = st.n;
    return body;
}

int jj_parse(const char *source, jj_program *prog, char *err, size_t errn) {
    memset(prog, 0, sizeof *prog);
    if (jj_lex(source, &prog->toks, err, errn) < 0) return -1;
    parser P = {.prog = prog, .t = prog->toks.toks, .n = prog->toks.n, .err = err, .errn = errn};
    prog->root = p_body(&P, NULL);
    if (!prog->root) {
        if (!P.failed) snprintf(err, errn, "template syntax error");
        jj_program_free(prog);
        return -1;
    }
    return 0;
}

void jj_program_free(jj_program *p) {
    jj_arena_free(&p->arena);
    jj_tokens_free(&p->toks);
    memset(p, 0, sizeof *p);
}
