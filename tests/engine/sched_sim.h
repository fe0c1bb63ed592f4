/* sched_sim — a fake model runner for scheduler tests (header-only).
 *
 * The "KV cache" is modelled: every slot of every block records which token
 * sits at which position. Executing an item writes its input tokens into
 * the slots its block table names, and sampling reads positions
 * [0, start + n) back through the block table, checking each slot holds the
 * request's own token at that position (so a wrong table, a bad prefix hit
 * or a lost preemption shows up), then derives the next token from a hash of
 * that whole prefix. Outputs therefore depend only on the prompt, never on
 * batching, chunking, preemption or async scheduling: batch invariance is
 * checkable by comparing runs.
 *
 * Async mode schedules step N+1 before updating step N; placeholder inputs
 * come from the runner's own record of each request's last sampled token
 * (the "device" copy).
 */
#ifndef TEST_SCHED_SIM_H
#define TEST_SCHED_SIM_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/sched.h"

#define SIM_MAX_REQS 256
#define SIM_VOCAB 1000
#define SIM_MAX_STEPS 8192

typedef struct {
    esched *s;
    esched_params p;
    int32_t num_slots;
    int32_t *slot_tok, *slot_pos; /* [num_blocks * B], -1 = never written */
    ereq *reqs[SIM_MAX_REQS];     /* by id */
    int32_t last_sampled[SIM_MAX_REQS];
    int32_t n_reqs;
    bool async;
    esched_output out[2]; /* current and in-flight (async) */
    int32_t *sampled[2];
    int32_t n_sampled[2];
    bool pending;         /* out[1] waits for its update */
    int32_t steps;
    esched_req_list fin;
    int32_t n_finished;
    /* optional scripted tokens: script[id][k] is output k of request id */
    const int32_t *script[SIM_MAX_REQS];
    int32_t script_len[SIM_MAX_REQS];
    int32_t max_items_seen;
    /* comp[k]: a hash of step k's items (request, start, tokens) in order */
    uint64_t comp[SIM_MAX_STEPS];
} sim;

static inline sim *sim_new(const esched_params *p, bool async) {
    sim *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->p = *p;
    m->async = async;
    m->s = esched_create(p);
    if (!m->s) fail_msg("esched_create: %s", vc_err_msg());
    kv_block_pool *pool = kv_mgr_pool(esched_kv(m->s));
    m->num_slots = kv_pool_num_blocks(pool) * kv_mgr_block_size(esched_kv(m->s));
    m->slot_tok = malloc(sizeof *m->slot_tok * (size_t)m->num_slots);
    m->slot_pos = malloc(sizeof *m->slot_pos * (size_t)m->num_slots);
    for (int32_t i = 0; i < m->num_slots; i++) m->slot_tok[i] = m->slot_pos[i] = -1;
    for (int i = 0; i < 2; i++) m->sampled[i] = malloc(sizeof(int32_t) * (size_t)p->max_num_seqs);
    return m;
}

static inline uint64_t sim_mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* prompt: tokens[i] = f(seed, i) unless given */
static inline ereq *sim_add(sim *m, const int32_t *prompt, int32_t n, const ereq_sampling *sp, int prio, double t) {
    int64_t id = m->n_reqs;
    assert_true(id < SIM_MAX_REQS);
    int32_t *buf = NULL;
    if (!prompt) {
        buf = malloc(sizeof *buf * (size_t)n);
        for (int32_t i = 0; i < n; i++) buf[i] = (int32_t)(sim_mix((uint64_t)id + 77, (uint64_t)i) % SIM_VOCAB);
        prompt = buf;
    }
    ereq_sampling d = ereq_sampling_default();
    ereq *r = ereq_create(id, prompt, n, sp ? sp : &d);
    free(buf);
    assert_non_null(r);
    r->priority = prio;
    r->arrival_time = t;
    if (esched_add_request(m->s, r) != VC_OK) fail_msg("add: %s", vc_err_msg());
    m->reqs[m->n_reqs++] = r;
    return r;
}

static inline int32_t sim_slot(const ereq *r, int32_t pos, int32_t B) {
    int32_t nb;
    const int32_t *tbl = kv_seq_block_ids(r->seq, &nb);
    assert_true(pos / B < nb);
    return tbl[pos / B] * B + pos % B;
}

