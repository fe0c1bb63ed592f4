/* vllm_chat / vllm_chat_stream: an OpenAI /v1/chat/completions request
 * (JSON) -> the model's chat template -> the engine -> a chat.completion
 * object, or one chat.completion.chunk object per callback. */
#include "capi/capi_internal.h"

#include "base/err.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#define MAX_STOP 64

/* A parsed request: the prompt tokens and the sampling parameters (stop
 * strings point into req). */
typedef struct {
    json_t *req;
    vllm_sampling_params vp;
    const char *stop[MAX_STOP];
    int32_t *ids;
    size_t n_ids;
    bool include_usage;
    const char *model;
} chat_req;

static void chat_req_free(chat_req *c) {
    json_decref(c->req);
    free(c->ids);
}

static vllm_status bad(const char *fmt, const char *what) {
    return capi_fail(VLLM_ERR_INVALID_ARGUMENT, fmt, what);
}

/* Optional number field -> *out; wrong type is an error. */
static vllm_status get_num(json_t *req, const char *key, float *out) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return VLLM_OK;
    if (!json_is_number(v)) return bad("chat request: \"%s\" must be a number", key);
    *out = (float)json_number_value(v);
    return VLLM_OK;
}

static vllm_status get_int(json_t *req, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return VLLM_OK;
    if (!json_is_integer(v)) return bad("chat request: \"%s\" must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return bad("chat request: \"%s\" is out of range", key);
    *out = x;
    return VLLM_OK;
}

/* Refuse what vllm.c cannot do yet instead of ignoring it. */
static vllm_status refuse_unsupported(const vllm_engine *e, json_t *req) {
    static const char *const guided[] = {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                                         "structured_outputs"};
    for (size_t i = 0; i < sizeof guided / sizeof *guided; i++) {
        json_t *v = json_object_get(req, guided[i]);
        if (v && !json_is_null(v))
            return bad("chat request: \"%s\" (structured output) is not supported by vllm.c yet", guided[i]);
    }
    json_t *rf = json_object_get(req, "response_format");
    if (rf && !json_is_null(rf)) {
        const char *t = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !t) return bad("chat request: %s needs a \"type\"", "response_format");
        if (strcmp(t, "text"))
            return bad("chat request: response_format \"%s\" (structured output) is not supported by vllm.c yet", t);
    }
    json_t *tc = json_object_get(req, "tool_choice");
    if (tc && !json_is_null(tc)) {
        const char *s = json_string_value(tc);
        if (!s || (strcmp(s, "none") && strcmp(s, "auto")))
            return bad("chat request: tool_choice %s (forced tool calls) is not supported by vllm.c yet",
                       s ? s : "with a named function");
    }
    json_t *lp = json_object_get(req, "logprobs");
    if (json_is_true(lp)) return bad("chat request: %s is not supported by the C API yet", "logprobs");
    json_t *n = json_object_get(req, "n");
    if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1))
        return bad("chat request: %s (n != 1) is not supported by the C API yet", "several choices");
    if (json_is_true(json_object_get(req, "continue_final_message")))
        return bad("chat request: %s is not supported yet", "continue_final_message");
    if (e->tool_parser && strcmp(e->tool_parser, "none"))
        return bad("tool parser \"%s\" is not supported by vllm.c yet (leave tool_parser NULL)", e->tool_parser);
    if (e->reasoning_parser && strcmp(e->reasoning_parser, "none"))
        return bad("reasoning parser \"%s\" is not supported by vllm.c yet (leave reasoning_parser NULL)",
                   e->reasoning_parser);
    return VLLM_OK;
}

