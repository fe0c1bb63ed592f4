#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_level = -1;

static vc_log_level level_from_env(void) {
    const char *s = getenv("VLLM_LOG_LEVEL");
    if (!s) return VC_LOG_WARN;
    if (!strcmp(s, "debug")) return VC_LOG_DEBUG;
    if (!strcmp(s, "info")) return VC_LOG_INFO;
    if (!strcmp(s, "warn")) return VC_LOG_WARN;
    if (!strcmp(s, "error")) return VC_LOG_ERROR;
    if (!strcmp(s, "off")) return VC_LOG_OFF;
    return VC_LOG_WARN;
}

void vc_log_set_level(vc_log_level lvl) { g_level = (int)lvl; }

vc_log_level vc_log_get_level(void) {
    if (g_level < 0) g_level = (int)level_from_env();
    return (vc_log_level)g_level;
}

void vc_log(vc_log_level lvl, const char *fmt, ...) {
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    if (lvl < vc_log_get_level() || lvl >= VC_LOG_OFF) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[vllm %s] ", names[lvl]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool vc_step_trace(void) {
    static int on = -1; /* -1: not read yet (a benign race: every reader computes the same value) */
    if (on < 0) {
        const char *e = getenv("VLLM_STEP_TRACE");
        on = e && *e && strcmp(e, "0") != 0;
    }
    return on == 1;
}
