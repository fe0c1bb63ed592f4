#include "engine/sched.h"

#include "base/err.h"
#include "engine/sched_queue.h"

#include <stdlib.h>
#include <string.h>

const int32_t ESCHED_ITER_LE[ESCHED_ITER_BUCKETS] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

struct esched {
    esched_params p;
    kv_manager *kv;
    bool own_kv;
    int32_t B, usable_blocks;

    ereq **running; /* [max_num_seqs], scheduling order */
    int64_t iter_steps, iter_tokens, iter_counts[ESCHED_ITER_BUCKETS + 1]; /* tokens per step */
    int32_t n_running;
    esched_queue waiting;

    /* Ids finished since the last schedule; capacity is kept at least the
     * number of live requests plus these, so finishing never allocates. */
    int64_t *finished_ids;
    int32_t n_finished, cap_finished;

    /* Live requests by id: open addressing, linear probing, power-of-two
     * capacity at least twice the live count (grown at add, so removal
     * never allocates). */
    ereq **index;
    int32_t index_cap, n_live;

    int64_t num_preemptions, num_steps;
    int64_t pq, ph, ppq, pph; /* prefix queries/hits, first admissions / readmissions */
};

esched_params esched_params_default(void) {
    esched_params p;
    memset(&p, 0, sizeof p);
    p.max_num_batched_tokens = 8192;
    p.max_num_seqs = 256;
    p.policy = ESCHED_FCFS;
    p.enable_chunked_prefill = true;
    p.block_size = 16;
    p.enable_prefix_caching = true;
    return p;
}

static int64_t cdiv64(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return VC_OK;
    int32_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return vc_err_set(VC_ERR_OOM, "out of memory");
    *p = q;
    *cap = c;
    return VC_OK;
}

esched *esched_create(const esched_params *p) {
    if (p->max_num_batched_tokens <= 0 || p->max_num_seqs <= 0 || p->max_model_len < 2 ||
        p->long_prefill_token_threshold < 0 || (p->policy != ESCHED_FCFS && p->policy != ESCHED_PRIORITY)) {
        vc_err_set(VC_ERR_INVALID,
                   "scheduler: bad parameters (max_num_batched_tokens %d, max_num_seqs %d, max_model_len %d, "
                   "long_prefill_token_threshold %d)",
                   p->max_num_batched_tokens, p->max_num_seqs, p->max_model_len, p->long_prefill_token_threshold);
        return NULL;
    }
    if (!p->enable_chunked_prefill && p->max_num_batched_tokens < p->max_model_len) {
        vc_err_set(VC_ERR_INVALID,
                   "scheduler: without chunked prefill max_num_batched_tokens (%d) must be >= max_model_len (%d)",
                   p->max_num_batched_tokens, p->max_model_len);
        return NULL;
    }
    esched *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->p = *p;
    s->waiting.sorted = p->policy == ESCHED_PRIORITY;
    if (p->kv) {
        s->kv = p->kv;
    } else {
        kv_mgr_params kp = kv_mgr_params_default();
        kp.num_blocks = p->num_blocks;
        kp.block_size = p->block_size;
        kp.max_model_len = p->max_model_len;
        kp.enable_caching = p->enable_prefix_caching;
        s->kv = kv_mgr_create(&kp);
        if (!s->kv) {
            vc_err_prefix("scheduler");
            free(s);
            return NULL;
        }
        s->own_kv = true;
    }
    s->B = kv_mgr_block_size(s->kv);
    s->usable_blocks = kv_pool_num_blocks(kv_mgr_pool(s->kv)) - 1;
    /* 2x: with async scheduling, requests whose last token is in flight keep
     * their entry until it arrives but no longer hold a seat (below). */
    s->running = malloc((size_t)p->max_num_seqs * 2 * sizeof *s->running);
    if (!s->running) goto oom;
    return s;
oom:
    esched_free(s);
    vc_err_set(VC_ERR_OOM, "out of memory");
    return NULL;
}

