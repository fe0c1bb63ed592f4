/* tok_json — a small, fast read-only JSON DOM for tokenizer.json (internal).
 *
 * jansson needs ~0.6 s for an 11 MB tokenizer.json on our machines; the
 * loader budget is 200 ms. This parser makes one pass over the buffer into
 * a flat node array (28 bytes a node); strings stay views into the caller's
 * buffer and are unescaped only on request.
 *
 *   tj_doc d; if (tj_parse(&d, buf, len, "tokenizer.json") < 0) -> vc_err_msg()
 *   uint32_t m = tj_get(&d, 0, "model");        // 0 = absent (root is node 0)
 *   for (uint32_t c = tj_child(&d, m); c; c = tj_next(&d, c)) ...
 *   tj_free(&d);
 */
#ifndef TOK_JSON_H
#define TOK_JSON_H

#include "base/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ } tj_type;

typedef struct {
    uint8_t type;    /* tj_type */
    uint8_t esc;     /* string value contains backslash escapes */
    uint8_t key_esc; /* member key contains escapes */
    uint32_t next;   /* next sibling, 0 = none */
    uint32_t child;  /* first child (ARR/OBJ), 0 = none */
    uint32_t n;      /* children (ARR/OBJ) or raw byte length (STR/NUM) */
    uint32_t off;    /* raw value start in the buffer (after the quote) */
    uint32_t key_off, key_n; /* member key (objects only) */
} tj_node;

typedef struct {
    const char *buf;
    size_t len;
    tj_node *nodes;
    uint32_t n_nodes, cap;
} tj_doc;

/* Parse `buf[0..len)` (kept alive by the caller). Errors name `what`. */
int tj_parse(tj_doc *d, const char *buf, size_t len, const char *what);
void tj_free(tj_doc *d);

static inline const tj_node *tj_node_at(const tj_doc *d, uint32_t i) { return &d->nodes[i]; }
static inline int tj_type_of(const tj_doc *d, uint32_t i) { return d->nodes[i].type; }
static inline uint32_t tj_child(const tj_doc *d, uint32_t i) { return d->nodes[i].child; }
static inline uint32_t tj_next(const tj_doc *d, uint32_t i) { return d->nodes[i].next; }
static inline uint32_t tj_len(const tj_doc *d, uint32_t i) { return d->nodes[i].n; }

/* Member `key` of object node `obj`; 0 when absent, not an object, or null. */
uint32_t tj_get(const tj_doc *d, uint32_t obj, const char *key);
/* Element `idx` of an array; 0 when out of range. */
uint32_t tj_at(const tj_doc *d, uint32_t arr, uint32_t idx);

/* String value of node `i` (must be TJ_STR): a view when it has no escapes,
 * else unescaped into `scratch` (cleared first). Returns -1 on bad escapes. */
int tj_str(const tj_doc *d, uint32_t i, vc_strbuf *scratch, const char **s, size_t *n);
/* The key of member node `i`, same rules. */
int tj_key(const tj_doc *d, uint32_t i, vc_strbuf *scratch, const char **s, size_t *n);
/* Compare a string node to a C string (false if not a string). */
bool tj_str_eq(const tj_doc *d, uint32_t i, const char *s);
/* Malloc'd NUL-terminated copy of a string node, NULL if not a string. */
char *tj_strdup(const tj_doc *d, uint32_t i);
/* Numbers: false if not a number or out of range. */
bool tj_i64(const tj_doc *d, uint32_t i, int64_t *out);
bool tj_f64(const tj_doc *d, uint32_t i, double *out);
/* true/false nodes; `def` when absent (i == 0) or null. */
bool tj_bool(const tj_doc *d, uint32_t i, bool def);

#endif
