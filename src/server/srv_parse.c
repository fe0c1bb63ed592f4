/* srv_parse — request JSON -> srv_gen, with OpenAI-style validation errors.
 * Unknown fields are ignored (vLLM logs and ignores them); fields that ask
 * for something the engine cannot do yet are refused with a clear 400
 * rather than silently dropped. */
#include "server/srv_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOP 16
#define MAX_N 128
#define MAX_PROMPTS 64

int srv_err(srv_error *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    switch (status) {
    case 401: e->type = "AuthenticationError"; break;
    case 404: e->type = "NotFoundError"; break;
    case 405: e->type = "MethodNotAllowed"; break;
    case 413: e->type = "RequestEntityTooLarge"; break;
    case 500: e->type = "InternalServerError"; break;
    case 503: e->type = "ServiceUnavailableError"; break;
    default: e->type = "BadRequestError"; break;
    }
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

char *srv_error_json(const srv_error *e) {
    json_t *in = json_pack("{s:s, s:s, s:o, s:i}", "message", e->msg, "type", e->type, "param",
                           e->param[0] ? json_string(e->param) : json_null(), "code", e->status);
    json_t *j = in ? json_pack("{s:o}", "error", in) : NULL;
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) s = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"InternalServerError\",\"param\":null,\"code\":500}}");
    return s;
}