void esched_free(esched *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->n_running; i++) {
        kv_seq_release(s->kv, s->running[i]->seq);
        s->running[i]->seq = NULL;
    }
    for (int32_t i = 0; i < s->waiting.n; i++) {
        ereq *r = esched_queue_at(&s->waiting, i);
        kv_seq_release(s->kv, r->seq);
        r->seq = NULL;
    }
    if (s->own_kv) kv_mgr_free(s->kv);
    free(s->running);
    esched_queue_free(&s->waiting);
    free(s->finished_ids);
    free(s->index);
    free(s);
}

kv_manager *esched_kv(esched *s) { return s->kv; }

ereq *esched_running_at(const esched *s, int32_t i) {
    return i >= 0 && i < s->n_running ? s->running[i] : NULL;
}

ereq *esched_waiting_at(const esched *s, int32_t i) {
    return i >= 0 && i < s->waiting.n ? esched_queue_at(&s->waiting, i) : NULL;
}

static uint32_t id_hash(int64_t id) {
    uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

/* Slot holding id, or the empty slot where it would go. */
static int32_t index_slot(const esched *s, int64_t id) {
    uint32_t mask = (uint32_t)s->index_cap - 1;
    uint32_t i = id_hash(id) & mask;
    while (s->index[i] && s->index[i]->id != id) i = (i + 1) & mask;
    return (int32_t)i;
}

static int index_reserve(esched *s, int32_t live) {
    if (s->index_cap >= 2 * live) return VC_OK;
    int32_t cap = s->index_cap ? s->index_cap : 64;
    while (cap < 2 * live) cap *= 2;
    ereq **old = s->index;
    int32_t old_cap = s->index_cap;
    s->index = calloc((size_t)cap, sizeof *s->index);
    if (!s->index) {
        s->index = old;
        return vc_err_set(VC_ERR_OOM, "out of memory");
    }
    s->index_cap = cap;
    for (int32_t i = 0; i < old_cap; i++)
        if (old[i]) s->index[index_slot(s, old[i]->id)] = old[i];
    free(old);
    return VC_OK;
}

static void index_remove(esched *s, int64_t id) {
    uint32_t mask = (uint32_t)s->index_cap - 1;
    uint32_t i = (uint32_t)index_slot(s, id);
    VC_ASSERT(s->index[i]);
    s->index[i] = NULL;
    s->n_live--;
    /* backward-shift: re-place the rest of the probe run */
    for (uint32_t j = (i + 1) & mask; s->index[j]; j = (j + 1) & mask) {
        ereq *r = s->index[j];
        s->index[j] = NULL;
        s->index[index_slot(s, r->id)] = r;
    }
}

int32_t esched_num_unfinished(const esched *s) { return s->n_live; }

ereq *esched_find(esched *s, int64_t id) {
    if (!s->index_cap) return NULL;
    return s->index[index_slot(s, id)];
}

int esched_add_request(esched *s, ereq *r) {
    const esched_params *p = &s->p;
    if (!r) return vc_err_set(VC_ERR_INVALID, "scheduler: NULL request");
    if (r->status != EREQ_WAITING || r->seq)
        return vc_err_set(VC_ERR_INVALID, "request %lld: already scheduled once", (long long)r->id);
    if (esched_find(s, r->id))
        return vc_err_set(VC_ERR_INVALID, "request %lld: id already in use", (long long)r->id);
    if (r->num_prompt < 1 || r->num_tokens != r->num_prompt)
        return vc_err_set(VC_ERR_INVALID, "request %lld: empty prompt", (long long)r->id);
    if (r->num_prompt > p->max_model_len - 1)
        return vc_err_set(VC_ERR_INVALID,
                          "request %lld: the prompt (%d tokens) leaves no room to generate: the maximum model "
                          "length is %d",
                          (long long)r->id, r->num_prompt, p->max_model_len);
    const ereq_sampling *sp = &r->sp;
    if (sp->max_tokens < 1)
        return vc_err_set(VC_ERR_INVALID, "request %lld: max_tokens must be at least 1, got %d", (long long)r->id,
                          sp->max_tokens);
    if (sp->min_tokens < 0 || sp->min_tokens > sp->max_tokens)
        return vc_err_set(VC_ERR_INVALID, "request %lld: min_tokens (%d) must be in [0, max_tokens = %d]",
                          (long long)r->id, sp->min_tokens, sp->max_tokens);
    if ((int64_t)r->num_prompt + sp->min_tokens > p->max_model_len)
        return vc_err_set(VC_ERR_INVALID,
                          "request %lld: prompt (%d tokens) + min_tokens (%d) exceeds the maximum model length %d",
                          (long long)r->id, r->num_prompt, sp->min_tokens, p->max_model_len);
    if (sp->n_stop_token_ids < 0 || sp->n_stop_token_ids > EREQ_MAX_STOP_IDS)
        return vc_err_set(VC_ERR_INVALID, "request %lld: %d stop token ids (at most %d)", (long long)r->id,
                          sp->n_stop_token_ids, EREQ_MAX_STOP_IDS);
    int64_t longest = (int64_t)r->num_prompt + sp->max_tokens;
    if (longest > p->max_model_len) longest = p->max_model_len;
    if (cdiv64(longest, s->B) > s->usable_blocks)
        return vc_err_set(VC_ERR_INVALID,
                          "request %lld: up to %lld tokens need %lld KV blocks but the cache has only %d",
                          (long long)r->id, (long long)longest, (long long)cdiv64(longest, s->B), s->usable_blocks);

    int32_t live = s->n_live + 1;
    int rc = grow((void **)&s->finished_ids, &s->cap_finished, live + s->n_finished, sizeof *s->finished_ids);
    if (!rc) rc = esched_queue_reserve(&s->waiting, live);
    if (!rc) rc = index_reserve(s, live);
    if (rc) return rc;

    kv_seq_params kp = {0};
    if (r->cache_salt) {
        kp.cache_salt = r->cache_salt;
        kp.cache_salt_len = (uint32_t)strlen(r->cache_salt);
    }
    kp.skip_prefix_lookup = sp->prompt_logprobs >= 0; /* prompt logprobs need every position */
    r->seq = kv_seq_create(s->kv, &kp);
    if (!r->seq) return vc_err_status() ? vc_err_status() : VC_ERR_OOM;
    rc = kv_seq_append_tokens(s->kv, r->seq, r->tokens, r->num_tokens);
    if (!rc) rc = esched_queue_push(&s->waiting, r);
    if (rc) {
        kv_seq_release(s->kv, r->seq);
        r->seq = NULL;
        return rc;
    }
    s->index[index_slot(s, r->id)] = r;
    s->n_live++;
    r->num_computed = 0;
    r->num_output_placeholders = 0;
    r->stop_by_id = false;
    r->stop_str_idx = -1;
    return VC_OK;
}

/* r has left the queues: free its KV and record it for the runner. */
static void finish(esched *s, ereq *r, ereq_status st) {
    index_remove(s, r->id);
    kv_seq_release(s->kv, r->seq);
    r->seq = NULL;
    r->status = st;
    VC_ASSERT(s->n_finished < s->cap_finished); /* reserved at add */
    s->finished_ids[s->n_finished++] = r->id;
}

static void running_remove_at(esched *s, int32_t i) {
    memmove(s->running + i, s->running + i + 1, (size_t)(s->n_running - i - 1) * sizeof *s->running);
    s->n_running--;
}

/* Take a live request out of its queue; false when it is not live. */
static bool unlink_req(esched *s, ereq *r) {
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == r) {
            running_remove_at(s, i);
            return true;
        }
    int32_t w = esched_queue_find(&s->waiting, r);
    if (w < 0) return false;
    esched_queue_remove_at(&s->waiting, w);
    return true;
}

