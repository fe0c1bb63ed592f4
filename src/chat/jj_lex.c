/* jj_lex — template source -> tokens, with Jinja2's whitespace rules as
 * transformers configures them: trim_blocks=True (one newline after a
 * block tag or comment is dropped), lstrip_blocks=True (spaces/tabs before
 * a block tag or comment on its own line are dropped), keep_trailing_newline
 * False, and the `-` / `+` modifiers on tags. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jj.h"

typedef struct {
    jj_tokens *t;
    const char *s; /* normalised source */
    size_t n, pos;
    int line;
    bool line_starting; /* the previous match ended with '\n' */
    char *err;
    size_t errn;
} lexer;

static int lerr(lexer *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lerr(lexer *L, const char *fmt, ...) {
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(L->err, L->errn, "template syntax error (line %d): %s", L->line, m);
    return -1;
}

static jj_tok *push(lexer *L, jj_tok_type ty, const char *p, size_t n) {
    jj_tokens *t = L->t;
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 256;
        jj_tok *nt = realloc(t->toks, nc * sizeof *nt);
        if (!nt) return NULL;
        t->toks = nt;
        t->cap = nc;
    }
    jj_tok *k = &t->toks[t->n++];
    memset(k, 0, sizeof *k);
    k->t = ty;
    k->p = p;
    k->n = n;
    k->line = L->line;
    return k;
}

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (L->s[i] == '\n') L->line++;
}

/* length of the Python-whitespace code point at p, 0 if none */
static size_t ws_at(const char *p, size_t n) {
    if (n == 0) return 0;
    uint32_t cp;
    size_t k = jj_utf8_dec(p, n, &cp);
    return jj_py_isspace(cp) ? k : 0;
}

static size_t skip_ws(lexer *L, size_t i) {
    size_t k;
    while ((k = ws_at(L->s + i, L->n - i)) != 0) i += k;
    return i;
}

/* text before a tag, with `-` (rstrip) or lstrip_blocks applied */
static int emit_data(lexer *L, size_t start, size_t end, char sign, bool is_var) {
    size_t e = end;
    if (sign == '-') {
        /* Python rstrip(): walk back over whitespace code points */
        while (e > start) {
            size_t b = e - 1;
            while (b > start && ((unsigned char)L->s[b] & 0xC0) == 0x80) b--;
            if (ws_at(L->s + b, e - b) != e - b) break;
            e = b;
        }
    } else if (sign != '+' && !is_var) {
        size_t lp = start;
        for (size_t i = end; i > start; i--)
            if (L->s[i - 1] == '\n') {
                lp = i;
                break;
            }
        if ((lp > start || L->line_starting) && lp < end) {
            size_t i = lp;
            size_t k;
            while (i < end && (k = ws_at(L->s + i, end - i)) != 0) i += k;
            if (i == end) e = lp;
        }
    }
    if (e > start && !push(L, JT_DATA, L->s + start, e - start)) return lerr(L, "out of memory");
    count_lines(L, start, end);
    return 0;
}

