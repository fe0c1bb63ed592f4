/* jj — the Jinja2 interpreter behind chat.h (internal).
 *
 * Pipeline: source -> jj_lex (tokens, whitespace control already applied to
 * the text between tags) -> jj_parse (AST in an arena) -> jj_render (walks
 * the AST with a fresh value arena per render).
 *
 * Values mimic Python objects as Jinja2 sees them (None, bool, int, float,
 * str, list, tuple, dict, Undefined, namespace, callables), with Python's
 * printing, comparison and arithmetic rules, so output matches
 * transformers.apply_chat_template byte for byte. Everything a render
 * allocates lives in one arena freed at the end, so error paths never leak.
 * Strings are UTF-8; lengths, indices and slices count code points.
 *
 * Files: jj_value.c (values, arena, printing, comparison), jj_json.c
 * (json_t <-> values, tojson), jj_lex.c, jj_parse.c, jj_eval.c
 * (expressions), jj_exec.c (statements, macros, jj_render), jj_filters.c
 * (filters and tests), jj_methods.c (attribute/item access, str/dict
 * methods, globals), jj_format.c (`%` and str.format). jj_eval.h holds the
 * render-time structures shared by those files.
 *
 *   jj_program p; char err[512], *out;
 *   if (jj_parse(src, &p, err, sizeof err) < 0) -> err
 *   if (jj_render(&p, vars_object, NULL, &out, err, sizeof err) < 0) -> err
 *   free(out); jj_program_free(&p);
 */
#ifndef JJ_H
#define JJ_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"

/* ---- limits (runaway templates end with an error, never a hang) ---- */
#define JJ_MAX_NEST 128       /* parser nesting (expressions + blocks) */
#define JJ_MAX_CALL_DEPTH 64  /* macro / caller / loop() recursion */

typedef struct {
    uint64_t max_steps; /* evaluation steps per render */
    size_t max_output;  /* bytes of rendered output (and of any one string) */
    size_t max_arena;   /* bytes of values allocated per render */
} jj_limits;

/* 50M steps, 64 MiB output, 512 MiB of values */
jj_limits jj_limits_default(void);

/* ---- arena ---- */
typedef struct jj_arena_blk jj_arena_blk;
typedef struct {
    jj_arena_blk *head;
    size_t total, limit; /* limit 0 = none */
} jj_arena;

void *jj_alloc(jj_arena *a, size_t n); /* zeroed; NULL on OOM or limit */
void jj_arena_free(jj_arena *a);

/* ---- values ---- */
typedef enum {
    JJ_UNDEF = 0, JJ_NONE, JJ_BOOL, JJ_INT, JJ_FLOAT, JJ_STR,
    JJ_LIST,   /* list or tuple (l->tuple) */
    JJ_DICT,
    JJ_NS,     /* namespace(): a dict with attribute assignment */
    JJ_FUNC,   /* global builtin: range, namespace, dict, raise_exception, ... */
    JJ_METHOD, /* bound method of a str/dict/list value */
    JJ_MACRO,
    JJ_LOOP,   /* the `loop` object of a for loop */
    JJ_RANGE   /* range(...) result before it is listed */
} jj_type;

typedef struct jj_list jj_list;
typedef struct jj_dict jj_dict;
typedef struct jj_method jj_method;
typedef struct jj_macro jj_macro;
typedef struct jj_loop jj_loop;
typedef struct jj_range jj_range;

typedef struct jj_val {
    uint8_t t;
    uint8_t safe; /* str marked safe (|safe / |e): only affects |e */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p; /* UTF-8, not NUL-terminated; for UNDEF: hint or NULL */
            size_t n;
        } s;
        jj_list *l;
        jj_dict *d;
        int fn;
        jj_method *m;
        jj_macro *mac;
        jj_loop *loop;
        jj_range *r;
    } u;
} jj_val;

struct jj_list {
    jj_val *v;
    size_t n, cap;
    bool tuple;
    bool group; /* groupby's (grouper, list) tuple: also has those attributes */
};
struct jj_dict {
    jj_val *k, *v;
    size_t n, cap;
};
struct jj_method {
    jj_val self;
    const char *name;
};
struct jj_range {
    int64_t start, stop, step;
};

/* ---- render context (used by eval, filters, methods) ---- */
typedef struct jj_ctx jj_ctx;

extern const jj_val jj_undef_v, jj_none_v;
jj_val jj_bool(bool b);
jj_val jj_int(int64_t i);
jj_val jj_float(double f);
jj_val jj_str(const char *p, size_t n); /* borrows p */
jj_val jj_undef(const char *hint);      /* hint: error text if used */

/* Allocating constructors return -1 with an error recorded on ctx. */
int jj_str_dup(jj_ctx *c, const char *p, size_t n, jj_val *out);
int jj_list_new(jj_ctx *c, size_t cap, bool tuple, jj_val *out);
int jj_list_push(jj_ctx *c, jj_val *list, jj_val v);
int jj_dict_new(jj_ctx *c, size_t cap, jj_val *out);
int jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v);
const jj_val *jj_dict_get(const jj_dict *d, jj_val k);
const jj_val *jj_dict_gets(const jj_dict *d, const char *key);

bool jj_truthy(jj_val v);
bool jj_eq(jj_val a, jj_val b);
/* Python ordering: <0, 0, >0 in *cmp; -1 (TypeError) when not comparable. */
int jj_compare(jj_ctx *c, jj_val a, jj_val b, const char *op, int *cmp);
const char *jj_type_name(jj_val v); /* Python type name: 'str', 'dict', ... */

