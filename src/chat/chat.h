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
 * template's message in vc_err_msg(); never a crash.
 */
#ifndef CHAT_H
#define CHAT_H

#include <jansson.h>
#include <stdbool.h>

typedef struct chat_template chat_template;

typedef struct {
    const json_t *messages;      /* array of message objects (required) */
    const json_t *tools;         /* array or NULL (then `tools` is undefined) */
    bool add_generation_prompt;
    const char *bos_token;       /* NULL -> "" */
    const char *eos_token;       /* NULL -> "" */
    const json_t *extra;         /* object of extra variables (chat_template_kwargs) or NULL */
} chat_render_params;

chat_render_params chat_render_params_default(void);
chat_template *chat_template_create(const char *source);
void chat_template_free(chat_template *t);
int chat_template_render(const chat_template *t, const chat_render_params *p, char **out);

#endif
