/* runner_warm — the decode graphs recorded at start (vLLM captures its
 * cudagraph sizes at start too).
 *
 * A decode step's graph is keyed by its padded row count (mdl_graph_bucket),
 * the block-table width and the KV cache, and recorded at the key's first
 * step: in serving that first step holds the host for the eager run and
 * the recording (session 23's traces: concurrency 64's tail decode steps
 * of 49, 42, 34, 26 and 18 rows 3-10 ms each). Here each bucket up to
 * max_rows runs once on the runner's own KV cache and block-table width,
 * largest first (the block-table and logits buffers reach their size
 * before the smaller graphs record their addresses), as rows that write
 * nothing: token 0 at position 0, slot -1 (KV_STORE skips it), length 1
 * over the null block 0. On a backend without graphs the same steps run
 * eagerly (the CPU tests exercise the batches). */
#include "engine/runner_int.h"

#include "base/err.h"

#include <stdlib.h>

int erun_warm_decode(erun_runner *r, int32_t max_rows) {
    if (max_rows > r->p.max_num_seqs) max_rows = r->p.max_num_seqs;
    if (max_rows > r->p.max_num_batched_tokens) max_rows = r->p.max_num_batched_tokens;
    if (max_rows > 256) max_rows = 256;
    if (max_rows < 1) return VC_OK;
    const int32_t mb = r->max_blocks, top = mdl_graph_bucket(max_rows) <= r->p.max_num_batched_tokens
                                                ? mdl_graph_bucket(max_rows)
                                                : max_rows;
    int32_t *buf = calloc((size_t)(7 * top + 1) + (size_t)top * (size_t)mb, sizeof *buf);
    if (!buf) return vc_err_set(VC_ERR_OOM, "runner warm-up: out of memory");
    int32_t *ids = buf, *pos = ids + top, *slots = pos + top, *out = slots + top, *sl = out + top, *rows = sl + top,
            *qsl = rows + top, *bt = qsl + top + 1; /* ids, positions, block tables: zeros */
    int rc = VC_OK;
    for (int32_t t = top, last = 0; t >= 1 && rc == VC_OK; t--) {
        const int32_t b = mdl_graph_bucket(t) <= top ? mdl_graph_bucket(t) : t;
        if (b == last) continue;
        last = b;
        for (int32_t i = 0; i < b; i++) slots[i] = -1, sl[i] = 1, rows[i] = i, qsl[i] = i;
        qsl[b] = b;
        mdl_batch batch = {.n_tokens = b, .ids = ids, .positions = pos, .slots = slots, .n_seqs = b, .qsl = qsl,
                           .seq_lens = sl, .block_tables = bt, .max_blocks = mb, .n_logits = b, .logit_rows = rows};
        rc = mdl_forward_batch_argmax(r->m, r->kv, &batch, out);
    }
    free(buf);
    return rc;
}
