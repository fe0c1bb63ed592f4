/* tok_pretok — HF pre-tokenizers: split a normalized segment into pieces. */
#include "base/err.h"
#include "tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>

void tok_pieces_push(tok_pieces *p, size_t off, size_t len, bool at_start) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        tok_piece *v = realloc(p->v, cap * sizeof *v);
        VC_ASSERT(v != NULL);
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = (tok_piece){off, len, at_start};
}

void tok_pieces_free(tok_pieces *p) {
    vc_sb_free(&p->arena);
    free(p->v);
    memset(p, 0, sizeof *p);
}

void tok_pretok_free(tok_pretok *p) {
    if (!p) return;
    tok_regex_free(p->re);
    for (size_t i = 0; i < p->n_items; i++) tok_pretok_free(&p->items[i]);
    free(p->items);
    memset(p, 0, sizeof *p);
}

/* A split of a piece: [s, e) and whether it matched the pattern. */
typedef struct {
    size_t s, e;
    bool m;
} seg;

typedef struct {
    seg *v;
    size_t n, cap;
} segs;

static void segs_push(segs *a, size_t s, size_t e, bool m) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 32;
        seg *v = realloc(a->v, cap * sizeof *v);
        VC_ASSERT(v != NULL);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (seg){s, e, m};
}

/* Regex matches of s[0..n) as covering segments (pattern.rs semantics). */
static int find_regex(const tok_regex *re, const char *s, size_t n, segs *out) {
    out->n = 0;
    size_t prev = 0, pos = 0;
    while (pos <= n) {
        size_t ms, me;
        int r = tok_regex_find(re, s, n, pos, &ms, &me);
        if (r < 0) return r;
        if (r == 0) break;
        if (prev != ms) segs_push(out, prev, ms, false);
        segs_push(out, ms, me, true);
        prev = me;
        if (me == ms) {
            if (ms >= n) break;
            size_t l = tok_utf8_len(s + ms, n - ms, NULL);
            pos = ms + (l ? l : 1);
        } else {
            pos = me;
        }
    }
    if (prev != n) segs_push(out, prev, n, false);
    return 0;
}

typedef bool (*cp_pred)(uint32_t);

static void find_chars(cp_pred pred, const char *s, size_t n, segs *out) {
    out->n = 0;
    size_t last = 0, i = 0;
    while (i < n) {
        uint32_t cp = 0;
        size_t l = tok_utf8_len(s + i, n - i, &cp);
        if (!l) l = 1;
        if (pred(cp)) {
            if (last < i) segs_push(out, last, i, false);
            segs_push(out, i, i + l, true);
            last = i + l;
        }
        i += l;
    }
    if (n > last) segs_push(out, last, n, false);
}

/* Applies a split behavior (normalizer.rs split) and appends the kept,
 * non-empty pieces of parent piece `pc` to `out`. */
static void emit_behavior(segs *sg, tok_behavior b, bool invert, const tok_piece *pc, tok_pieces *out) {
    if (invert)
        for (size_t i = 0; i < sg->n; i++) sg->v[i].m = !sg->v[i].m;
    segs r = {0};
    bool prev = false;
    switch (b) {
    case TB_ISOLATED:
        for (size_t i = 0; i < sg->n; i++) segs_push(&r, sg->v[i].s, sg->v[i].e, false);
        break;
    case TB_REMOVED:
        for (size_t i = 0; i < sg->n; i++) segs_push(&r, sg->v[i].s, sg->v[i].e, sg->v[i].m);
        break;
    case TB_CONTIGUOUS:
        for (size_t i = 0; i < sg->n; i++) {
            if (sg->v[i].m == prev && r.n) r.v[r.n - 1].e = sg->v[i].e;
            else segs_push(&r, sg->v[i].s, sg->v[i].e, false);
            prev = sg->v[i].m;
        }
        break;
    case TB_MERGED_PREV:
        for (size_t i = 0; i < sg->n; i++) {
            if (sg->v[i].m && !prev && r.n) r.v[r.n - 1].e = sg->v[i].e;
            else segs_push(&r, sg->v[i].s, sg->v[i].e, false);
            prev = sg->v[i].m;
        }
        break;
    case TB_MERGED_NEXT:
        for (size_t k = sg->n; k-- > 0;) {
            if (sg->v[k].m && !prev && r.n) r.v[r.n - 1].s = sg->v[k].s;
            else segs_push(&r, sg->v[k].s, sg->v[k].e, false);
            prev = sg->v[k].m;
        }
        for (size_t i = 0; i < r.n / 2; i++) {
            seg t = r.v[i];
            r.v[i] = r.v[r.n - 1 - i];
            r.v[r.n - 1 - i] = t;
        }
        break;
    }
    for (size_t i = 0; i < r.n; i++) {
        if (r.v[i].m || r.v[i].e == r.v[i].s) continue;
        tok_pieces_push(out, pc->off + r.v[i].s, r.v[i].e - r.v[i].s, pc->at_start && r.v[i].s == 0);
    }
    free(r.v);
}

/* Appends `n` bytes to the arena and returns their offset. The arena may
 * move: callers re-read p->arena.s afterwards. */
static size_t arena_add(tok_pieces *p, const char *s, size_t n) {
    size_t off = p->arena.len;
    vc_sb_append(&p->arena, s, n);
    return off;
}

static void swap_out(tok_pieces *p, tok_pieces *np) {
    free(p->v);
    p->v = np->v;
    p->n = np->n;
    p->cap = np->cap;
}

