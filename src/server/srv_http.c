/* srv_http — the libmicrohttpd daemon: one thread per connection, body
 * accumulation with a size limit, API-key check, routing, and the glue that
 * turns an srv_reply into an MHD response (a buffer, or an SSE stream
 * pulled by a content-reader callback that may block on its job). */
#include "server/srv_internal.h"

#include "base/err.h"
#include "base/log.h"
#include "base/mapfile.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* Per-connection request state (con_cls). */
typedef struct {
    vc_strbuf body;
    bool too_big;
} conn_ctx;

srv_params srv_params_default(void) {
    return (srv_params){.host = "127.0.0.1", .port = 8000, .max_body_bytes = 4u << 20};
}

int srv_port(const srv_server *s) { return s->port; }

void srv_reply_json(srv_reply *r, int status, json_t *j) {
    r->status = status;
    r->content_type = "application/json";
    r->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!r->body) {
        srv_error e;
        srv_err(&e, 500, NULL, "out of memory");
        srv_reply_error(r, &e);
    }
}

void srv_reply_error(srv_reply *r, const srv_error *e) {
    r->status = e->status;
    r->content_type = "application/json";
    free(r->body);
    r->body = srv_error_json(e);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    bool done;
    size_t k = srv_stream_read(cls, buf, max, &done);
    if (done) return MHD_CONTENT_READER_END_OF_STREAM;
    return (ssize_t)k;
}

static void stream_free(void *cls) { srv_stream_free(cls); }

/* ---- CORS, as Starlette's CORSMiddleware behind vLLM: allowed methods and
 * headers "*"; a request from an allowed Origin gets Access-Control-Allow-
 * Origin ("*" when any origin is allowed and credentials are not). */
static bool origin_allowed(const srv_server *s, const char *origin) {
    for (int i = 0; i < s->n_origins; i++)
        if (!strcmp(s->origins[i], "*") || !strcmp(s->origins[i], origin)) return true;
    return false;
}

/* Starlette's check of the requested headers: each (trimmed, lowercased)
 * must be one of the allowed ones, compared case-insensitively. */
static bool headers_allowed(const srv_server *s, const char *req) {
    if (s->allow_all_headers || !req) return true;
    static const char *const safelisted[] = {"accept", "accept-language", "content-language", "content-type"};
    for (;;) { /* "a," is "a" and "" (Python's split), and "" is no header */
        size_t k = strcspn(req, ",");
        const char *b = req, *e = req + k;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
        size_t len = (size_t)(e - b);
        bool ok = false;
        for (int i = 0; i < 4 && !ok; i++) ok = strlen(safelisted[i]) == len && !strncasecmp(safelisted[i], b, len);
        for (int i = 0; i < s->n_headers && !ok; i++) ok = strlen(s->headers[i]) == len && !strncasecmp(s->headers[i], b, len);
        if (!ok) return false;
        if (req[k] != ',') return true;
        req += k + 1;
    }
}

static bool method_allowed(const srv_server *s, const char *m) {
    for (int i = 0; i < s->n_methods; i++)
        if (!strcmp(s->methods[i], m)) return true;
    return false;
}

static bool any_origin(const srv_server *s) {
    for (int i = 0; i < s->n_origins; i++)
        if (!strcmp(s->origins[i], "*")) return true;
    return false;
}

static void add_cors(const srv_server *s, struct MHD_Connection *c, struct MHD_Response *resp) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin || !origin_allowed(s, origin)) return;
    if (any_origin(s) && !s->allow_credentials) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    } else {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(resp, "Vary", "Origin");
    }
    if (s->allow_credentials) MHD_add_response_header(resp, "Access-Control-Allow-Credentials", "true");
}

/* OPTIONS with Origin + Access-Control-Request-Method: the preflight answer,
 * before any API-key check: 200 "OK", or 400 "Disallowed CORS " + what
 * failed ("origin", "method", "headers", comma-separated), as Starlette. */
