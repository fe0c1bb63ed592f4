/* srv_internal — types shared by the server's files (not a public API).
 *
 * A generation request flows: body -> srv_parse_gen (srv_gen) ->
 * srv_job_start (one engine child request per prompt x n) -> the handler
 * reads srv_events off the job (streaming) or waits for all children to
 * finish (JSON) -> srv_job_release. */
#ifndef SRV_INTERNAL_H
#define SRV_INTERNAL_H

#include "base/strbuf.h"
#include "chat/chat.h"
#include "engine/async_engine.h"
#include "server/server.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- errors: OpenAI error JSON {"error": {message, type, param, code}} */
typedef struct {
    int status;            /* HTTP status */
    const char *type;      /* "BadRequestError", "NotFoundError", ... */
    char param[64];        /* offending field or "" */
    char msg[512];
} srv_error;

int srv_err(srv_error *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* {"error": {...}} as a malloc'd string. */
char *srv_error_json(const srv_error *e);

/* ---- parsed generation request */
typedef struct {
    char *text;            /* a text prompt, or NULL */
    int32_t *ids;          /* a token-id prompt (when text is NULL) */
    int32_t n_ids;
} srv_prompt;

typedef struct {
    bool chat;
    char *model;                  /* as sent, may be NULL */
    /* completions */
    srv_prompt *prompts;
    int n_prompts;
    bool echo;
    /* chat */
    json_t *messages;             /* owned reference */
    json_t *tools;                /* owned reference or NULL */
    json_t *template_kwargs;      /* owned reference or NULL */
    bool add_generation_prompt;
    bool continue_final_message;  /* the reply continues the last (assistant) message */
    bool tool_choice_none;
    /* common */
    int64_t max_tokens;           /* -1: default (16 completions, rest of context for chat) */
    int32_t logprobs;             /* -1: none; k: sampled token + top k (sp.logprobs) */
    int n;
    bool stream, include_usage;
    ereq_sampling sp;             /* sp.stop, sp.logit_bias_*, sp.allowed_token_ids and
                                   * sp.bad_words_* point into the arrays below */
    char **stop;
    int n_stop;
    int32_t prompt_logprobs;      /* -1: none; k: each prompt token + top k */
    int32_t *logit_bias_ids;      /* [n_logit_bias] (ids checked against the vocab later) */
    float *logit_bias_vals;
    int32_t n_logit_bias;
    int32_t *allowed_ids;         /* [n_allowed] */
    int32_t n_allowed;
    char **bad_words;             /* [n_bad_words] strings; tokenized by the handler */
    int n_bad_words;
    int32_t *bad_ids, *bad_lens;  /* tokenized bad words (filled by srv_openai) */
    /* tool_choice: "required" (tool_required) or a named function (tool_forced) */
    bool tool_required;
    char *tool_forced;
} srv_gen;

/* Parse and validate a completions (chat false) or chat request body.
 * 0, or -1 with *err filled (status 400). Always call srv_gen_free. */
int srv_parse_gen(const char *body, size_t len, bool chat, srv_gen *g, srv_error *err);
void srv_gen_free(srv_gen *g);
/* Strict UTF-8 check (no overlongs, surrogates or > U+10FFFF). */
bool srv_utf8_valid(const char *s, size_t len);

/* ---- metrics (srv_metrics.c) */
typedef struct srv_metrics srv_metrics;
/* Reference counted: every job holds one, since aborted children may still
 * report (on the engine thread) after the server is gone. */
srv_metrics *srv_metrics_create(int32_t max_model_len); /* 1-2-5 token buckets up to it */
srv_metrics *srv_metrics_ref(srv_metrics *m);
void srv_metrics_free(srv_metrics *m); /* drops one reference */
void srv_metrics_ttft(srv_metrics *m, double s);
void srv_metrics_itl(srv_metrics *m, double s);
/* One finished engine request (a choice). */
typedef struct {
    const char *reason;           /* stop, length, abort, error */
    double e2e;                   /* arrival -> final delta, seconds */
    double tpot;                  /* (last token - first token) / (tokens - 1); < 0: fewer than 2 tokens */
    int32_t prompt_tokens, gen_tokens;
    int32_t max_tokens, n;        /* the request's parameters */
    /* From the engine's timeline (eng_times), seconds; < 0: not reached
     * (e.g. aborted while waiting). vLLM's definitions. */
    double queue, prefill, decode, inference;
} srv_finished;
void srv_metrics_finished(srv_metrics *m, const srv_finished *f);
char *srv_metrics_render(srv_metrics *m, aeng *a, const char *model_name);

/* ---- the job: one HTTP request's engine children */
typedef struct srv_event {
    struct srv_event *next;
    int idx;                      /* choice index */
    char *text;                   /* new text (may be "") */
    size_t len;
    int32_t n_tokens;             /* new tokens in this delta */
    const char *finish_reason;    /* static string when finished, else NULL */
    char *stop_reason;            /* the stop string that finished it, or NULL */
    int32_t n_lp;                 /* logprobs of this delta's token: [0] sampled, then top k */
    int32_t *lp_ids;
    float *lp_vals;
    /* prompt logprobs (first delta only): positions [0, n_plp), stride k + 1 */
    int32_t n_plp, plp_stride;
    int32_t *plp_ids, *plp_ranks;
    float *plp_vals;
} srv_event;

typedef struct {
    struct srv_job *job;
    int idx;                      /* choice index */
    int64_t id;
    bool live;                    /* submitted and not yet finished */
    int32_t prompt_tokens, completion_tokens;
    double t_first, t_last;       /* first / last token delta (TTFT, ITL, TPOT) */
    bool got_first;
} srv_child;

typedef struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                     /* 1 (HTTP side) + live children */
    srv_event *head, *tail;
    srv_child *ch;
    int n_ch, n_done;
    bool oom;                     /* a final delta could not be queued */
    double t_arrival;
    int32_t max_tokens, n;        /* request parameters, for the metrics */
    aeng *engine;
    srv_metrics *metrics;
} srv_job;

