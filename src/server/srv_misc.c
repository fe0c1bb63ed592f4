/* srv_misc — GET /v1/models, POST /tokenize and POST /detokenize (vLLM's
 * shapes: tokenize takes a prompt or chat messages; both check the model
 * name when one is given). */
#include "server/srv_internal.h"

#include "base/err.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

void srv_handle_models(srv_server *s, srv_reply *r) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:i, s:[]}", "id", s->model_name, "object", "model",
                          "created", (json_int_t)s->created, "owned_by", "vllm", "root", s->model_name, "parent",
                          "max_model_len", s->max_model_len, "permission");
    srv_reply_json(r, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

/* Parse the body as an object and check "model". NULL + reply on error. */
static json_t *load_body(srv_server *s, const char *body, size_t len, srv_reply *r) {
    srv_error e;
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        srv_reply_error(r, (srv_err(&e, 400, NULL, "malformed JSON body: %s", je.text), &e));
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        srv_reply_error(r, (srv_err(&e, 400, NULL, "the body must be a JSON object"), &e));
        return NULL;
    }
    json_t *m = json_object_get(o, "model");
    if (m && !json_is_null(m) && (!json_is_string(m) || strcmp(json_string_value(m), s->model_name))) {
        json_decref(o);
        if (!json_is_string(m)) srv_reply_error(r, (srv_err(&e, 400, "model", "'model' must be a string"), &e));
        else srv_reply_error(r, (srv_err(&e, 404, "model", "The model `%.200s` does not exist.", json_string_value(m)), &e));
        return NULL;
    }
    return o;
}

void srv_handle_tokenize(srv_server *s, const char *body, size_t len, srv_reply *r) {
    srv_error e;
    json_t *o = load_body(s, body, len, r);
    if (!o) return;
    json_t *prompt = json_object_get(o, "prompt"), *msgs = json_object_get(o, "messages");
    char *text = NULL;
    bool add_special = true;
    int32_t *ids = NULL;
    size_t n = 0;
    if (json_is_string(prompt)) {
        json_t *as = json_object_get(o, "add_special_tokens");
        if (as && !json_is_null(as) && !json_is_boolean(as)) {
            srv_reply_error(r, (srv_err(&e, 400, "add_special_tokens", "'add_special_tokens' must be a boolean"), &e));
            goto out;
        }
        if (as) add_special = json_is_true(as);
        text = strdup(json_string_value(prompt));
    } else if (msgs) {
        /* Reuse the chat request parser for message validation. */
        srv_gen g;
        if (srv_parse_gen(body, len, true, &g, &e) < 0) {
            srv_gen_free(&g);
            srv_reply_error(r, &e);
            goto out;
        }
        if (!s->tmpl) {
            srv_gen_free(&g);
            srv_reply_error(r, (srv_err(&e, 400, "messages", "this model has no chat template"), &e));
            goto out;
        }
        chat_render_params p = chat_render_params_default();
        p.messages = g.messages;
        p.tools = g.tools;
        p.add_generation_prompt = g.add_generation_prompt;
        p.bos_token = tok_bos_token_str(s->tok);
        p.eos_token = tok_eos_token_str(s->tok);
        p.extra = g.template_kwargs;
        int rc = chat_template_render(s->tmpl, &p, &text);
        srv_gen_free(&g);
        if (rc < 0) {
            srv_reply_error(r, (srv_err(&e, 400, "messages", "chat template: %s", vc_err_msg()), &e));
            goto out;
        }
        add_special = false;
    } else {
        srv_reply_error(r, (srv_err(&e, 400, "prompt", "give 'prompt' (a string) or 'messages'"), &e));
        goto out;
    }
    if (!text || tok_encode(s->tok, text, strlen(text), add_special, &ids, &n) < 0) {
        srv_reply_error(r, (srv_err(&e, 400, "prompt", "tokenizer: %s", text ? vc_err_msg() : "out of memory"), &e));
        goto out;
    }
    json_t *toks = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(toks, json_integer(ids[i]));
    srv_reply_json(r, 200, json_pack("{s:I, s:i, s:o, s:n}", "count", (json_int_t)n, "max_model_len",
                                     s->max_model_len, "tokens", toks, "token_strs"));
out:
    free(text);
    free(ids);
    json_decref(o);
}

void srv_handle_detokenize(srv_server *s, const char *body, size_t len, srv_reply *r) {
    srv_error e;
    json_t *o = load_body(s, body, len, r);
    if (!o) return;
    json_t *t = json_object_get(o, "tokens");
    int32_t *ids = NULL;
    char *text = NULL;
    if (!json_is_array(t)) {
        srv_reply_error(r, (srv_err(&e, 400, "tokens", "'tokens' must be a list of token ids"), &e));
        goto out;
    }
    size_t n = json_array_size(t), vocab = tok_vocab_size(s->tok);
    ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        srv_reply_error(r, (srv_err(&e, 500, NULL, "out of memory"), &e));
        goto out;
    }
    size_t i;
    json_t *v;
    json_array_foreach(t, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || (size_t)json_integer_value(v) >= vocab) {
            srv_reply_error(r, (srv_err(&e, 400, "tokens", "tokens[%zu] is not a token id of this model", i), &e));
            goto out;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    if (tok_decode(s->tok, ids, n, false, &text, NULL) < 0) {
        srv_reply_error(r, (srv_err(&e, 400, "tokens", "%s", vc_err_msg()), &e));
        goto out;
    }
    srv_reply_json(r, 200, json_pack("{s:s}", "prompt", text));
out:
    free(ids);
    free(text);
    json_decref(o);
}