static enum MHD_Result preflight(srv_server *s, struct MHD_Connection *c, const char *origin) {
    const char *rm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method");
    const char *rh = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    bool o_ok = origin_allowed(s, origin), m_ok = rm && method_allowed(s, rm), h_ok = headers_allowed(s, rh);
    char msg[64];
    if (o_ok && m_ok && h_ok) snprintf(msg, sizeof msg, "OK");
    else
        snprintf(msg, sizeof msg, "Disallowed CORS %s%s%s%s%s", o_ok ? "" : "origin", !o_ok && !m_ok ? ", " : "",
                 m_ok ? "" : "method", (!o_ok || !m_ok) && !h_ok ? ", " : "", h_ok ? "" : "headers");
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(msg), msg, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", s->methods_joined);
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    if (s->allow_all_headers) {
        if (rh) MHD_add_response_header(resp, "Access-Control-Allow-Headers", rh);
    } else if (s->headers_joined) {
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", s->headers_joined);
    }
    if (o_ok) add_cors(s, c, resp);
    else MHD_add_response_header(resp, "Vary", "Origin");
    enum MHD_Result ret = MHD_queue_response(c, o_ok && m_ok && h_ok ? 200u : 400u, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_reply(srv_server *s, struct MHD_Connection *c, srv_reply *r) {
    struct MHD_Response *resp;
    if (r->stream) {
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, r->stream, stream_free);
        if (!resp) {
            srv_stream_free(r->stream);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
    } else {
        const char *b = r->body ? r->body : "";
        resp = MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            free(r->body);
            return MHD_NO;
        }
    }
    if (r->content_type) MHD_add_response_header(resp, "Content-Type", r->content_type);
    add_cors(s, c, resp);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static bool authorized(srv_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    const char *k = h + 7;
    size_t a = strlen(k), b = strlen(s->api_key);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned char)(k[i] ^ s->api_key[i]);
    return diff == 0;
}

static void route(srv_server *s, struct MHD_Connection *c, const char *url, const char *method, conn_ctx *cc,
                  srv_reply *r) {
    srv_error e;
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strncmp(url, "/v1/", 4) && !authorized(s, c)) {
        srv_reply_error(r, (srv_err(&e, 401, NULL, "Unauthorized: a valid API key is required"), &e));
        return;
    }
    if (cc->too_big) {
        srv_reply_error(r, (srv_err(&e, 413, NULL, "the request body exceeds %zu bytes", s->max_body), &e));
        return;
    }
    const char *body = cc->body.s ? cc->body.s : "";
    size_t len = cc->body.len;
    struct { const char *path; bool is_post; } routes[] = {
        {"/health", false}, {"/version", false}, {"/v1/models", false}, {"/metrics", false}, {"/", false},
        {"/v1/completions", true}, {"/v1/chat/completions", true}, {"/tokenize", true}, {"/detokenize", true},
    };
    int which = -1;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) which = (int)i;
    if (which < 0) {
        srv_reply_error(r, (srv_err(&e, 404, NULL, "Not Found: %.200s", url), &e));
        return;
    }
    if (routes[which].is_post ? !post : !get) {
        srv_reply_error(r, (srv_err(&e, 405, NULL, "Method Not Allowed: %.20s %.200s", method, url), &e));
        return;
    }
    switch (which) {
    case 0:
        r->content_type = "application/json";
        if (aeng_alive(s->engine)) {
            r->status = 200;
            r->body = strdup("");
        } else {
            srv_reply_error(r, (srv_err(&e, 503, NULL, "the engine is not running"), &e));
        }
        break;
    case 1: srv_reply_json(r, 200, json_pack("{s:s}", "version", s->version)); break;
    case 2: srv_handle_models(s, r); break;
    case 3:
        r->status = 200;
        r->content_type = "text/plain; version=0.0.4; charset=utf-8";
        r->body = srv_metrics_render(s->metrics, s->engine, s->model_name);
        break;
    case 4:
        r->status = 200;
        r->content_type = "text/html; charset=utf-8";
        r->body = strdup(srv_chat_page);
        break;
    case 5: srv_handle_completions(s, body, len, false, r); break;
    case 6: srv_handle_completions(s, body, len, true, r); break;
    case 7: srv_handle_tokenize(s, body, len, r); break;
    case 8: srv_handle_detokenize(s, body, len, r); break;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        return MHD_YES;
    }
    if (*upload_size) {
        /* Past the limit the rest is read and dropped, then answered 413
         * (closing mid-upload would leave the client a broken pipe). */
        if (!cc->too_big && cc->body.len + *upload_size > s->max_body) {
            cc->too_big = true;
            vc_sb_free(&cc->body);
        }
        if (!cc->too_big) vc_sb_append(&cc->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!strcmp(method, "OPTIONS") && origin &&
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method"))
        return preflight(s, c, origin);
    srv_reply r = {.client_fd = -1};
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r.client_fd = ci->connect_fd;
    route(s, c, url, method, cc, &r);
    return send_reply(s, c, &r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode tc) {
    (void)cls;
    (void)c;
    (void)tc;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    vc_sb_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

/* --allowed-origins / --allowed-methods / --allowed-headers: a JSON list of
 * strings (vLLM's form) or a comma-separated list; NULL or empty: ["*"]. */
static int parse_list(const char *flag, const char *v, char ***out, int *n_out) {
    json_t *j = v && *v ? json_loads(v, JSON_DECODE_ANY, NULL) : NULL;
    if (v && *v && !j && (*v == '[' || *v == '"'))
        return vc_err_set(VC_ERR_INVALID, "%s: not a JSON list of strings: %s", flag, v);
    size_t n = j ? json_array_size(j) : 1;
    if (!j && v && *v)
        for (const char *q = v; *q; q++) n += *q == ',';
    char **l = calloc(n ? n : 1, sizeof *l);
    *out = l;
    *n_out = 0;
    if (!l) {
        json_decref(j);
        return vc_err_set(VC_ERR_OOM, "out of memory");
    }
    int rc = VC_OK;
    if (j) {
        if (!json_is_array(j)) rc = vc_err_set(VC_ERR_INVALID, "%s: expected a JSON list of strings", flag);
        size_t i;
        json_t *x;
        json_array_foreach(j, i, x) {
            if (rc < 0) break;
            if (!json_is_string(x)) rc = vc_err_set(VC_ERR_INVALID, "%s: expected a JSON list of strings", flag);
            else if (!(l[(*n_out)++] = strdup(json_string_value(x)))) rc = vc_err_set(VC_ERR_OOM, "out of memory");
        }
    } else {
        const char *q = v && *v ? v : "*";
        while (rc == 0 && *q) {
            size_t k = strcspn(q, ",");
            while (k && q[k - 1] == ' ') k--;
            if (k && !(l[(*n_out)++] = strndup(q, k))) rc = vc_err_set(VC_ERR_OOM, "out of memory");
            q += strcspn(q, ",");
            while (*q == ',' || *q == ' ') q++;
        }
    }
    json_decref(j);
    return rc;
}

static void free_list(char **l, int n) {
    for (int i = 0; i < n; i++) free(l[i]);
    free(l);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Starlette's preflight lists: methods "*" -> all seven; headers = the
 * CORS-safelisted four plus the given ones, sorted as given (byte order),
 * joined for Access-Control-Allow-Headers and kept lowercased for the
 * membership test (NULL list when "*": requested headers are echoed). */
static int cors_lists(srv_server *s) {
    static const char *const all_methods[] = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
    static const char *const safelisted[] = {"Accept", "Accept-Language", "Content-Language", "Content-Type"};
    vc_strbuf m = {0}, h = {0};
    bool any_m = false, any_h = false;
    for (int i = 0; i < s->n_methods; i++) any_m |= !strcmp(s->methods[i], "*");
    for (int i = 0; i < s->n_headers; i++) any_h |= !strcmp(s->headers[i], "*");
    if (any_m) {
        free_list(s->methods, s->n_methods);
        s->n_methods = 0;
        s->methods = calloc(7, sizeof *s->methods);
        if (!s->methods) return vc_err_set(VC_ERR_OOM, "out of memory");
        for (int i = 0; i < 7; i++)
            if (!(s->methods[s->n_methods++] = strdup(all_methods[i]))) return vc_err_set(VC_ERR_OOM, "out of memory");
    }
    for (int i = 0; i < s->n_methods; i++) vc_sb_printf(&m, "%s%s", i ? ", " : "", s->methods[i]);
    s->allow_all_headers = any_h;
    if (!any_h) { /* union with the safelisted four, sorted, unique */
        char **u = calloc((size_t)s->n_headers + 4, sizeof *u);
        if (!u) return vc_err_set(VC_ERR_OOM, "out of memory");
        int n = 0;
        for (int i = 0; i < 4; i++) u[n++] = (char *)safelisted[i];
        for (int i = 0; i < s->n_headers; i++) u[n++] = s->headers[i];
        qsort(u, (size_t)n, sizeof *u, cmp_str);
        for (int i = 0; i < n; i++)
            if (i == 0 || strcmp(u[i], u[i - 1])) vc_sb_printf(&h, "%s%s", h.len ? ", " : "", u[i]);
        free(u);
    }
    s->methods_joined = m.s ? m.s : strdup("");
    s->headers_joined = h.s; /* NULL when "*" */
    if (!s->methods_joined) return vc_err_set(VC_ERR_OOM, "out of memory");
    return VC_OK;
}


srv_server *srv_create(aeng *engine, const srv_params *p) {
    if (!p->model_name || !*p->model_name) {
        vc_err_set(VC_ERR_INVALID, "server: no model name");
        return NULL;
    }
    srv_server *s = calloc(1, sizeof *s);
    if (!s) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    s->engine = engine;
    s->tok = aeng_tokenizer(engine);
    if (!s->tok) { /* every endpoint decodes or encodes text (was: a crash at the chat template) */
        free(s);
        vc_err_set(VC_ERR_INVALID, "the model has no tokenizer (tokenizer.json, or a GGUF vocabulary): the OpenAI "
                                   "server needs one to return text; `vllm run --prompt-ids` and the C API work "
                                   "with token ids alone");
        return NULL;
    }
    s->max_model_len = aeng_max_model_len(engine);
    s->max_body = p->max_body_bytes ? p->max_body_bytes : (4u << 20);
    s->created = (long)time(NULL);
    s->model_name = strdup(p->model_name);
    s->api_key = p->api_key && *p->api_key ? strdup(p->api_key) : NULL;
    s->version = strdup(p->version ? p->version : "unknown");
    s->metrics = srv_metrics_create(s->max_model_len);
    if (!s->model_name || !s->version || (p->api_key && *p->api_key && !s->api_key) || !s->metrics) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        goto fail;
    }
    if (p->tool_call_parser && *p->tool_call_parser) {
        if (!strcmp(p->tool_call_parser, "hermes")) s->tools = SRV_TOOLS_HERMES;
        else if (!strcmp(p->tool_call_parser, "llama3_json")) s->tools = SRV_TOOLS_LLAMA3_JSON;
        else if (!strcmp(p->tool_call_parser, "mistral")) s->tools = SRV_TOOLS_MISTRAL;
        else {
            vc_err_set(VC_ERR_INVALID, "--tool-call-parser '%s' is not supported (hermes, llama3_json, mistral)",
                       p->tool_call_parser);
            goto fail;
        }
    }
    if (p->reasoning_parser && *p->reasoning_parser) {
        if (strcmp(p->reasoning_parser, "deepseek_r1") && strcmp(p->reasoning_parser, "qwen3")) {
            vc_err_set(VC_ERR_INVALID, "--reasoning-parser '%s' is not supported (supported: deepseek_r1, qwen3)",
                       p->reasoning_parser);
            goto fail;
        }
        s->reasoning = strcmp(p->reasoning_parser, "qwen3") ? SRV_REASON_R1 : SRV_REASON_QWEN3;
    }
    const char *src = p->chat_template ? p->chat_template : tok_chat_template(s->tok);
    if (src) {
        s->tmpl = chat_template_create(src);
        if (!s->tmpl) {
            vc_err_prefix("chat template");
            goto fail;
        }
        /* No parser named: pick the one whose format the template teaches. */
        if (!s->tools) {
            if (strstr(src, "<tool_call>")) s->tools = SRV_TOOLS_HERMES;
            else if (strstr(src, "[TOOL_CALLS]")) s->tools = SRV_TOOLS_MISTRAL;
            else if (strstr(src, "<|python_tag|>")) s->tools = SRV_TOOLS_LLAMA3_JSON;
            if (s->tools) VC_INFO("tool-call parser from the chat template: %s",
                                  s->tools == SRV_TOOLS_HERMES ? "hermes" :
                                  s->tools == SRV_TOOLS_MISTRAL ? "mistral" : "llama3_json");
        }
    } else {
        VC_WARN("the model has no chat template: /v1/chat/completions answers 400 (use --chat-template)");
    }

    if (parse_list("--allowed-origins", p->allowed_origins, &s->origins, &s->n_origins) < 0 ||
        parse_list("--allowed-methods", p->allowed_methods, &s->methods, &s->n_methods) < 0 ||
        parse_list("--allowed-headers", p->allowed_headers, &s->headers, &s->n_headers) < 0 || cors_lists(s) < 0)
        goto fail;
    s->allow_credentials = p->allow_credentials;
    if (!p->ssl_keyfile != !p->ssl_certfile) {
        vc_err_set(VC_ERR_INVALID, "HTTPS needs both --ssl-keyfile and --ssl-certfile");
        goto fail;
    }
    if (p->ssl_keyfile) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            vc_err_set(VC_ERR_INVALID, "this libmicrohttpd was built without TLS: cannot serve HTTPS");
            goto fail;
        }
        size_t n;
        if (vc_read_file(p->ssl_keyfile, &s->tls_key, &n) < 0) {
            vc_err_prefix("--ssl-keyfile");
            goto fail;
        }
        if (vc_read_file(p->ssl_certfile, &s->tls_cert, &n) < 0) {
            vc_err_prefix("--ssl-certfile");
            goto fail;
        }
    }

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    const char *host = p->host && *p->host ? p->host : "127.0.0.1";
    if (p->port < 0 || p->port > 65535) {
        vc_err_set(VC_ERR_INVALID, "bad port %d", p->port);
        goto fail;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)p->port);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)p->port);
        flags |= MHD_USE_IPv6;
    } else {
        vc_err_set(VC_ERR_INVALID, "--host '%s' is not a numeric IPv4/IPv6 address", host);
        goto fail;
    }
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert},
        {MHD_OPTION_END, 0, NULL},
    };
    if (s->tls_key) flags |= MHD_USE_TLS;
    s->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)1024, MHD_OPTION_ARRAY, s->tls_key ? tls_opts : tls_opts + 2,
                            MHD_OPTION_END);
    if (!s->d) {
        if (s->tls_key)
            vc_err_set(VC_ERR_IO, "cannot serve HTTPS on %s:%d (port in use, or the key / certificate is not "
                                  "valid PEM or do not match)", host, p->port);
        else
            vc_err_set(VC_ERR_IO, "cannot listen on %s:%d (in use or not permitted)", host, p->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    return s;
fail:
    srv_free(s);
    return NULL;
}

void srv_free(srv_server *s) {
    if (!s) return;
    atomic_store(&s->stopping, true); /* waiting handlers and streams give up within 250 ms */
    if (s->d) MHD_stop_daemon(s->d);
    chat_template_free(s->tmpl);
    srv_metrics_free(s->metrics);
    free_list(s->origins, s->n_origins);
    free_list(s->methods, s->n_methods);
    free_list(s->headers, s->n_headers);
    free(s->methods_joined);
    free(s->headers_joined);
    free(s->tls_key);
    free(s->tls_cert);
    free(s->model_name);
    free(s->api_key);
    free(s->version);
    free(s);
}
