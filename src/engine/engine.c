#include "engine/engine.h"
#include "base/clock.h"

#include "base/err.h"
#include "base/log.h"
#include "engine/engine_int.h"
#include "runtime/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void on_prompt_lp(void *ctx, const ereq *q, int32_t pos, const int32_t *ids, const float *vals, int32_t n,
                         int32_t rank);

eng_params eng_params_default(void) {
    eng_params p;
    memset(&p, 0, sizeof p);
    p.block_size = 16;
    p.max_num_seqs = 64;
    p.max_num_batched_tokens = 2048;
    p.kv_cache_fraction = 0.25;
    p.gpu_memory_utilization = 0.9;
    p.enable_prefix_caching = true;
    p.enable_chunked_prefill = true;
    p.policy = ESCHED_FCFS;
    return p;
}

/* MemAvailable from /proc/meminfo, 0 if unknown. */
static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

static int push_ptr(void ***arr, int32_t *n, int32_t *cap, void *p) {
    if (*n == *cap) {
        int32_t c = *cap ? *cap * 2 : 64;
        void **a = realloc(*arr, (size_t)c * sizeof *a);
        if (!a) return vc_err_set(VC_ERR_OOM, "out of memory");
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = p;
    return VC_OK;
}

eng_engine *eng_create(const eng_params *p) {
    eng_engine *e = calloc(1, sizeof *e);
    if (!e) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    e->p = *p;
    if (!p->model) {
        vc_err_set(VC_ERR_INVALID, "engine: no model given");
        goto fail;
    }
    if (p->block_size <= 0 || p->block_size > 1024 || p->max_num_seqs <= 0 || p->max_num_batched_tokens <= 0 ||
        p->max_num_seqs > p->max_num_batched_tokens) {
        vc_err_set(VC_ERR_INVALID,
                   "engine: need 0 < block_size <= 1024 and 0 < max_num_seqs <= max_num_batched_tokens");
        goto fail;
    }
    rt_backend_params bp = rt_backend_params_default();
    bp.n_threads = p->n_threads;
    e->tp = p->tensor_parallel_size > 1 ? p->tensor_parallel_size : 1;
    e->bes = calloc((size_t)e->tp, sizeof *e->bes);
    if (!e->bes) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        goto fail;
    }
    if (rt_backends_create_group(p->device, e->tp, &bp, e->bes) < 0) goto fail;
    e->be = e->bes[0];
    mdl_params mp = mdl_params_default();
    mp.max_batch = p->max_num_batched_tokens;
    mp.upcast_weights = p->upcast_weights;
    mp.tp_size = e->tp;
    if (p->kv_cache_dtype && mdl_parse_kv_dtype(p->kv_cache_dtype, &mp.kv_dtype) < 0) goto fail;
    mp.tp_backends = e->bes;
    e->m = mdl_load(p->model, e->be, &mp);
    if (!e->m) goto fail;
    e->tok = tok_load(p->model); /* optional: token-id requests work without one */
    if (!e->tok) VC_WARN("no tokenizer for %s (%s): token ids only", p->model, vc_err_msg());
    const mdl_config *c = mdl_get_config(e->m);
    e->max_model_len = p->max_model_len > 0 ? p->max_model_len : (int32_t)c->max_pos;
    /* A pinned block count (the C API's num_blocks): without an explicit
     * max_model_len the context shrinks to what the pool holds. */
    if (p->num_blocks > 0 && p->max_model_len <= 0 &&
        (int64_t)e->max_model_len > ((int64_t)p->num_blocks - 1) * p->block_size)
        e->max_model_len = (int32_t)(((int64_t)p->num_blocks - 1) * p->block_size);
    if (e->max_model_len > c->max_pos) {
        vc_err_set(VC_ERR_INVALID, "max_model_len %d exceeds the model's context (%lld)", e->max_model_len,
                   (long long)c->max_pos);
        goto fail;
    }
    /* A warm-up that fails (e.g. no room for its throw-away KV cache on a
     * small device) costs only the first request's speed: say so, go on. */
    int64_t warm_rows = p->max_num_seqs; /* in: the most rows to warm; out: those warmed (0: none) */
    if (eng_warm_up(e, &warm_rows) < 0) {
        VC_WARN("warm-up skipped: %s", vc_err_msg());
        vc_err_clear();
    }
    /* KV budget -> blocks. */
    size_t per_block = mdl_kv_block_bytes(e->m, p->block_size);
    size_t budget = p->kv_cache_memory, dev_free = 0, dev_total = 0;
    if (!budget && rt_backend_mem_info(e->be, &dev_free, &dev_total) == 0) {
        /* Weights and activation buffers are already allocated: keep the
         * device at most gpu_memory_utilization full. */
        if (!(p->gpu_memory_utilization > 0 && p->gpu_memory_utilization <= 1)) {
            vc_err_set(VC_ERR_INVALID, "gpu_memory_utilization must be in (0, 1]");
            goto fail;
        }
        double reserve = (double)dev_total * (1.0 - p->gpu_memory_utilization);
        budget = (double)dev_free > reserve ? (size_t)((double)dev_free - reserve) : 0;
        VC_INFO("device memory: %.1f GiB free of %.1f GiB; KV budget %.1f GiB (utilization %.2f)",
                (double)dev_free / 1073741824.0, (double)dev_total / 1073741824.0, (double)budget / 1073741824.0,
                p->gpu_memory_utilization);
    } else if (!budget) {
        size_t avail = mem_available();
        budget = (size_t)((double)(avail ? avail : ((size_t)4 << 30)) * p->kv_cache_fraction);
    }
    int64_t nb = (int64_t)(budget / per_block);
    int64_t useful = (int64_t)p->max_num_seqs * ((e->max_model_len + p->block_size - 1) / p->block_size) + 1;
    if (nb > useful) nb = useful; /* more could never be used at once */
    if (p->num_blocks > 0) nb = p->num_blocks;
    if (nb > INT32_MAX / p->block_size) nb = INT32_MAX / p->block_size;
    int64_t need = (e->max_model_len + p->block_size - 1) / p->block_size + 1;
    if (nb < need && p->num_blocks > 0) {
        vc_err_set(VC_ERR_INVALID,
                   "num_blocks %d of %d tokens cannot hold one sequence of max_model_len %d (needs %lld): raise "
                   "num_blocks or lower max_model_len",
                   p->num_blocks, p->block_size, e->max_model_len, (long long)need);
        goto fail;
    }
    if (nb < need) {
        vc_err_set(VC_ERR_INVALID,
                   "KV cache budget of %zu bytes holds %lld blocks of %d tokens; one sequence of max_model_len %d "
                   "needs %lld: raise --kv-cache-memory or lower --max-model-len",
                   budget, (long long)nb, p->block_size, e->max_model_len, (long long)need);
        goto fail;
    }
    e->num_blocks = (int32_t)nb;
    VC_INFO("KV cache: %d blocks of %d tokens (%.1f MiB), max_model_len %d", e->num_blocks, p->block_size,
            (double)nb * (double)per_block / 1048576.0, e->max_model_len);
    esched_params sp = esched_params_default();
    sp.max_num_batched_tokens = p->max_num_batched_tokens;
    sp.max_num_seqs = p->max_num_seqs;
    sp.max_model_len = e->max_model_len;
    sp.policy = p->policy;
    sp.enable_chunked_prefill = p->enable_chunked_prefill;
    sp.num_blocks = e->num_blocks;
    sp.block_size = p->block_size;
    sp.enable_prefix_caching = p->enable_prefix_caching;
    e->sched = esched_create(&sp);
    if (!e->sched) goto fail;
    erun_params rp = {.num_blocks = e->num_blocks, .block_size = p->block_size,
                      .max_num_batched_tokens = p->max_num_batched_tokens, .max_num_seqs = p->max_num_seqs,
                      .max_model_len = e->max_model_len};
    e->runner = erun_create(e->m, &rp);
    if (!e->runner) goto fail;
    if (warm_rows > 0) { /* the decode graphs of every bucket, on the runner's KV cache (runner_warm.c) */
        const double t0 = vc_now_s();
        if (erun_warm_decode(e->runner, (int32_t)warm_rows) < 0) {
            VC_WARN("decode warm-up skipped: %s", vc_err_msg());
            vc_err_clear();
        } else {
            VC_INFO("warm-up: decode steps of 1 .. %lld rows (their graphs) in %.0f ms", (long long)warm_rows,
                    1e3 * (vc_now_s() - t0));
        }
    }
    if (p->async_scheduling && erun_start_worker(e->runner) < 0) goto fail;
    erun_set_prompt_lp_cb(e->runner, on_prompt_lp, e);
    e->sampled = malloc((size_t)p->max_num_seqs * sizeof *e->sampled);
    if (!e->sampled) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        goto fail;
    }
    return e;
