/* chat_render — render a chat template from the command line.
 *
 *   chat_render TEMPLATE_FILE MESSAGES_JSON_FILE [--tools FILE] [--documents FILE]
 *               [--no-generation-prompt] [--kwargs JSON] [--bos S] [--eos S] [--json]
 *
 * TEMPLATE_FILE is the raw Jinja text, or a tokenizer_config.json whose
 * "chat_template" field holds it. MESSAGES_JSON_FILE is a JSON array of
 * messages (or an object with "messages" and optionally "tools").
 * Prints the prompt to stdout (or {"prompt": ...} with --json); on error
 * prints the message to stderr and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mapfile.h"
#include "chat/chat.h"

static int usage(void) {
    fprintf(stderr, "usage: chat_render TEMPLATE_FILE MESSAGES_JSON_FILE [--tools FILE] [--documents FILE]\n"
                    "                   [--no-generation-prompt]\n"
                    "                   [--kwargs JSON] [--bos S] [--eos S] [--json]\n");
    return 1;
}

static json_t *load_json_file(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, JSON_PRESERVE_ORDER, &e);
    if (!j) fprintf(stderr, "chat_render: %s:%d: %s\n", path, e.line, e.text);
    return j;
}

/* template text: raw file, or tokenizer_config.json's chat_template */
static char *load_template(const char *path) {
    char *src;
    size_t n;
    if (vc_read_file(path, &src, &n) < 0) {
        fprintf(stderr, "chat_render: %s\n", vc_err_msg());
        return NULL;
    }
    json_t *j = json_loads(src, JSON_PRESERVE_ORDER, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return src;
    }
    json_t *t = json_object_get(j, "chat_template");
    const char *s = NULL;
    if (json_is_string(t)) s = json_string_value(t);
    else if (json_is_array(t)) { /* [{"name": "default", "template": ...}, ...] */
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) {
            json_t *nm = json_object_get(e, "name");
            if (json_is_string(nm) && !strcmp(json_string_value(nm), "default"))
                s = json_string_value(json_object_get(e, "template"));
        }
    }
    char *r = s ? strdup(s) : NULL;
    if (!r) fprintf(stderr, "chat_render: %s: no usable chat_template field\n", path);
    json_decref(j);
    free(src);
    return r;
}

int main(int argc, char **argv) {
    const char *tpath = NULL, *mpath = NULL, *tools_path = NULL, *docs_path = NULL, *kwargs = NULL, *bos = NULL,
               *eos = NULL;
    bool gen = true, as_json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tools") && i + 1 < argc) tools_path = argv[++i];
        else if (!strcmp(a, "--documents") && i + 1 < argc) docs_path = argv[++i];
        else if (!strcmp(a, "--kwargs") && i + 1 < argc) kwargs = argv[++i];
        else if (!strcmp(a, "--bos") && i + 1 < argc) bos = argv[++i];
        else if (!strcmp(a, "--eos") && i + 1 < argc) eos = argv[++i];
        else if (!strcmp(a, "--no-generation-prompt")) gen = false;
        else if (!strcmp(a, "--json")) as_json = true;
        else if (a[0] == '-' && a[1]) return usage();
        else if (!tpath) tpath = a;
        else if (!mpath) mpath = a;
        else return usage();
    }
    if (!tpath || !mpath) return usage();

    int rc = 1;
    char *src = NULL, *out = NULL;
    json_t *msgs = NULL, *tools = NULL, *docs = NULL, *extra = NULL;
    chat_template *t = NULL;
    if (!(src = load_template(tpath))) goto done;
    if (!(msgs = load_json_file(mpath))) goto done;
    if (json_is_object(msgs)) {
        json_t *m = json_incref(json_object_get(msgs, "messages"));
        json_t *tl = json_object_get(msgs, "tools");
        if (tl && !json_is_null(tl)) tools = json_incref(tl);
        json_decref(msgs);
        msgs = m;
    }
    if (tools_path) {
        json_decref(tools);
        if (!(tools = load_json_file(tools_path))) goto done;
    }
    if (docs_path && !(docs = load_json_file(docs_path))) goto done;
    if (kwargs) {
        json_error_t e;
        extra = json_loads(kwargs, JSON_PRESERVE_ORDER, &e);
        if (!json_is_object(extra)) {
            fprintf(stderr, "chat_render: --kwargs must be a JSON object\n");
            goto done;
        }
    }
    if (!(t = chat_template_create(src))) {
        fprintf(stderr, "%s\n", vc_err_msg());
        goto done;
    }
    chat_render_params p = chat_render_params_default();
    p.messages = msgs;
    p.tools = tools;
    p.documents = docs;
    p.add_generation_prompt = gen;
    p.bos_token = bos;
    p.eos_token = eos;
    p.extra = extra;
    if (chat_template_render(t, &p, &out) < 0) {
        fprintf(stderr, "%s\n", vc_err_msg());
        goto done;
    }
    if (as_json) {
        json_t *o = json_pack("{s:s}", "prompt", out);
        char *s = o ? json_dumps(o, JSON_ENSURE_ASCII) : NULL;
        if (s) printf("%s\n", s);
        free(s);
        json_decref(o);
    } else fwrite(out, 1, strlen(out), stdout);
    rc = 0;
done:
    free(out);
    chat_template_free(t);
    json_decref(msgs);
    json_decref(tools);
    json_decref(docs);
    json_decref(extra);
    free(src);
    return rc;
}
