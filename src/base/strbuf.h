/* strbuf — growable byte string (NUL-terminated).
 *   vc_strbuf sb = {0}; vc_sb_puts(&sb, "x"); vc_sb_printf(&sb, "%d", 3);
 *   use sb.s / sb.len; vc_sb_free(&sb);
 * Allocation failure aborts: these buffers are small and internal. */
#ifndef VC_STRBUF_H
#define VC_STRBUF_H

#include <stddef.h>

typedef struct {
    char *s;
    size_t len, cap;
} vc_strbuf;

void vc_sb_append(vc_strbuf *sb, const char *p, size_t n);
void vc_sb_puts(vc_strbuf *sb, const char *s);
void vc_sb_putc(vc_strbuf *sb, char c);
void vc_sb_printf(vc_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vc_sb_clear(vc_strbuf *sb);
char *vc_sb_steal(vc_strbuf *sb); /* returns the malloc'd string, resets sb */
void vc_sb_free(vc_strbuf *sb);

#endif