int esched_finish_request(esched *s, int64_t id, ereq_status status) {
    if (status < EREQ_FINISHED_STOPPED || status > EREQ_FINISHED_ERROR)
        return vc_err_set(VC_ERR_INVALID, "finish request %lld: status %d is not a finished status",
                          (long long)id, (int)status);
    ereq *r = esched_find(s, id);
    if (!r) return 0;
    unlink_req(s, r);
    finish(s, r, status);
    return 1;
}

int esched_abort(esched *s, int64_t id) { return esched_finish_request(s, id, EREQ_FINISHED_ABORTED); }

/* ---- one step */

static void preempt(esched *s, esched_output *out, ereq *r) {
    kv_mgr_free_blocks(s->kv, r->seq);
    r->status = EREQ_PREEMPTED;
    r->num_computed = 0;
    r->num_preemptions++;
    s->num_preemptions++;
    int rc = esched_queue_push_front(&s->waiting, r);
    VC_ASSERT(rc == VC_OK); /* capacity reserved at add */
    out->preempted[out->n_preempted++] = r;
}

/* Index of the running request to preempt. */
static int32_t pick_victim(const esched *s) {
    if (s->p.policy == ESCHED_FCFS) return s->n_running - 1;
    int32_t worst = 0;
    for (int32_t j = 1; j < s->n_running; j++)
        if (esched_prio_before(s->running[worst], s->running[j])) worst = j;
    return worst;
}

