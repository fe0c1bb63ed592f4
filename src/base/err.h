/* err — status codes and the thread-local error message.
 *
 * Two kinds of failure (STYLE.md 6):
 *  - internal invariants: VC_ASSERT(cond) aborts with file:line;
 *  - anything from outside (files, requests, flags, devices): return a
 *    negative vc_status and record a message with vc_err_set(); the caller
 *    reads it with vc_err_msg(). Never assert on data a user sent.
 */
#ifndef VC_ERR_H
#define VC_ERR_H

#include <stdio.h>
#include <stdlib.h>

typedef enum {
    VC_OK = 0,
    VC_ERR_INVALID = -1,     /* bad argument / request / flag */
    VC_ERR_IO = -2,          /* open/read/mmap failed */
    VC_ERR_FORMAT = -3,      /* malformed file or data */
    VC_ERR_OOM = -4,         /* allocation failed */
    VC_ERR_UNSUPPORTED = -5, /* valid but not implemented (dtype, arch, op) */
    VC_ERR_RUNTIME = -6      /* device or internal runtime failure */
} vc_status;

/* Record a printf-style message for the current thread; returns `st` so a
 * caller can write `return vc_err_set(VC_ERR_FORMAT, "...")`. */
int vc_err_set(int st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message: "ctx: old message". Returns the last status. */
int vc_err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *vc_err_msg(void);
int vc_err_status(void);
void vc_err_clear(void);
const char *vc_status_str(int st);

#define VC_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: internal error: assertion `%s` failed\n", \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

#endif
