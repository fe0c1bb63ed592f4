/* chat — renders a model's Jinja2 chat template the way
 * transformers.apply_chat_template does.
 *
 *   chat_template *t = chat_template_create(source);  // NULL -> vc_err_msg()
 *   chat_render_params p = chat_render_params_default();
 *   p.messages = msgs;   // json array of {"role","content",...}
 *   char *prompt; if (chat_template_render(t, &p, &prompt) < 0) -> vc_err_msg()
 *   free(prompt); chat_template_free(t);
 *
 * A template error or raise_exception() yields VC_ERR_INVALID with the
 * template's message in vc_err_msg(); never a crash. Runaway templates
 * (endless loops, recursion, huge output) end with an error too.
 *
 * The template sees what apply_chat_template passes: messages (with
 * reasoning aliased as transformers does: a message carrying
 * reasoning_content / thinking / reasoning gets both `thinking` and
 * `reasoning_content`), tools and documents (None when absent),
 * add_generation_prompt, bos_token, eos_token, then every key of `extra`
 * (e.g. enable_thinking). Globals: raise_exception, strftime_now, range,
 * namespace, dict. Jinja environment: trim_blocks, lstrip_blocks, sandboxed
 * (read-only lists/dicts), loop controls, {% generation %} renders its body.
 * The interpreter lives in jj*.c (internal header jj.h). A parsed template
 * is immutable: one chat_template may render from many threads at once.
 */
#ifndef CHAT_H
#define CHAT_H

#include <jansson.h>
#include <stdbool.h>

typedef struct chat_template chat_template;

typedef struct {
    const json_t *messages;      /* array of message objects (required) */
    const json_t *tools;         /* array or NULL (then `tools` is None) */
    const json_t *documents;     /* array or NULL (then `documents` is None) */
    bool add_generation_prompt;
    const char *bos_token;       /* NULL -> "" */
    const char *eos_token;       /* NULL -> "" */
    const json_t *extra;         /* object of extra variables (chat_template_kwargs) or NULL */
} chat_render_params;

/* messages NULL, tools NULL, add_generation_prompt true, tokens "" */
chat_render_params chat_render_params_default(void);
chat_template *chat_template_create(const char *source);
void chat_template_free(chat_template *t);
int chat_template_render(const chat_template *t, const chat_render_params *p, char **out);

#endif