fail:
    eng_free(e);
    return NULL;
}

static void on_prompt_lp(void *ctx, const ereq *q, int32_t pos, const int32_t *ids, const float *vals, int32_t n,
                         int32_t rank) {
    (void)ctx;
    eng_req *er = q->user;
    if (!er->plp_ids || pos <= 0 || pos >= q->num_prompt || n > er->plp_stride) return;
    memcpy(er->plp_ids + (int64_t)pos * er->plp_stride, ids, (size_t)n * sizeof *ids);
    memcpy(er->plp_vals + (int64_t)pos * er->plp_stride, vals, (size_t)n * sizeof *vals);
    er->plp_ranks[pos] = rank;
}

static void free_req(ereq *r) {
    eng_req *er = r->user;
    if (er) {
        eout_req_free(er->out);
        free(er->lp_ids);
        free(er->lp_vals);
        free(er->plp_ids);
        free(er->plp_vals);
        free(er->plp_ranks);
        free(er);
    }
    ereq_free(r);
}

void eng_free(eng_engine *e) {
    if (!e) return;
    if (e->runner) erun_stop_worker(e->runner); /* no step may still read the requests */
    for (int32_t i = 0; i < e->n_live; i++) {
        if (e->sched && !ereq_is_finished(e->live[i])) esched_abort(e->sched, e->live[i]->id);
        free_req(e->live[i]);
    }
    free(e->live);
    free(e->aborted);
    free(e->parents);
    free(e->rel);
    esched_output_free(&e->so[0]);
    esched_output_free(&e->so[1]);
    esched_req_list_free(&e->finished);
    free(e->sampled);
    free(e->outs);
    erun_free(e->runner);
    esched_free(e->sched);
    tok_free(e->tok);
    mdl_free(e->m);
    if (e->bes) rt_backends_free_group(e->bes, e->tp);
    free(e->bes);
    free(e);
}

