/* vllm tokenize — encode text, or render and encode a chat prompt.
 *
 *   vllm tokenize --model PATH TEXT
 *       -> {"ids": [...], "pieces": [...]}  (special tokens added as transformers does)
 *   vllm tokenize --model PATH --messages FILE [--tools FILE]
 *                 [--no-generation-prompt] [--template-kwargs JSON]
 *       -> {"prompt": "...", "ids": [...]}  (ids without adding special tokens again)
 *   vllm tokenize --model PATH --jsonl FILE   (batch mode for tests; "-" = stdin)
 *       each line a JSON string  -> {"ids","pieces","decoded","decoded_skip","stream","stream_skip"}
 *       each line a JSON id array -> {"decoded","decoded_skip","stream","stream_skip"}
 *   --no-special: encode without special tokens (TEXT and --jsonl modes).
 */
#include "base/err.h"
#include "base/mapfile.h"
#include "base/strbuf.h"
#include "chat/chat.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: vllm tokenize --model PATH [--no-special] TEXT\n"
            "       vllm tokenize --model PATH --messages FILE [--tools FILE] [--no-generation-prompt]\n"
            "                     [--template-kwargs JSON]\n"
            "       vllm tokenize --model PATH --jsonl FILE [--no-special]\n"
            "PATH: a tokenizer folder, a model folder or a .gguf file.\n");
}

/* JSON string literal; invalid UTF-8 is written lossily (U+FFFD). */
static void put_json_str(vc_strbuf *o, const char *s, size_t n) {
    vc_strbuf tmp = {0};
    json_t *probe = json_stringn(s, n); /* validates UTF-8 */
    if (!probe) {
        /* not valid UTF-8: keep ASCII, replace other bytes by U+FFFD */
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c < 0x80) vc_sb_putc(&tmp, (char)c);
            else vc_sb_append(&tmp, "\xEF\xBF\xBD", 3);
        }
        s = tmp.s ? tmp.s : "";
        n = tmp.len;
    }
    json_decref(probe);
    vc_sb_putc(o, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') vc_sb_puts(o, "\\\"");
        else if (c == '\\') vc_sb_puts(o, "\\\\");
        else if (c == '\n') vc_sb_puts(o, "\\n");
        else if (c == '\r') vc_sb_puts(o, "\\r");
        else if (c == '\t') vc_sb_puts(o, "\\t");
        else if (c < 0x20 || c == 0x7F) vc_sb_printf(o, "\\u%04x", c);
        else vc_sb_putc(o, (char)c);
    }
    vc_sb_putc(o, '"');
    vc_sb_free(&tmp);
}

static void put_ids(vc_strbuf *o, const int32_t *ids, size_t n) {
    vc_sb_putc(o, '[');
    for (size_t i = 0; i < n; i++) vc_sb_printf(o, i ? ", %d" : "%d", ids[i]);
    vc_sb_putc(o, ']');
}

static void put_pieces(vc_strbuf *o, const tok_tokenizer *t, const int32_t *ids, size_t n) {
    vc_sb_putc(o, '[');
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = tok_token_str(t, ids[i], &len);
        if (i) vc_sb_puts(o, ", ");
        put_json_str(o, s ? s : "", s ? len : 0);
    }
    vc_sb_putc(o, ']');
}

/* Streams ids one by one and appends the concatenated deltas as JSON. */
static int put_stream(vc_strbuf *o, const tok_tokenizer *t, const int32_t *ids, size_t n, bool skip) {
    tok_stream *st = tok_stream_create(t, skip);
    if (!st) return -1;
    vc_strbuf acc = {0};
    vc_sb_append(&acc, "", 0);
    char *d = NULL;
    size_t dl;
    for (size_t i = 0; i < n; i++) {
        if (tok_stream_push_n(st, ids[i], &d, &dl) < 0) goto fail;
        vc_sb_append(&acc, d ? d : "", dl);
        free(d);
    }
    if (tok_stream_flush_n(st, &d, &dl) < 0) goto fail;
    vc_sb_append(&acc, d ? d : "", dl);
    free(d);
    put_json_str(o, acc.s, acc.len);
    vc_sb_free(&acc);
    tok_stream_free(st);
    return 0;
fail:
    vc_sb_free(&acc);
    tok_stream_free(st);
    return -1;
}