bool srv_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        if (c < 0x80) { i++; continue; }
        int n;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else return false;
        if (i + (size_t)n >= len) return false;
        for (int k = 1; k <= n; k++) {
            if (i + (size_t)k >= len || (p[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += (size_t)n + 1;
    }
    return true;
}

/* ---- typed getters: absent or null -> keep the default (return 0) */

static int get_bool(json_t *o, const char *k, bool *out, srv_error *e) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return srv_err(e, 400, k, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

static int get_int(json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *out, bool *present, srv_error *e) {
    json_t *v = json_object_get(o, k);
    if (present) *present = false;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return srv_err(e, 400, k, "'%s' must be an integer", k);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return srv_err(e, 400, k, "'%s' must be between %lld and %lld, got %lld", k, (long long)lo, (long long)hi,
                       (long long)x);
    *out = x;
    if (present) *present = true;
    return 0;
}

static int get_num(json_t *o, const char *k, double lo, double hi, bool lo_open, float *out, srv_error *e) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return srv_err(e, 400, k, "'%s' must be a number", k);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        return srv_err(e, 400, k, "'%s' must be in %s%g, %g], got %g", k, lo_open ? "(" : "[", lo, hi, x);
    *out = (float)x;
    return 0;
}

static int parse_ids(json_t *arr, const char *param, srv_prompt *p, srv_error *e) {
    size_t n = json_array_size(arr);
    if (n == 0) return srv_err(e, 400, param, "the prompt is empty");
    if (n > (1u << 24)) return srv_err(e, 400, param, "the prompt is too long");
    p->ids = malloc(n * sizeof *p->ids);
    if (!p->ids) return srv_err(e, 500, param, "out of memory");
    p->n_ids = (int32_t)n;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return srv_err(e, 400, param, "token ids must be non-negative integers");
        p->ids[i] = (int32_t)json_integer_value(v);
    }
    return 0;
}

static int parse_prompt(json_t *o, srv_gen *g, srv_error *e) {
    json_t *p = json_object_get(o, "prompt");
    if (!p || json_is_null(p)) return srv_err(e, 400, "prompt", "'prompt' is required");
    if (json_is_string(p)) {
        g->prompts = calloc(1, sizeof *g->prompts);
        if (!g->prompts) return srv_err(e, 500, NULL, "out of memory");
        g->n_prompts = 1;
        g->prompts[0].text = strdup(json_string_value(p));
        return g->prompts[0].text ? 0 : srv_err(e, 500, NULL, "out of memory");
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return srv_err(e, 400, "prompt", "'prompt' must be a string, a list of strings, a list of token ids or a "
                                         "list of token-id lists (non-empty)");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) { /* one token-id prompt */
        g->prompts = calloc(1, sizeof *g->prompts);
        if (!g->prompts) return srv_err(e, 500, NULL, "out of memory");
        g->n_prompts = 1;
        return parse_ids(p, "prompt", &g->prompts[0], e);
    }
    size_t n = json_array_size(p);
    if (n > MAX_PROMPTS) return srv_err(e, 400, "prompt", "at most %d prompts per request", MAX_PROMPTS);
    g->prompts = calloc(n, sizeof *g->prompts);
    if (!g->prompts) return srv_err(e, 500, NULL, "out of memory");
    g->n_prompts = (int)n;
    size_t i;
    json_t *v;
    json_array_foreach(p, i, v) {
        if (json_is_string(v)) {
            g->prompts[i].text = strdup(json_string_value(v));
            if (!g->prompts[i].text) return srv_err(e, 500, NULL, "out of memory");
        } else if (json_is_array(v)) {
            if (parse_ids(v, "prompt", &g->prompts[i], e) < 0) return -1;
        } else {
            return srv_err(e, 400, "prompt", "'prompt' list items must be strings or token-id lists");
        }
    }
    return 0;
}

static const char *const ROLES[] = {"system", "user", "assistant", "tool", "developer", NULL};

/* Validate messages and flatten list-of-parts content to a string (the
 * templates expect strings). */
static int parse_messages(json_t *o, srv_gen *g, srv_error *e) {
    json_t *m = json_object_get(o, "messages");
    if (!m || !json_is_array(m)) return srv_err(e, 400, "messages", "'messages' must be a list of messages");
    if (json_array_size(m) == 0) return srv_err(e, 400, "messages", "'messages' must not be empty");
    g->messages = json_deep_copy(m);
    if (!g->messages) return srv_err(e, 500, NULL, "out of memory");
    size_t i;
    json_t *msg;
    json_array_foreach(g->messages, i, msg) {
        if (!json_is_object(msg)) return srv_err(e, 400, "messages", "messages[%zu] must be an object", i);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role)) return srv_err(e, 400, "messages", "messages[%zu].role must be a string", i);
        bool ok = false;
        for (int k = 0; ROLES[k]; k++) ok = ok || !strcmp(json_string_value(role), ROLES[k]);
        if (!ok)
            return srv_err(e, 400, "messages", "messages[%zu].role '%.40s' is not one of system, user, assistant, "
                                               "tool, developer", i, json_string_value(role));
        json_t *c = json_object_get(msg, "content");
        bool is_assistant = !strcmp(json_string_value(role), "assistant");
        if (!c || json_is_null(c)) {
            if (!is_assistant) return srv_err(e, 400, "messages", "messages[%zu].content is required", i);
            continue;
        }
        if (json_is_string(c)) continue;
        if (!json_is_array(c)) return srv_err(e, 400, "messages", "messages[%zu].content must be a string or a list", i);
        vc_strbuf sb = {0};
        size_t k;
        json_t *part;
        json_array_foreach(c, k, part) {
            json_t *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
            if (!json_is_object(part) || !json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
                !json_is_string(tx)) {
                vc_sb_free(&sb);
                return srv_err(e, 400, "messages", "messages[%zu].content[%zu]: only {\"type\": \"text\"} parts are "
                                                   "supported", i, k);
            }
            if (sb.len) vc_sb_putc(&sb, '\n');
            vc_sb_puts(&sb, json_string_value(tx));
        }
        json_object_set_new(msg, "content", json_string(sb.s ? sb.s : ""));
        vc_sb_free(&sb);
    }
    return 0;
}