/* One request (a whole request, or child `index` of parent_id) with the
 * resolved parameters sp; queued and listed live. */
static int add_one(eng_engine *e, const int32_t *prompt, int32_t n, const ereq_sampling *sp, void *user, int64_t id,
                   int64_t parent_id, int32_t index) {
    ereq *r = ereq_create(id, prompt, n, sp);
    if (!r) return vc_err_status() ? vc_err_status() : VC_ERR_INVALID;
    r->arrival_time = vc_now_s();
    eng_req *er = calloc(1, sizeof *er);
    if (!er) {
        ereq_free(r);
        return vc_err_set(VC_ERR_OOM, "out of memory");
    }
    er->user = user;
    er->parent_id = parent_id;
    er->index = index;
    er->t.arrival = r->arrival_time;
    r->user = er;
    if (sp->prompt_logprobs >= 0) {
        er->plp_stride = sp->prompt_logprobs + 1;
        er->plp_ids = calloc((size_t)n * (size_t)er->plp_stride, sizeof *er->plp_ids);
        er->plp_vals = calloc((size_t)n * (size_t)er->plp_stride, sizeof *er->plp_vals);
        er->plp_ranks = calloc((size_t)n, sizeof *er->plp_ranks);
        if (!er->plp_ids || !er->plp_vals || !er->plp_ranks) {
            free_req(r);
            return vc_err_set(VC_ERR_OOM, "out of memory");
        }
    }
    eout_detok d = {0};
    if (e->tok && eout_detok_tokenizer(e->tok, sp->skip_special_tokens, prompt, n, &d) < 0) {
        free_req(r);
        return VC_ERR_OOM;
    }
    er->out = eout_req_create(r, &d);
    if (!er->out) {
        free_req(r);
        return VC_ERR_OOM;
    }
    int rc = esched_add_request(e->sched, r);
    if (rc < 0) {
        free_req(r);
        return rc;
    }
    if (push_ptr((void ***)&e->live, &e->n_live, &e->cap_live, r) < 0) {
        esched_abort(e->sched, r->id);
        free_req(r);
        return VC_ERR_OOM;
    }
    return VC_OK;
}

static eng_parent *find_parent(eng_engine *e, int64_t id) {
    for (int32_t i = 0; i < e->n_parents; i++)
        if (e->parents[i].id == id) return &e->parents[i];
    return NULL;
}

