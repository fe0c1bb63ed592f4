/* srv_openai — POST /v1/completions and /v1/chat/completions: prompt
 * building (chat template or text/ids), the engine job, and the answer as
 * one JSON object or an SSE stream of chunks. */
#include "server/srv_internal.h"

#include "base/err.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    vc_strbuf text;               /* completions / chat content */
    vc_strbuf reasoning;
    json_t *tool_calls;           /* array */
    srv_splitter split;
    const char *finish_reason;
    char *stop_reason;
    bool started;                 /* stream: role / echo chunk sent */
    bool named;                   /* tool_choice named a function: finish "stop" (vLLM / OpenAI) */
    json_t *lp;                   /* non-streaming logprobs, or NULL */
    json_t *plp;                  /* prompt logprobs (vLLM shape), or NULL */
    size_t lp_off;                /* completions text_offset */
} choice_state;

struct srv_stream {
    srv_server *s;
    srv_job *job;
    bool chat, include_usage;
    char id[64];
    long created;
    int n_choices, n;
    choice_state *cs;
    char **echo;                  /* per prompt, or NULL */
    int32_t *prompt_len;          /* per prompt */
    int client_fd;
    bool gone;                    /* the client hung up: stop streaming */
    vc_strbuf out;                /* SSE bytes not yet handed to MHD */
    size_t pos;
    bool done;
};

/* ---- building the prompt(s) */

static int chat_prompt(srv_server *s, srv_gen *g, const char *prefill, int32_t **ids, int32_t *n, srv_error *e) {
    if (!s->tmpl)
        return srv_err(e, 400, "messages", "this model has no chat template: start the server with --chat-template");
    chat_render_params p = chat_render_params_default();
    p.messages = g->messages;
    p.tools = g->tools;
    p.add_generation_prompt = g->add_generation_prompt;
    p.bos_token = tok_bos_token_str(s->tok);
    p.eos_token = tok_eos_token_str(s->tok);
    p.extra = g->template_kwargs;
    char *text = NULL;
    if (chat_template_render(s->tmpl, &p, &text) < 0)
        return srv_err(e, 400, "messages", "chat template: %s", vc_err_msg());
    if (g->continue_final_message) {
        /* Cut what the template put after the final message (its end-of-turn
         * marker), so generation continues that message, as vLLM does. */
        json_t *last = json_array_get(g->messages, json_array_size(g->messages) - 1);
        const char *fin = json_string_value(json_object_get(last, "content"));
        size_t fl = strlen(fin);
        char *hit = NULL;
        for (char *q = text; fl && (q = strstr(q, fin)); q++) hit = q;
        if (fl && !hit) {
            free(text);
            return srv_err(e, 400, "messages", "continue_final_message: the template does not render the final "
                                               "message verbatim");
        }
        if (hit) hit[fl] = 0;
    }
    if (prefill) { /* forced tool choice: the reply starts with the opening of a call */
        char *t2 = NULL;
        if (asprintf(&t2, "%s%s", text, prefill) < 0) t2 = NULL;
        free(text);
        if (!(text = t2)) return srv_err(e, 500, NULL, "out of memory");
    }
    size_t nn = 0;
    int rc = tok_encode(s->tok, text, strlen(text), false, ids, &nn);
    free(text);
    if (rc < 0) return srv_err(e, 400, "messages", "tokenizer: %s", vc_err_msg());
    *n = (int32_t)nn;
    return 0;
}

static int text_prompt(srv_server *s, const char *text, int32_t **ids, int32_t *n, srv_error *e) {
    size_t nn = 0;
    if (tok_encode(s->tok, text, strlen(text), true, ids, &nn) < 0)
        return srv_err(e, 400, "prompt", "tokenizer: %s", vc_err_msg());
    *n = (int32_t)nn;
    return 0;
}

/* ---- JSON pieces */

/* A token's text (decoded alone); bytes that are not valid UTF-8 on their
 * own are shown as "bytes:\xNN..." as vLLM does. */