static int parse_stop(json_t *o, srv_gen *g, srv_error *e) {
    json_t *s = json_object_get(o, "stop");
    if (!s || json_is_null(s)) return 0;
    if (json_is_string(s)) {
        g->stop = calloc(1, sizeof *g->stop);
        if (!g->stop) return srv_err(e, 500, NULL, "out of memory");
        g->n_stop = 1;
        g->stop[0] = strdup(json_string_value(s));
    } else if (json_is_array(s)) {
        size_t n = json_array_size(s);
        if (n > MAX_STOP) return srv_err(e, 400, "stop", "at most %d stop strings", MAX_STOP);
        g->stop = calloc(n ? n : 1, sizeof *g->stop);
        if (!g->stop) return srv_err(e, 500, NULL, "out of memory");
        size_t i;
        json_t *v;
        json_array_foreach(s, i, v) {
            if (!json_is_string(v)) return srv_err(e, 400, "stop", "'stop' must be a string or a list of strings");
            g->stop[g->n_stop++] = strdup(json_string_value(v));
        }
    } else {
        return srv_err(e, 400, "stop", "'stop' must be a string or a list of strings");
    }
    for (int i = 0; i < g->n_stop; i++) {
        if (!g->stop[i]) return srv_err(e, 500, NULL, "out of memory");
        if (!g->stop[i][0]) return srv_err(e, 400, "stop", "stop strings must not be empty");
    }
    g->sp.stop = g->stop;
    g->sp.n_stop = g->n_stop;
    return 0;
}

static int refuse_unsupported(json_t *o, srv_error *e) {
    json_t *v;
    if ((v = json_object_get(o, "response_format")) && !json_is_null(v)) {
        json_t *ty = json_object_get(v, "type");
        if (!json_is_object(v) || !json_is_string(ty))
            return srv_err(e, 400, "response_format", "'response_format' must be an object with a 'type'");
        if (strcmp(json_string_value(ty), "text"))
            return srv_err(e, 400, "response_format",
                           "response_format '%.40s' needs structured output (guided decoding), which this server "
                           "does not implement; only {\"type\": \"text\"} is accepted", json_string_value(ty));
    }
    if ((v = json_object_get(o, "best_of")) && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return srv_err(e, 400, "best_of", "best_of > 1 is not supported");
    if ((v = json_object_get(o, "use_beam_search")) && json_is_true(v))
        return srv_err(e, 400, "use_beam_search", "beam search is not supported");
    if ((v = json_object_get(o, "suffix")) && !json_is_null(v))
        return srv_err(e, 400, "suffix", "suffix is not supported");
    return 0;
}

#define MAX_LOGIT_BIAS 65536
#define MAX_ALLOWED (1 << 20)
#define MAX_BAD_WORDS 64

/* A token id: a non-negative integer (the vocab bound is checked by the
 * handler, which knows the tokenizer). */
static bool token_id_of(json_t *v, int32_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) return false;
    *out = (int32_t)json_integer_value(v);
    return true;
}

/* logit_bias {"id": bias} (bias clamped to [-100, 100] as vLLM does),
 * allowed_token_ids [id...], bad_words ["word"...], prompt_logprobs k. */