/* Python 'unicode-escape' decoding of a string literal body. */
static int unescape(lexer *L, const char *p, size_t n, jj_tok *tok) {
    vc_strbuf sb = {0};
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch != '\\' || i + 1 >= n) {
            vc_sb_putc(&sb, ch);
            continue;
        }
        char e = p[++i];
        int hex = 0;
        switch (e) {
        case '\n': break;
        case '\\': vc_sb_putc(&sb, '\\'); break;
        case '\'': vc_sb_putc(&sb, '\''); break;
        case '"': vc_sb_putc(&sb, '"'); break;
        case 'a': vc_sb_putc(&sb, '\a'); break;
        case 'b': vc_sb_putc(&sb, '\b'); break;
        case 'f': vc_sb_putc(&sb, '\f'); break;
        case 'n': vc_sb_putc(&sb, '\n'); break;
        case 'r': vc_sb_putc(&sb, '\r'); break;
        case 't': vc_sb_putc(&sb, '\t'); break;
        case 'v': vc_sb_putc(&sb, '\v'); break;
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i + 1 < n && p[i + 1] >= '0' && p[i + 1] <= '7'; k++)
                    v = v * 8 + (uint32_t)(p[++i] - '0');
                jj_utf8_enc(&sb, v);
            } else {
                vc_sb_putc(&sb, '\\');
                vc_sb_putc(&sb, e);
            }
        }
        if (hex) {
            uint32_t v = 0;
            for (int k = 0; k < hex; k++) {
                char h = i + 1 < n ? p[i + 1] : 0;
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) {
                    vc_sb_free(&sb);
                    return lerr(L, "truncated \\%c escape in string literal", e);
                }
                v = v * 16 + (uint32_t)d;
                i++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
                vc_sb_free(&sb);
                return lerr(L, "invalid \\%c escape in string literal", e);
            }
            jj_utf8_enc(&sb, v);
        }
    }
    char *d = jj_alloc(&L->t->strings, sb.len + 1);
    if (!d) {
        vc_sb_free(&sb);
        return lerr(L, "out of memory");
    }
    if (sb.len) memcpy(d, sb.s, sb.len);
    tok->p = d;
    tok->n = sb.len;
    vc_sb_free(&sb);
    return 0;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* digits with single underscores between them; returns end */
static size_t digits(const char *s, size_t i, size_t n) {
    while (i < n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < n && is_digit(s[i + 1]) && i > 0 && is_digit(s[i - 1]))))
        i++;
    return i;
}

static bool is_base_digit(char c, int base) {
    if (base == 16) return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    return c >= '0' && c < '0' + base;
}

