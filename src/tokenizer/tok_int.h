/* tok_int — internal structures of the tokenizer module (not a public API).
 *
 * Encoding pipeline (mirrors HF tokenizers):
 *   text -> split on non-normalized added tokens
 *        -> per text segment: normalizer -> split on normalized added tokens
 *        -> pre-tokenizer (list of pieces) -> model (BPE) -> ids
 *        -> post-processor (prefix/suffix special ids) when add_special.
 * Decoding: ids -> token strings (skipping specials on request) -> decoder
 * chain on the list of strings -> concatenation.
 */
#ifndef TOK_INT_H
#define TOK_INT_H

#include "base/strbuf.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *s;
    uint32_t n;
} tok_str;

/* ---- hash maps (tok_util.c) ---- */

/* Open-addressing map string -> id; the keys live in a caller table
 * (table[id] is the key of id). A slot also holds the key's length and
 * first bytes, so a probe rarely has to read the key string itself
 * (loading a vocabulary is bound by these cache misses). */
#define TOK_SLOT_KEY 11
typedef struct {
    uint32_t id1;            /* id + 1, 0 = empty */
    uint8_t len;             /* key length, 255 = 255 or more */
    char key[TOK_SLOT_KEY];  /* first bytes of the key */
} tok_strslot;

typedef struct {
    tok_strslot *slots;
    uint32_t mask;
} tok_strmap;

int tok_strmap_init(tok_strmap *m, size_t n_expected);
void tok_strmap_free(tok_strmap *m);
int32_t tok_strmap_get(const tok_strmap *m, const tok_str *table, const char *s, size_t n);
/* Inserts id (key = table[id]); an existing equal key is replaced. */
void tok_strmap_put(tok_strmap *m, const tok_str *table, int32_t id);

/* Open-addressing map u64 -> u64 (BPE merges: (left<<32|right) -> (rank<<32|new_id);
 * also the added-token trie edges). */
typedef struct {
    uint64_t k, v; /* k == UINT64_MAX: empty */
} tok_u64slot;

typedef struct {
    tok_u64slot *slots; /* key and value side by side: one cache line per probe */
    uint32_t mask;
    size_t n;
} tok_u64map;

int tok_u64map_init(tok_u64map *m, size_t n_expected);
void tok_u64map_free(tok_u64map *m);
bool tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val);
/* Inserts or overwrites: 1 if new, 0 if replaced, <0 on OOM. */
int tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val);

uint64_t tok_hash(const char *s, size_t n);

/* ---- UTF-8 and Unicode helpers (tok_util.c) ---- */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid. */
size_t tok_utf8_len(const char *s, size_t n, uint32_t *cp);
bool tok_utf8_valid(const char *s, size_t n);
/* Appends bytes to sb, replacing invalid sequences by U+FFFD the way
 * Rust's String::from_utf8_lossy does (one per maximal invalid subpart). */
void tok_utf8_lossy(vc_strbuf *sb, const uint8_t *p, size_t n);
bool tok_is_whitespace(uint32_t cp);   /* Rust char::is_whitespace */
bool tok_is_alnum(uint32_t cp);        /* Rust char::is_alphanumeric */
bool tok_is_numeric(uint32_t cp);      /* Rust char::is_numeric */
bool tok_is_punct(uint32_t cp);        /* ASCII punct or Unicode P* */

/* GPT-2 byte <-> unicode alphabet. */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); /* -1 if not in the alphabet */

/* ---- regex (tok_util.c) ---- */
typedef struct tok_regex tok_regex;
/* literal: match the pattern as a plain string. Errors name `what`. */
tok_regex *tok_regex_new(const char *pat, size_t n, bool literal, const char *what);
void tok_regex_free(tok_regex *re);
/* Leftmost-first non-empty match in s[from..n): returns 1 and the span,
 * 0 if none, <0 on a matcher failure. */
int tok_regex_find(const tok_regex *re, const char *s, size_t n, size_t from, size_t *ms, size_t *me);

/* ---- normalizers (tok_normalize.c) ---- */
typedef enum {
    TN_NFC, TN_NFD, TN_NFKC, TN_NFKD, TN_LOWER, TN_STRIP, TN_REPLACE, TN_PREPEND, TN_APPEND, TN_SEQ
} tok_norm_type;

typedef struct tok_norm {
    tok_norm_type type;
    bool strip_left, strip_right;
    tok_regex *pat;      /* REPLACE */
    char *content;       /* REPLACE content, PREPEND/APPEND string */
    size_t content_n;
    struct tok_norm *items; /* SEQ */
    size_t n_items;
} tok_norm;

void tok_norm_free(tok_norm *n);
/* out = normalize(s); out is cleared first. */
int tok_norm_apply(const tok_norm *n, const char *s, size_t len, vc_strbuf *out);

/* ---- pieces: substrings produced by pre-tokenization ---- */
typedef struct {
    size_t off, len; /* into the arena */
    bool at_start;   /* begins at offset 0 of the original input */
} tok_piece;

typedef struct {
    vc_strbuf arena;
    tok_piece *v;
    size_t n, cap;
} tok_pieces;

void tok_pieces_push(tok_pieces *p, size_t off, size_t len, bool at_start);
void tok_pieces_free(tok_pieces *p);