static vllm_status parse_sampling(chat_req *c) {
    json_t *req = c->req;
    vllm_sampling_params *p = &c->vp;
    *p = vllm_sampling_params_default();
    p->max_tokens = 0; /* chat: up to the context unless asked */
    vllm_status st;
    if ((st = get_num(req, "temperature", &p->temperature)) || (st = get_num(req, "top_p", &p->top_p)) ||
        (st = get_num(req, "min_p", &p->min_p)) || (st = get_num(req, "presence_penalty", &p->presence_penalty)) ||
        (st = get_num(req, "frequency_penalty", &p->frequency_penalty)) ||
        (st = get_num(req, "repetition_penalty", &p->repetition_penalty)))
        return st;
    int64_t v = p->top_k;
    if ((st = get_int(req, "top_k", -1, INT32_MAX, &v))) return st;
    p->top_k = (int32_t)v;
    v = 0;
    if ((st = get_int(req, "max_tokens", 1, INT32_MAX, &v)) ||
        (st = get_int(req, "max_completion_tokens", 1, INT32_MAX, &v)))
        return st;
    p->max_tokens = (int32_t)v;
    v = 0;
    if ((st = get_int(req, "min_tokens", 0, INT32_MAX, &v))) return st;
    p->min_tokens = (int32_t)v;
    json_t *seed = json_object_get(req, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return bad("chat request: \"%s\" must be an integer", "seed");
        p->seed = (uint64_t)json_integer_value(seed);
        p->has_seed = 1;
    }
    json_t *ie = json_object_get(req, "ignore_eos");
    if (ie && !json_is_null(ie)) {
        if (!json_is_boolean(ie)) return bad("chat request: \"%s\" must be a boolean", "ignore_eos");
        p->ignore_eos = json_is_true(ie);
    }
    json_t *stop = json_object_get(req, "stop");
    if (json_is_string(stop)) {
        c->stop[0] = json_string_value(stop);
        p->n_stop = 1;
    } else if (json_is_array(stop)) {
        if (json_array_size(stop) > MAX_STOP) return bad("chat request: more than %s stop strings", "64");
        size_t i;
        json_t *s;
        json_array_foreach(stop, i, s) {
            if (!json_is_string(s)) return bad("chat request: \"%s\" entries must be strings", "stop");
            c->stop[p->n_stop++] = json_string_value(s);
        }
    } else if (stop && !json_is_null(stop)) {
        return bad("chat request: \"%s\" must be a string or an array of strings", "stop");
    }
    p->stop = p->n_stop ? c->stop : NULL;
    json_t *so = json_object_get(req, "stream_options");
    c->include_usage = json_is_true(json_object_get(so, "include_usage"));
    return VLLM_OK;
}

/* Without a template: "role: content" lines and "assistant:". */
static char *plain_prompt(const json_t *msgs) {
    vc_strbuf sb = {0};
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        vc_sb_printf(&sb, "%s: ", role);
        if (json_is_string(content)) {
            vc_sb_puts(&sb, json_string_value(content));
        } else if (json_is_array(content)) {
            size_t j;
            json_t *part;
            json_array_foreach(content, j, part) {
                const char *t = json_string_value(json_object_get(part, "text"));
                if (t) vc_sb_puts(&sb, t);
            }
        }
        vc_sb_putc(&sb, '\n');
    }
    vc_sb_puts(&sb, "assistant:");
    return vc_sb_steal(&sb);
}