static int pretok_one(const tok_pretok *pt, tok_pieces *p) {
    tok_pieces np = {0};
    segs sg = {0};
    int rc = 0;
    switch (pt->type) {
    case TP_SEQ:
        for (size_t i = 0; i < pt->n_items && rc == 0; i++) rc = pretok_one(&pt->items[i], p);
        return rc;
    case TP_SPLIT:
    case TP_WHITESPACE:
        for (size_t i = 0; i < p->n && rc == 0; i++) {
            const tok_piece *pc = &p->v[i];
            rc = find_regex(pt->re, p->arena.s + pc->off, pc->len, &sg);
            if (rc == 0) emit_behavior(&sg, pt->behavior, pt->invert, pc, &np);
        }
        break;
    case TP_DIGITS:
    case TP_PUNCT:
    case TP_WSSPLIT: {
        cp_pred pred = pt->type == TP_DIGITS ? tok_is_numeric
                       : pt->type == TP_PUNCT ? tok_is_punct : tok_is_whitespace;
        tok_behavior b = pt->type == TP_DIGITS ? (pt->individual_digits ? TB_ISOLATED : TB_CONTIGUOUS)
                         : pt->type == TP_PUNCT ? pt->behavior : TB_REMOVED;
        for (size_t i = 0; i < p->n; i++) {
            find_chars(pred, p->arena.s + p->v[i].off, p->v[i].len, &sg);
            emit_behavior(&sg, b, false, &p->v[i], &np);
        }
        break;
    }
    case TP_METASPACE: {
        tok_pieces mid = {0};
        for (size_t i = 0; i < p->n; i++) {
            tok_piece pc = p->v[i];
            size_t off = p->arena.len;
            bool starts = pc.len >= pt->repl_n && !memcmp(p->arena.s + pc.off, pt->repl, pt->repl_n);
            /* a leading space becomes the replacement too */
            if (!starts && pc.len && p->arena.s[pc.off] == ' ') starts = true;
            bool pre = pt->scheme == TPS_ALWAYS ? !starts
                       : pt->scheme == TPS_FIRST ? (!starts && pc.at_start) : false;
            if (pre) arena_add(p, pt->repl, pt->repl_n);
            for (size_t k = 0; k < pc.len; k++) {
                char c = p->arena.s[pc.off + k];
                if (c == ' ') arena_add(p, pt->repl, pt->repl_n);
                else arena_add(p, &c, 1);
            }
            tok_pieces_push(&mid, off, p->arena.len - off, pc.at_start);
        }
        if (pt->split) {
            for (size_t i = 0; i < mid.n; i++) {
                const tok_piece *pc = &mid.v[i];
                const char *s = p->arena.s + pc->off;
                sg.n = 0;
                size_t last = 0, k = 0;
                while (k < pc->len) {
                    if (pc->len - k >= pt->repl_n && !memcmp(s + k, pt->repl, pt->repl_n)) {
                        if (last < k) segs_push(&sg, last, k, false);
                        segs_push(&sg, k, k + pt->repl_n, true);
                        k += pt->repl_n;
                        last = k;
                    } else {
                        k++;
                    }
                }
                if (pc->len > last) segs_push(&sg, last, pc->len, false);
                emit_behavior(&sg, TB_MERGED_NEXT, false, pc, &np);
            }
            free(mid.v);
        } else {
            np.v = mid.v, np.n = mid.n, np.cap = mid.cap;
        }
        break;
    }
    case TP_BYTELEVEL: {
        tok_pieces mid = {0};
        for (size_t i = 0; i < p->n; i++) {
            tok_piece pc = p->v[i];
            if (pt->add_prefix_space && !(pc.len && p->arena.s[pc.off] == ' ')) {
                char *copy = malloc(pc.len + 1); /* the arena may move while it grows */
                if (!copy) {
                    rc = vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
                    break;
                }
                memcpy(copy, p->arena.s + pc.off, pc.len);
                size_t off = arena_add(p, " ", 1);
                vc_sb_append(&p->arena, copy, pc.len);
                free(copy);
                pc.off = off;
                pc.len += 1;
            }
            tok_pieces_push(&mid, pc.off, pc.len, pc.at_start);
        }
        if (pt->use_regex) {
            for (size_t i = 0; i < mid.n && rc == 0; i++) {
                rc = find_regex(pt->re, p->arena.s + mid.v[i].off, mid.v[i].len, &sg);
                if (rc == 0) emit_behavior(&sg, TB_ISOLATED, false, &mid.v[i], &np);
            }
            free(mid.v);
        } else {
            np.v = mid.v, np.n = mid.n, np.cap = mid.cap;
        }
        /* map bytes to the printable alphabet */
        char stack[512];
        for (size_t i = 0; i < np.n && rc == 0; i++) {
            size_t len = np.v[i].len, k = 0;
            char *buf = len * 2 <= sizeof stack ? stack : malloc(len * 2);
            if (!buf) {
                rc = vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
                break;
            }
            const uint8_t *src = (const uint8_t *)p->arena.s + np.v[i].off;
            for (size_t j = 0; j < len; j++) {
                uint32_t cp = tok_byte_to_cp(src[j]); /* < U+0144: one or two bytes */
                if (cp < 0x80) {
                    buf[k++] = (char)cp;
                } else {
                    buf[k++] = (char)(0xC0 | (cp >> 6));
                    buf[k++] = (char)(0x80 | (cp & 0x3F));
                }
            }
            np.v[i].off = arena_add(p, buf, k);
            np.v[i].len = k;
            if (buf != stack) free(buf);
        }
        break;
    }
    }
    free(sg.v);
    if (rc < 0) {
        free(np.v);
        return rc;
    }
    swap_out(p, &np);
    return 0;
}

int tok_pretok_apply(const tok_pretok *pt, tok_pieces *p) {
    if (!pt) return 0;
    return pretok_one(pt, p);
}