int eng_add_tokens(eng_engine *e, const int32_t *prompt, int32_t n, const ereq_sampling *sp, void *user,
                   int64_t *id_out) {
    if (n <= 0) return vc_err_set(VC_ERR_INVALID, "the prompt is empty");
    if (sp->n < 0 || sp->n > 1024) return vc_err_set(VC_ERR_INVALID, "n must be in [1, 1024], got %d", sp->n);
    int64_t V = mdl_get_config(e->m)->vocab;
    for (int32_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return vc_err_set(VC_ERR_INVALID, "prompt token %d out of range [0, %lld)", prompt[i], (long long)V);
    /* EOS from the model (vLLM: the first is eos_token_id, the others join
     * stop_token_ids). */
    ereq_sampling s2 = *sp;
    const mdl_config *c = mdl_get_config(e->m);
    if (s2.eos_token_id < 0 && c->n_eos > 0) s2.eos_token_id = c->eos_ids[0];
    for (int i = 1; i < c->n_eos && s2.n_stop_token_ids < EREQ_MAX_STOP_IDS; i++) {
        bool have = false;
        for (int j = 0; j < s2.n_stop_token_ids; j++) have |= s2.stop_token_ids[j] == c->eos_ids[i];
        if (!have) s2.stop_token_ids[s2.n_stop_token_ids++] = c->eos_ids[i];
    }
    int32_t nc = s2.n > 1 ? s2.n : 1;
    s2.n = 1;
    if (erun_validate(e->runner, &s2) < 0) return VC_ERR_INVALID;
    int64_t pid = e->next_id;
    if (nc == 1) {
        int rc = add_one(e, prompt, n, &s2, user, pid, pid, 0);
        if (rc < 0) return rc;
        e->next_id++;
        *id_out = pid;
        return VC_OK;
    }
    /* n > 1: children pid + 1 + i; seeded parents give child i seed + i
     * (vLLM's ParentRequest), unseeded ones share the parameters. */
    if (e->n_parents == e->cap_parents) {
        int32_t cap = e->cap_parents ? 2 * e->cap_parents : 16;
        eng_parent *np = realloc(e->parents, (size_t)cap * sizeof *np);
        if (!np) return vc_err_set(VC_ERR_OOM, "out of memory");
        e->parents = np;
        e->cap_parents = cap;
    }
    uint64_t seed = s2.seed;
    for (int32_t i = 0; i < nc; i++) {
        if (s2.has_seed) s2.seed = seed + (uint64_t)i;
        int rc = add_one(e, prompt, n, &s2, user, pid + 1 + i, pid, i);
        if (rc < 0) { /* withdraw the children added so far, silently */
            for (int32_t j = 0; j < i; j++) {
                ereq *r = eng_find_live(e, pid + 1 + j);
                esched_abort(e->sched, pid + 1 + j);
                if (r) ((eng_req *)r->user)->reported_final = true;
            }
            if (i > 0) e->next_id += 1 + nc; /* their ids are not reused */
            return rc;
        }
    }
    e->parents[e->n_parents++] = (eng_parent){pid, nc, nc};
    e->next_id += 1 + nc;
    *id_out = pid;
    return VC_OK;
}

int eng_add_text(eng_engine *e, const char *text, const ereq_sampling *sp, void *user, int64_t *id_out) {
    if (!e->tok) return vc_err_set(VC_ERR_INVALID, "this model has no tokenizer: send token ids");
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(e->tok, text, strlen(text), true, &ids, &n) < 0) return VC_ERR_INVALID;
    int rc = n > INT32_MAX ? vc_err_set(VC_ERR_INVALID, "prompt too long")
                           : eng_add_tokens(e, ids, (int32_t)n, sp, user, id_out);
    free(ids);
    return rc;
}

static int abort_one(eng_engine *e, int64_t id) {
    int rc = esched_abort(e->sched, id);
    if (rc == 1) {
        if (e->n_aborted == e->cap_aborted) {
            int32_t c = e->cap_aborted ? e->cap_aborted * 2 : 16;
            int64_t *a = realloc(e->aborted, (size_t)c * sizeof *a);
            if (!a) return vc_err_set(VC_ERR_OOM, "out of memory");
            e->aborted = a;
            e->cap_aborted = c;
        }
        e->aborted[e->n_aborted++] = id;
    }
    return rc < 0 ? rc : VC_OK;
}

int eng_abort(eng_engine *e, int64_t id) {
    const eng_parent *p = find_parent(e, id);
    if (!p) return abort_one(e, id);
    for (int32_t i = 0; i < p->n; i++) {
        int rc = abort_one(e, id + 1 + i);
        if (rc < 0) return rc;
    }
    return VC_OK;
}

int eng_abort_all(eng_engine *e) {
    for (int32_t i = 0; i < e->n_live; i++) {
        ereq *r = e->live[i];
        if (!ereq_is_finished(r)) {
            int rc = abort_one(e, r->id);
            if (rc < 0) return rc;
        }
    }
    return VC_OK;
}