static vllm_status parse(vllm_engine *e, const char *request_json, chat_req *c) {
    memset(c, 0, sizeof *c);
    json_error_t jerr;
    c->req = json_loads(request_json, 0, &jerr);
    if (!c->req)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "chat request: invalid JSON at line %d column %d: %s", jerr.line,
                         jerr.column, jerr.text);
    if (!json_is_object(c->req)) return bad("chat request: %s must be a JSON object", "the request");
    vllm_status st = refuse_unsupported(e, c->req);
    if (st) return st;
    if (!e->tok) return bad("chat: %s has no tokenizer", e->model_name);
    if (e->tmpl_err) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "chat: the model's chat template: %s", e->tmpl_err);
    json_t *msgs = json_object_get(c->req, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return bad("chat request: %s must be a non-empty array", "\"messages\"");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
            return bad("chat request: every message needs a string %s", "\"role\"");
    }
    json_t *tools = json_object_get(c->req, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return bad("chat request: %s must be an array", "\"tools\"");
    json_t *kw = json_object_get(c->req, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return bad("chat request: %s must be an object", "\"chat_template_kwargs\"");
    json_t *agp = json_object_get(c->req, "add_generation_prompt");
    if ((st = parse_sampling(c))) return st;
    c->model = json_string_value(json_object_get(c->req, "model"));
    if (!c->model || !*c->model) c->model = e->model_name;

    char *prompt = NULL;
    if (e->tmpl) {
        chat_render_params rp = chat_render_params_default();
        rp.messages = msgs;
        rp.tools = json_is_array(tools) ? tools : NULL;
        rp.add_generation_prompt = agp ? json_is_true(agp) : true;
        rp.bos_token = tok_bos_token_str(e->tok);
        rp.eos_token = tok_eos_token_str(e->tok);
        rp.extra = json_is_object(kw) ? kw : NULL;
        if (chat_template_render(e->tmpl, &rp, &prompt) < 0)
            return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "chat: the chat template failed: %s", vc_err_msg());
    } else {
        prompt = plain_prompt(msgs);
    }
    /* The template already holds the special tokens (BOS): vLLM encodes
     * chat prompts without adding more. */
    int rc = tok_encode(e->tok, prompt, strlen(prompt), false, &c->ids, &c->n_ids);
    free(prompt);
    if (rc < 0) return capi_from_vc(rc, "chat: tokenizing the prompt");
    if (c->n_ids == 0 || c->n_ids > INT32_MAX) return bad("chat: the rendered prompt is %s", "empty or too long");
    return VLLM_OK;
}

static void make_id(char *buf, size_t n) {
    static atomic_uint_fast64_t counter;
    uint64_t k = atomic_fetch_add(&counter, 1) + 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec * 1000000007ULL) ^ ((uint64_t)ts.tv_nsec << 20) ^ (k * 0x9E3779B97F4A7C15ULL);
    snprintf(buf, n, "chatcmpl-%016" PRIx64, x);
}

/* Text as a JSON string; bytes that are not UTF-8 (a model can emit a
 * lone byte-fallback token) become U+FFFD, as HF's decode does, instead of
 * failing the whole response. */
static json_t *text_json(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    vc_strbuf sb = {0};
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0 || cp == 0) {
            vc_sb_puts(&sb, "\xEF\xBF\xBD");
            i++;
        } else {
            vc_sb_append(&sb, s + i, (size_t)k);
            i += (size_t)k;
        }
    }
    j = json_stringn(sb.s ? sb.s : "", sb.len);
    vc_sb_free(&sb);
    return j;
}

static json_t *usage_json(const eout_usage *u) {
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)u->prompt_tokens, "completion_tokens",
                     (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)u->prompt_tokens + u->completion_tokens);
}

/* Start a call for a parsed request (deliver/ext set by the caller first). */
static vllm_status start(vllm_engine *e, chat_req *c, capi_call *call) {
    ereq_sampling sp;
    vllm_status st = capi_sampling(e, &c->vp, &sp);
    if (st) return st;
    return capi_call_submit(call, NULL, c->ids, (int32_t)c->n_ids, &sp);
}

vllm_status vllm_chat(vllm_engine *e, const char *request_json, char **out_response_json) {
    capi_clear_error();
    if (out_response_json) *out_response_json = NULL;
    if (!e || !request_json || !out_response_json)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT,
                         "vllm_chat: engine, request_json and out_response_json must not be NULL");
    chat_req c;
    vllm_status st = parse(e, request_json, &c);
    if (st) {
        chat_req_free(&c);
        return st;
    }
    capi_call call;
    if (capi_call_init(&call, e) < 0) {
        chat_req_free(&c);
        return capi_fail(VLLM_ERR_RUNTIME, "cannot create a mutex");
    }
    call.keep_text = true;
    st = start(e, &c, &call);
    if (st == VLLM_OK) {
        capi_call_wait(&call);
        if (call.failed) st = capi_fail(VLLM_ERR_RUNTIME, "generation failed: the engine stopped on an error");
    }
    if (st == VLLM_OK) {
        char id[48];
        make_id(id, sizeof id);
        json_t *resp = json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:{s:s, s:o}, s:n, s:s}], s:o}", "id", id,
                                 "object", "chat.completion", "created", (json_int_t)time(NULL), "model", c.model,
                                 "choices", "index", 0, "message", "role", "assistant", "content",
                                 text_json(call.text.s ? call.text.s : "", call.text.len), "logprobs", "finish_reason",
                                 call.finish_reason ? call.finish_reason : "stop", "usage", usage_json(&call.usage));
        *out_response_json = resp ? json_dumps(resp, JSON_COMPACT) : NULL;
        json_decref(resp);
        if (!*out_response_json) st = capi_fail(VLLM_ERR_RUNTIME, "vllm_chat: cannot build the response JSON");
    }
    capi_call_destroy(&call);
    chat_req_free(&c);
    return st;
}

