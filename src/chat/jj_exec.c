/* jj_exec — statements, macros and the render entry point. */
#include <stdio.h>
#include <string.h>

#include "chat/jj_eval.h"

static int exec(jj_ctx *c, const jj_node *n, jj_scope *s);

static int exec_body(jj_ctx *c, const jj_node *body, jj_scope *s) {
    if (!body) return 0;
    for (size_t i = 0; i < body->nkids; i++) {
        if (exec(c, body->kids[i], s) < 0) return -1;
        if (c->ctl) return 0;
    }
    return 0;
}

/* Run body with output captured into a new string value. */
static int capture(jj_ctx *c, const jj_node *body, jj_scope *s, jj_val *out) {
    vc_strbuf sb = {0}, *saved = c->out;
    c->out = &sb;
    int rc = exec_body(c, body, s);
    c->out = saved;
    if (rc == 0) rc = jj_str_dup(c, sb.s ? sb.s : "", sb.len, out);
    vc_sb_free(&sb);
    return rc;
}

/* Bind names to v: one name, or unpack an iterable into several. */
static int assign(jj_ctx *c, jj_scope *s, const jj_node *n, jj_val v) {
    if (n->op == 0) return jj_scope_set(c, s, n->kwn[0], v);
    jj_list *l;
    if (jj_iterate(c, v, &l) < 0) return -1;
    if (l->n != n->nkw) {
        if (l->n > n->nkw) return jj_error(c, "too many values to unpack (expected %zu)", n->nkw);
        return jj_error(c, "not enough values to unpack (expected %zu, got %zu)", n->nkw, l->n);
    }
    for (size_t i = 0; i < l->n; i++)
        if (jj_scope_set(c, s, n->kwn[i], l->v[i]) < 0) return -1;
    return 0;
}

/* Iterate `it` through the body of for-node n; depth counts recursive loop() calls. */
static int run_loop(jj_ctx *c, const jj_node *n, jj_scope *s, jj_val it, int64_t depth) {
    jj_list *items;
    if (jj_iterate(c, it, &items) < 0) return -1;
    if (n->c) { /* `for x in y if cond`: filter first, so loop.length counts kept items */
        jj_val kept;
        if (jj_list_new(c, items->n, false, &kept) < 0) return -1;
        jj_scope *is = jj_scope_new(c, s);
        if (!is) return -1;
        for (size_t i = 0; i < items->n; i++) {
            jj_val cond;
            is->n = 0;
            if (assign(c, is, n, items->v[i]) < 0 || jj_eval(c, n->c, is, &cond) < 0) return -1;
            if (jj_truthy(cond)) kept.u.l->v[kept.u.l->n++] = items->v[i];
        }
        items = kept.u.l;
    }
    if (items->n == 0) {
        if (!n->else_body) return 0;
        jj_scope *es = jj_scope_new(c, s);
        return es ? exec_body(c, n->else_body, es) : -1;
    }
    jj_loop *lp = jj_alloc(&c->arena, sizeof *lp);
    if (!lp) return jj_error(c, "template used too much memory");
    lp->items = items;
    lp->depth = depth;
    lp->node = n;
    lp->scope = s;
    jj_val lv = {.t = JJ_LOOP};
    lv.u.loop = lp;
    /* one scope reused by every iteration: Jinja forgets an iteration's
     * assignments at the next one, and this keeps long loops' memory flat */
    jj_scope *is = jj_scope_new(c, s);
    if (!is) return -1;
    for (size_t i = 0; i < items->n; i++) {
        if (jj_step(c) < 0) return -1;
        lp->idx = i;
        is->n = 0;
        if (jj_scope_set(c, is, "loop", lv) < 0 || assign(c, is, n, items->v[i]) < 0) return -1;
        if (exec_body(c, n->b, is) < 0) return -1;
        if (c->ctl == JJ_CTL_BREAK) {
            c->ctl = 0;
            break;
        }
        c->ctl = 0;
    }
    return 0;
}

static int exec_for(jj_ctx *c, const jj_node *n, jj_scope *s) {
    jj_val it;
    if (jj_eval(c, n->a, s, &it) < 0) return -1;
    return run_loop(c, n, s, it, 1);
}

/* loop(items) inside a recursive for: render the body for items, one level deeper */
int jj_loop_call(jj_ctx *c, const jj_loop *l, const jj_args *a, jj_val *out) {
    if (!l->node->recursive)
        return jj_error(c, "The loop must have the 'recursive' marker to be called recursively.");
    if (a->npos != 1 || a->nkw) return jj_error(c, "loop() takes exactly one argument");
    if (c->call_depth >= JJ_MAX_CALL_DEPTH) return jj_error(c, "maximum loop recursion depth exceeded");
    vc_strbuf sb = {0}, *saved = c->out;
    c->out = &sb;
    c->call_depth++;
    int saved_ctl = c->ctl;
    c->ctl = 0;
    int rc = run_loop(c, l->node, l->scope, a->pos[0], l->depth + 1);
    c->ctl = saved_ctl;
    c->call_depth--;
    c->out = saved;
    if (rc == 0) rc = jj_str_dup(c, sb.s ? sb.s : "", sb.len, out);
    vc_sb_free(&sb);
    return rc;
}