static void add_item(esched_output *out, ereq *r, int32_t start, int32_t n) {
    esched_item *it = &out->items[out->n_items++];
    it->req = r;
    it->start = start;
    it->num_tokens = n;
    it->sample = start + n == r->num_tokens + r->num_output_placeholders;
    it->num_placeholder_inputs = start + n > r->num_tokens ? start + n - r->num_tokens : 0;
    out->total_tokens += n;
}

static void remove_item_of(esched_output *out, const ereq *r, int32_t *budget) {
    for (int32_t k = 0; k < out->n_items; k++)
        if (out->items[k].req == r) {
            *budget += out->items[k].num_tokens;
            out->total_tokens -= out->items[k].num_tokens;
            memmove(out->items + k, out->items + k + 1, (size_t)(out->n_items - k - 1) * sizeof *out->items);
            out->n_items--;
            return;
        }
}

/* Async: the step in flight already samples the request's last allowed
 * token (max_tokens), so it is not scheduled again and gives up its seat
 * at once. Sync scheduling would have finished it before planning this
 * step, so the step then holds the same requests in both modes: with a
 * device whose kernels depend on the batch shape, async output equals sync
 * output (vLLM keeps the seat until the token arrives). */
static bool last_token_in_flight(const ereq *r) {
    return r->num_output_placeholders > 0 &&
           (int64_t)r->num_computed + 2 - r->num_output_placeholders >= (int64_t)r->num_prompt + r->sp.max_tokens;
}

static int32_t count_last_in_flight(const esched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_running; i++) n += last_token_in_flight(s->running[i]);
    return n;
}

/* Running requests in order; returns a negative status only on a KV
 * manager error. */
static int schedule_running(esched *s, esched_output *out, int32_t *budget) {
    const esched_params *p = &s->p;
    int32_t i = 0;
    while (i < s->n_running && *budget > 0) {
        ereq *r = s->running[i];
        if (last_token_in_flight(r)) {
            i++;
            continue;
        }
        int32_t n = r->num_tokens + r->num_output_placeholders - r->num_computed;
        if (p->long_prefill_token_threshold > 0 && n > p->long_prefill_token_threshold)
            n = p->long_prefill_token_threshold;
        if (n > *budget) n = *budget;
        if (n > p->max_model_len - 1 - r->num_computed) n = p->max_model_len - 1 - r->num_computed;
        if (n <= 0) {
            i++;
            continue;
        }
        bool ok = false;
        for (;;) {
            int rc = kv_mgr_allocate_slots(s->kv, r->seq, r->num_computed, n, NULL, 0);
            if (rc == KV_ALLOC_OK) {
                ok = true;
                break;
            }
            if (rc < 0) return rc;
            int32_t v = pick_victim(s);
            ereq *victim = s->running[v];
            running_remove_at(s, v);
            if (v < i) { /* priority policy: it was scheduled earlier this step */
                remove_item_of(out, victim, budget);
                i--;
            }
            preempt(s, out, victim);
            if (victim == r) break;
        }
        if (!ok) break;
        add_item(out, r, r->num_computed, n);
        *budget -= n;
        i++;
    }
    return VC_OK;
}

