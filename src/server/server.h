/* server — the OpenAI-compatible HTTP front end (vLLM's api_server) over
 * the async engine, on libmicrohttpd.
 *
 *   srv_params p = srv_params_default(); p.port = 8000; p.model_name = "m";
 *   srv_server *s = srv_create(engine, &p);   // NULL -> vc_err_msg(); listening
 *   ... srv_port(s) ...                        // the bound port (p.port 0: ephemeral)
 *   srv_free(s);                               // stops listening, aborts live requests
 *
 * Threads: one per connection (MHD thread-per-connection). A handler
 * submits child requests to the engine and waits on its job's condition
 * variable; the engine callbacks only append deltas to the job's queue and
 * signal (never block). A streaming response pulls deltas from the queue as
 * SSE; a client that disconnects aborts its requests, which frees their KV
 * blocks. Tour of the files:
 *   srv_http.c     daemon, routing, auth, body limits, error JSON
 *   srv_parse.c    request JSON -> srv_gen (validation; fuzzed)
 *   srv_job.c      the engine bridge: child requests, delta queue, refcount
 *   srv_openai.c   /v1/completions, /v1/chat/completions (JSON and SSE)
 *   srv_misc.c     /v1/models, /version, /tokenize, /detokenize
 *   srv_metrics.c  Prometheus /metrics
 *   srv_tools.c    tool-call (hermes) and reasoning (<think>) parsers
 */
#ifndef SRV_SERVER_H
#define SRV_SERVER_H

#include "engine/async_engine.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *host;           /* "127.0.0.1" */
    int port;                   /* 8000; 0 = any free port */
    const char *model_name;     /* served name (required) */
    const char *api_key;        /* NULL: no auth */
    const char *chat_template;  /* template source; NULL: the tokenizer's */
    const char *tool_call_parser; /* NULL or "hermes" */
    const char *reasoning_parser; /* NULL or "deepseek_r1"/"qwen3" (<think>...</think>) */
    size_t max_body_bytes;      /* 4 MiB */
    const char *version;        /* for GET /version */
    /* CORS (vLLM's --allowed-origins / --allow-credentials): a JSON list of
     * origins or a comma-separated list; NULL: ["*"] */
    const char *allowed_origins;
    /* CORS preflight (vLLM's --allowed-methods / --allowed-headers), same
     * forms; NULL: ["*"] */
    const char *allowed_methods, *allowed_headers;
    bool allow_credentials;
    /* HTTPS (vLLM's --ssl-keyfile / --ssl-certfile): PEM files, both or neither */
    const char *ssl_keyfile, *ssl_certfile;
} srv_params;

typedef struct srv_server srv_server;

srv_params srv_params_default(void);
/* Starts listening. The engine must outlive the server. */
srv_server *srv_create(aeng *engine, const srv_params *p);
int srv_port(const srv_server *s);
void srv_free(srv_server *s);

#endif