static int exec_set(jj_ctx *c, const jj_node *n, jj_scope *s, jj_val v) {
    if (n->op == 2) {
        jj_val ns;
        const jj_scope *sc = s;
        const jj_val *found = NULL;
        for (; sc && !found; sc = sc->parent)
            for (size_t i = 0; i < sc->n; i++)
                if (strcmp(sc->names[i], n->name) == 0) found = &sc->vals[i];
        ns = found ? *found : jj_undef_v;
        if (ns.t != JJ_NS) return jj_error(c, "cannot assign attribute on non-namespace object");
        if (n->kwn[0][0] == '_')
            return jj_error(c, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%s'. "
                               "Please rename the attribute.", n->kwn[0]);
        jj_val key;
        if (jj_str_dup(c, n->kwn[0], strlen(n->kwn[0]), &key) < 0) return -1;
        return jj_dict_set(c, ns.u.d, key, v);
    }
    return assign(c, s, n, v);
}

static int exec(jj_ctx *c, const jj_node *n, jj_scope *s) {
    if (jj_step(c) < 0) return -1;
    jj_val v;
    switch (n->k) {
    case JN_BODY: return exec_body(c, n, s);
    case JN_TEXT: return jj_emit(c, n->lit.u.s.p, n->lit.u.s.n);
    case JN_OUTPUT: {
        if (jj_eval(c, n->a, s, &v) < 0) return -1;
        if (v.t == JJ_STR) return jj_emit(c, v.u.s.p, v.u.s.n);
        vc_strbuf sb = {0};
        int rc = jj_to_str(c, &sb, v);
        if (rc == 0) rc = jj_emit(c, sb.s ? sb.s : "", sb.len);
        vc_sb_free(&sb);
        return rc;
    }
    case JN_IF:
        if (jj_eval(c, n->a, s, &v) < 0) return -1;
        if (jj_truthy(v)) return exec_body(c, n->b, s);
        if (!n->else_body) return 0;
        return n->else_body->k == JN_IF ? exec(c, n->else_body, s) : exec_body(c, n->else_body, s);
    case JN_FOR: return exec_for(c, n, s);
    case JN_SET:
        if (jj_eval(c, n->a, s, &v) < 0) return -1;
        return exec_set(c, n, s, v);
    case JN_SET_BLOCK: { /* the body has its own scope: its assignments stay inside */
        jj_scope *bs = jj_scope_new(c, s);
        if (!bs || capture(c, n->b, bs, &v) < 0) return -1;
        if (n->a) {
            jj_scope *fs = jj_scope_new(c, s);
            if (!fs || jj_scope_set(c, fs, "\x01body", v) < 0 || jj_eval(c, n->a, fs, &v) < 0) return -1;
        }
        return exec_set(c, n, s, v);
    }
    case JN_MACRO: {
        jj_macro *m = jj_alloc(&c->arena, sizeof *m);
        if (!m) return jj_error(c, "template used too much memory");
        m->node = n;
        m->closure = s;
        v.t = JJ_MACRO;
        v.u.mac = m;
        return jj_scope_set(c, s, n->name, v);
    }
    case JN_CALLBLOCK: {
        jj_macro *cm = jj_alloc(&c->arena, sizeof *cm);
        if (!cm) return jj_error(c, "template used too much memory");
        cm->node = n;
        cm->closure = s;
        jj_val f, r;
        jj_args args;
        if (jj_eval(c, n->a->a, s, &f) < 0 || jj_eval_args(c, n->a, s, &args) < 0) return -1;
        if (f.t != JJ_MACRO) return jj_error(c, "{%% call %%} needs a macro, got '%s'", jj_type_name(f));
        if (jj_call_macro(c, f.u.mac, &args, cm, &r) < 0) return -1;
        return jj_emit(c, r.u.s.p, r.u.s.n);
    }
    case JN_FILTERBLOCK: {
        jj_scope *fs = jj_scope_new(c, s);
        if (!fs || capture(c, n->b, fs, &v) < 0) return -1;
        if (jj_scope_set(c, fs, "\x01body", v) < 0 || jj_eval(c, n->a, fs, &v) < 0) return -1;
        vc_strbuf sb = {0};
        int rc = jj_to_str(c, &sb, v);
        if (rc == 0) rc = jj_emit(c, sb.s ? sb.s : "", sb.len);
        vc_sb_free(&sb);
        return rc;
    }
    case JN_BREAK: c->ctl = JJ_CTL_BREAK; return 0;
    case JN_CONTINUE: c->ctl = JJ_CTL_CONTINUE; return 0;
    case JN_WITH: {
        jj_scope *ws = jj_scope_new(c, s);
        if (!ws) return -1;
        for (size_t i = 0; i < n->nkw; i++) {
            if (jj_eval(c, n->kw[i], s, &v) < 0 || jj_scope_set(c, ws, n->kwn[i], v) < 0) return -1;
        }
        return exec_body(c, n->b, ws);
    }
    default:
        if (jj_eval(c, n, s, &v) < 0) return -1;
        return 0;
    }
}