/* str(v) and repr(v) appended to sb. Returns -1 on error (e.g. depth). */
int jj_to_str(jj_ctx *c, vc_strbuf *sb, jj_val v);
int jj_to_repr(jj_ctx *c, vc_strbuf *sb, jj_val v);
/* str(v) as a value (no copy for strings). */
int jj_as_str(jj_ctx *c, jj_val v, jj_val *out);
void jj_repr_float(vc_strbuf *sb, double f);

/* iteration: materialise anything iterable as a list (dict -> keys,
 * str -> characters, range -> ints, undefined -> empty). */
int jj_iterate(jj_ctx *c, jj_val v, jj_list **out);

/* UTF-8 helpers */
size_t jj_utf8_len(const char *p, size_t n);
size_t jj_utf8_dec(const char *p, size_t n, uint32_t *cp); /* bytes used (>=1) */
void jj_utf8_enc(vc_strbuf *sb, uint32_t cp);
bool jj_py_isspace(uint32_t cp);

/* json */
int jj_from_json(jj_ctx *c, const json_t *j, jj_val *out);
typedef struct {
    const char *indent; /* NULL: compact one-line form */
    const char *item_sep, *key_sep;
    bool sort_keys;
    bool ensure_ascii; /* escape everything outside ' '..'~' as \uXXXX */
} jj_json_opts;
int jj_to_json(jj_ctx *c, vc_strbuf *sb, jj_val v, const jj_json_opts *o);

/* ---- lexer ---- */
typedef enum {
    JT_EOF = 0, JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP
} jj_tok_type;

typedef struct {
    jj_tok_type t;
    int line;
    const char *p; /* DATA/NAME/OP: slice of the normalised source; STRING: unescaped copy */
    size_t n;
    int64_t i;
    double f;
} jj_tok;

typedef struct {
    char *src; /* normalised source (owned) */
    jj_tok *toks;
    size_t n, cap;
    jj_arena strings; /* unescaped string literals */
} jj_tokens;

/* On error: returns -1 and writes a message into err. */
int jj_lex(const char *source, jj_tokens *out, char *err, size_t errn);
void jj_tokens_free(jj_tokens *t);

/* ---- AST ---- */
typedef enum {
    /* expressions */
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_GETATTR, JN_GETITEM, JN_SLICE,
    JN_CALL, JN_FILTER, JN_TEST, JN_BINOP, JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR,
    JN_COND, JN_COMPARE, JN_CONCAT,
    /* statements */
    JN_BODY, JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO,
    JN_CALLBLOCK, JN_FILTERBLOCK, JN_BREAK, JN_CONTINUE, JN_WITH
} jj_node_kind;

typedef struct jj_node jj_node;
struct jj_node {
    jj_node_kind k;
    int line;
    int op;              /* BINOP: op char code; TEST: negated; FOR/SET: tuple target */
    bool recursive;      /* FOR: `recursive` loop (loop(items) re-enters the body) */
    jj_val lit;          /* LIT constant, TEXT data */
    const char *name;    /* NAME/GETATTR/FILTER/TEST name; NUL-terminated */
    jj_node *a, *b, *c;  /* children (meaning per kind) */
    jj_node **kids;      /* args / items / body statements / targets */
    size_t nkids;
    jj_node **kw;        /* kwarg values / dict values / defaults */
    const char **kwn;    /* kwarg names / params */
    size_t nkw;
    jj_node *else_body;
};

typedef struct {
    jj_arena arena;
    jj_node *root;
    jj_tokens toks;
} jj_program;

int jj_parse(const char *source, jj_program *prog, char *err, size_t errn);
void jj_program_free(jj_program *p);

/* ---- render ---- */

/* Renders prog with the given top-level variables. On success *out is a
 * malloc'd string. On error returns -1 and writes a message into err. */
int jj_render(const jj_program *prog, const json_t *vars, const jj_limits *lim, char **out, char *err,
              size_t errn);

/* ---- shared by eval / filters / methods ---- */
typedef struct {
    jj_val *pos;
    size_t npos;
    const char **kwn;
    jj_val *kwv;
    size_t nkw;
} jj_args;

int jj_error(jj_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jj_arena *jj_ctx_arena(jj_ctx *c);
size_t jj_max_output(const jj_ctx *c);
int jj_step(jj_ctx *c); /* counts work; -1 when over JJ_MAX_STEPS */
/* Argument i (positional) or keyword `name`; NULL if absent. */
const jj_val *jj_arg(const jj_args *a, size_t i, const char *name);

int jj_apply_filter(jj_ctx *c, const char *name, jj_val in, const jj_args *a, jj_val *out);
int jj_apply_test(jj_ctx *c, const char *name, jj_val in, const jj_args *a, bool *out);
bool jj_has_test(const char *name);
bool jj_has_filter(const char *name);
int jj_call_value(jj_ctx *c, jj_val f, const jj_args *a, jj_val *out);
int jj_call_method(jj_ctx *c, const jj_method *m, const jj_args *a, jj_val *out);
int jj_call_global(jj_ctx *c, int fn, const jj_args *a, jj_val *out);
/* obj.name lookup (Python attribute first, then item, as Jinja's getattr). */
int jj_getattr(jj_ctx *c, jj_val obj, const char *name, jj_val *out);
int jj_getitem(jj_ctx *c, jj_val obj, jj_val key, jj_val *out);
int jj_lookup_global(const char *name, jj_val *out);
int jj_loop_attr(jj_ctx *c, const jj_loop *l, const char *name, jj_val *out);
int jj_call_macro(jj_ctx *c, const jj_macro *m, const jj_args *a, const jj_macro *caller, jj_val *out);
int jj_macro_repr(vc_strbuf *sb, const jj_macro *m);

enum { JJ_FN_RANGE = 1, JJ_FN_NAMESPACE, JJ_FN_DICT, JJ_FN_RAISE, JJ_FN_STRFTIME };

#endif