static json_t *tok_json(const srv_server *s, int32_t id, json_t **bytes_out) {
    char *t = NULL;
    size_t n = 0;
    if (tok_decode(s->tok, &id, 1, false, &t, &n) < 0 || !t) {
        free(t);
        t = strdup("");
        n = 0;
    }
    if (bytes_out) {
        *bytes_out = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes_out, json_integer((unsigned char)t[i]));
    }
    json_t *j;
    if (srv_utf8_valid(t, n) && !memchr(t, 0, n)) {
        j = json_stringn(t, n);
    } else {
        vc_strbuf sb = {0};
        vc_sb_puts(&sb, "bytes:");
        for (size_t i = 0; i < n; i++) vc_sb_printf(&sb, "\\x%02x", (unsigned char)t[i]);
        j = json_string(sb.s);
        vc_sb_free(&sb);
    }
    free(t);
    return j ? j : json_string("");
}

/* Append this event's token logprobs to dst: completions
 * {tokens, token_logprobs, top_logprobs, text_offset}; chat {content: [...]}. */
static void lp_append(const srv_server *s, bool chat, json_t *dst, const srv_event *ev, size_t *off) {
    if (ev->n_lp <= 0) return;
    if (!chat) {
        json_t *tok = tok_json(s, ev->lp_ids[0], NULL);
        json_t *top = json_object();
        for (int32_t i = 0; i < ev->n_lp; i++) {
            json_t *k = i ? tok_json(s, ev->lp_ids[i], NULL) : json_incref(tok);
            json_object_set_new(top, json_string_value(k), json_real(ev->lp_vals[i]));
            json_decref(k);
        }
        json_array_append_new(json_object_get(dst, "text_offset"), json_integer((json_int_t)*off));
        *off += strlen(json_string_value(tok));
        json_array_append_new(json_object_get(dst, "tokens"), tok);
        json_array_append_new(json_object_get(dst, "token_logprobs"), json_real(ev->lp_vals[0]));
        json_array_append_new(json_object_get(dst, "top_logprobs"), top);
        return;
    }
    json_t *top = json_array();
    for (int32_t i = 1; i < ev->n_lp; i++) {
        json_t *b;
        json_t *t = tok_json(s, ev->lp_ids[i], &b);
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", t, "logprob", (double)ev->lp_vals[i],
                                             "bytes", b));
    }
    json_t *b;
    json_t *t = tok_json(s, ev->lp_ids[0], &b);
    json_array_append_new(json_object_get(dst, "content"),
                          json_pack("{s:o, s:f, s:o, s:o}", "token", t, "logprob", (double)ev->lp_vals[0], "bytes", b,
                                    "top_logprobs", top));
}

/* vLLM's prompt_logprobs: [null, {"<id>": {logprob, rank, decoded_token}}, ...],
 * one dict per prompt position after the first (the prompt token and the top k). */
static json_t *plp_json(const srv_server *s, const srv_event *ev) {
    json_t *arr = json_array();
    json_array_append_new(arr, json_null());
    for (int32_t p = 1; p < ev->n_plp; p++) {
        json_t *d = json_object();
        for (int32_t i = ev->plp_stride - 1; i >= 0; i--) { /* the prompt token (i = 0) last: its rank wins */
            int32_t id = ev->plp_ids[(size_t)p * ev->plp_stride + i];
            char key[16];
            snprintf(key, sizeof key, "%d", id);
            json_object_set_new(d, key, json_pack("{s:f, s:i, s:o}", "logprob",
                                                  (double)ev->plp_vals[(size_t)p * ev->plp_stride + i], "rank",
                                                  i ? i : ev->plp_ranks[p], "decoded_token", tok_json(s, id, NULL)));
        }
        json_array_append_new(arr, d);
    }
    return arr;
}

static json_t *lp_new(bool chat) {
    return chat ? json_pack("{s:[]}", "content")
                : json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

static json_t *usage_json(const srv_job *j, int n) {
    long long pt = 0, ct = 0;
    for (int i = 0; i < j->n_ch; i++) {
        if (i % n == 0) pt += j->ch[i].prompt_tokens;
        ct += j->ch[i].completion_tokens;
    }
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)pt, "completion_tokens", (json_int_t)ct,
                     "total_tokens", (json_int_t)(pt + ct));
}

static json_t *opt_str(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *chat_message(choice_state *c) {
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content",
                          c->text.len || json_array_size(c->tool_calls) == 0 ? json_string(c->text.s ? c->text.s : "")
                                                                             : json_null());
    if (c->reasoning.len) json_object_set_new(m, "reasoning", json_string(c->reasoning.s));
    json_object_set(m, "tool_calls", c->tool_calls);
    return m;
}

