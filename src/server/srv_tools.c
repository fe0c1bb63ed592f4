/* srv_tools — the reasoning (<think>...</think>) and hermes tool-call
 * splitters, streaming: each push returns what is known so far; a possible
 * tag prefix at the end of the text waits for the next push. */
#include "server/srv_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";
static const char TOOL_OPEN[] = "<tool_call>", TOOL_CLOSE[] = "</tool_call>";

void srv_make_id(char *out, size_t cap, const char *prefix) {
    static atomic_uint_fast64_t counter;
    uint64_t c = atomic_fetch_add(&counter, 1) + 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* splitmix64 of time and counter: unique per process, unpredictable enough for ids */
    uint64_t z = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ ((uint64_t)ts.tv_sec << 20) ^ c;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    snprintf(out, cap, "%s%016llx%08llx", prefix, (unsigned long long)z, (unsigned long long)(c & 0xffffffffu));
}

void srv_splitter_init(srv_splitter *sp, srv_reasoning reasoning, srv_tool_parser tp) {
    memset(sp, 0, sizeof *sp);
    sp->reasoning = reasoning;
    sp->mode = reasoning == SRV_REASON_R1 ? 1 : 0;
    sp->tp = tp;
}

void srv_splitter_free(srv_splitter *sp) {
    vc_sb_free(&sp->pend);
    json_decref(sp->call_name);
    sp->call_name = NULL;
}

void srv_splitter_prefill(srv_splitter *sp, const char *text) {
    vc_sb_puts(&sp->pend, text);
    sp->mode = 0; /* the reply starts with the call, not in reasoning */
    sp->forced = true;
}

/* Length of the longest suffix of s[0,n) that is a proper prefix of tag. */
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1; k > 0; k--)
        if (k <= n && !memcmp(s + n - k, tag, k)) return k;
    return 0;
}

static bool is_call(const json_t *j) { return json_is_object(j) && json_is_string(json_object_get(j, "name")); }

/* Append the call object j ({"name", "arguments" | "parameters"}). */
static void emit_obj(srv_splitter *sp, const json_t *j, json_t *tool_calls) {
    json_t *name = json_object_get(j, "name");
    json_t *args = json_object_get(j, "arguments");
    if (!args) args = json_object_get(j, "parameters");
    char *a = args ? json_dumps(args, JSON_ENCODE_ANY) : strdup("{}"); /* json.dumps spacing, as vLLM */
    char id[64];
    srv_make_id(id, sizeof id, "chatcmpl-tool-");
    json_t *call = json_pack("{s:i, s:s, s:s, s:{s:O, s:s}}", "index", sp->n_tools, "id", id, "type", "function",
                             "function", "name", name, "arguments", a ? a : "{}");
    if (call) json_array_append_new(tool_calls, call);
    sp->n_tools++;
    free(a);
}

/* ---- hermes calls, read incrementally */