/* Submit one child per (prompt, i < n): prompts[k] ids, seed + i when a seed
 * is set. On failure the children already submitted are aborted, the job is
 * released and *job NULL; err filled. */
int srv_job_start(aeng *a, srv_metrics *m, int32_t *const *prompt_ids, const int32_t *n_prompt_ids,
                  int n_prompts, int n, const ereq_sampling *sp, srv_job **job, srv_error *err);
/* Pop the next event, waiting while the queue is empty and children live.
 * NULL when every child finished and the queue is drained. */
srv_event *srv_job_next(srv_job *j);
/* Same, waiting at most ms milliseconds: NULL with *timed_out set when
 * nothing came. */
srv_event *srv_job_next_timed(srv_job *j, int ms, bool *timed_out);
/* The client's socket was closed by the peer (poll POLLRDHUP/HUP/ERR). */
bool srv_client_gone(int fd);
void srv_event_free(srv_event *ev);
/* Abort the live children (client gone) and drop the HTTP side's reference. */
void srv_job_release(srv_job *j);

/* ---- the server */
/* hermes: <tool_call>{...}</tool_call> anywhere; llama3_json: the whole
 * output is {"name", "parameters"} object(s) (after an optional
 * <|python_tag|>, ';'-separated); mistral: the output starts with
 * [TOOL_CALLS] and a JSON array of {"name", "arguments"}. */
typedef enum { SRV_TOOLS_NONE = 0, SRV_TOOLS_HERMES, SRV_TOOLS_LLAMA3_JSON, SRV_TOOLS_MISTRAL } srv_tool_parser;
/* Reasoning parsers: qwen3 opens reasoning at <think>; deepseek_r1 starts in
 * reasoning (its template already wrote <think>) and a leading <think> is
 * dropped. Both end it at </think>. */
typedef enum { SRV_REASON_NONE = 0, SRV_REASON_QWEN3, SRV_REASON_R1 } srv_reasoning;