/* ---- pre-tokenizers (tok_pretok.c) ---- */
typedef enum { TB_REMOVED, TB_ISOLATED, TB_MERGED_PREV, TB_MERGED_NEXT, TB_CONTIGUOUS } tok_behavior;
typedef enum { TPS_ALWAYS, TPS_FIRST, TPS_NEVER } tok_prepend_scheme;
typedef enum {
    TP_SPLIT, TP_BYTELEVEL, TP_METASPACE, TP_DIGITS, TP_PUNCT, TP_WHITESPACE, TP_WSSPLIT, TP_SEQ
} tok_pretok_type;

typedef struct tok_pretok {
    tok_pretok_type type;
    tok_regex *re;       /* SPLIT pattern, BYTELEVEL/WHITESPACE regex */
    tok_behavior behavior;
    bool invert;
    bool add_prefix_space, use_regex; /* BYTELEVEL */
    char repl[8];        /* METASPACE replacement (UTF-8) */
    size_t repl_n;
    tok_prepend_scheme scheme;
    bool split;          /* METASPACE */
    bool individual_digits;
    struct tok_pretok *items;
    size_t n_items;
} tok_pretok;

void tok_pretok_free(tok_pretok *p);
/* Rewrites `p` in place (new pieces appended to its arena). */
int tok_pretok_apply(const tok_pretok *pt, tok_pieces *p);

/* ---- model (tok_bpe.c) ---- */
typedef struct {
    tok_str *vocab;       /* [n_vocab] model token strings (id-indexed; s==NULL: hole) */
    size_t n_vocab;
    tok_strmap vmap;
    tok_u64map merges;    /* (a<<32|b) -> (rank<<32|new_id) */
    int32_t unk_id;       /* -1: none */
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256]; /* <0xNN> ids, -1 if absent */
    int32_t *cp_ids;      /* [TOK_CP_DIRECT] id of the 1-char token for small code points, -1 */
    struct tok_cache *cache; /* word -> ids, shared by all threads (tok_bpe.c) */
} tok_model;
#define TOK_CP_DIRECT 0x800

typedef struct {
    int32_t *v;
    size_t n, cap;
} tok_ids;

int tok_ids_push(tok_ids *a, int32_t id);

/* Per-call scratch space for BPE (symbol lists and the merge heap). */
typedef struct tok_bpe_ws tok_bpe_ws;
tok_bpe_ws *tok_bpe_ws_new(void);
void tok_bpe_ws_free(tok_bpe_ws *w);

int tok_model_finish(tok_model *m); /* builds cp_ids / byte_ids after vocab load */
void tok_model_free(tok_model *m);
int tok_bpe_encode_word(const tok_model *m, tok_bpe_ws *w, const char *s, size_t n, tok_ids *out);

/* ---- decoders (tok_decode.c) ---- */
typedef enum { TD_BYTELEVEL, TD_REPLACE, TD_BYTEFALLBACK, TD_FUSE, TD_STRIP, TD_METASPACE, TD_SEQ } tok_dec_type;

typedef struct tok_dec {
    tok_dec_type type;
    char *pat, *content; /* REPLACE (string pattern) */
    size_t pat_n, content_n;
    uint32_t strip_cp;   /* STRIP content char */
    int start, stop;     /* STRIP */
    char repl[8];        /* METASPACE */
    size_t repl_n;
    tok_prepend_scheme scheme;
    struct tok_dec *items;
    size_t n_items;
} tok_dec;

void tok_dec_free(tok_dec *d);

/* ---- added tokens ---- */
typedef struct {
    int32_t id;
    char *content;
    size_t n;
    bool special, lstrip, rstrip, normalized, single_word;
} tok_added;

/* Byte trie over added-token contents (leftmost-longest matching). */
typedef struct {
    tok_u64map edges;  /* (node<<8|byte) -> child node */
    int32_t *term;     /* [n_nodes] index into added[] or -1 */
    uint32_t n_nodes, cap;
    uint8_t first[256]; /* bytes that can start a match */
    bool empty;
} tok_trie;

struct tok_tokenizer {
    char *name;          /* path for messages */
    tok_model model;
    tok_str *tokens;     /* [n_tokens] id -> string (added tokens override vocab) */
    uint8_t *special;    /* [n_tokens] 1 if the id is a special token */
    size_t n_tokens;
    tok_strmap addmap;   /* added-token content -> id (over tokens[]) */
    char *arena;         /* owns token strings from the loaders */
    tok_added *added;
    size_t n_added;
    tok_trie trie_raw, trie_norm; /* non-normalized / normalized added tokens */
    char **norm_added;   /* normalized content of normalized added tokens */
    tok_norm *norm;
    tok_pretok *pretok;
    tok_dec *dec;
    int32_t *post_prefix, *post_suffix; /* added around a single sequence */
    size_t n_post_prefix, n_post_suffix;
    int32_t bos_id, unk_id, pad_id;
    int32_t *eos_ids;
    size_t n_eos;
    char *bos_str, *eos_str, *chat_template;
};

/* tok_encode.c */
int tok_trie_build(tok_trie *t, const tok_tokenizer *tk, bool normalized);
void tok_trie_free(tok_trie *t);
/* tok_core.c: shared finishing step of every loader (tables, tries). */
int tok_finish(tok_tokenizer *t);
tok_tokenizer *tok_alloc(const char *name);
/* tok_load_json.c */
int tok_parse_tokenizer_json(tok_tokenizer *t, const char *buf, size_t len, const char *what);
/* Sets bos/eos/pad/unk strings and ids and the chat template from
 * tokenizer_config.json text (jansson). */
int tok_apply_config(tok_tokenizer *t, const char *cfg, size_t len, const char *what);
int tok_add_eos(tok_tokenizer *t, int32_t id);

#endif