static int put_decodes(vc_strbuf *o, const tok_tokenizer *t, const int32_t *ids, size_t n) {
    static const char *names[2] = {"decoded", "decoded_skip"};
    for (int k = 0; k < 2; k++) {
        char *s;
        size_t len;
        if (tok_decode(t, ids, n, k == 1, &s, &len) < 0) return -1;
        vc_sb_printf(o, ", \"%s\": ", names[k]);
        put_json_str(o, s, len);
        free(s);
    }
    vc_sb_puts(o, ", \"stream\": ");
    if (put_stream(o, t, ids, n, false) < 0) return -1;
    vc_sb_puts(o, ", \"stream_skip\": ");
    return put_stream(o, t, ids, n, true);
}

static int run_jsonl(const tok_tokenizer *t, const char *path, bool add_special) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return vc_err_set(VC_ERR_IO, "cannot open %s", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    long lineno = 0;
    vc_strbuf o = {0};
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len == 0 || line[0] == '\n') continue;
        json_error_t e;
        json_t *v = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
        vc_sb_clear(&o);
        vc_sb_append(&o, "", 0);
        if (json_is_string(v)) {
            int32_t *ids;
            size_t n;
            if (tok_encode(t, json_string_value(v), json_string_length(v), add_special, &ids, &n) < 0) {
                rc = -1;
            } else {
                vc_sb_puts(&o, "{\"ids\": ");
                put_ids(&o, ids, n);
                vc_sb_puts(&o, ", \"pieces\": ");
                put_pieces(&o, t, ids, n);
                if (put_decodes(&o, t, ids, n) < 0) rc = -1;
                vc_sb_putc(&o, '}');
                free(ids);
            }
        } else if (json_is_array(v)) {
            size_t n = json_array_size(v);
            int32_t *ids = malloc((n + 1) * sizeof *ids);
            if (!ids) rc = vc_err_set(VC_ERR_OOM, "out of memory");
            for (size_t i = 0; rc == 0 && i < n; i++) {
                json_t *x = json_array_get(v, i);
                if (!json_is_integer(x)) rc = vc_err_set(VC_ERR_INVALID, "%s:%ld: ids must be integers", path, lineno);
                else ids[i] = (int32_t)json_integer_value(x);
            }
            if (rc == 0) {
                vc_sb_puts(&o, "{\"n\": ");
                vc_sb_printf(&o, "%zu", n);
                if (put_decodes(&o, t, ids, n) < 0) rc = -1;
                vc_sb_putc(&o, '}');
            }
            free(ids);
        } else {
            rc = vc_err_set(VC_ERR_INVALID, "%s:%ld: expected a JSON string or an array of ids", path, lineno);
        }
        json_decref(v);
        if (rc == 0) {
            fwrite(o.s, 1, o.len, stdout);
            fputc('\n', stdout);
        }
    }
    free(line);
    vc_sb_free(&o);
    if (f != stdin) fclose(f);
    return rc;
}

static json_t *load_json_file(const char *path, const char *what) {
    json_error_t e;
    json_t *v = json_load_file(path, JSON_DECODE_ANY, &e);
    if (!v) vc_err_set(VC_ERR_INVALID, "%s %s: %s (line %d)", what, path, e.text, e.line);
    return v;
}