struct srv_server {
    aeng *engine;
    const tok_tokenizer *tok;
    chat_template *tmpl;          /* NULL: chat is answered with 400 */
    char *model_name;
    char *api_key;
    char *version;
    srv_tool_parser tools;
    srv_reasoning reasoning;
    size_t max_body;
    int32_t max_model_len;
    long created;
    srv_metrics *metrics;
    struct MHD_Daemon *d;
    char **origins;               /* CORS allowed origins; "*" = any */
    int n_origins;
    char **methods, **headers;    /* CORS preflight: allowed methods ("*" expanded) and headers */
    int n_methods, n_headers;
    bool allow_all_headers;       /* headers "*": requested headers are echoed */
    char *methods_joined;         /* "DELETE, GET, ..." */
    char *headers_joined;         /* safelisted + allowed, sorted; NULL when "*" */
    bool allow_credentials;
    char *tls_key, *tls_cert;     /* PEM, when serving HTTPS */
    atomic_bool stopping;         /* srv_free began: in-flight answers end now */
    int port;
};

/* A handler's answer: status + body + content type, or a streaming job. */
typedef struct {
    int client_fd;                /* in: the connection's socket (-1 unknown) */
    int status;
    char *body;                   /* malloc'd */
    const char *content_type;
    /* streaming: the SSE generator (srv_openai.c) */
    struct srv_stream *stream;
} srv_reply;

void srv_reply_json(srv_reply *r, int status, json_t *j); /* steals j */
void srv_reply_error(srv_reply *r, const srv_error *e);

void srv_handle_completions(srv_server *s, const char *body, size_t len, bool chat, srv_reply *r);
/* SSE pull: fill up to max bytes of buf; 0 with *done false never happens
 * (it waits); *done true at the end. */
size_t srv_stream_read(struct srv_stream *st, char *buf, size_t max, bool *done);
void srv_stream_free(struct srv_stream *st);

void srv_handle_models(srv_server *s, srv_reply *r);
void srv_handle_tokenize(srv_server *s, const char *body, size_t len, srv_reply *r);
void srv_handle_detokenize(srv_server *s, const char *body, size_t len, srv_reply *r);

/* ---- tool calls / reasoning (srv_tools.c)
 * A streaming splitter over one choice's text: content, reasoning
 * (<think>...</think>, when enabled) and hermes tool calls
 * (<tool_call>{"name", "arguments"}</tool_call>, when enabled). Text that
 * may be the start of a tag is held back until it is known. */
typedef struct {
    srv_reasoning reasoning;
    bool seen_text;               /* anything emitted yet (R1: leading <think>) */
    srv_tool_parser tp;
    int mode;                     /* 0 content, 1 reasoning, 2 inside a tool call, 3 whole-output call */
    bool content_seen;            /* content emitted (whole-output parsers look only at the start) */
    vc_strbuf pend;               /* held back / tool-call body */
    int n_tools;                  /* tool calls emitted so far */
    /* stream: tool calls come out as deltas (vLLM's streaming shape): the
     * first {index, id, type, function: {name}} once the name is read, then
     * {index, function: {arguments: fragment}} while the arguments object
     * arrives; fragments concatenate to the model's arguments text. */
    bool stream;
    bool forced;                  /* prefilled (forced tool choice): a call whose name was read
                                   * stays a call even when its JSON is cut short */
    /* The hermes call being read (positions in pend, which holds its body):
     * call_state 0 reading the name, 1 name known (header sent when
     * streaming) reading up to the arguments value, 2 inside the arguments
     * object, 3 arguments complete, -1 no incremental parse (decided at the
     * close), 4 name known but arguments not incremental. */
    int call_state;
    json_t *call_name;
    char call_id[64];
    size_t lex_pos, args_off, args_sent, args_end;
    int depth;
    bool in_str, esc;
} srv_splitter;

void srv_splitter_init(srv_splitter *sp, srv_reasoning reasoning, srv_tool_parser tp);
/* Feed new text (final: no more comes; flush what is held). Appends to
 * content / reasoning and appends {index, id, type, function} objects to
 * tool_calls (an array). */
void srv_splitter_push(srv_splitter *sp, const char *text, size_t len, bool final, vc_strbuf *content,
                       vc_strbuf *reasoning, json_t *tool_calls);
void srv_splitter_free(srv_splitter *sp);
/* Text the server wrote at the start of the reply (forced tool choice:
 * the opening of a call); parsed with the reply, never sent as content. */
void srv_splitter_prefill(srv_splitter *sp, const char *text);
/* A fresh id: prefix + 24 hex digits. */
void srv_make_id(char *out, size_t cap, const char *prefix);

double srv_now(void);

extern const char srv_chat_page[]; /* srv_page.c: GET / */

#endif
