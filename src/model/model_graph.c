/* model_graph — decode steps replayed as backend graphs (CUDA graphs).
 *
 * A decode step (every sequence contributes one token and needs its logits)
 * launches ~18 kernels per layer; issued one by one from the host they cost
 * more than the GPU needs to run them. Like vLLM's cudagraph capture sizes,
 * such a step is padded to a bucket of Tb tokens (1, 2, 4, then multiples
 * of 8 up to MG_MAX_T) and, per (Tb, block-table width, KV cache), the
 * forward pass is recorded once and replayed afterwards.
 *
 * Padding rows: token 0 at position 0 with slot -1 (KV_STORE skips it), as
 * a sequence of length 1 whose block-table row is all block 0 (always a
 * valid block), logits row = itself. Their results are never copied out.
 *
 * A recording needs the buffers every kernel touches to stay put: the
 * model's activation and metadata buffers do; the block tables and logits
 * buffers may be regrown, so an entry also remembers their addresses and is
 * re-recorded when they moved. The first step of a key runs eagerly (which
 * also grows backend workspaces to that shape), then the key is recorded
 * (recording queues nothing), and later steps replay it. A key whose
 * recording fails (an op that cannot be recorded) stays eager.
 *
 * The graph covers the forward pass only: the splice of in-flight ids
 * (async scheduling's COMBINE) runs eagerly before the launch, and the
 * argmax / sampling of the logits rows eagerly after it.
 *
 * Disabled with VLLM_CUDA_GRAPHS=0 (or a backend without graphs).
 */
#include "model/model_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

#define MG_MAX_T 256
#define MG_SLOTS 48

struct mdl_graph_entry {
    int32_t tb, max_blocks;
    const mdl_kv *kv;
    const void *bt_data, *logits_data;
    void *graph; /* NULL: eager (not recorded yet, or recording failed) */
    int state;   /* 0 seen once (next step records), 1 recorded, 2 recording failed */
};
typedef struct mdl_graph_entry mg_entry;

int32_t mdl_graph_bucket(int32_t T) {
    if (T <= 1) return 1;
    if (T <= 2) return 2;
    if (T <= 4) return 4;
    return (T + 7) / 8 * 8;
}
#define bucket mdl_graph_bucket

static bool graphs_enabled(mdl_model *m) {
    if (m->graphs_on == 0) {
        const char *e = getenv("VLLM_CUDA_GRAPHS");
        m->graphs_on = rt_backend_has_graphs(m->be) && !(e && !strcmp(e, "0")) ? 2 : 1;
        if (m->graphs_on == 2) {
            m->graphs = calloc(MG_SLOTS, sizeof *m->graphs);
            if (!m->graphs) m->graphs_on = 1;
        }
    }
    return m->graphs_on == 2;
}

static void entry_clear(mdl_model *m, mg_entry *e) {
    rt_backend_graph_free(m->be, e->graph);
    memset(e, 0, sizeof *e);
}

void mdl_graph_drop_kv(mdl_model *m, const mdl_kv *kv) {
    for (int i = 0; m && i < m->n_graphs; i++)
        if (m->graphs[i].kv == kv) {
            entry_clear(m, &m->graphs[i]);
            m->graphs[i] = m->graphs[--m->n_graphs];
            i--;
        }
}

void mdl_graph_free_all(mdl_model *m) {
    for (int i = 0; i < m->n_graphs; i++) rt_backend_graph_free(m->be, m->graphs[i].graph);
    free(m->graphs);
    m->graphs = NULL;
    m->n_graphs = 0;
    free(m->pad_host);
    m->pad_host = NULL;
    m->pad_cap = 0;
}

static mg_entry *find_entry(mdl_model *m, const mdl_kv *kv, int32_t tb, int32_t max_blocks) {
    for (int i = 0; i < m->n_graphs; i++) {
        mg_entry *e = &m->graphs[i];
        if (e->kv == kv && e->tb == tb && e->max_blocks == max_blocks) return e;
    }
    if (m->n_graphs == MG_SLOTS) { /* full: start over */
        for (int i = 0; i < m->n_graphs; i++) entry_clear(m, &m->graphs[i]);
        m->n_graphs = 0;
    }
    mg_entry *e = &m->graphs[m->n_graphs++];
    memset(e, 0, sizeof *e);
    e->kv = kv;
    e->tb = tb;
    e->max_blocks = max_blocks;
    return e;
}

/* A decode step: one token and one logits row per sequence, in order. */
static bool is_decode(const mdl_batch *b) {
    if (b->n_tokens != b->n_seqs || b->n_logits != b->n_tokens) return false;
    for (int32_t i = 0; i < b->n_seqs; i++)
        if (b->qsl[i + 1] != i + 1 || b->logit_rows[i] != i) return false;
    return true;
}