static int schedule_waiting(esched *s, esched_output *out, int32_t *budget) {
    const esched_params *p = &s->p;
    int32_t leaving = count_last_in_flight(s);
    while (s->waiting.n > 0 && *budget > 0 && s->n_running - leaving < p->max_num_seqs) {
        ereq *r = esched_queue_at(&s->waiting, 0);
        kv_hit hit;
        kv_mgr_get_computed_blocks(s->kv, r->seq, &hit);
        int32_t computed = hit.num_tokens;
        int32_t n = r->num_tokens - computed;
        if (p->long_prefill_token_threshold > 0 && n > p->long_prefill_token_threshold)
            n = p->long_prefill_token_threshold;
        if (!p->enable_chunked_prefill && n > *budget) break;
        if (n > *budget) n = *budget;
        int rc = kv_mgr_allocate_slots(s->kv, r->seq, 0, n, &hit, 0);
        if (rc == KV_ALLOC_NO_SPACE) break;
        if (rc < 0) return rc;
        esched_queue_remove_at(&s->waiting, 0);
        s->running[s->n_running++] = r;
        if (r->status == EREQ_WAITING) r->num_cached_prompt = computed; /* first admission only */
        r->status = EREQ_RUNNING;
        r->num_computed = computed;
        add_item(out, r, computed, n);
        *budget -= n;
    }
    return VC_OK;
}

int esched_schedule(esched *s, esched_output *out) {
    out->n_items = out->n_preempted = out->n_finished = 0;
    out->total_tokens = 0;
    int32_t most = s->p.max_num_seqs;
    int rc = grow((void **)&out->items, &out->cap_items, most, sizeof *out->items);
    if (!rc) rc = grow((void **)&out->preempted, &out->cap_preempted, 2 * most, sizeof *out->preempted);
    if (!rc) rc = grow((void **)&out->finished_ids, &out->cap_finished, s->n_finished, sizeof *out->finished_ids);
    if (rc) return rc;
    if (s->n_finished) memcpy(out->finished_ids, s->finished_ids, (size_t)s->n_finished * sizeof *out->finished_ids);
    out->n_finished = s->n_finished;
    s->n_finished = 0;
    s->num_steps++;

    int32_t budget = s->p.max_num_batched_tokens;
    rc = schedule_running(s, out, &budget);
    if (!rc && out->n_preempted == 0) rc = schedule_waiting(s, out, &budget);

    kv_prefix_stats ps;
    kv_mgr_take_prefix_stats(s->kv, &ps);
    s->pq += ps.queries;
    s->ph += ps.hits;
    s->ppq += ps.preempted_queries;
    s->pph += ps.preempted_hits;
    if (rc) { /* KV manager failure: what was planned is dropped, the queues stay consistent */
        out->n_items = 0;
        out->total_tokens = 0;
        return rc;
    }
    VC_ASSERT(budget >= 0 && out->total_tokens <= s->p.max_num_batched_tokens);
    if (out->total_tokens > 0) {
        int b = 0;
        while (b < ESCHED_ITER_BUCKETS && out->total_tokens > ESCHED_ITER_LE[b]) b++;
        s->iter_counts[b]++;
        s->iter_steps++;
        s->iter_tokens += out->total_tokens;
    }
    /* Computed tokens advance now, so the next step can be planned before
     * this one's results arrive. */
    for (int32_t k = 0; k < out->n_items; k++) {
        esched_item *it = &out->items[k];
        it->req->num_computed += it->num_tokens;
        if (it->sample) it->req->num_output_placeholders++;
        it->req->num_inflight++;
    }
    return VC_OK;
}