static int lex_number(lexer *L, size_t *pi) {
    const char *s = L->s;
    size_t i = *pi, st = i, n = L->n;
    if (s[i] == '0' && i + 2 < n) { /* 0x / 0o / 0b with optional underscores */
        char b = (char)(s[i + 1] | 0x20);
        int base = b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 0;
        size_t j = i + 2;
        if (base && j < n && s[j] == '_') j++;
        if (base && j < n && is_base_digit(s[j], base)) {
            uint64_t v = 0;
            bool ovf = false;
            while (j < n && (is_base_digit(s[j], base) || (s[j] == '_' && j + 1 < n && is_base_digit(s[j + 1], base)))) {
                if (s[j] != '_') {
                    int d = is_digit(s[j]) ? s[j] - '0' : (s[j] | 0x20) - 'a' + 10;
                    if (v > (UINT64_MAX >> 1) / (uint64_t)base) ovf = true;
                    v = v * (uint64_t)base + (uint64_t)d;
                }
                j++;
            }
            if (ovf || v > INT64_MAX) return lerr(L, "integer literal too large");
            jj_tok *t = push(L, JT_INT, s + st, j - st);
            if (!t) return lerr(L, "out of memory");
            t->i = (int64_t)v;
            *pi = j;
            return 0;
        }
    }
    i = digits(s, i, n);
    bool is_float = false;
    if (i + 1 < n && s[i] == '.' && is_digit(s[i + 1])) {
        is_float = true;
        i = digits(s, i + 1, n);
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-')) j++;
        if (j < n && is_digit(s[j])) {
            is_float = true;
            i = digits(s, j, n);
        }
    }
    char buf[128];
    size_t k = 0;
    for (size_t x = st; x < i && k + 1 < sizeof buf; x++)
        if (s[x] != '_') buf[k++] = s[x];
    buf[k] = 0;
    jj_tok *t = push(L, is_float ? JT_FLOAT : JT_INT, s + st, i - st);
    if (!t) return lerr(L, "out of memory");
    if (is_float) t->f = strtod(buf, NULL);
    else {
        char *end;
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (errno || k >= sizeof buf - 1) return lerr(L, "integer literal too large");
        t->i = v;
    }
    *pi = i;
    return 0;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char OPS1[] = "+-/*%~[](){}><=.:|,;";

/* Tokens inside {{ }} or {% %} up to and including the end delimiter. */
static int lex_tag(lexer *L, bool block) {
    const char *s = L->s;
    int depth = 0;
    char closers[JJ_MAX_NEST]; /* expected closing bracket per open one */
    size_t i = L->pos;
    for (;;) {
        i = skip_ws(L, i);
        if (i >= L->n) return lerr(L, "unexpected end of template, expected '%s'", block ? "%}" : "}}");
        char ch = s[i];
        const char *end = block ? "%}" : "}}";
        if (depth == 0) {
            size_t e = 0;
            bool strip = false, keep = false;
            if (ch == '-' && i + 2 < L->n && strncmp(s + i + 1, end, 2) == 0) e = 3, strip = true;
            else if (block && ch == '+' && strncmp(s + i + 1, end, 2) == 0) e = 3, keep = true;
            else if (strncmp(s + i, end, 2) == 0) e = 2;
            if (e) {
                size_t st = i;
                i += e;
                if (strip) i = skip_ws(L, i);
                else if (block && !keep && i < L->n && s[i] == '\n') i++;
                if (!push(L, block ? JT_BLOCK_END : JT_VAR_END, s + st, e)) return lerr(L, "out of memory");
                count_lines(L, st, i);
                L->line_starting = i > 0 && s[i - 1] == '\n';
                L->pos = i;
                return 0;
            }
        }
        if (is_digit(ch)) {
            if (lex_number(L, &i) < 0) return -1;
            continue;
        }
        if (is_name0(ch)) {
            size_t st = i;
            while (i < L->n && (is_name0(s[i]) || is_digit(s[i]))) i++;
            if (!push(L, JT_NAME, s + st, i - st)) return lerr(L, "out of memory");
            continue;
        }
        if (ch == '\'' || ch == '"') {
            size_t st = ++i;
            while (i < L->n && s[i] != ch) {
                if (s[i] == '\\' && i + 1 < L->n) i++;
                i++;
            }
            if (i >= L->n) return lerr(L, "unexpected char %s at %zu", ch == '\'' ? "\"'\"" : "'\"'", st - 1);
            jj_tok *t = push(L, JT_STRING, NULL, 0);
            if (!t || unescape(L, s + st, i - st, t) < 0) return t ? -1 : lerr(L, "out of memory");
            count_lines(L, st, i);
            i++;
            continue;
        }
        size_t oplen = 0;
        for (int k = 0; OPS2[k]; k++)
            if (strncmp(s + i, OPS2[k], 2) == 0) oplen = 2;
        if (!oplen && strchr(OPS1, ch) && ch) oplen = 1;
        if (!oplen) {
            uint32_t cp;
            jj_utf8_dec(s + i, L->n - i, &cp);
            if (cp >= 0x20 && cp < 0x7F) return lerr(L, "unexpected char '%c' at %zu", (char)cp, i);
            return lerr(L, "unexpected char U+%04X at %zu", cp, i);
        }
        if (ch == '(' || ch == '[' || ch == '{') {
            if (depth >= JJ_MAX_NEST) return lerr(L, "template nested too deeply");
            closers[depth++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
        } else if (oplen == 1 && (ch == ')' || ch == ']' || ch == '}')) {
            if (depth == 0) return lerr(L, "unexpected '%c'", ch);
            if (closers[depth - 1] != ch) return lerr(L, "unexpected '%c', expected '%c'", ch, closers[depth - 1]);
            depth--;
        }
        if (!push(L, JT_OP, s + i, oplen)) return lerr(L, "out of memory");
        i += oplen;
    }
}

/* After `{% raw %}`: everything up to `{% endraw %}` is data. */
static int lex_raw(lexer *L) {
    const char *s = L->s;
    size_t i = L->pos;
    for (;;) {
        const char *f = memmem(s + i, L->n - i, "{%", 2);
        if (!f) return lerr(L, "missing end of raw directive");
        size_t t = (size_t)(f - s), j = t + 2;
        char sign = 0;
        if (j < L->n && (s[j] == '-' || s[j] == '+')) sign = s[j++];
        j = skip_ws(L, j);
        if (L->n - j >= 6 && strncmp(s + j, "endraw", 6) == 0) {
            j = skip_ws(L, j + 6);
            size_t e = 0;
            bool strip = false, keep = false;
            if (strncmp(s + j, "-%}", 3) == 0) e = 3, strip = true;
            else if (strncmp(s + j, "+%}", 3) == 0) e = 3, keep = true;
            else if (strncmp(s + j, "%}", 2) == 0) e = 2;
            if (e) {
                if (emit_data(L, L->pos, t, sign, false) < 0) return -1;
                j += e;
                if (strip) j = skip_ws(L, j);
                else if (!keep && j < L->n && s[j] == '\n') j++;
                count_lines(L, t, j);
                L->line_starting = s[j - 1] == '\n';
                L->pos = j;
                return 0;
            }
        }
        i = t + 2;
    }
}

static int lex_all(lexer *L) {
    const char *s = L->s;
    while (L->pos < L->n) {
        size_t st = L->pos, i = st;
        const char *f = NULL;
        while (i + 1 < L->n) {
            f = memchr(s + i, '{', L->n - i - 1);
            if (!f) break;
            char c2 = f[1];
            if (c2 == '{' || c2 == '%' || c2 == '#') break;
            i = (size_t)(f - s) + 1;
            f = NULL;
        }
        if (!f) { /* trailing data */
            if (!push(L, JT_DATA, s + st, L->n - st)) return lerr(L, "out of memory");
            count_lines(L, st, L->n);
            L->pos = L->n;
            break;
        }
        size_t t = (size_t)(f - s);
        char kind = f[1];
        size_t j = t + 2;
        char sign = 0;
        if (j < L->n && (s[j] == '-' || s[j] == '+')) sign = s[j++];
        if (kind == '%') { /* raw? */
            size_t r = skip_ws(L, j);
            if (L->n - r >= 3 && strncmp(s + r, "raw", 3) == 0) {
                size_t q = skip_ws(L, r + 3);
                size_t e = strncmp(s + q, "-%}", 3) == 0 ? 3 : strncmp(s + q, "%}", 2) == 0 ? 2 : 0;
                if (e) {
                    if (emit_data(L, st, t, sign, false) < 0) return -1;
                    q += e;
                    if (e == 3) q = skip_ws(L, q);
                    count_lines(L, t, q);
                    L->line_starting = s[q - 1] == '\n';
                    L->pos = q;
                    if (lex_raw(L) < 0) return -1;
                    continue;
                }
            }
        }
        if (emit_data(L, st, t, sign, kind == '{') < 0) return -1;
        if (kind == '#') { /* comment: up to the first #}, with -#} / +#} modifiers */
            const char *c = memmem(s + j, L->n - j, "#}", 2);
            if (!c) return lerr(L, "missing end of comment tag");
            size_t ce = (size_t)(c - s);
            bool strip = ce > j && s[ce - 1] == '-';
            bool keep = ce > j && s[ce - 1] == '+';
            size_t q = ce + 2;
            if (strip) q = skip_ws(L, q);
            else if (!keep && q < L->n && s[q] == '\n') q++;
            count_lines(L, t, q);
            L->line_starting = s[q - 1] == '\n';
            L->pos = q;
            continue;
        }
        if (!push(L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, s + t, j - t)) return lerr(L, "out of memory");
        L->pos = j;
        if (lex_tag(L, kind == '%') < 0) return -1;
    }
    if (!push(L, JT_EOF, s + L->n, 0)) return lerr(L, "out of memory");
    return 0;
}

int jj_lex(const char *source, jj_tokens *out, char *err, size_t errn) {
    memset(out, 0, sizeof *out);
    size_t n = strlen(source);
    char *s = malloc(n + 1);
    if (!s) {
        snprintf(err, errn, "out of memory");
        return -1;
    }
    /* newlines: \r\n and \r -> \n; drop one trailing newline */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (source[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < n && source[i + 1] == '\n') i++;
        } else s[k++] = source[i];
    }
    if (k > 0 && s[k - 1] == '\n') k--;
    s[k] = 0;
    out->src = s;
    lexer L = {.t = out, .s = s, .n = k, .line = 1, .line_starting = true, .err = err, .errn = errn};
    if (lex_all(&L) < 0) {
        jj_tokens_free(out);
        return -1;
    }
    return 0;
}

void jj_tokens_free(jj_tokens *t) {
    free(t->src);
    free(t->toks);
    jj_arena_free(&t->strings);
    memset(t, 0, sizeof *t);
}