static const char *final_reason(const choice_state *c) {
    if (c->finish_reason && !strcmp(c->finish_reason, "stop") && json_array_size(c->tool_calls) && !c->named)
        return "tool_calls";
    return c->finish_reason ? c->finish_reason : "error";
}

static json_t *chunk_base(struct srv_stream *st) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[]}", "id", st->id, "object",
                     st->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)st->created,
                     "model", st->s->model_name, "choices");
}

static void put_chunk(struct srv_stream *st, json_t *chunk) {
    char *txt = json_dumps(chunk, JSON_COMPACT);
    json_decref(chunk);
    if (!txt) return;
    vc_sb_puts(&st->out, "data: ");
    vc_sb_puts(&st->out, txt);
    vc_sb_puts(&st->out, "\n\n");
    free(txt);
}

/* One chunk for choice idx: text (completions) or content / reasoning /
 * tool calls (chat) and an optional finish reason. */
static void put_choice_chunk(struct srv_stream *st, int idx, const char *text, const char *reasoning,
                             json_t *tool_calls, bool role, const char *finish, const char *stop_reason, json_t *lp) {
    json_t *ch = chunk_base(st);
    json_t *c;
    if (st->chat) {
        json_t *d = json_object();
        if (role) json_object_set_new(d, "role", json_string("assistant"));
        if (text) json_object_set_new(d, "content", json_string(text));
        if (reasoning) json_object_set_new(d, "reasoning", json_string(reasoning));
        if (tool_calls) json_object_set(d, "tool_calls", tool_calls);
        c = json_pack("{s:i, s:o, s:o, s:o}", "index", idx, "delta", d, "logprobs", lp ? lp : json_null(),
                      "finish_reason", opt_str(finish));
    } else {
        c = json_pack("{s:i, s:s, s:o, s:o, s:o}", "index", idx, "text", text ? text : "", "logprobs",
                      lp ? lp : json_null(), "finish_reason", opt_str(finish), "stop_reason", opt_str(stop_reason));
    }
    json_array_append_new(json_object_get(ch, "choices"), c);
    put_chunk(st, ch);
}

static void stream_event(struct srv_stream *st, srv_event *ev) {
    choice_state *c = &st->cs[ev->idx];
    int pk = ev->idx / st->n;
    bool first = !c->started;
    c->started = true;
    if (first && st->chat) put_choice_chunk(st, ev->idx, "", NULL, NULL, true, NULL, NULL, NULL);
    if (first && !st->chat && st->echo && st->echo[pk]) put_choice_chunk(st, ev->idx, st->echo[pk], NULL, NULL, false, NULL, NULL, NULL);
    const char *finish = ev->finish_reason;
    json_t *lp = NULL;
    if (ev->n_lp > 0) {
        lp = lp_new(st->chat);
        lp_append(st->s, st->chat, lp, ev, &c->lp_off);
    }
    if (!st->chat) {
        if (ev->len || finish || lp) put_choice_chunk(st, ev->idx, ev->text, NULL, NULL, false, finish, ev->stop_reason, lp);
        return;
    }
    vc_strbuf content = {0}, reasoning = {0};
    json_t *calls = json_array();
    srv_splitter_push(&c->split, ev->text, ev->len, finish != NULL, &content, &reasoning, calls);
    if (finish) {
        c->finish_reason = finish;
        if (json_array_size(calls) || c->split.n_tools) json_array_extend(c->tool_calls, calls);
    }
    if (reasoning.len) put_choice_chunk(st, ev->idx, NULL, reasoning.s, NULL, false, NULL, NULL, NULL);
    if (json_array_size(calls)) {
        if (content.len) { /* text before the call goes first */
            put_choice_chunk(st, ev->idx, content.s, NULL, NULL, false, NULL, NULL, NULL);
            vc_sb_clear(&content);
        }
        put_choice_chunk(st, ev->idx, NULL, NULL, calls, false, NULL, NULL, NULL);
    }
    if (content.len || finish || lp) {
        const char *fr = NULL;
        if (finish) fr = (!strcmp(finish, "stop") && c->split.n_tools && !c->named) ? "tool_calls" : finish;
        put_choice_chunk(st, ev->idx, content.len || !finish ? (content.s ? content.s : "") : NULL, NULL, NULL,
                         false, fr, NULL, lp);
        lp = NULL;
    }
    json_decref(lp);
    json_decref(calls);
    vc_sb_free(&content);
    vc_sb_free(&reasoning);
}