static int parse_token_controls(json_t *o, srv_gen *g, srv_error *e) {
    json_t *v = json_object_get(o, "logit_bias");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v)) return srv_err(e, 400, "logit_bias", "'logit_bias' must be an object {token_id: bias}");
        size_t n = json_object_size(v);
        if (n > MAX_LOGIT_BIAS) return srv_err(e, 400, "logit_bias", "at most %d logit_bias entries", MAX_LOGIT_BIAS);
        if (n) {
            g->logit_bias_ids = malloc(n * sizeof *g->logit_bias_ids);
            g->logit_bias_vals = malloc(n * sizeof *g->logit_bias_vals);
            if (!g->logit_bias_ids || !g->logit_bias_vals) return srv_err(e, 500, NULL, "out of memory");
        }
        const char *k;
        json_t *b;
        json_object_foreach(v, k, b) {
            char *end;
            long long id = strtoll(k, &end, 10);
            if (!*k || *end || id < 0 || id > INT32_MAX)
                return srv_err(e, 400, "logit_bias", "logit_bias keys must be token ids, got '%.40s'", k);
            if (!json_is_number(b) || !isfinite(json_number_value(b)))
                return srv_err(e, 400, "logit_bias", "logit_bias values must be numbers");
            double x = json_number_value(b);
            x = x < -100 ? -100 : x > 100 ? 100 : x;
            g->logit_bias_ids[g->n_logit_bias] = (int32_t)id;
            g->logit_bias_vals[g->n_logit_bias++] = (float)x;
        }
        g->sp.logit_bias_ids = g->logit_bias_ids;
        g->sp.logit_bias_vals = g->logit_bias_vals;
        g->sp.n_logit_bias = g->n_logit_bias;
    }
    v = json_object_get(o, "allowed_token_ids");
    if (v && !json_is_null(v)) {
        size_t n = json_array_size(v);
        if (!json_is_array(v) || n == 0 || n > MAX_ALLOWED)
            return srv_err(e, 400, "allowed_token_ids", "'allowed_token_ids' must be a non-empty list of token ids");
        g->allowed_ids = malloc(n * sizeof *g->allowed_ids);
        if (!g->allowed_ids) return srv_err(e, 500, NULL, "out of memory");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (!token_id_of(x, &g->allowed_ids[i]))
                return srv_err(e, 400, "allowed_token_ids", "'allowed_token_ids' must hold non-negative integers");
        }
        g->n_allowed = (int32_t)n;
        g->sp.allowed_token_ids = g->allowed_ids;
        g->sp.n_allowed_token_ids = g->n_allowed;
    }
    v = json_object_get(o, "bad_words");
    if (v && !json_is_null(v)) {
        size_t n = json_array_size(v);
        if (!json_is_array(v) || n > MAX_BAD_WORDS)
            return srv_err(e, 400, "bad_words", "'bad_words' must be a list of at most %d strings", MAX_BAD_WORDS);
        g->bad_words = calloc(n ? n : 1, sizeof *g->bad_words);
        if (!g->bad_words) return srv_err(e, 500, NULL, "out of memory");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            const char *w = json_string_value(x);
            if (!w) return srv_err(e, 400, "bad_words", "'bad_words' must be a list of strings");
            while (*w == ' ') w++;
            if (!*w) return srv_err(e, 400, "bad_words", "bad_words must not be empty");
            if (!(g->bad_words[g->n_bad_words++] = strdup(w))) return srv_err(e, 500, NULL, "out of memory");
        }
    }
    int64_t k = -1;
    bool has;
    if (get_int(o, "prompt_logprobs", 0, 20, &k, &has, e)) return -1;
    if (has && k > 0 && g->stream)
        return srv_err(e, 400, "prompt_logprobs", "prompt_logprobs are not available when stream=true");
    g->prompt_logprobs = has && !g->stream ? (int32_t)k : -1;
    g->sp.prompt_logprobs = g->prompt_logprobs;
    bool sbst = true;
    if (get_bool(o, "spaces_between_special_tokens", &sbst, e)) return -1;
    return 0;
}

