#include "engine/runner.h"

#include "base/err.h"
#include "sample/batch.h"
#include "sample/from_request.h"

#include <stdlib.h>
#include <string.h>

/* Per-request sampler state, found by request id (open addressing). */
typedef struct {
    int64_t id; /* -1 empty, -2 deleted */
    smp_req *s;
} samp_slot;

struct erun_runner {
    mdl_model *m;
    mdl_kv *kv;
    erun_params p;
    int32_t max_blocks; /* M: block-table row length */
    int64_t vocab;
    /* host staging, sized for the worst step */
    int32_t *ids, *pos, *slots, *rows; /* [T] */
    int64_t *slots64;                  /* [T] kv_slot_mapping output */
    int32_t *qsl, *seq_lens;           /* [S+1], [S] */
    int32_t *bt;                       /* [S, M] */
    float *logits;                     /* [S, V] */
    smp_batch *sampler;
    smp_row *smp_rows;                 /* [S] */
    samp_slot *samp;
    int64_t samp_cap, samp_used;
};

erun_runner *erun_create(mdl_model *m, const erun_params *p) {
    if (p->num_blocks < 2 || p->block_size <= 0 || p->max_num_batched_tokens <= 0 || p->max_num_seqs <= 0 ||
        p->max_model_len <= 0) {
        vc_err_set(VC_ERR_INVALID, "runner: bad parameters");
        return NULL;
    }
    erun_runner *r = calloc(1, sizeof *r);
    if (!r) goto oom;
    r->m = m;
    r->p = *p;
    r->vocab = mdl_get_config(m)->vocab;
    r->max_blocks = (p->max_model_len + p->block_size - 1) / p->block_size;
    int64_t T = p->max_num_batched_tokens, S = p->max_num_seqs;
    r->kv = mdl_kv_create(m, p->num_blocks, p->block_size);
    if (!r->kv) goto fail;
    smp_batch_params sbp = smp_batch_params_default();
    sbp.vocab = r->vocab;
    sbp.max_batch = (int32_t)S;
    r->sampler = smp_batch_create(&sbp);
    if (!r->sampler) goto fail;
    r->smp_rows = malloc((size_t)S * sizeof *r->smp_rows);
    r->ids = malloc((size_t)T * sizeof *r->ids);
    r->pos = malloc((size_t)T * sizeof *r->pos);
    r->slots = malloc((size_t)T * sizeof *r->slots);
    r->rows = malloc((size_t)T * sizeof *r->rows);
    r->slots64 = malloc((size_t)T * sizeof *r->slots64);
    r->qsl = malloc((size_t)(S + 1) * sizeof *r->qsl);
    r->seq_lens = malloc((size_t)S * sizeof *r->seq_lens);
    r->bt = malloc((size_t)(S * r->max_blocks) * sizeof *r->bt);
    r->logits = malloc((size_t)(S * r->vocab) * sizeof *r->logits);
    r->samp_cap = 64;
    while (r->samp_cap < 4 * S) r->samp_cap *= 2;
    r->samp = malloc((size_t)r->samp_cap * sizeof *r->samp);
    if (!r->ids || !r->pos || !r->slots || !r->rows || !r->slots64 || !r->qsl || !r->seq_lens || !r->bt ||
        !r->logits || !r->samp || !r->smp_rows)
        goto oom;
    for (int64_t i = 0; i < r->samp_cap; i++) r->samp[i] = (samp_slot){-1, NULL};
    return r;
oom:
    vc_err_set(VC_ERR_OOM, "runner: out of memory");
fail:
    erun_free(r);
    return NULL;
}

void erun_free(erun_runner *r) {
    if (!r) return;
    for (int64_t i = 0; r->samp && i < r->samp_cap; i++)
        if (r->samp[i].id >= 0) smp_req_free(r->samp[i].s);
    free(r->samp);
    free(r->smp_rows);
    smp_batch_free(r->sampler);
    mdl_kv_free(r->kv);
    free(r->ids);
    free(r->pos);
    free(r->slots);
    free(r->rows);
    free(r->slots64);
    free(r->qsl);
    free(r->seq_lens);
    free(r->bt);
    free(r->logits);
    free(r);
}

