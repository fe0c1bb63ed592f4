/* tok_normalize — HF normalizers on whole text segments. */
#include "base/err.h"
#include "tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

void tok_norm_free(tok_norm *n) {
    if (!n) return;
    tok_regex_free(n->pat);
    free(n->content);
    for (size_t i = 0; i < n->n_items; i++) tok_norm_free(&n->items[i]);
    free(n->items);
    memset(n, 0, sizeof *n);
}

static bool all_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

/* Code points that are NFC (NFC_QC=Yes), have combining class 0 and are
 * never the second char of a canonical composition: a text made only of
 * them is already NFC. Checked against the Unicode 14 data. */
static bool nfc_inert(uint32_t c) {
    return c < 0x300 || (c >= 0x400 && c <= 0x482) || (c >= 0x5D0 && c <= 0x5EA) || (c >= 0x621 && c <= 0x64A) ||
           (c >= 0x2010 && c <= 0x2027) || (c >= 0x2030 && c <= 0x205E) || (c >= 0x3000 && c <= 0x3029) ||
           (c >= 0x3041 && c <= 0x3096) || (c >= 0x30A1 && c <= 0x30FA) || (c >= 0x4E00 && c <= 0x9FFF) ||
           (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0x1F300 && c <= 0x1FAFF);
}

static bool nfc_quick(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t l = tok_utf8_len(s + i, n - i, &cp);
        if (!l || !nfc_inert(cp)) return false;
        i += l;
    }
    return true;
}

static int norm_unicode(tok_norm_type t, const char *s, size_t n, vc_strbuf *out) {
    if (all_ascii(s, n) || (t == TN_NFC && nfc_quick(s, n))) { /* unchanged by this normal form */
        vc_sb_append(out, s, n);
        return 0;
    }
    int opts = UTF8PROC_STABLE;
    switch (t) {
    case TN_NFC: opts |= UTF8PROC_COMPOSE; break;
    case TN_NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case TN_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      (utf8proc_option_t)opts);
    if (r < 0) return vc_err_set(VC_ERR_INVALID, "tokenizer: normalization failed: %s", utf8proc_errmsg(r));
    vc_sb_append(out, (const char *)dst, (size_t)r);
    free(dst);
    return 0;
}

static void norm_lower(const char *s, size_t n, vc_strbuf *out) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = tok_utf8_len(s + i, n - i, &cp);
        if (!l) { /* callers validate UTF-8; keep bytes as they are */
            vc_sb_putc(out, s[i++]);
            continue;
        }
        if (cp == 0x130) { /* İ lowercases to two chars: i + combining dot */
            vc_sb_append(out, "i\xCC\x87", 3);
        } else {
            utf8proc_uint8_t buf[4];
            utf8proc_ssize_t k = utf8proc_encode_char(utf8proc_tolower((utf8proc_int32_t)cp), buf);
            vc_sb_append(out, (const char *)buf, (size_t)k);
        }
        i += l;
    }
}

static void norm_strip(const tok_norm *nm, const char *s, size_t n, vc_strbuf *out) {
    size_t a = 0, b = n;
    if (nm->strip_left) {
        while (a < b) {
            uint32_t cp;
            size_t l = tok_utf8_len(s + a, b - a, &cp);
            if (!l || !tok_is_whitespace(cp)) break;
            a += l;
        }
    }
    if (nm->strip_right) {
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
            uint32_t cp;
            size_t l = tok_utf8_len(s + st, b - st, &cp);
            if (!l || st + l != b || !tok_is_whitespace(cp)) break;
            b = st;
        }
    }
    vc_sb_append(out, s + a, b - a);
}

static int norm_replace(const tok_norm *nm, const char *s, size_t n, vc_strbuf *out) {
    size_t pos = 0, last = 0;
    while (pos <= n) {
        size_t ms, me;
        int r = tok_regex_find(nm->pat, s, n, pos, &ms, &me);
        if (r < 0) return r;
        if (r == 0) break;
        if (me == ms) { /* empty match: replace nothing, step one char */
            size_t l = ms < n ? tok_utf8_len(s + ms, n - ms, NULL) : 1;
            pos = ms + (l ? l : 1);
            continue;
        }
        vc_sb_append(out, s + last, ms - last);
        vc_sb_append(out, nm->content, nm->content_n);
        last = pos = me;
    }
    vc_sb_append(out, s + last, n - last);
    return 0;
}

static int norm_one(const tok_norm *nm, const char *s, size_t n, vc_strbuf *out) {
    switch (nm->type) {
    case TN_NFC:
    case TN_NFD:
    case TN_NFKC:
    case TN_NFKD: return norm_unicode(nm->type, s, n, out);
    case TN_LOWER: norm_lower(s, n, out); return 0;
    case TN_STRIP: norm_strip(nm, s, n, out); return 0;
    case TN_REPLACE: return norm_replace(nm, s, n, out);
    case TN_PREPEND:
        if (n) vc_sb_append(out, nm->content, nm->content_n);
        vc_sb_append(out, s, n);
        return 0;
    case TN_APPEND:
        vc_sb_append(out, s, n);
        if (n) vc_sb_append(out, nm->content, nm->content_n);
        return 0;
    case TN_SEQ: {
        vc_strbuf a = {0}, b = {0};
        vc_sb_append(&a, s, n);
        for (size_t i = 0; i < nm->n_items; i++) {
            vc_sb_clear(&b);
            vc_sb_append(&b, "", 0);
            if (norm_one(&nm->items[i], a.s, a.len, &b) < 0) {
                vc_sb_free(&a);
                vc_sb_free(&b);
                return -1;
            }
            vc_strbuf t = a;
            a = b;
            b = t;
        }
        vc_sb_append(out, a.s, a.len);
        vc_sb_free(&a);
        vc_sb_free(&b);
        return 0;
    }
    }
    return vc_err_set(VC_ERR_UNSUPPORTED, "tokenizer: unknown normalizer");
}

int tok_norm_apply(const tok_norm *nm, const char *s, size_t len, vc_strbuf *out) {
    vc_sb_clear(out);
    vc_sb_append(out, "", 0);
    if (!nm) {
        vc_sb_append(out, s, len);
        return 0;
    }
    return norm_one(nm, s, len, out);
}
