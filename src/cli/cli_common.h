/* cli_common — flag value parsing and default-model lookup shared by the
 * subcommands. Errors set vc_err and return < 0. */
#ifndef CLI_COMMON_H
#define CLI_COMMON_H

#include <stddef.h>
#include <stdint.h>

int cli_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_f32(const char *flag, const char *s, float lo, float hi, float *out);
/* The default model: $VLLM_MODEL, else models/<default file> next to the
 * binary's build folder or under the current directory. */
int cli_default_model(char *out, size_t cap);
/* --device NAME: "cpu" or "cuda" (when compiled in). */
int cli_parse_device(const char *s, int *out);

#endif