int eng_fail_all(eng_engine *e, eng_output **outs, int32_t *n_outs) {
    *n_outs = 0;
    *outs = e->outs;
    int rc = VC_OK;
    double now = vc_now_s();
    for (int32_t i = 0; i < e->n_live && rc == 0; i++) {
        ereq *r = e->live[i];
        if (((eng_req *)r->user)->reported_final) continue;
        if (!ereq_is_finished(r)) esched_finish_request(e->sched, r->id, EREQ_FINISHED_ERROR);
        rc = eng_emit(e, r, now, n_outs);
    }
    *outs = e->outs;
    return rc;
}

bool eng_has_unfinished(const eng_engine *e) {
    for (int32_t i = 0; i < e->n_live; i++)
        if (!((eng_req *)e->live[i]->user)->reported_final) return true;
    return false;
}

int eng_emit(eng_engine *e, ereq *r, double now, int32_t *n_outs) {
    eng_req *er = r->user;
    if (er->reported_final) return VC_OK;
    eout_delta d;
    int rc = eout_req_process(er->out, r, e->sched, &d);
    if (rc < 0) return rc;
    if (!d.finished && d.n_token_ids == 0 && d.text_len == 0) return VC_OK;
    if (*n_outs == e->cap_outs) {
        int32_t c = e->cap_outs ? e->cap_outs * 2 : 64;
        eng_output *o = realloc(e->outs, (size_t)c * sizeof *o);
        if (!o) return vc_err_set(VC_ERR_OOM, "out of memory");
        e->outs = o;
        e->cap_outs = c;
    }
    if (d.n_token_ids > 0) {
        if (er->t.first_token == 0) er->t.first_token = now;
        er->t.last_token = now;
    }
    bool parent_done = d.finished;
    if (d.finished) {
        er->reported_final = true;
        er->t.finished = now;
        eng_parent *p = er->parent_id != r->id ? find_parent(e, er->parent_id) : NULL;
        if (p) {
            parent_done = --p->n_left == 0;
            if (parent_done) *p = e->parents[--e->n_parents];
        }
    }
    e->outs[(*n_outs)++] = (eng_output){.id = r->id, .user = er->user, .text = d.text, .text_len = d.text_len,
                                        .token_ids = d.token_ids, .n_token_ids = d.n_token_ids,
                                        .finished = d.finished, .finish_reason = d.finish_reason,
                                        .stop_str = d.stop_str, .usage = d.usage,
                                        .n_lp = d.n_token_ids > 0 ? er->n_lp : 0, .lp_ids = er->lp_ids,
                                        .lp_vals = er->lp_vals, .lp_rank = er->lp_rank,
                                        .parent_id = er->parent_id, .index = er->index,
                                        .parent_finished = parent_done, .times = er->t};
    er->n_lp = 0;
    /* Prompt logprobs go with the first token: every prompt chunk's step has
     * completed by then (async: the worker may still be writing them for an
     * aborted request, which gets none). */
    if (er->plp_ids && !er->plp_sent && d.n_token_ids > 0) {
        eng_output *o = &e->outs[*n_outs - 1];
        o->n_plp = r->num_prompt;
        o->plp_stride = er->plp_stride;
        o->plp_ids = er->plp_ids;
        o->plp_vals = er->plp_vals;
        o->plp_ranks = er->plp_ranks;
        er->plp_sent = true;
    }
    return VC_OK;
}

ereq *eng_find_live(eng_engine *e, int64_t id) {
    for (int32_t i = 0; i < e->n_live; i++)
        if (e->live[i]->id == id) return e->live[i];
    return NULL;
}

void eng_reap(eng_engine *e) {
    int32_t w = 0;
    for (int32_t i = 0; i < e->n_live; i++) {
        ereq *r = e->live[i];
        if (((eng_req *)r->user)->reported_final && ereq_can_free(r)) free_req(r);
        else e->live[w++] = r;
    }
    e->n_live = w;
}

const mdl_config *eng_model_config(const eng_engine *e) { return mdl_get_config(e->m); }
const tok_tokenizer *eng_tokenizer(const eng_engine *e) { return e->tok; }
int32_t eng_num_blocks(const eng_engine *e) { return e->num_blocks; }
int32_t eng_max_model_len(const eng_engine *e) { return e->max_model_len; }
void eng_stats(const eng_engine *e, esched_stats *out) { esched_get_stats(e->sched, out); }