/* Produce more SSE bytes (blocks for the next delta). */
static void stream_produce(struct srv_stream *st) {
    if (atomic_load(&st->s->stopping)) { /* shutting down: end the stream, abort the rest */
        st->gone = true;
        return;
    }
    bool timed_out;
    srv_event *ev = srv_job_next_timed(st->job, 250, &timed_out);
    if (timed_out) { /* nothing yet (e.g. a long prefill): is anyone still listening? */
        if (srv_client_gone(st->client_fd)) st->gone = true;
        return;
    }
    if (ev) {
        stream_event(st, ev);
        srv_event_free(ev);
        return;
    }
    if (st->job->oom) {
        srv_error e;
        srv_err(&e, 500, NULL, "out of memory while streaming");
        char *ej = srv_error_json(&e);
        vc_sb_printf(&st->out, "data: %s\n\n", ej);
        free(ej);
    }
    if (st->include_usage) {
        json_t *ch = chunk_base(st);
        json_object_set_new(ch, "usage", usage_json(st->job, st->n));
        put_chunk(st, ch);
    }
    vc_sb_puts(&st->out, "data: [DONE]\n\n");
    st->done = true;
}

size_t srv_stream_read(struct srv_stream *st, char *buf, size_t max, bool *done) {
    *done = false;
    while (st->pos >= st->out.len) {
        vc_sb_clear(&st->out);
        st->pos = 0;
        if (st->done || st->gone) {
            *done = true;
            return 0;
        }
        stream_produce(st);
    }
    size_t k = st->out.len - st->pos;
    if (k > max) k = max;
    memcpy(buf, st->out.s + st->pos, k);
    st->pos += k;
    return k;
}

static void choices_free(choice_state *cs, int n) {
    if (!cs) return;
    for (int i = 0; i < n; i++) {
        vc_sb_free(&cs[i].text);
        vc_sb_free(&cs[i].reasoning);
        json_decref(cs[i].tool_calls);
        json_decref(cs[i].lp);
        json_decref(cs[i].plp);
        srv_splitter_free(&cs[i].split);
        free(cs[i].stop_reason);
    }
    free(cs);
}

void srv_stream_free(struct srv_stream *st) {
    if (!st) return;
    srv_job_release(st->job); /* aborts what still runs (client gone) */
    choices_free(st->cs, st->n_choices);
    if (st->echo)
        for (int i = 0; i < st->n_choices / st->n; i++) free(st->echo[i]);
    free(st->echo);
    free(st->prompt_len);
    vc_sb_free(&st->out);
    free(st);
}

/* ---- token-level controls that need the tokenizer */

/* Ids in [0, vocab); bad words as token sequences the vLLM way: the word
 * (leading spaces dropped) and, when it tokenizes to as many tokens with a
 * different first token, " " + word (the word after a space). */
static int token_controls(srv_server *s, srv_gen *g, srv_error *e) {
    size_t vocab = tok_vocab_size(s->tok);
    for (int32_t i = 0; i < g->n_logit_bias; i++)
        if ((size_t)g->logit_bias_ids[i] >= vocab)
            return srv_err(e, 400, "logit_bias", "token id %d in logit_bias is out of vocabulary (size %zu)",
                           g->logit_bias_ids[i], vocab);
    for (int32_t i = 0; i < g->n_allowed; i++)
        if ((size_t)g->allowed_ids[i] >= vocab)
            return srv_err(e, 400, "allowed_token_ids", "token id %d in allowed_token_ids is out of vocabulary "
                                                        "(size %zu)", g->allowed_ids[i], vocab);
    if (!g->n_bad_words) return 0;
    vc_strbuf ids = {0}, lens = {0}; /* int32 arrays as bytes */
    int rc = 0;
    for (int w = 0; w < g->n_bad_words && rc == 0; w++) {
        int32_t *first = NULL;
        size_t n_first = 0;
        for (int sp = 0; sp < 2 && rc == 0; sp++) {
            char *txt = NULL;
            if (asprintf(&txt, "%s%s", sp ? " " : "", g->bad_words[w]) < 0) { rc = srv_err(e, 500, NULL, "out of memory"); break; }
            int32_t *t = NULL;
            size_t n = 0;
            if (tok_encode(s->tok, txt, strlen(txt), false, &t, &n) < 0) rc = srv_err(e, 400, "bad_words", "tokenizer: %s", vc_err_msg());
            free(txt);
            if (rc == 0 && n > 0 && (!sp || (n == n_first && t[0] != first[0]))) {
                int32_t len = (int32_t)n;
                vc_sb_append(&ids, (const char *)t, n * sizeof *t);
                vc_sb_append(&lens, (const char *)&len, sizeof len);
            }
            if (sp) free(t);
            else { first = t; n_first = n; }
        }
        free(first);
    }
    if (rc == 0 && lens.len) {
        g->bad_ids = malloc(ids.len);
        g->bad_lens = malloc(lens.len);
        if (!g->bad_ids || !g->bad_lens) rc = srv_err(e, 500, NULL, "out of memory");
        else {
            memcpy(g->bad_ids, ids.s, ids.len);
            memcpy(g->bad_lens, lens.s, lens.len);
            g->sp.bad_words_ids = g->bad_ids;
            g->sp.bad_words_lens = g->bad_lens;
            g->sp.n_bad_words = (int32_t)(lens.len / sizeof(int32_t));
        }
    }
    vc_sb_free(&ids);
    vc_sb_free(&lens);
    return rc;
}