static size_t skip_ws(const char *s, size_t i, size_t n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* s[i] is '"': the index after the closing quote, or 0 while incomplete. */
static size_t str_end(const char *s, size_t i, size_t n) {
    for (size_t k = i + 1; k < n; k++) {
        if (s[k] == '\\') k++;
        else if (s[k] == '"') return k + 1;
    }
    return 0;
}

/* Does s[i..n) start with lit: 1 yes, 0 not known yet, -1 no. */
static int match(const char *s, size_t i, size_t n, const char *lit) {
    size_t l = strlen(lit), m = n - i < l ? n - i : l;
    if (memcmp(s + i, lit, m)) return -1;
    return m == l ? 1 : 0;
}

/* Add to the delta of call `index` (the last element when it is that
 * call's, so one chunk carries one delta per call). */
static void add_delta(json_t *calls, int index, const char *id, json_t *name, const char *args, size_t args_len) {
    json_t *d = json_array_get(calls, json_array_size(calls) - 1);
    if (!d || json_integer_value(json_object_get(d, "index")) != index) {
        d = json_pack("{s:i, s:{}}", "index", index, "function");
        if (!d || json_array_append_new(calls, d)) return;
    }
    json_t *fn = json_object_get(d, "function");
    if (id) {
        json_object_set_new(d, "id", json_string(id));
        json_object_set_new(d, "type", json_string("function"));
    }
    if (name) json_object_set(fn, "name", name);
    if (args) {
        const char *old = json_string_value(json_object_get(fn, "arguments"));
        vc_strbuf sb = {0};
        vc_sb_puts(&sb, old ? old : "");
        vc_sb_append(&sb, args, args_len);
        json_t *v = json_stringn(sb.s ? sb.s : "", sb.len);
        if (v) json_object_set_new(fn, "arguments", v);
        vc_sb_free(&sb);
    }
}

static void call_reset(srv_splitter *sp) {
    json_decref(sp->call_name);
    sp->call_name = NULL;
    sp->call_state = 0;
    sp->lex_pos = sp->args_off = sp->args_sent = sp->args_end = 0;
    sp->depth = 0;
    sp->in_str = sp->esc = false;
}

/* Read the call body s[0, n) as far as it goes: {"name": "...", then
 * "arguments"/"parameters": {...}. With calls (streaming) the header and
 * argument fragments are emitted as they become known. */
static void scan_call(srv_splitter *sp, const char *s, size_t n, json_t *calls) {
    size_t i;
    if (sp->call_state == 0) {
        i = skip_ws(s, 0, n);
        if (i == n) return;
        if (s[i] != '{') { sp->call_state = -1; return; }
        i = skip_ws(s, i + 1, n);
        int m = match(s, i, n, "\"name\"");
        if (m <= 0) { if (m < 0) sp->call_state = -1; return; }
        i = skip_ws(s, i + 6, n);
        if (i == n) return;
        if (s[i] != ':') { sp->call_state = -1; return; }
        i = skip_ws(s, i + 1, n);
        if (i == n) return;
        if (s[i] != '"') { sp->call_state = -1; return; }
        size_t e = str_end(s, i, n);
        if (!e) return;
        json_t *name = json_loadb(s + i, e - i, JSON_DECODE_ANY, NULL);
        if (!json_is_string(name)) {
            json_decref(name);
            sp->call_state = -1;
            return;
        }
        sp->call_name = name;
        srv_make_id(sp->call_id, sizeof sp->call_id, "chatcmpl-tool-");
        if (calls) add_delta(calls, sp->n_tools, sp->call_id, name, NULL, 0);
        sp->call_state = 1;
        sp->lex_pos = e;
    }
    if (sp->call_state == 1) {
        i = skip_ws(s, sp->lex_pos, n);
        if (i == n) return;
        if (s[i] != ',') { sp->call_state = 4; return; }
        i = skip_ws(s, i + 1, n);
        size_t kl = 11;
        int m = match(s, i, n, "\"arguments\"");
        if (m < 0) { m = match(s, i, n, "\"parameters\""); kl = 12; }
        if (m <= 0) { if (m < 0) sp->call_state = 4; return; }
        i = skip_ws(s, i + kl, n);
        if (i == n) return;
        if (s[i] != ':') { sp->call_state = 4; return; }
        i = skip_ws(s, i + 1, n);
        if (i == n) return;
        if (s[i] != '{' && s[i] != '[') { sp->call_state = 4; return; }
        sp->args_off = sp->lex_pos = i;
        sp->call_state = 2;
    }
    if (sp->call_state == 2) {
        size_t k = sp->lex_pos;
        for (; k < n; k++) {
            char c = s[k];
            if (sp->in_str) {
                if (sp->esc) sp->esc = false;
                else if (c == '\\') sp->esc = true;
                else if (c == '"') sp->in_str = false;
            } else if (c == '"') {
                sp->in_str = true;
            } else if (c == '{' || c == '[') {
                sp->depth++;
            } else if ((c == '}' || c == ']') && --sp->depth == 0) {
                sp->call_state = 3;
                sp->args_end = ++k;
                break;
            }
        }
        sp->lex_pos = k;
        size_t from = sp->args_off + sp->args_sent;
        if (calls && k > from) {
            add_delta(calls, sp->n_tools, NULL, NULL, s + from, k - from);
            sp->args_sent = k - sp->args_off;
        }
    }
}

/* The call body s[0, n) is complete (close tag or end of output). */
static void finish_call(srv_splitter *sp, const char *s, size_t n, vc_strbuf *content, json_t *tool_calls) {
    scan_call(sp, s, n, sp->stream ? tool_calls : NULL);
    json_t *j = json_loadb(s, n, 0, NULL);
    json_t *name = NULL, *args = NULL;
    if (is_call(j)) {
        name = json_incref(json_object_get(j, "name"));
        args = json_object_get(j, "arguments");
        if (!args) args = json_object_get(j, "parameters");
        json_incref(args);
    } else if (sp->call_state == 3) { /* lenient: a readable name and arguments, junk after them */
        name = json_incref(sp->call_name);
        args = json_loadb(s + sp->args_off, sp->args_end - sp->args_off, 0, NULL);
    } else if (sp->forced && sp->call_name) { /* forced choice: a call even when cut short */
        name = json_incref(sp->call_name);
    }
    json_decref(j);
    bool header_sent = sp->stream && sp->call_state >= 1;
    if (!name && !header_sent) { /* not a tool call after all: keep the text, as vLLM does */
        vc_sb_puts(content, TOOL_OPEN);
        vc_sb_append(content, s, n);
        vc_sb_puts(content, TOOL_CLOSE);
    } else if (header_sent && (sp->call_state == 2 || sp->call_state == 3)) {
        /* arguments streamed as text: send what is left (all of it when the
         * object never closed, e.g. cut by max_tokens) */
        size_t end = sp->call_state == 3 ? sp->args_end : n, from = sp->args_off + sp->args_sent;
        if (end > from) add_delta(tool_calls, sp->n_tools, NULL, NULL, s + from, end - from);
    } else {
        /* arguments in one piece: the parsed object (json.dumps spacing, as
         * vLLM), the raw text of an unclosed one, or {} */
        char *a = args ? json_dumps(args, JSON_ENCODE_ANY)
                : sp->call_state == 2 ? strndup(s + sp->args_off, n - sp->args_off) : NULL;
        const char *av = a ? a : "{}";
        if (header_sent) {
            add_delta(tool_calls, sp->n_tools, NULL, NULL, av, strlen(av));
        } else {
            char id[64];
            srv_make_id(id, sizeof id, "chatcmpl-tool-");
            add_delta(tool_calls, sp->n_tools, id, name, av, strlen(av));
        }
        free(a);
    }
    if (name || header_sent) sp->n_tools++;
    json_decref(name);
    json_decref(args);
    call_reset(sp);
}

static const char PY_TAG[] = "<|python_tag|>", MISTRAL_TAG[] = "[TOOL_CALLS]";

/* Whole-output calls (llama3_json / mistral), at the end: all-or-nothing,
 * else the text is content. */
static void emit_whole(srv_splitter *sp, const char *s, size_t n, vc_strbuf *content, json_t *tool_calls) {
    json_t *calls = json_array();
    const char *p = s, *end = s + n;
    while (p < end && strchr(" \t\r\n", *p)) p++;
    bool ok = true;
    if (sp->tp == SRV_TOOLS_MISTRAL) {
        p += strlen(MISTRAL_TAG);
        json_t *arr = json_loadb(p, (size_t)(end - p), 0, NULL);
        if (json_is_object(arr)) json_array_append(calls, arr);
        else if (json_is_array(arr)) json_array_extend(calls, arr);
        else ok = false;
        json_decref(arr);
    } else {
        if ((size_t)(end - p) >= strlen(PY_TAG) && !memcmp(p, PY_TAG, strlen(PY_TAG))) p += strlen(PY_TAG);
        while (ok && p < end) {
            while (p < end && strchr(" \t\r\n;", *p)) p++;
            if (p == end) break;
            json_error_t err;
            json_t *o = json_loadb(p, (size_t)(end - p), JSON_DISABLE_EOF_CHECK, &err);
            if (!o) { ok = false; break; }
            json_array_append_new(calls, o);
            p += err.position;
        }
    }
    size_t i;
    json_t *c;
    if (json_array_size(calls) == 0) ok = false;
    json_array_foreach(calls, i, c) ok = ok && is_call(c);
    if (ok) json_array_foreach(calls, i, c) emit_obj(sp, c, tool_calls);
    else vc_sb_append(content, s, n);
    json_decref(calls);
}

/* Whole-output parsers: does the (trimmed) start say "tool call" (1), maybe
 * once more text comes (0), or not (-1)? */
static int whole_start(const srv_splitter *sp, const char *s, size_t n) {
    size_t i = 0;
    while (i < n && strchr(" \t\r\n", s[i])) i++;
    if (i == n) return 0;
    const char *marks[2] = {MISTRAL_TAG, NULL};
    if (sp->tp == SRV_TOOLS_LLAMA3_JSON) { marks[0] = PY_TAG; marks[1] = "{"; }
    for (int k = 0; k < 2 && marks[k]; k++) {
        size_t ml = strlen(marks[k]), m = n - i < ml ? n - i : ml;
        if (!memcmp(s + i, marks[k], m)) return m == ml ? 1 : 0;
    }
    return -1;
}

void srv_splitter_push(srv_splitter *sp, const char *text, size_t len, bool final, vc_strbuf *content,
                       vc_strbuf *reasoning, json_t *tool_calls) {
    vc_sb_append(&sp->pend, text, len);
    for (;;) {
        const char *s = sp->pend.s ? sp->pend.s : "";
        size_t n = sp->pend.len;
        if (n == 0) break;
        if (sp->mode == 0 && !sp->content_seen &&
            (sp->tp == SRV_TOOLS_LLAMA3_JSON || sp->tp == SRV_TOOLS_MISTRAL)) {
            int w = whole_start(sp, s, n);
            if (w == 1) sp->mode = 3;
            else if (w == 0 && !final) break;
            else sp->content_seen = true; /* plain content from here on */
        }
        if (sp->mode == 3) { /* hold everything; decide at the end */
            if (final) {
                emit_whole(sp, s, n, content, tool_calls);
                vc_sb_clear(&sp->pend);
            }
            break;
        }
        if (sp->mode == 2) { /* inside <tool_call>: wait for the close tag */
            const char *e = strstr(s, TOOL_CLOSE);
            if (!e) {
                if (final) { /* unterminated: try it as a call, else content */
                    finish_call(sp, s, n, content, tool_calls);
                    vc_sb_clear(&sp->pend);
                } else if (sp->stream) {
                    scan_call(sp, s, n - partial_tag(s, n, TOOL_CLOSE), tool_calls);
                }
                break;
            }
            finish_call(sp, s, (size_t)(e - s), content, tool_calls);
            size_t used = (size_t)(e - s) + strlen(TOOL_CLOSE);
            memmove(sp->pend.s, s + used, n - used + 1);
            sp->pend.len = n - used;
            sp->mode = 0;
            continue;
        }
        /* Find the earliest tag this mode reacts to. */
        const char *tags[2];
        int nt = 0;
        if (sp->mode == 1) {
            tags[nt++] = THINK_CLOSE;
            if (!sp->seen_text) tags[nt++] = THINK_OPEN; /* R1: a leading <think> is dropped */
        } else {
            if (sp->reasoning != SRV_REASON_NONE) tags[nt++] = THINK_OPEN;
            if (sp->tp == SRV_TOOLS_HERMES) tags[nt++] = TOOL_OPEN;
        }
        const char *best = NULL, *best_tag = NULL;
        for (int i = 0; i < nt; i++) {
            const char *p = strstr(s, tags[i]);
            if (p && (!best || p < best)) { best = p; best_tag = tags[i]; }
        }
        vc_strbuf *dst = sp->mode == 1 ? reasoning : content;
        if (best) {
            vc_sb_append(dst, s, (size_t)(best - s));
            size_t used = (size_t)(best - s) + strlen(best_tag);
            if (best > s) sp->seen_text = true;
            if (best_tag == THINK_OPEN) sp->mode = 1;
            else if (best_tag == THINK_CLOSE) sp->mode = 0;
            else sp->mode = 2;
            memmove(sp->pend.s, s + used, n - used + 1);
            sp->pend.len = n - used;
            continue;
        }
        size_t hold = 0;
        if (!final)
            for (int i = 0; i < nt; i++) {
                size_t h = partial_tag(s, n, tags[i]);
                if (h > hold) hold = h;
            }
        if (n - hold > 0) sp->seen_text = true;
        vc_sb_append(dst, s, n - hold);
        memmove(sp->pend.s, s + n - hold, hold + 1);
        sp->pend.len = hold;
        break;
    }
}
