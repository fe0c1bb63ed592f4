/* log — leveled logging to stderr.
 * Level from env VLLM_LOG_LEVEL (debug|info|warn|error|off), default warn;
 * the CLI may raise it with vc_log_set_level(). */
#ifndef VC_LOG_H
#define VC_LOG_H

#include <stdbool.h>

typedef enum { VC_LOG_DEBUG = 0, VC_LOG_INFO, VC_LOG_WARN, VC_LOG_ERROR, VC_LOG_OFF } vc_log_level;

void vc_log_set_level(vc_log_level lvl);
vc_log_level vc_log_get_level(void);
void vc_log(vc_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define VC_DEBUG(...) vc_log(VC_LOG_DEBUG, __VA_ARGS__)
#define VC_INFO(...) vc_log(VC_LOG_INFO, __VA_ARGS__)
#define VC_WARN(...) vc_log(VC_LOG_WARN, __VA_ARGS__)
#define VC_ERROR(...) vc_log(VC_LOG_ERROR, __VA_ARGS__)

/* VLLM_STEP_TRACE set and not "0": the engine and the model print a line
 * of host times per step (engine_step.c, model_mirror.c). Read once. */
bool vc_step_trace(void);

#endif