/* tool_choice "required" / named, without structured output: the server
 * writes the opening of a call in the parser's format after the
 * generation prompt (named, or "required" with one tool: up to the
 * arguments value; else up to the name's opening quote), so the reply is a
 * call by construction; the model writes the rest: a name not checked
 * against `tools` when several are offered, and arguments that are valid
 * JSON only if the model closes its object within max_tokens (no schema
 * check). A hermes call with a known name also stops at </tool_call>. */
static int forced_tool_choice(srv_server *s, srv_gen *g, char **prefill, srv_error *e) {
    *prefill = NULL;
    if (!g->tool_required && !g->tool_forced) return 0;
    if (s->tools == SRV_TOOLS_NONE)
        return srv_err(e, 400, "tool_choice", "tool_choice '%s' needs a tool-call parser: start the server with "
                                              "--tool-call-parser (or a chat template that teaches one)",
                       g->tool_forced ? "function" : "required");
    const char *open = s->tools == SRV_TOOLS_HERMES ? "<tool_call>\n{\"name\": "
                     : s->tools == SRV_TOOLS_MISTRAL ? "[TOOL_CALLS] [{\"name\": " : "{\"name\": ";
    const char *key = s->tools == SRV_TOOLS_LLAMA3_JSON ? "parameters" : "arguments";
    int rc;
    /* "required" with a single tool can only mean that tool. */
    const char *fname = g->tool_forced;
    if (!fname && json_array_size(g->tools) == 1)
        fname = json_string_value(json_object_get(json_object_get(json_array_get(g->tools, 0), "function"), "name"));
    if (fname) {
        json_t *nm = json_string(fname);
        char *q = nm ? json_dumps(nm, JSON_ENCODE_ANY) : NULL;
        json_decref(nm);
        rc = q ? asprintf(prefill, "%s%s, \"%s\": ", open, q, key) : -1;
        free(q);
    } else {
        rc = asprintf(prefill, "%s\"", open);
    }
    if (rc < 0) {
        *prefill = NULL;
        return srv_err(e, 500, NULL, "out of memory");
    }
    if (fname && s->tools == SRV_TOOLS_HERMES) {
        char **st = realloc(g->stop, (size_t)(g->n_stop + 1) * sizeof *st);
        if (!st) return srv_err(e, 500, NULL, "out of memory");
        g->stop = st;
        if (!(g->stop[g->n_stop] = strdup("</tool_call>"))) return srv_err(e, 500, NULL, "out of memory");
        g->n_stop++;
        g->sp.stop = g->stop;
        g->sp.n_stop = g->n_stop;
    }
    return 0;
}

/* ---- the handler */