/* Upload the batch padded to tb rows (see the file comment). */
static int upload_padded(mdl_model *m, const mdl_batch *b, int32_t tb) {
    int32_t T = b->n_tokens, M = b->max_blocks;
    int64_t need = (int64_t)tb * (6 + (int64_t)M) + 1;
    if (need > m->pad_cap) {
        int32_t *p = realloc(m->pad_host, (size_t)need * sizeof *p);
        if (!p) return vc_err_set(VC_ERR_OOM, "out of memory");
        m->pad_host = p;
        m->pad_cap = need;
    }
    int32_t *ids = m->pad_host, *pos = ids + tb, *slots = pos + tb, *sl = slots + tb, *rows = sl + tb,
            *qsl = rows + tb, *bt = qsl + tb + 1;
    memcpy(ids, b->ids, (size_t)T * 4);
    memcpy(pos, b->positions, (size_t)T * 4);
    memcpy(slots, b->slots, (size_t)T * 4);
    memcpy(sl, b->seq_lens, (size_t)T * 4);
    memcpy(bt, b->block_tables, (size_t)T * (size_t)M * 4);
    for (int32_t i = T; i < tb; i++) {
        ids[i] = 0;
        pos[i] = 0;
        slots[i] = -1;
        sl[i] = 1;
    }
    memset(bt + (int64_t)T * M, 0, (size_t)(tb - T) * (size_t)M * 4);
    for (int32_t i = 0; i <= tb; i++) qsl[i] = i;
    for (int32_t i = 0; i < tb; i++) rows[i] = i;
    int rc = mdl_upload_i32(m, &m->ids, ids, tb);
    if (rc == 0) rc = mdl_upload_i32(m, &m->pos, pos, tb);
    if (rc == 0) rc = mdl_upload_i32(m, &m->slots, slots, tb);
    if (rc == 0) rc = mdl_upload_i32(m, &m->qsl, qsl, tb + 1);
    if (rc == 0) rc = mdl_upload_i32(m, &m->seq_lens, sl, tb);
    if (rc == 0) rc = mdl_upload_i32(m, &m->logit_rows, rows, tb);
    if (rc == 0) rc = mdl_upload_i32(m, &m->block_tables, bt, (int64_t)tb * M);
    return rc;
}

/* Record the forward pass of e's shape (queues nothing). */
static void record(mdl_model *m, mdl_kv *kv, mg_entry *e) {
    void *g = NULL;
    int rc = rt_backend_graph_begin(m->be);
    if (rc == 0) {
        int frc = m->arch->forward(m, kv, e->tb, e->tb, e->max_blocks, e->tb);
        rc = rt_backend_graph_end(m->be, &g);
        if (frc < 0) rc = frc;
    }
    if (rc < 0 || !g) {
        VC_INFO("decode graph for %d tokens not recorded (%s): running eagerly", e->tb, vc_err_msg());
        rt_backend_graph_free(m->be, g);
        e->state = 2;
        return;
    }
    e->graph = g;
    e->state = 1;
}

bool mdl_graph_step(mdl_model *m, mdl_kv *kv, const mdl_batch *b, int *rc) {
    if (!graphs_enabled(m) || !is_decode(b) || b->n_tokens > MG_MAX_T) return false;
    m->att_dec = 0; /* all decode: one attention call */
    m->last_rows = 0; /* and the last layer over every row */
    int32_t T = b->n_tokens, tb = bucket(T);
    if (tb > m->max_batch) return false;
    *rc = mdl_ensure_block_tables(m, (int64_t)tb * b->max_blocks);
    if (*rc == 0) *rc = mdl_ensure_logits(m, tb);
    if (*rc == 0) *rc = upload_padded(m, b, tb);
    if (*rc == 0) *rc = mdl_splice_ids(m, tb); /* eager, before the graph reads the ids */
    if (*rc < 0) return true;
    mg_entry *e = find_entry(m, kv, tb, b->max_blocks);
    if (e->state == 1 && (e->bt_data != m->block_tables.data || e->logits_data != m->logits.data)) {
        rt_backend_graph_free(m->be, e->graph); /* a buffer moved: record again */
        e->graph = NULL;
        e->state = 0;
    }
    if (e->state == 1) {
        *rc = rt_backend_graph_launch(m->be, e->graph);
    } else {
        *rc = m->arch->forward(m, kv, tb, tb, b->max_blocks, tb);
        if (*rc == 0 && e->state == 0) {
            e->bt_data = m->block_tables.data;
            e->logits_data = m->logits.data;
            record(m, kv, e);
        }
    }
    return true;
}
