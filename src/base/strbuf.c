#include "base/strbuf.h"

#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sb_reserve(vc_strbuf *sb, size_t extra) {
    if (sb->len + extra + 1 <= sb->cap) return;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1) cap *= 2;
    char *p = realloc(sb->s, cap);
    VC_ASSERT(p != NULL);
    sb->s = p;
    sb->cap = cap;
}

void vc_sb_append(vc_strbuf *sb, const char *p, size_t n) {
    sb_reserve(sb, n);
    if (n) memcpy(sb->s + sb->len, p, n);
    sb->len += n;
    sb->s[sb->len] = 0;
}

void vc_sb_puts(vc_strbuf *sb, const char *s) { vc_sb_append(sb, s, strlen(s)); }
void vc_sb_putc(vc_strbuf *sb, char c) { vc_sb_append(sb, &c, 1); }

void vc_sb_printf(vc_strbuf *sb, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    VC_ASSERT(n >= 0);
    sb_reserve(sb, (size_t)n);
    vsnprintf(sb->s + sb->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    sb->len += (size_t)n;
}

void vc_sb_clear(vc_strbuf *sb) {
    sb->len = 0;
    if (sb->s) sb->s[0] = 0;
}

char *vc_sb_steal(vc_strbuf *sb) {
    if (!sb->s) sb_reserve(sb, 0), sb->s[0] = 0;
    char *s = sb->s;
    sb->s = NULL;
    sb->len = sb->cap = 0;
    return s;
}

void vc_sb_free(vc_strbuf *sb) {
    free(sb->s);
    sb->s = NULL;
    sb->len = sb->cap = 0;
}
