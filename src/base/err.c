#include "base/err.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char g_msg[1024];
static _Thread_local int g_status;

int vc_err_set(int st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    g_status = st;
    return st;
}

int vc_err_prefix(const char *fmt, ...) {
    char pre[512], old[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, g_msg, sizeof old);
    snprintf(g_msg, sizeof g_msg, "%.500s: %.500s", pre, old);
    return g_status;
}

const char *vc_err_msg(void) { return g_msg[0] ? g_msg : "no error"; }
int vc_err_status(void) { return g_status; }
void vc_err_clear(void) { g_msg[0] = 0; g_status = 0; }

const char *vc_status_str(int st) {
    switch (st) {
    case VC_OK: return "ok";
    case VC_ERR_INVALID: return "invalid argument";
    case VC_ERR_IO: return "i/o error";
    case VC_ERR_FORMAT: return "format error";
    case VC_ERR_OOM: return "out of memory";
    case VC_ERR_UNSUPPORTED: return "unsupported";
    case VC_ERR_RUNTIME: return "runtime error";
    default: return "unknown error";
    }
}