/* ---- streaming */

typedef struct {
    char id[48];
    const char *model;
    json_int_t created;
    bool include_usage, sent_role;
    bool build_failed; /* a chunk could not be made (out of memory): the request was stopped */
} chat_stream;

/* Send one chunk; false when the caller wants to stop (or on OOM). */
static bool send_chunk(capi_call *call, json_t *chunk) {
    char *s = chunk ? json_dumps(chunk, JSON_COMPACT) : NULL;
    json_decref(chunk);
    if (!s) {
        ((chat_stream *)call->ext)->build_failed = true;
        return false;
    }
    bool go = call->cb(s, false, call->user);
    free(s);
    return go;
}

static json_t *chunk(const chat_stream *cs, json_t *delta, const char *finish) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:s?}]}", "id", cs->id, "object",
                     "chat.completion.chunk", "created", cs->created, "model", cs->model, "choices", "index", 0,
                     "delta", delta, "logprobs", "finish_reason", finish);
}

static bool deliver_chunks(capi_call *call, const eng_output *o) {
    chat_stream *cs = call->ext;
    if (!cs->sent_role) {
        cs->sent_role = true;
        if (!send_chunk(call, chunk(cs, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL)))
            return false;
    }
    if (o->text_len) {
        json_t *d = json_pack("{s:o}", "content", text_json(o->text, o->text_len));
        if (!send_chunk(call, chunk(cs, d, NULL))) return false;
    }
    if (!o->finished) return true;
    if (!send_chunk(call, chunk(cs, json_object(), o->finish_reason ? o->finish_reason : "stop"))) return false;
    if (cs->include_usage) {
        json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", cs->id, "object", "chat.completion.chunk",
                              "created", cs->created, "model", cs->model, "choices", "usage", usage_json(&o->usage));
        if (!send_chunk(call, u)) return false;
    }
    return call->cb("", true, call->user);
}

vllm_status vllm_chat_stream(vllm_engine *e, const char *request_json, vllm_token_callback cb, void *user_data) {
    capi_clear_error();
    if (!e || !request_json || !cb)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_chat_stream: engine, request_json and cb must not be NULL");
    chat_req c;
    vllm_status st = parse(e, request_json, &c);
    if (st) {
        chat_req_free(&c);
        return st;
    }
    chat_stream cs = {.model = c.model, .created = (json_int_t)time(NULL), .include_usage = c.include_usage};
    make_id(cs.id, sizeof cs.id);
    capi_call call;
    if (capi_call_init(&call, e) < 0) {
        chat_req_free(&c);
        return capi_fail(VLLM_ERR_RUNTIME, "cannot create a mutex");
    }
    call.cb = cb;
    call.user = user_data;
    call.deliver = deliver_chunks;
    call.ext = &cs;
    st = start(e, &c, &call);
    if (st == VLLM_OK) {
        capi_call_wait(&call);
        if (call.failed) st = capi_fail(VLLM_ERR_RUNTIME, "generation failed: the engine stopped on an error");
        else if (cs.build_failed)
            st = capi_fail(VLLM_ERR_RUNTIME, "vllm_chat_stream: cannot build a chunk (out of memory)");
    }
    capi_call_destroy(&call);
    chat_req_free(&c);
    return st;
}