void srv_handle_completions(srv_server *s, const char *body, size_t len, bool chat, srv_reply *r) {
    srv_gen g;
    srv_error e;
    int32_t **ids = NULL, *n_ids = NULL;
    int n_prompts = 0;
    struct srv_stream *st = NULL;
    char *prefill = NULL;
    if (srv_parse_gen(body, len, chat, &g, &e) < 0) goto fail;
    if (g.model && strcmp(g.model, s->model_name)) {
        srv_err(&e, 404, "model", "The model `%.200s` does not exist.", g.model);
        goto fail;
    }
    if (token_controls(s, &g, &e) < 0) goto fail;
    if (forced_tool_choice(s, &g, &prefill, &e) < 0) goto fail;
    n_prompts = chat ? 1 : g.n_prompts;
    if (n_prompts * g.n > 256) {
        srv_err(&e, 400, "n", "%d prompts x n=%d choices is over the limit of 256 per request", n_prompts, g.n);
        goto fail;
    }
    ids = calloc((size_t)n_prompts, sizeof *ids);
    n_ids = calloc((size_t)n_prompts, sizeof *n_ids);
    st = calloc(1, sizeof *st);
    if (!ids || !n_ids || !st) { srv_err(&e, 500, NULL, "out of memory"); goto fail; }
    st->s = s;
    st->client_fd = r->client_fd;
    st->chat = chat;
    st->n = g.n;
    st->n_choices = n_prompts * g.n;
    st->include_usage = g.include_usage;
    st->created = (long)time(NULL);
    srv_make_id(st->id, sizeof st->id, chat ? "chatcmpl-" : "cmpl-");
    st->cs = calloc((size_t)st->n_choices, sizeof *st->cs);
    if (!st->cs) { srv_err(&e, 500, NULL, "out of memory"); goto fail; }
    for (int i = 0; i < st->n_choices; i++) {
        st->cs[i].tool_calls = json_array();
        srv_splitter_init(&st->cs[i].split, s->reasoning, g.tools && !g.tool_choice_none ? s->tools : SRV_TOOLS_NONE);
        st->cs[i].split.stream = g.stream;
        st->cs[i].named = g.tool_forced != NULL;
        if (prefill) srv_splitter_prefill(&st->cs[i].split, prefill);
    }
    if (g.echo) {
        st->echo = calloc((size_t)n_prompts, sizeof *st->echo);
        if (!st->echo) { srv_err(&e, 500, NULL, "out of memory"); goto fail; }
    }
    size_t vocab = tok_vocab_size(s->tok);
    for (int k = 0; k < n_prompts; k++) {
        if (chat) {
            if (chat_prompt(s, &g, prefill, &ids[k], &n_ids[k], &e) < 0) goto fail;
        } else if (g.prompts[k].text) {
            if (text_prompt(s, g.prompts[k].text, &ids[k], &n_ids[k], &e) < 0) goto fail;
            if (st->echo && !(st->echo[k] = strdup(g.prompts[k].text))) { srv_err(&e, 500, NULL, "out of memory"); goto fail; }
        } else {
            for (int32_t i = 0; i < g.prompts[k].n_ids; i++)
                if ((size_t)g.prompts[k].ids[i] >= vocab) {
                    srv_err(&e, 400, "prompt", "token id %d is out of vocabulary (size %zu)", g.prompts[k].ids[i], vocab);
                    goto fail;
                }
            ids[k] = g.prompts[k].ids;
            n_ids[k] = g.prompts[k].n_ids;
            g.prompts[k].ids = NULL;
            if (st->echo && tok_decode(s->tok, ids[k], (size_t)n_ids[k], false, &st->echo[k], NULL) < 0) {
                srv_err(&e, 500, NULL, "%s", vc_err_msg());
                goto fail;
            }
        }
        if (n_ids[k] == 0) { srv_err(&e, 400, "prompt", "the prompt is empty"); goto fail; }
        if (n_ids[k] >= s->max_model_len) {
            srv_err(&e, 400, chat ? "messages" : "prompt",
                    "This model's maximum context length is %d tokens. However, your request has %d input tokens.",
                    s->max_model_len, n_ids[k]);
            goto fail;
        }
        int64_t mt = g.max_tokens >= 0 ? g.max_tokens : chat ? s->max_model_len - n_ids[k] : 16;
        if (n_ids[k] + mt > s->max_model_len) {
            srv_err(&e, 400, "max_tokens",
                    "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                    "(%d in the input, %lld for the completion). Please reduce the length of the input or "
                    "max_tokens.", s->max_model_len, (long long)(n_ids[k] + mt), n_ids[k], (long long)mt);
            goto fail;
        }
        /* One max_tokens for the whole job: the smallest any prompt allows. */
        if (k == 0 || mt < g.sp.max_tokens) g.sp.max_tokens = (int32_t)mt;
    }
    if (!aeng_alive(s->engine)) { srv_err(&e, 503, NULL, "the engine is not running"); goto fail; }
    if (srv_job_start(s->engine, s->metrics, ids, n_ids, n_prompts, g.n, &g.sp, &st->job, &e) < 0) goto fail;
    for (int k = 0; k < n_prompts; k++) free(ids[k]);
    free(ids);
    free(n_ids);
    ids = NULL;
    n_ids = NULL;

    free(prefill);
    prefill = NULL;
    if (g.stream) {
        srv_gen_free(&g);
        r->status = 200;
        r->stream = st;
        r->content_type = "text/event-stream";
        return;
    }
    /* Non-streaming: collect everything. */
    srv_event *ev;
    bool timed_out;
    double checked = srv_now();
    while ((ev = srv_job_next_timed(st->job, 250, &timed_out)) || timed_out) {
        if (atomic_load(&s->stopping)) {
            srv_event_free(ev);
            srv_err(&e, 503, NULL, "the server is shutting down");
            goto fail;
        }
        if (srv_now() - checked >= 0.25) { /* a client that hung up: abort, free the KV */
            checked = srv_now();
            if (srv_client_gone(r->client_fd)) {
                srv_event_free(ev);
                srv_err(&e, 499, NULL, "client closed the connection");
                goto fail;
            }
        }
        if (!ev) continue;
        choice_state *c = &st->cs[ev->idx];
        if (ev->n_plp > 0 && !c->plp) c->plp = plp_json(s, ev);
        if (chat) srv_splitter_push(&c->split, ev->text, ev->len, ev->finish_reason != NULL, &c->text, &c->reasoning,
                                    c->tool_calls);
        else vc_sb_append(&c->text, ev->text, ev->len);
        if (ev->n_lp > 0) {
            if (!c->lp) c->lp = lp_new(chat);
            lp_append(s, chat, c->lp, ev, &c->lp_off);
        }
        if (ev->finish_reason) {
            c->finish_reason = ev->finish_reason;
            c->stop_reason = ev->stop_reason;
            ev->stop_reason = NULL;
        }
        srv_event_free(ev);
    }
    if (st->job->oom) { srv_err(&e, 500, NULL, "out of memory while generating"); goto fail; }
    json_t *choices = json_array();
    for (int i = 0; i < st->n_choices; i++) {
        choice_state *c = &st->cs[i];
        json_t *ch;
        if (chat) {
            ch = json_pack("{s:i, s:o, s:O, s:s}", "index", i, "message", chat_message(c), "logprobs",
                           c->lp ? c->lp : json_null(), "finish_reason", final_reason(c));
        } else {
            const char *echo = st->echo ? st->echo[i / g.n] : NULL;
            char *full = NULL;
            if (echo && asprintf(&full, "%s%s", echo, c->text.s ? c->text.s : "") < 0) full = NULL;
            ch = json_pack("{s:i, s:s, s:O, s:s, s:o, s:O}", "index", i, "text",
                           full ? full : (c->text.s ? c->text.s : ""), "logprobs", c->lp ? c->lp : json_null(),
                           "finish_reason", final_reason(c),
                           "stop_reason", opt_str(c->stop_reason), "prompt_logprobs",
                           c->plp ? c->plp : json_null());
            free(full);
        }
        json_array_append_new(choices, ch);
    }
    json_t *resp = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", st->id, "object",
                             chat ? "chat.completion" : "text_completion", "created", (json_int_t)st->created, "model",
                             s->model_name, "choices", choices, "usage", usage_json(st->job, g.n));
    if (chat) /* vLLM: the chat response carries the (shared) prompt's logprobs at the top */
        json_object_set(resp, "prompt_logprobs", st->n_choices && st->cs[0].plp ? st->cs[0].plp : json_null());
    srv_reply_json(r, 200, resp);
    srv_stream_free(st);
    srv_gen_free(&g);
    return;
fail:
    free(prefill);
    if (ids)
        for (int k = 0; k < n_prompts; k++) free(ids[k]);
    free(ids);
    free(n_ids);
    srv_stream_free(st);
    srv_gen_free(&g);
    srv_reply_error(r, &e);
}