static int run_chat(const tok_tokenizer *t, const char *messages_path, const char *tools_path, bool gen_prompt,
                    const char *kwargs) {
    int rc = -1;
    json_t *msgs = NULL, *tools = NULL, *extra = NULL;
    chat_template *ct = NULL;
    char *prompt = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    const char *src = tok_chat_template(t);
    if (!src) {
        vc_err_set(VC_ERR_INVALID, "the tokenizer has no chat template");
        goto done;
    }
    if (!(msgs = load_json_file(messages_path, "--messages"))) goto done;
    if (!json_is_array(msgs)) {
        vc_err_set(VC_ERR_INVALID, "--messages %s: expected a JSON array", messages_path);
        goto done;
    }
    if (tools_path && !(tools = load_json_file(tools_path, "--tools"))) goto done;
    if (kwargs) {
        json_error_t e;
        extra = json_loads(kwargs, 0, &e);
        if (!json_is_object(extra)) {
            vc_err_set(VC_ERR_INVALID, "--template-kwargs: expected a JSON object");
            goto done;
        }
    }
    if (!(ct = chat_template_create(src))) goto done;
    chat_render_params p = chat_render_params_default();
    p.messages = msgs;
    p.tools = tools;
    p.add_generation_prompt = gen_prompt;
    p.bos_token = tok_bos_token_str(t);
    p.eos_token = tok_eos_token_str(t);
    p.extra = extra;
    if (chat_template_render(ct, &p, &prompt) < 0) goto done;
    if (tok_encode(t, prompt, strlen(prompt), false, &ids, &n) < 0) goto done;
    vc_strbuf o = {0};
    vc_sb_puts(&o, "{\"prompt\": ");
    put_json_str(&o, prompt, strlen(prompt));
    vc_sb_puts(&o, ", \"ids\": ");
    put_ids(&o, ids, n);
    vc_sb_puts(&o, "}\n");
    fwrite(o.s, 1, o.len, stdout);
    vc_sb_free(&o);
    rc = 0;
done:
    free(ids);
    free(prompt);
    chat_template_free(ct);
    json_decref(msgs);
    json_decref(tools);
    json_decref(extra);
    return rc;
}

int cli_tokenize(int argc, char **argv) {
    const char *model = NULL, *messages = NULL, *tools = NULL, *kwargs = NULL, *jsonl = NULL, *text = NULL;
    bool gen_prompt = true, add_special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model") && has_val) {
            model = argv[++i];
        } else if (!strcmp(a, "--messages") && has_val) {
            messages = argv[++i];
        } else if (!strcmp(a, "--tools") && has_val) {
            tools = argv[++i];
        } else if (!strcmp(a, "--template-kwargs") && has_val) {
            kwargs = argv[++i];
        } else if (!strcmp(a, "--jsonl") && has_val) {
            jsonl = argv[++i];
        } else if (!strcmp(a, "--no-generation-prompt")) {
            gen_prompt = false;
        } else if (!strcmp(a, "--no-special")) {
            add_special = false;
        } else if (a[0] == '-' && a[1] == '-' && strcmp(a, "--")) {
            fprintf(stderr, "vllm tokenize: unknown flag or missing value: %s\n", a);
            tokenize_usage(stderr);
            return 2;
        } else {
            if (!strcmp(a, "--") && i + 1 < argc) a = argv[++i];
            if (text) {
                fprintf(stderr, "vllm tokenize: more than one TEXT argument\n");
                tokenize_usage(stderr);
                return 2;
            }
            text = a;
        }
    }
    int modes = (text != NULL) + (messages != NULL) + (jsonl != NULL);
    if (modes != 1 || ((tools || kwargs || !gen_prompt) && !messages)) {
        fprintf(stderr, "vllm tokenize: give exactly one of TEXT, --messages or --jsonl\n");
        tokenize_usage(stderr);
        return 2;
    }
    char defpath[4096];
    if (!model) {
        if (cli_default_model(defpath, sizeof defpath) < 0) {
            fprintf(stderr, "vllm tokenize: --model is required (%s)\n", vc_err_msg());
            return 2;
        }
        model = defpath;
    }
    tok_tokenizer *t = tok_load(model);
    if (!t) {
        fprintf(stderr, "vllm tokenize: %s\n", vc_err_msg());
        return 1;
    }
    int rc = 0;
    if (jsonl) {
        rc = run_jsonl(t, jsonl, add_special);
    } else if (messages) {
        rc = run_chat(t, messages, tools, gen_prompt, kwargs);
    } else {
        int32_t *ids;
        size_t n;
        rc = tok_encode(t, text, strlen(text), add_special, &ids, &n);
        if (rc == 0) {
            vc_strbuf o = {0};
            vc_sb_puts(&o, "{\"ids\": ");
            put_ids(&o, ids, n);
            vc_sb_puts(&o, ", \"pieces\": ");
            put_pieces(&o, t, ids, n);
            vc_sb_puts(&o, "}\n");
            fwrite(o.s, 1, o.len, stdout);
            vc_sb_free(&o);
            free(ids);
        }
    }
    tok_free(t);
    if (rc < 0) {
        fprintf(stderr, "vllm tokenize: %s\n", vc_err_msg());
        return 1;
    }
    return 0;
}
