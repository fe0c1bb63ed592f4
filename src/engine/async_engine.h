/* async_engine — the engine on its own thread (vLLM's AsyncLLM over
 * EngineCore): submit / abort / stream from any thread.
 *
 *   aeng *a = aeng_create(&params);                 // loads, starts the thread
 *   aeng_submit_text(a, "Hi", &sampling, on_delta, user, &id);
 *       on_delta(user, o) runs on the engine thread for every delta of the
 *       request (o valid during the call only; keep it short, never block);
 *       the last call has o->finished set; with sp.n > 1 every child's
 *       deltas come to the same callback (o->index tells the choice) and
 *       the last call of all has o->parent_finished set
 *   aeng_abort(a, id);                              // from any thread, also from a callback
 *   aeng_free(a);                                   // aborts what is left, joins the thread
 *
 * Submissions are validated synchronously (the caller gets the error).
 * The engine thread sleeps while there is no work. If a step fails the
 * engine is marked dead: every live request gets a final "error" delta and
 * later submissions are refused (aeng_alive() false, for /health).
 */
#ifndef AENG_ASYNC_ENGINE_H
#define AENG_ASYNC_ENGINE_H

#include "engine/engine.h"

typedef struct aeng aeng;
typedef void (*aeng_cb)(void *user, const eng_output *o);

aeng *aeng_create(const eng_params *p);
void aeng_free(aeng *a);
int aeng_submit_tokens(aeng *a, const int32_t *prompt, int32_t n, const ereq_sampling *sp, aeng_cb cb,
                       void *user, int64_t *id_out);
int aeng_submit_text(aeng *a, const char *text, const ereq_sampling *sp, aeng_cb cb, void *user,
                     int64_t *id_out);
int aeng_abort(aeng *a, int64_t id);
bool aeng_alive(const aeng *a);
/* Immutable after create: safe from any thread. */
const mdl_config *aeng_model_config(const aeng *a);
const tok_tokenizer *aeng_tokenizer(const aeng *a);
int32_t aeng_max_model_len(const aeng *a);
int32_t aeng_num_blocks(const aeng *a);
/* A consistent snapshot of the scheduler statistics. */
void aeng_stats(aeng *a, esched_stats *out);

#endif