/* Call a macro (or a call block's `caller`): arguments bind to parameters,
 * missing ones take their defaults (evaluated in the call's scope) or are
 * undefined; the body's output is the return value. */
int jj_call_macro(jj_ctx *c, const jj_macro *m, const jj_args *a, const jj_macro *caller, jj_val *out) {
    const jj_node *n = m->node;
    const char *mname = n->k == JN_MACRO ? n->name : "caller";
    if (c->call_depth >= JJ_MAX_CALL_DEPTH) return jj_error(c, "maximum macro recursion depth exceeded");
    if (a->npos > n->nkw)
        return jj_error(c, "macro '%s' takes not more than %zu argument(s)", mname, n->nkw);
    jj_scope *s = jj_scope_new(c, m->closure);
    if (!s) return -1;
    for (size_t k = 0; k < a->nkw; k++) {
        bool ok = false;
        for (size_t p = 0; p < n->nkw; p++)
            if (strcmp(n->kwn[p], a->kwn[k]) == 0) ok = p >= a->npos;
        if (!ok) return jj_error(c, "macro '%s' takes no keyword argument '%s'", mname, a->kwn[k]);
    }
    for (size_t p = 0; p < n->nkw; p++) {
        const jj_val *v = jj_arg(a, p, n->kwn[p]);
        jj_val d;
        if (!v) {
            if (n->kw[p]) {
                if (jj_eval(c, n->kw[p], s, &d) < 0) return -1;
            } else {
                vc_strbuf sb = {0};
                vc_sb_printf(&sb, "parameter '%s' was not provided", n->kwn[p]);
                jj_val h;
                int rc = jj_str_dup(c, sb.s, sb.len, &h);
                vc_sb_free(&sb);
                if (rc < 0) return -1;
                d = jj_undef(h.u.s.p);
            }
            v = &d;
        }
        if (jj_scope_set(c, s, n->kwn[p], *v) < 0) return -1;
    }
    if (caller) {
        jj_val cv = {.t = JJ_MACRO};
        cv.u.mac = (jj_macro *)caller;
        if (jj_scope_set(c, s, "caller", cv) < 0) return -1;
    }
    c->call_depth++;
    int saved_ctl = c->ctl;
    c->ctl = 0;
    int rc = capture(c, n->b, s, out);
    c->ctl = saved_ctl;
    c->call_depth--;
    return rc;
}

int jj_macro_repr(vc_strbuf *sb, const jj_macro *m) {
    vc_sb_printf(sb, "<Macro '%s'>", m->node->k == JN_MACRO ? m->node->name : "caller");
    return 0;
}

int jj_render(const jj_program *prog, const json_t *vars, const jj_limits *lim, char **out, char *err,
              size_t errn) {
    jj_ctx c = {.err = err, .errn = errn};
    c.lim = lim ? *lim : jj_limits_default();
    c.arena.limit = c.lim.max_arena;
    vc_strbuf sb = {0};
    c.out = &sb;
    int rc = -1;
    jj_scope *top = jj_scope_new(&c, NULL);
    if (!top) goto done;
    if (vars) {
        if (!json_is_object(vars)) {
            jj_error(&c, "render variables must be a JSON object");
            goto done;
        }
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)vars, k, v) {
            jj_val kv, vv;
            if (jj_str_dup(&c, k, strlen(k), &kv) < 0 || jj_from_json(&c, v, &vv) < 0) goto done;
            if (jj_scope_set(&c, top, kv.u.s.p, vv) < 0) goto done;
        }
    }
    if (exec_body(&c, prog->root, top) < 0) goto done;
    *out = vc_sb_steal(&sb);
    if (!*out) *out = calloc(1, 1);
    if (!*out) {
        jj_error(&c, "out of memory");
        goto done;
    }
    rc = 0;
done:
    if (rc < 0 && !c.failed) snprintf(err, errn, "template render failed");
    vc_sb_free(&sb);
    jj_arena_free(&c.arena);
    return rc;
}
