/* vllm chat — an interactive terminal chat against an OpenAI-compatible
 * server (--url), or locally: the model is loaded and served in-process on
 * a free loopback port, and the same client talks to it. Replies stream
 * (SSE over HTTP/1.1, chunked or not); the conversation is kept. */
#include "base/err.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "cli/cli_http.h"
#include "engine/async_engine.h"
#include "server/server.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void chat_usage(FILE *f) {
    fprintf(f,
            "usage: vllm chat [--url http://HOST:PORT] [MODEL] [options]\n"
            "  --url URL          talk to a running server (default: load MODEL and serve it in-process)\n"
            "  MODEL, --model P   model for local mode (default: the default model)\n"
            "  --model-name NAME  model name to send (default: the server's first model)\n"
            "  --api-key KEY      bearer key (also $VLLM_API_KEY / $OPENAI_API_KEY)\n"
            "  --system TEXT      a system message\n"
            "  --max-tokens N     per reply (default 512)\n"
            "  --temperature T    default: the server's (1.0)\n"
            "  --threads N        CPU threads in local mode\n"
            "Type a message and Enter; an empty line or Ctrl-D quits.\n");
}

/* SSE payloads of a chat stream: print content (reasoning dimmed). */
static void on_sse(void *user, const char *data) {
    vc_strbuf *reply = user;
    if (!strcmp(data, "[DONE]")) return;
    json_t *j = json_loads(data, 0, NULL);
    json_t *d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    const char *txt = json_string_value(json_object_get(d, "content"));
    const char *rs = json_string_value(json_object_get(d, "reasoning"));
    if (rs) { printf("\033[2m%s\033[0m", rs); fflush(stdout); }
    if (txt) { fputs(txt, stdout); fflush(stdout); vc_sb_puts(reply, txt); }
    json_t *err = json_object_get(j, "error");
    if (err) fprintf(stderr, "\n[error] %s\n", json_string_value(json_object_get(err, "message")));
    json_decref(j);
}

/* Call and turn a non-200 answer into an error with the server's message. */
static int call(const cli_http_target *t, const char *method, const char *path, const char *body, vc_strbuf *reply,
                vc_strbuf *out) {
    int status = 0;
    if (cli_http_call(t, method, path, body, reply ? on_sse : NULL, reply, &status, out) < 0) return -1;
    if (status == 200) return 0;
    json_t *j = json_loads(out->s ? out->s : "", 0, NULL);
    const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    int rc = vc_err_set(VC_ERR_IO, "HTTP %d: %s", status, m ? m : (out->s ? out->s : ""));
    json_decref(j);
    return rc;
}

static int chat_loop(const cli_http_target *t, const char *model_name, const char *system, int64_t max_tokens,
                     float temperature, bool has_temp) {
    vc_strbuf out = {0};
    char *name = model_name ? strdup(model_name) : NULL;
    if (!name) {
        if (call(t, "GET", "/v1/models", NULL, NULL, &out) < 0) return -1;
        json_t *j = json_loads(out.s ? out.s : "", 0, NULL);
        const char *id = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
        name = id ? strdup(id) : NULL;
        json_decref(j);
        vc_sb_free(&out);
        if (!name) return vc_err_set(VC_ERR_IO, "the server lists no model");
    }
    json_t *msgs = json_array();
    if (system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
    char line[8192];
    int rc = 0;
    for (;;) {
        printf("> ");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\n")] = 0;
        if (!line[0]) break;
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", line));
        json_t *req = json_pack("{s:s, s:O, s:b, s:I}", "model", name, "messages", msgs, "stream", 1,
                                "max_tokens", (json_int_t)max_tokens);
        if (has_temp) json_object_set_new(req, "temperature", json_real(temperature));
        char *body = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        vc_strbuf reply = {0};
        vc_sb_clear(&out);
        rc = body ? call(t, "POST", "/v1/chat/completions", body, &reply, &out) : -1;
        free(body);
        printf("\n");
        if (rc < 0) {
            fprintf(stderr, "vllm chat: %s\n", vc_err_msg());
            json_array_remove(msgs, json_array_size(msgs) - 1);
        } else {
            json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content",
                                                  reply.s ? reply.s : ""));
        }
        vc_sb_free(&reply);
    }
    vc_sb_free(&out);
    json_decref(msgs);
    free(name);
    return 0;
}

int cli_chat(int argc, char **argv) {
    eng_params ep = eng_params_default();
    const char *url = NULL, *model_name = NULL, *system = NULL;
    const char *key = getenv("VLLM_API_KEY");
    if (!key) key = getenv("OPENAI_API_KEY");
    int64_t max_tokens = 512, v;
    float temperature = 1.0f;
    bool has_temp = false;
    char defpath[4096];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { chat_usage(stdout); return 0; }
        if (a[0] != '-') { ep.model = a; continue; }
        if (!val) { fprintf(stderr, "vllm chat: %s needs a value\n", a); return 2; }
        int rc = 0;
        if (!strcmp(a, "--url")) url = val;
        else if (!strcmp(a, "--model")) ep.model = val;
        else if (!strcmp(a, "--model-name")) model_name = val;
        else if (!strcmp(a, "--api-key")) key = val;
        else if (!strcmp(a, "--system")) system = val;
        else if (!strcmp(a, "--max-tokens")) rc = cli_parse_i64(a, val, 1, 1 << 24, &max_tokens);
        else if (!strcmp(a, "--temperature")) { rc = cli_parse_f32(a, val, 0.0f, 100.0f, &temperature); has_temp = true; }
        else if (!strcmp(a, "--threads")) { rc = cli_parse_i64(a, val, 1, 1024, &v); ep.n_threads = (int)v; }
        else { fprintf(stderr, "vllm chat: unknown option '%s'\n", a); chat_usage(stderr); return 2; }
        if (rc < 0) { fprintf(stderr, "vllm chat: %s\n", vc_err_msg()); return 2; }
        i++;
    }
    signal(SIGPIPE, SIG_IGN);
    cli_http_target t = {.key = key};
    aeng *a = NULL;
    srv_server *s = NULL;
    int status = 1;
    if (url) {
        if (cli_http_parse_url(url, &t) < 0) { fprintf(stderr, "vllm chat: %s\n", vc_err_msg()); return 2; }
    } else {
        if (!ep.model) {
            if (cli_default_model(defpath, sizeof defpath) < 0) { fprintf(stderr, "vllm chat: %s\n", vc_err_msg()); return 1; }
            ep.model = defpath;
        }
        a = aeng_create(&ep);
        srv_params sp = srv_params_default();
        sp.port = 0;
        sp.model_name = "local";
        sp.version = VLLM_VERSION_STR;
        if (a) s = srv_create(a, &sp);
        if (!s) { fprintf(stderr, "vllm chat: %s\n", vc_err_msg()); goto done; }
        snprintf(t.host, sizeof t.host, "127.0.0.1");
        snprintf(t.port, sizeof t.port, "%d", srv_port(s));
        t.key = NULL;
    }
    if (chat_loop(&t, model_name, system, max_tokens, temperature, has_temp) < 0) {
        fprintf(stderr, "vllm chat: %s\n", vc_err_msg());
        goto done;
    }
    status = 0;
done:
    srv_free(s);
    aeng_free(a);
    return status;
}