static int parse_tools(json_t *o, srv_gen *g, srv_error *e) {
    json_t *t = json_object_get(o, "tools");
    if (t && !json_is_null(t)) {
        if (!json_is_array(t)) return srv_err(e, 400, "tools", "'tools' must be a list");
        size_t i;
        json_t *v;
        json_array_foreach(t, i, v) {
            json_t *fn = json_object_get(v, "function");
            if (!json_is_object(v) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
                return srv_err(e, 400, "tools", "tools[%zu] must be {\"type\": \"function\", \"function\": {\"name\", "
                                                "...}}", i);
        }
        if (json_array_size(t)) g->tools = json_incref(t);
    }
    json_t *tc = json_object_get(o, "tool_choice");
    if (tc && !json_is_null(tc)) {
        const char *ts = json_string_value(tc);
        if (ts && !strcmp(ts, "none")) g->tool_choice_none = true;
        else if (ts && !strcmp(ts, "auto")) {}
        else if (ts && !strcmp(ts, "required")) g->tool_required = true;
        else if (json_is_object(tc)) {
            json_t *fn = json_object_get(tc, "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            if (!name || !*name)
                return srv_err(e, 400, "tool_choice", "a named tool_choice must be {\"type\": \"function\", "
                                                      "\"function\": {\"name\": ...}}");
            g->tool_forced = strdup(name);
            if (!g->tool_forced) return srv_err(e, 500, NULL, "out of memory");
        } else {
            return srv_err(e, 400, "tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or "
                                                  "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        if ((g->tool_required || g->tool_forced) && !g->tools)
            return srv_err(e, 400, "tool_choice", "tool_choice '%s' needs 'tools'", g->tool_forced ? "function" : "required");
        if (g->tool_forced) {
            bool found = false;
            size_t i;
            json_t *v;
            json_array_foreach(g->tools, i, v) {
                const char *nm = json_string_value(json_object_get(json_object_get(v, "function"), "name"));
                found = found || (nm && !strcmp(nm, g->tool_forced));
            }
            if (!found)
                return srv_err(e, 400, "tool_choice", "tool_choice names function '%.100s', which is not in 'tools'",
                               g->tool_forced);
        }
    }
    return 0;
}

int srv_parse_gen(const char *body, size_t len, bool chat, srv_gen *g, srv_error *e) {
    memset(g, 0, sizeof *g);
    g->sp = ereq_sampling_default();
    g->max_tokens = -1;
    g->n = 1;
    g->add_generation_prompt = true;
    json_error_t jerr;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) return srv_err(e, 400, NULL, "malformed JSON body: %s (line %d)", jerr.text, jerr.line);
    int rc = -1;
    if (!json_is_object(o)) { srv_err(e, 400, NULL, "the body must be a JSON object"); goto out; }

    json_t *m = json_object_get(o, "model");
    if (m && !json_is_null(m)) {
        if (!json_is_string(m)) { srv_err(e, 400, "model", "'model' must be a string"); goto out; }
        g->model = strdup(json_string_value(m));
    }
    if (chat ? parse_messages(o, g, e) : parse_prompt(o, g, e)) goto out;
    if (refuse_unsupported(o, e)) goto out;
    g->logprobs = -1;
    g->prompt_logprobs = -1;
    json_t *lp = json_object_get(o, "logprobs"), *tlp = json_object_get(o, "top_logprobs");
    if (chat) {
        if (lp && !json_is_null(lp) && !json_is_boolean(lp)) { srv_err(e, 400, "logprobs", "'logprobs' must be a boolean"); goto out; }
        int64_t k = 0;
        bool has_k;
        if (get_int(o, "top_logprobs", 0, 20, &k, &has_k, e)) goto out;
        if (has_k && !json_is_true(lp)) {
            srv_err(e, 400, "top_logprobs", "top_logprobs needs logprobs=true");
            goto out;
        }
        if (json_is_true(lp)) g->logprobs = (int32_t)k;
    } else {
        (void)tlp;
        int64_t k = -1;
        if (get_int(o, "logprobs", 0, 20, &k, NULL, e)) goto out;
        g->logprobs = (int32_t)k;
    }
    g->sp.logprobs = g->logprobs;

    int64_t x;
    bool has;
    x = -1;
    if (get_int(o, "max_tokens", 1, INT32_MAX, &x, &has, e)) goto out;
    if (has) g->max_tokens = x;
    if (chat) {
        if (get_int(o, "max_completion_tokens", 1, INT32_MAX, &x, &has, e)) goto out;
        if (has) g->max_tokens = x;
    }
    x = 1;
    if (get_int(o, "n", 1, MAX_N, &x, NULL, e)) goto out;
    g->n = (int)x;
    if (get_bool(o, "stream", &g->stream, e)) goto out;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) { srv_err(e, 400, "stream_options", "'stream_options' must be an object"); goto out; }
        if (!g->stream) { srv_err(e, 400, "stream_options", "stream_options is only allowed with stream=true"); goto out; }
        if (get_bool(so, "include_usage", &g->include_usage, e)) goto out;
    }
    ereq_sampling *sp = &g->sp;
    if (get_num(o, "temperature", 0, 100, false, &sp->temperature, e)) goto out;
    if (get_num(o, "top_p", 0, 1, true, &sp->top_p, e)) goto out;
    if (get_num(o, "min_p", 0, 1, false, &sp->min_p, e)) goto out;
    if (get_num(o, "presence_penalty", -2, 2, false, &sp->presence_penalty, e)) goto out;
    if (get_num(o, "frequency_penalty", -2, 2, false, &sp->frequency_penalty, e)) goto out;
    if (get_num(o, "repetition_penalty", 0, 100, true, &sp->repetition_penalty, e)) goto out;
    x = sp->top_k;
    if (get_int(o, "top_k", -1, INT32_MAX, &x, NULL, e)) goto out;
    sp->top_k = (int32_t)x;
    if (get_int(o, "seed", INT64_MIN, INT64_MAX, &x, &has, e)) goto out;
    if (has) { sp->seed = (uint64_t)x; sp->has_seed = true; }
    x = 0;
    if (get_int(o, "min_tokens", 0, INT32_MAX, &x, NULL, e)) goto out;
    sp->min_tokens = (int32_t)x;
    if (g->max_tokens > 0 && sp->min_tokens > g->max_tokens) {
        srv_err(e, 400, "min_tokens", "min_tokens (%d) must not exceed max_tokens (%lld)", sp->min_tokens,
                (long long)g->max_tokens);
        goto out;
    }
    if (get_bool(o, "ignore_eos", &sp->ignore_eos, e)) goto out;
    if (get_bool(o, "skip_special_tokens", &sp->skip_special_tokens, e)) goto out;
    if (get_bool(o, "include_stop_str_in_output", &sp->include_stop_str_in_output, e)) goto out;
    json_t *sti = json_object_get(o, "stop_token_ids");
    if (sti && !json_is_null(sti)) {
        if (!json_is_array(sti) || json_array_size(sti) > EREQ_MAX_STOP_IDS) {
            srv_err(e, 400, "stop_token_ids", "'stop_token_ids' must be a list of at most %d token ids",
                    EREQ_MAX_STOP_IDS);
            goto out;
        }
        size_t i;
        json_t *v;
        json_array_foreach(sti, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
                srv_err(e, 400, "stop_token_ids", "'stop_token_ids' must hold non-negative integers");
                goto out;
            }
            sp->stop_token_ids[sp->n_stop_token_ids++] = (int32_t)json_integer_value(v);
        }
    }
    if (parse_stop(o, g, e)) goto out;
    if (parse_token_controls(o, g, e)) goto out;
    if (chat) {
        if (get_bool(o, "add_generation_prompt", &g->add_generation_prompt, e)) goto out;
        if (get_bool(o, "continue_final_message", &g->continue_final_message, e)) goto out;
        if (g->continue_final_message) {
            json_t *last = json_array_get(g->messages, json_array_size(g->messages) - 1);
            const char *role = json_string_value(json_object_get(last, "role"));
            if (json_is_true(json_object_get(o, "add_generation_prompt"))) {
                srv_err(e, 400, "continue_final_message",
                        "continue_final_message and add_generation_prompt cannot both be true");
                goto out;
            }
            if (!role || strcmp(role, "assistant") || !json_is_string(json_object_get(last, "content"))) {
                srv_err(e, 400, "continue_final_message",
                        "continue_final_message needs a final assistant message with text content");
                goto out;
            }
            g->add_generation_prompt = false;
        }
        json_t *kw = json_object_get(o, "chat_template_kwargs");
        if (kw && !json_is_null(kw)) {
            if (!json_is_object(kw)) {
                srv_err(e, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
                goto out;
            }
            g->template_kwargs = json_incref(kw);
        }
        if (parse_tools(o, g, e)) goto out;
    } else {
        if (get_bool(o, "echo", &g->echo, e)) goto out;
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

void srv_gen_free(srv_gen *g) {
    free(g->model);
    for (int i = 0; i < g->n_prompts; i++) {
        free(g->prompts[i].text);
        free(g->prompts[i].ids);
    }
    free(g->prompts);
    json_decref(g->messages);
    json_decref(g->tools);
    json_decref(g->template_kwargs);
    for (int i = 0; i < g->n_stop; i++) free(g->stop[i]);
    free(g->stop);
    free(g->logit_bias_ids);
    free(g->logit_bias_vals);
    free(g->allowed_ids);
    for (int i = 0; i < g->n_bad_words; i++) free(g->bad_words[i]);
    free(g->bad_words);
    free(g->bad_ids);
    free(g->bad_lens);
    free(g->tool_forced);
    memset(g, 0, sizeof *g);
}