void esched_output_free(esched_output *out) {
    free(out->items);
    free(out->preempted);
    free(out->finished_ids);
    memset(out, 0, sizeof *out);
}

void esched_req_list_free(esched_req_list *l) {
    free(l->reqs);
    memset(l, 0, sizeof *l);
}

/* ---- results */

/* vLLM's check_stop, after a token was appended. */
static ereq_status check_stop(const esched *s, ereq *r) {
    const ereq_sampling *sp = &r->sp;
    int32_t nout = r->num_tokens - r->num_prompt;
    if (nout < sp->min_tokens) return EREQ_RUNNING;
    int32_t last = r->tokens[r->num_tokens - 1];
    if (!sp->ignore_eos && sp->eos_token_id >= 0 && last == sp->eos_token_id) return EREQ_FINISHED_STOPPED;
    for (int i = 0; i < sp->n_stop_token_ids; i++)
        if (last == sp->stop_token_ids[i]) {
            r->stop_by_id = true;
            r->stop_reason_id = (uint32_t)last;
            return EREQ_FINISHED_STOPPED;
        }
    if (r->num_tokens >= s->p.max_model_len || nout >= sp->max_tokens) return EREQ_FINISHED_LENGTH;
    return EREQ_RUNNING;
}

int esched_update(esched *s, const esched_output *out, const int32_t *sampled, int32_t n_sampled,
                  esched_req_list *finished) {
    int32_t want = 0;
    for (int32_t k = 0; k < out->n_items; k++) want += out->items[k].sample;
    if (n_sampled != want)
        return vc_err_set(VC_ERR_INVALID, "scheduler update: %d sampled tokens for %d sampling requests", n_sampled,
                          want);
    for (int32_t k = 0; k < n_sampled; k++)
        if (sampled[k] < 0) return vc_err_set(VC_ERR_INVALID, "scheduler update: negative token id %d", sampled[k]);
    if (finished) {
        finished->n = 0;
        int rc = grow((void **)&finished->reqs, &finished->cap, out->n_items, sizeof *finished->reqs);
        if (rc) return rc;
    }
    for (int32_t k = 0; k < out->n_items; k++) out->items[k].req->num_inflight--;

    int32_t j = 0;
    for (int32_t k = 0; k < out->n_items; k++) {
        const esched_item *it = &out->items[k];
        if (!it->sample) continue;
        int32_t tok = sampled[j++];
        ereq *r = it->req;
        if (ereq_is_finished(r)) continue; /* aborted or stopped while in flight */
        if (r->num_output_placeholders > 0) r->num_output_placeholders--;
        int rc = ereq_append_token(r, tok);
        if (!rc) rc = kv_seq_append_tokens(s->kv, r->seq, &tok, 1);
        if (rc) return rc;
        ereq_status st = check_stop(s, r);
        if (st == EREQ_RUNNING) continue;
        unlink_req(s, r); /* running, or waiting when preempted while in flight */
        finish(s, r, st);
        if (finished) finished->reqs[finished->n++] = r;
    }
    return VC_OK;
}

void esched_get_stats(const esched *s, esched_stats *out) {
    memset(out, 0, sizeof *out);
    out->num_running = s->n_running - count_last_in_flight(s); /* seats held */
    out->num_waiting = s->waiting.n;
    out->kv_usage = kv_mgr_usage(s->kv);
    out->num_preemptions_total = s->num_preemptions;
    out->prefix_queries_total = s->pq;
    out->prefix_hits_total = s->ph;
    out->preempted_prefix_queries_total = s->ppq;
    out->preempted_prefix_hits_total = s->pph;
    out->num_steps = s->num_steps;
    out->iter_steps = s->iter_steps;
    out->iter_tokens = s->iter_tokens;
    memcpy(out->iter_counts, s->iter_counts, sizeof out->iter_counts);
}
