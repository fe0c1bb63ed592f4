/* cli_http — a minimal HTTP/1.1 client for the CLI's server clients
 * (vllm chat --url, vllm bench serve): plain http:// only, one request per
 * connection, chunked bodies undone, SSE "data: " lines handed to a
 * callback as they arrive. Errors set vc_err and return < 0. */
#ifndef CLI_HTTP_H
#define CLI_HTTP_H

#include "base/strbuf.h"

#include <stdbool.h>

typedef struct {
    char host[256];
    char port[16];
    const char *key; /* bearer key or NULL */
} cli_http_target;

/* Called for each SSE data payload (after "data: ", without the newline). */
typedef void (*cli_sse_cb)(void *user, const char *data);

int cli_http_parse_url(const char *url, cli_http_target *t);
/* One request. With sse non-NULL and status 200 the body is read as SSE
 * and given to sse line by line; otherwise it is appended to *out. */
int cli_http_call(const cli_http_target *t, const char *method, const char *path, const char *body, cli_sse_cb sse,
                  void *user, int *status, vc_strbuf *out);

#endif
