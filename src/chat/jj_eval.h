/* jj_eval — render-time state shared by jj_eval.c (expressions),
 * jj_exec.c (statements), jj_filters.c and jj_methods.c (internal). */
#ifndef JJ_EVAL_H
#define JJ_EVAL_H

#include "chat/jj.h"

typedef struct jj_scope jj_scope;
struct jj_scope {
    jj_scope *parent;
    const char **names;
    jj_val *vals;
    size_t n, cap;
};

struct jj_macro {
    const jj_node *node;  /* JN_MACRO, or JN_CALLBLOCK for a `caller` */
    jj_scope *closure;    /* scope the macro was defined in */
};

struct jj_loop {
    const jj_list *items; /* the (filtered) sequence being iterated */
    size_t idx;           /* 0-based position */
    int64_t depth;        /* 1 + recursion level of a recursive loop */
    const jj_node *node;  /* the JN_FOR, for loop(...) in recursive loops */
    jj_scope *scope;      /* scope the for statement runs in */
    jj_val last_changed;  /* loop.changed() memory (JJ_UNDEF: never called) */
};

struct jj_ctx {
    jj_arena arena;
    vc_strbuf *out;   /* where output goes (macro calls and block sets capture) */
    char *err;
    size_t errn;
    bool failed;
    uint64_t steps;
    jj_limits lim;
    int call_depth;
    int ctl;          /* pending loop control: 0, JJ_CTL_BREAK, JJ_CTL_CONTINUE */
    /* The newest large concatenation results, allocated with spare room so
     * that `s = s ~ x` (accumulating in a loop) appends in place instead of
     * copying: strings are immutable views, and bytes past len belong to no
     * view yet, so appending there changes no existing value. */
    struct {
        char *p;
        size_t len, cap;
    } grow[8];
    unsigned grow_next; /* round-robin slot for the next large result */
};

enum { JJ_CTL_BREAK = 1, JJ_CTL_CONTINUE = 2 };

jj_scope *jj_scope_new(jj_ctx *c, jj_scope *parent);
int jj_scope_set(jj_ctx *c, jj_scope *s, const char *name, jj_val v);
int jj_emit(jj_ctx *c, const char *p, size_t n);
int jj_loop_call(jj_ctx *c, const jj_loop *l, const jj_args *a, jj_val *out);
int jj_eval(jj_ctx *c, const jj_node *n, jj_scope *s, jj_val *out);
int jj_eval_args(jj_ctx *c, const jj_node *n, jj_scope *s, jj_args *a);
int jj_binop(jj_ctx *c, int op, jj_val a, jj_val b, jj_val *out);
int jj_contains(jj_ctx *c, jj_val item, jj_val seq, bool *res);
int jj_compare_op(jj_ctx *c, const char *op, jj_val a, jj_val b, bool *res);
/* jj_format.c */
int jj_percent_format(jj_ctx *c, jj_val fmt, jj_val args, jj_val *out);
int jj_str_format(jj_ctx *c, jj_val fmt, const jj_args *a, jj_val *out);

#endif
