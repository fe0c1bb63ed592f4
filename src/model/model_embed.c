/* model_embed — the token embedding of the llama and gemma3 families, and
 * its vocab-parallel form under tensor parallelism (vLLM's
 * VocabParallelEmbedding).
 *
 * tp_size 1: tok_embd is the whole table [V, d] and the step's hidden
 * states are table rows. tp_size W: rank r holds rows [r*V/W, (r+1)*V/W)
 * (the same rows as its share of a tied LM head); each rank writes the
 * rows of the ids it holds and zeros elsewhere, and an all-reduce sums the
 * ranks' [n, d] partials, so every rank gets the full rows (adding zeros is
 * exact: the result equals the unsplit lookup bit for bit). On a GPU per
 * rank this keeps a 1/W share of the table (Llama-3.1-8B: 1.05 GB -> 0.53
 * GB per rank at W = 2). Sequence-parallel steps (mdl_embed_sp)
 * reduce-scatter the partials instead: each rank gets its own rows. */
#include "model/model_impl.h"

#include "runtime/ops.h"

int mdl_bind_embedding(mdl_model *m) {
    const mdl_config *c = &m->cfg;
    int64_t shape[2] = {c->vocab, c->hidden};
    int rc = m->tp_size > 1 ? mdl_bind_split(m, &m->tok_embd, "token_embd.weight", 2, shape, 0, true)
                            : mdl_bind(m, &m->tok_embd, "token_embd.weight", 2, shape, true);
    if (rc < 0) return rc;
    if (!c->tie_embeddings && mdl_bind_split(m, &m->output, "output.weight", 2, shape, 0, false) < 0) return -1;
    /* Tied (or a GGUF without output.weight): the LM head is this rank's
     * share of the table, which is exactly what tok_embd holds. */
    if (!m->output.data) m->output = m->tok_embd;
    return 0;
}

int mdl_embed(mdl_model *m, rt_tensor *x, const rt_tensor *ids) {
    if (m->tp_size <= 1) return rt_embed(m->be, x, &m->tok_embd, ids);
    int rc = rt_embed_shard(m->be, x, &m->tok_embd, ids, (int64_t)m->tp_rank * m->vocab_l);
    return rc < 0 ? rc : mdl_tp_all_reduce(m, x);
}

int mdl_embed_sp(mdl_model *m, const mdl_sp *sp, rt_tensor *x_full, const rt_tensor *ids) {
    /* rows [0, n): this rank's partial lookup; the pad rows are zeroed and
     * the partials reduce-scattered (half an all-reduce's traffic at W = 2;
     * exact: each row has one nonzero contributor). */
    rt_tensor x = rt_tensor_slice0(x_full, 0, sp->n);
    MDL_TRY(rt_embed_shard(m->be, &x, &m->tok_embd, ids, (int64_t)m->tp_rank * m->vocab_l));
    return mdl_sp_reduce(m, sp, x_full);
}