static uint64_t mix(int64_t id) {
    uint64_t x = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

static samp_slot *samp_find(erun_runner *r, int64_t id, bool insert) {
    uint64_t mask = (uint64_t)r->samp_cap - 1, i = mix(id) & mask;
    samp_slot *tomb = NULL;
    for (;;) {
        samp_slot *s = &r->samp[i];
        if (s->id == id) return s;
        if (s->id == -2 && !tomb) tomb = s;
        if (s->id == -1) return insert ? (tomb ? tomb : s) : NULL;
        i = (i + 1) & mask;
    }
}

static int samp_grow(erun_runner *r) {
    int64_t old_cap = r->samp_cap;
    samp_slot *old = r->samp;
    r->samp_cap *= 2;
    r->samp = malloc((size_t)r->samp_cap * sizeof *r->samp);
    if (!r->samp) {
        r->samp = old;
        r->samp_cap = old_cap;
        return vc_err_set(VC_ERR_OOM, "runner: out of memory");
    }
    for (int64_t i = 0; i < r->samp_cap; i++) r->samp[i] = (samp_slot){-1, NULL};
    r->samp_used = 0;
    for (int64_t i = 0; i < old_cap; i++)
        if (old[i].id >= 0) {
            *samp_find(r, old[i].id, true) = old[i];
            r->samp_used++;
        }
    free(old);
    return VC_OK;
}

/* Sampler parameters of an engine request: EOS (unless ignored) and the
 * stop ids form the min_tokens stop set. */
static int make_req(const erun_runner *r, const ereq_sampling *qs, smp_req **out) {
    int32_t eos = qs->eos_token_id;
    return smp_req_create_from_ereq(r->sampler, qs, &eos, eos >= 0 ? 1 : 0, out);
}

int erun_validate(const erun_runner *r, const ereq_sampling *sp) {
    smp_req *req = NULL;
    int rc = make_req(r, sp, &req);
    smp_req_free(req);
    return rc;
}

/* The request's immutable sampler parameters, created on first use. */
static const smp_req *sampler_for(erun_runner *r, const ereq *q) {
    samp_slot *s = samp_find(r, q->id, false);
    if (s) return s->s;
    if (2 * (r->samp_used + 1) > r->samp_cap && samp_grow(r) < 0) return NULL;
    smp_req *req = NULL;
    if (make_req(r, &q->sp, &req) < 0) return NULL;
    s = samp_find(r, q->id, true);
    *s = (samp_slot){q->id, req};
    r->samp_used++;
    return req;
}

const smp_batch_out *erun_sample_output(const erun_runner *r) { return smp_batch_output(r->sampler); }

void erun_release(erun_runner *r, int64_t req_id) {
    samp_slot *s = samp_find(r, req_id, false);
    if (!s) return;
    smp_req_free(s->s);
    s->id = -2;
    s->s = NULL;
}

int erun_execute(erun_runner *r, const esched_output *so, int32_t *sampled) {
    int32_t S = so->n_items, T = 0, n_logits = 0, B = r->p.block_size;
    if (S == 0) return VC_OK;
    if (S > r->p.max_num_seqs || so->total_tokens > r->p.max_num_batched_tokens)
        return vc_err_set(VC_ERR_INVALID, "runner: step of %d requests / %d tokens exceeds the limits", S,
                          so->total_tokens);
    r->qsl[0] = 0;
    for (int32_t i = 0; i < S; i++) {
        const esched_item *it = &so->items[i];
        const ereq *q = it->req;
        int32_t nb = 0;
        const int32_t *blocks = kv_seq_block_ids(q->seq, &nb);
        int32_t end = it->start + it->num_tokens;
        if (it->num_tokens <= 0 || end > q->num_tokens || (int64_t)nb * B < end || nb > r->max_blocks ||
            T + it->num_tokens > r->p.max_num_batched_tokens)
            return vc_err_set(VC_ERR_INVALID, "runner: inconsistent schedule for request %lld", (long long)q->id);
        memcpy(r->ids + T, q->tokens + it->start, (size_t)it->num_tokens * sizeof(int32_t));
        kv_slot_mapping(blocks, nb, B, it->start, it->num_tokens, r->slots64 + T);
        for (int32_t j = 0; j < it->num_tokens; j++) {
            r->pos[T + j] = it->start + j;
            r->slots[T + j] = (int32_t)r->slots64[T + j];
        }
        int32_t *row = r->bt + (int64_t)i * r->max_blocks;
        memcpy(row, blocks, (size_t)nb * sizeof *row);
        for (int32_t j = nb; j < r->max_blocks; j++) row[j] = 0; /* null block */
        T += it->num_tokens;
        r->qsl[i + 1] = T;
        r->seq_lens[i] = end;
        if (it->sample) r->rows[n_logits++] = T - 1;
    }
    mdl_batch b = {.n_tokens = T, .ids = r->ids, .positions = r->pos, .slots = r->slots, .n_seqs = S,
                   .qsl = r->qsl, .seq_lens = r->seq_lens, .block_tables = r->bt, .max_blocks = r->max_blocks,
                   .n_logits = n_logits, .logit_rows = r->rows};
    int rc = mdl_forward_batch(r->m, r->kv, &b, r->logits);
    if (rc < 0) return rc;
    int32_t k = 0;
    for (int32_t i = 0; i < S; i++) {
        if (!so->items[i].sample) continue;
        const ereq *q = so->items[i].req;
        const smp_req *sr = sampler_for(r, q);
        if (!sr) return vc_err_prefix("request %lld: sampling parameters", (long long)q->id);
        /* History: the prompt, then the outputs known so far. */
        r->smp_rows[k] = smp_row_from_ereq(sr, q);
        k++;
    }
    if (k == 0) return VC_OK;
    rc = smp_batch_sample(r->sampler, r->logits, r->smp_rows, k);
    if (rc < 0) return rc;
    memcpy(sampled, smp_batch_output(r->sampler)->tokens, (size_t)k * sizeof *sampled);
    return VC_OK;
}
