/* chat — public API over the jj interpreter: builds the variables that
 * transformers.apply_chat_template passes to the template. */
#include "chat/chat.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "chat/jj.h"

struct chat_template {
    jj_program prog;
};

chat_render_params chat_render_params_default(void) {
    chat_render_params p;
    memset(&p, 0, sizeof p);
    p.add_generation_prompt = true;
    return p;
}

chat_template *chat_template_create(const char *source) {
    if (!source) {
        vc_err_set(VC_ERR_INVALID, "chat template: no template source");
        return NULL;
    }
    chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        vc_err_set(VC_ERR_OOM, "chat template: out of memory");
        return NULL;
    }
    char err[512];
    if (jj_parse(source, &t->prog, err, sizeof err) < 0) {
        vc_err_set(VC_ERR_INVALID, "chat template: %s", err);
        free(t);
        return NULL;
    }
    return t;
}

void chat_template_free(chat_template *t) {
    if (!t) return;
    jj_program_free(&t->prog);
    free(t);
}

/* transformers' _alias_reasoning_fields: a message with reasoning under
 * reasoning_content / thinking / reasoning (first non-null wins) becomes
 * {"thinking": r, **message, "reasoning_content": r}. */
static json_t *alias_reasoning(const json_t *messages) {
    static const char *const fields[] = {"reasoning_content", "thinking", "reasoning"};
    json_t *out = json_array();
    if (!out) return NULL;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *r = NULL;
        if (json_is_object(m))
            for (int k = 0; k < 3 && !r; k++) {
                json_t *v = json_object_get(m, fields[k]);
                if (v && !json_is_null(v)) r = v;
            }
        json_t *nm;
        if (r) {
            nm = json_object();
            if (!nm) goto fail;
            json_object_set(nm, "thinking", r);
            json_object_update(nm, m);
            json_object_set(nm, "reasoning_content", r);
        } else nm = json_incref(m);
        if (json_array_append_new(out, nm) < 0) goto fail;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

int chat_template_render(const chat_template *t, const chat_render_params *p, char **out) {
    *out = NULL;
    if (!t || !p || !p->messages || !json_is_array(p->messages))
        return vc_err_set(VC_ERR_INVALID, "chat template: messages must be a JSON array");
    if (p->tools && !json_is_array(p->tools) && !json_is_null(p->tools))
        return vc_err_set(VC_ERR_INVALID, "chat template: tools must be a JSON array");
    if (p->documents && !json_is_array(p->documents) && !json_is_null(p->documents))
        return vc_err_set(VC_ERR_INVALID, "chat template: documents must be a JSON array");
    if (p->extra && !json_is_object(p->extra))
        return vc_err_set(VC_ERR_INVALID, "chat template: extra variables must be a JSON object");
    json_t *vars = json_object();
    json_t *msgs = alias_reasoning(p->messages);
    if (!vars || !msgs) {
        json_decref(vars);
        json_decref(msgs);
        return vc_err_set(VC_ERR_OOM, "chat template: out of memory");
    }
    /* the same names apply_chat_template passes; absent tools/documents are None */
    json_object_set_new(vars, "messages", msgs);
    json_object_set_new(vars, "tools", p->tools ? json_incref((json_t *)p->tools) : json_null());
    json_object_set_new(vars, "documents", p->documents ? json_incref((json_t *)p->documents) : json_null());
    json_object_set_new(vars, "add_generation_prompt", json_boolean(p->add_generation_prompt));
    json_object_set_new(vars, "bos_token", json_string(p->bos_token ? p->bos_token : ""));
    json_object_set_new(vars, "eos_token", json_string(p->eos_token ? p->eos_token : ""));
    if (p->extra) json_object_update(vars, (json_t *)p->extra);
    char err[1024];
    int rc = jj_render(&t->prog, vars, NULL, out, err, sizeof err);
    json_decref(vars);
    if (rc < 0) return vc_err_set(VC_ERR_INVALID, "chat template: %s", err);
    return 0;
}