/* Run one scheduled output: write KV, check it, sample. */
static inline void sim_execute(sim *m, const esched_output *o, int32_t *sampled, int32_t *n_sampled) {
    int32_t B = kv_mgr_block_size(esched_kv(m->s));
    int32_t total = 0, ns = 0;
    assert_true(o->total_tokens <= m->p.max_num_batched_tokens);
    assert_true(o->n_items <= m->p.max_num_seqs);
    if (o->n_items > m->max_items_seen) m->max_items_seen = o->n_items;
    if (m->steps - 1 < SIM_MAX_STEPS) {
        uint64_t c = 7;
        for (int32_t k = 0; k < o->n_items; k++)
            c = sim_mix(sim_mix(sim_mix(c, (uint64_t)o->items[k].req->id), (uint64_t)o->items[k].start),
                        (uint64_t)o->items[k].num_tokens);
        m->comp[m->steps - 1] = c;
    }
    for (int32_t k = 0; k < o->n_items; k++) {
        const esched_item *it = &o->items[k];
        ereq *r = it->req;
        assert_true(it->num_tokens > 0);
        for (int32_t j = 0; j < k; j++) assert_ptr_not_equal(o->items[j].req, r);
        total += it->num_tokens;
        if (ereq_is_finished(r)) fail_msg("request %lld scheduled after finishing", (long long)r->id);
        assert_int_equal(r->status, EREQ_RUNNING);
        /* inputs */
        int32_t known = it->num_tokens - it->num_placeholder_inputs;
        assert_true(it->num_placeholder_inputs <= 1);
        for (int32_t i = 0; i < it->num_tokens; i++) {
            int32_t pos = it->start + i;
            int32_t tok = i < known ? r->tokens[pos] : m->last_sampled[r->id];
            if (i < known) assert_true(pos < r->num_tokens);
            int32_t sl = sim_slot(r, pos, B);
            m->slot_tok[sl] = tok;
            m->slot_pos[sl] = pos;
        }
        if (!it->sample) continue;
        /* attention reads the whole prefix back through the block table */
        uint64_t h = 1469598103934665603ull;
        int32_t end = it->start + it->num_tokens;
        for (int32_t pos = 0; pos < end; pos++) {
            int32_t sl = sim_slot(r, pos, B);
            if (m->slot_pos[sl] != pos) fail_msg("req %lld pos %d: slot holds position %d", (long long)r->id, pos,
                                                 m->slot_pos[sl]);
            if (pos < r->num_tokens && m->slot_tok[sl] != r->tokens[pos])
                fail_msg("req %lld pos %d: slot token %d != %d", (long long)r->id, pos, m->slot_tok[sl],
                         r->tokens[pos]);
            h = sim_mix(h, (uint64_t)m->slot_tok[sl]);
        }
        int32_t k_out = end - r->num_prompt; /* index of the output this sample makes */
        int32_t tok;
        if (m->script[r->id] && k_out < m->script_len[r->id]) tok = m->script[r->id][k_out];
        else tok = 10 + (int32_t)(h % (SIM_VOCAB - 10)); /* ids < 10 reserved for EOS/stop tests */
        sampled[ns++] = tok;
        m->last_sampled[r->id] = tok;
    }
    assert_int_equal(total, o->total_tokens);
    *n_sampled = ns;
}

static inline void sim_update(sim *m, const esched_output *o, const int32_t *sampled, int32_t n) {
    if (esched_update(m->s, o, sampled, n, &m->fin) != VC_OK) fail_msg("update: %s", vc_err_msg());
    for (int32_t i = 0; i < m->fin.n; i++) {
        assert_true(ereq_is_finished(m->fin.reqs[i]));
        assert_null(m->fin.reqs[i]->seq);
    }
    m->n_finished += m->fin.n;
}

/* One engine step; returns the number of items scheduled. */
static inline int32_t sim_step(sim *m) {
    esched_output *o = &m->out[0];
    if (esched_schedule(m->s, o) != VC_OK) fail_msg("schedule: %s", vc_err_msg());
    m->steps++;
    esched_stats st;
    esched_get_stats(m->s, &st);
    assert_true(st.num_running <= m->p.max_num_seqs);
    int32_t n_items = o->n_items;
    sim_execute(m, o, m->sampled[0], &m->n_sampled[0]);
    if (!m->async) {
        sim_update(m, o, m->sampled[0], m->n_sampled[0]);
        return n_items;
    }
    if (m->pending) sim_update(m, &m->out[1], m->sampled[1], m->n_sampled[1]);
    /* the step just executed becomes the one in flight */
    esched_output t = m->out[1];
    m->out[1] = m->out[0];
    m->out[0] = t;
    int32_t *ts = m->sampled[1];
    m->sampled[1] = m->sampled[0];
    m->sampled[0] = ts;
    m->n_sampled[1] = m->n_sampled[0];
    m->pending = true;
    return n_items;
}

static inline bool sim_all_finished(const sim *m) {
    for (int32_t i = 0; i < m->n_reqs; i++)
        if (!ereq_is_finished(m->reqs[i])) return false;
    return true;
}

/* Step until every request finished (bounded); flushes the async pipeline. */
static inline void sim_run(sim *m, int32_t max_steps) {
    for (int32_t i = 0; i < max_steps && !sim_all_finished(m); i++) sim_step(m);
    if (!sim_all_finished(m)) fail_msg("requests still live after %d steps", max_steps);
    if (m->pending) {
        sim_update(m, &m->out[1], m->sampled[1], m->n_sampled[1]);
        m->pending = false;
    }
}

static inline void sim_check_pool_full(sim *m) {
    kv_manager *kv = esched_kv(m->s);
    if (kv_pool_check(kv_mgr_pool(kv)) != VC_OK) fail_msg("%s", vc_err_msg());
    assert_int_equal(kv_mgr_num_free_blocks(kv), kv_pool_num_blocks(kv_mgr_pool(kv)) - 1);
}

/* Frees everything; every request must be finished with nothing in flight. */
static inline void sim_free(sim *m) {
    if (m->pending) {
        sim_update(m, &m->out[1], m->sampled[1], m->n_sampled[1]);
        m->pending = false;
    }
    for (int32_t i = 0; i < m->n_reqs; i++) {
        if (!ereq_is_finished(m->reqs[i])) esched_abort(m->s, m->reqs[i]->id);
        assert_true(ereq_can_free(m->reqs[i]));
    }
    sim_check_pool_full(m);
    esched_free(m->s);
    for (int32_t i = 0; i < m->n_reqs; i++) ereq_free(m->reqs[i]);
    for (int i = 0; i < 2; i++) {
        esched_output_free(&m->out[i]);
        free(m->sampled[i]);
    }
    esched_req_list_free(&m->fin);
    free(m->slot_tok);
    free(m->slot_pos);
    free(m);
}

static inline esched_params sim_params(int32_t budget, int32_t seqs, int32_t max_len, int32_t blocks, int32_t B) {
    esched_params p = esched_params_default();
    p.max_num_batched_tokens = budget;
    p.max_num_seqs = seqs;
    p.max_model_len = max_len;
    p.num_blocks = blocks;
    p.block_size = B;
    return p;
}

#endif
