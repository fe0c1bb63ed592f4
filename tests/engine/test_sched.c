/* Scheduler: step-by-step behaviour against vLLM's rules (token budget,
 * running first, chunked prefill, long-prefill threshold, FCFS order,
 * preemption victims, abort in every state, stop-rule order, prefix
 * caching counters, async placeholders, validation). Every test ends with
 * the KV pool back to full. */
#include "sched_sim.h"

/* ---- chunked prefill and budgets */

static void test_chunked_prefill_budgets(void **st) {
    (void)st;
    const int32_t budgets[] = {64, 100, 333, 1000, 4096};
    for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++) {
        int32_t budget = budgets[b];
        esched_params p = sim_params(budget, 4, 2048, 200, 16);
        sim *m = sim_new(&p, false);
        ereq_sampling sp = ereq_sampling_default();
        sp.max_tokens = 3;
        ereq *r = sim_add(m, NULL, 1000, &sp, 0, 0);
        int32_t done = 0, steps = 0;
        while (done < 1000) {
            int32_t before = r->num_computed;
            assert_int_equal(sim_step(m), 1);
            const esched_item *it = &m->out[0].items[0];
            int32_t want = 1000 - done < budget ? 1000 - done : budget;
            assert_int_equal(it->start, before);
            assert_int_equal(it->num_tokens, want);
            assert_int_equal(it->sample, done + want == 1000);
            done += want;
            steps++;
            assert_int_equal(r->num_computed, done);
        }
        assert_int_equal(steps, (1000 + budget - 1) / budget);
        assert_int_equal(ereq_num_output(r), 1);
        sim_run(m, 10);
        assert_int_equal(ereq_num_output(r), 3);
        assert_int_equal(r->status, EREQ_FINISHED_LENGTH);
        sim_free(m);
    }
}

/* vllm:iteration_tokens_total: tokens per step in vLLM's bounds. A
 * 20-token prompt at budget 8 runs 8, 8, 4 (three steps in le=8), then 2
 * decode steps of 1 token (le=1); an empty step is not counted. */
static void test_iteration_tokens(void **st) {
    (void)st;
    esched_params p = sim_params(8, 4, 2048, 200, 16);
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 3;
    sim_add(m, NULL, 20, &sp, 0, 0);
    sim_run(m, 20);
    assert_int_equal(sim_step(m), 0); /* nothing left: not a step with tokens */
    esched_stats s;
    esched_get_stats(m->s, &s);
    assert_int_equal(s.iter_steps, 5);
    assert_int_equal(s.iter_tokens, 22);
    assert_int_equal(s.iter_counts[0], 2);
    assert_int_equal(s.iter_counts[1], 3);
    for (int b = 2; b <= ESCHED_ITER_BUCKETS; b++) assert_int_equal(s.iter_counts[b], 0);
    assert_int_equal(ESCHED_ITER_LE[0], 1);
    assert_int_equal(ESCHED_ITER_LE[ESCHED_ITER_BUCKETS - 1], 16384);
    sim_free(m);
}

static void test_long_prefill_threshold(void **st) {
    (void)st;
    esched_params p = sim_params(512, 4, 2048, 200, 16);
    p.long_prefill_token_threshold = 100;
    sim *m = sim_new(&p, false);
    ereq *a = sim_add(m, NULL, 250, NULL, 0, 0);
    ereq *b = sim_add(m, NULL, 30, NULL, 0, 1);
    sim_step(m);
    /* both admitted, a capped at 100 */
    assert_int_equal(m->out[0].n_items, 2);
    assert_ptr_equal(m->out[0].items[0].req, a);
    assert_int_equal(m->out[0].items[0].num_tokens, 100);
    assert_int_equal(m->out[0].items[1].num_tokens, 30);
    sim_step(m);
    assert_int_equal(m->out[0].items[0].num_tokens, 100);
    assert_int_equal(m->out[0].items[1].num_tokens, 1); /* b decodes */
    sim_step(m);
    assert_int_equal(m->out[0].items[0].num_tokens, 50);
    assert_true(m->out[0].items[0].sample);
    (void)b;
    sim_run(m, 100);
    sim_free(m);
}

static void test_running_first(void **st) {
    (void)st;
    esched_params p = sim_params(64, 8, 2048, 200, 16);
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 50;
    ereq *a = sim_add(m, NULL, 10, &sp, 0, 0);
    sim_step(m); /* a prefilled */
    ereq *b = sim_add(m, NULL, 500, &sp, 0, 1);
    ereq *c = sim_add(m, NULL, 5, &sp, 0, 2);
    sim_step(m);
    const esched_output *o = &m->out[0];
    assert_int_equal(o->n_items, 2);
    assert_ptr_equal(o->items[0].req, a);
    assert_int_equal(o->items[0].num_tokens, 1);
    assert_ptr_equal(o->items[1].req, b);
    assert_int_equal(o->items[1].num_tokens, 63);
    assert_false(o->items[1].sample);
    assert_int_equal(o->total_tokens, 64);
    sim_step(m); /* running a, b first; the budget is gone before c */
    assert_int_equal(o->n_items, 2);
    assert_ptr_equal(o->items[1].req, b);
    assert_int_equal(c->status, EREQ_WAITING);
    sim_run(m, 200);
    sim_free(m);
}

static void test_no_chunked_prefill_waits(void **st) {
    (void)st;
    esched_params p = sim_params(300, 8, 300, 200, 16);
    p.enable_chunked_prefill = false;
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 4;
    ereq *a = sim_add(m, NULL, 200, &sp, 0, 0);
    ereq *b = sim_add(m, NULL, 150, &sp, 0, 1); /* does not fit next to a */
    ereq *c = sim_add(m, NULL, 50, &sp, 0, 2);
    sim_step(m);
    assert_int_equal(m->out[0].n_items, 1);
    assert_ptr_equal(m->out[0].items[0].req, a);
    assert_int_equal(b->status, EREQ_WAITING);
    assert_int_equal(c->status, EREQ_WAITING); /* FCFS: c waits behind b */
    sim_step(m);
    assert_int_equal(m->out[0].n_items, 3); /* a decodes 1, then b's 150 and c's 50 fit in 299 */
    assert_int_equal(m->out[0].items[1].num_tokens, 150);
    assert_int_equal(m->out[0].items[2].num_tokens, 50);
    sim_run(m, 50);
    sim_free(m);
    /* and without chunked prefill the budget must cover max_model_len */
    p.max_num_batched_tokens = 100;
    assert_null(esched_create(&p));
    assert_non_null(strstr(vc_err_msg(), "chunked prefill"));
}

static void test_fcfs_order_and_max_seqs(void **st) {
    (void)st;
    esched_params p = sim_params(1000, 2, 512, 200, 16);
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 3;
    ereq *r[5];
    for (int i = 0; i < 5; i++) r[i] = sim_add(m, NULL, 20 + i, &sp, 0, i);
    sim_step(m);
    assert_int_equal(m->out[0].n_items, 2);
    assert_ptr_equal(m->out[0].items[0].req, r[0]);
    assert_ptr_equal(m->out[0].items[1].req, r[1]);
    /* admission follows arrival: each request finishes before a later one starts */
    int32_t order[5], n = 0;
    while (!sim_all_finished(m)) {
        sim_step(m);
        for (int32_t k = 0; k < m->out[0].n_items; k++) {
            const esched_item *it = &m->out[0].items[k];
            if (it->start == 0) order[n++] = (int32_t)it->req->id;
        }
    }
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(order[i], 2 + i);
    sim_free(m);
}

/* ---- preemption */

static void test_preemption_fcfs_tail(void **st) {
    (void)st;
    /* 3 requests of 32 prompt tokens with B = 16 each hold 2 blocks; with 7
     * usable blocks the first decode needing a third block preempts. */
    esched_params p = sim_params(1000, 8, 256, 8, 16);
    p.enable_prefix_caching = false;
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 20;
    ereq *r[3];
    for (int i = 0; i < 3; i++) r[i] = sim_add(m, NULL, 32, &sp, 0, i);
    sim_step(m); /* all prefilled: 6 blocks */
    assert_int_equal(m->out[0].n_items, 3);
    sim_step(m); /* r0 takes the last block; r1 needs one: preempt r2 (the tail) */
    const esched_output *o = &m->out[0];
    assert_int_equal(o->n_preempted, 1);
    assert_ptr_equal(o->preempted[0], r[2]);
    assert_int_equal(r[2]->status, EREQ_PREEMPTED);
    assert_int_equal(r[2]->num_computed, 0);
    assert_int_equal(r[2]->num_preemptions, 1);
    assert_ptr_equal(esched_waiting_at(m->s, 0), r[2]);
    assert_int_equal(o->n_items, 2); /* r0 and r1; no admission in a preempting step */
    esched_stats stt;
    esched_get_stats(m->s, &stt);
    assert_int_equal(stt.num_preemptions_total, 1);
    assert_int_equal(stt.num_waiting, 1);
    sim_run(m, 500);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i]->status, EREQ_FINISHED_LENGTH);
        assert_int_equal(ereq_num_output(r[i]), 20);
    }
    sim_free(m);
}

static void test_preempt_self(void **st) {
    (void)st;
    /* the only running request cannot grow: it preempts itself and waits */
    esched_params p = sim_params(1000, 8, 256, 4, 16); /* 3 usable blocks */
    p.enable_prefix_caching = false;
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 40; /* 8 + 40 = 48 tokens = 3 blocks: admissible */
    ereq *a = sim_add(m, NULL, 8, &sp, 0, 0);
    ereq *b = sim_add(m, NULL, 8, &sp, 0, 1);
    sim_run(m, 500);
    assert_int_equal(ereq_num_output(a), 40);
    assert_int_equal(ereq_num_output(b), 40);
    assert_true(a->num_preemptions + b->num_preemptions > 0);
    sim_free(m);
}

static void test_priority_victim(void **st) {
    (void)st;
    esched_params p = sim_params(1000, 8, 256, 8, 16); /* 7 usable */
    p.enable_prefix_caching = false;
    p.policy = ESCHED_PRIORITY;
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 20;
    /* priorities: lower is more urgent; worst = highest priority value,
     * ties broken by the latest arrival */
    ereq *a = sim_add(m, NULL, 32, &sp, 1, 0.0);
    ereq *b = sim_add(m, NULL, 32, &sp, 5, 1.0);
    ereq *c = sim_add(m, NULL, 32, &sp, 5, 2.0);
    sim_step(m);
    /* waiting order was by priority then arrival */
    assert_ptr_equal(m->out[0].items[0].req, a);
    assert_ptr_equal(m->out[0].items[1].req, b);
    assert_ptr_equal(m->out[0].items[2].req, c);
    sim_step(m); /* a takes the free block, b needs one: victim c (prio 5, latest) */
    assert_int_equal(m->out[0].n_preempted, 1);
    assert_ptr_equal(m->out[0].preempted[0], c);
    sim_run(m, 500);
    sim_free(m);

    /* the victim may be a request scheduled earlier in the same step: its
     * tokens go back to the budget and its item is dropped */
    m = sim_new(&p, false);
    a = sim_add(m, NULL, 32, &sp, 9, 0.0); /* worst priority, runs first */
    b = sim_add(m, NULL, 32, &sp, 1, 1.0);
    c = sim_add(m, NULL, 32, &sp, 1, 2.0);
    sim_step(m);
    assert_ptr_equal(m->out[0].items[0].req, b); /* priority order */
    assert_ptr_equal(m->out[0].items[2].req, a);
    /* running order is b, c, a. step: b takes the last block, c needs one ->
     * victim a (priority 9), which was not scheduled yet. */
    sim_step(m);
    assert_int_equal(m->out[0].n_preempted, 1);
    assert_ptr_equal(m->out[0].preempted[0], a);
    sim_run(m, 500);
    for (int i = 0; i < 3; i++) assert_int_equal(ereq_num_output(m->reqs[i]), 20);
    sim_free(m);
}

static void test_priority_victim_already_scheduled(void **st) {
    (void)st;
    /* running order a (prio 0), x (prio 9), y (prio 0): a and x decode in
     * place, y needs a block -> victim x, scheduled earlier this step */
    esched_params p = sim_params(1000, 8, 256, 8, 16); /* 7 usable */
    p.enable_prefix_caching = false;
    p.policy = ESCHED_PRIORITY;
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 20;
    ereq *a = sim_add(m, NULL, 10, &sp, 0, 0.0); /* 1 block */
    sim_step(m);
    ereq *x = sim_add(m, NULL, 10, &sp, 9, 1.0); /* 1 block */
    sim_step(m);
    ereq *y = sim_add(m, NULL, 80, &sp, 0, 2.0); /* 5 blocks: pool full */
    sim_step(m);
    assert_int_equal(kv_mgr_num_free_blocks(esched_kv(m->s)), 0);
    assert_ptr_equal(esched_running_at(m->s, 1), x);
    assert_int_equal(y->num_tokens, 81);
    sim_step(m);
    const esched_output *o = &m->out[0];
    assert_int_equal(o->n_preempted, 1);
    assert_ptr_equal(o->preempted[0], x);
    assert_int_equal(o->n_items, 2);
    assert_ptr_equal(o->items[0].req, a);
    assert_ptr_equal(o->items[1].req, y);
    assert_int_equal(o->total_tokens, 2);
    assert_ptr_equal(esched_waiting_at(m->s, 0), x);
    sim_run(m, 500);
    for (int i = 0; i < 3; i++) assert_int_equal(ereq_num_output(m->reqs[i]), 20);
    sim_free(m);
}

/* ---- abort and finish */

static void test_abort_every_state(void **st) {
    (void)st;
    esched_params p = sim_params(64, 8, 512, 12, 16);
    p.enable_prefix_caching = false;
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 30;
    ereq *waiting = sim_add(m, NULL, 20, &sp, 0, 0);
    assert_int_equal(esched_abort(m->s, waiting->id), 1);
    assert_int_equal(waiting->status, EREQ_FINISHED_ABORTED);
    assert_null(waiting->seq);
    assert_int_equal(esched_abort(m->s, waiting->id), 0); /* twice: no-op */
    assert_int_equal(esched_abort(m->s, 12345), 0);       /* unknown */

    ereq *prefill = sim_add(m, NULL, 100, &sp, 0, 1); /* chunked over 2 steps */
    sim_step(m);
    assert_int_equal(m->out[0].n_finished, 1); /* the runner hears of `waiting` */
    assert_int_equal(m->out[0].finished_ids[0], waiting->id);
    assert_int_equal(prefill->num_computed, 64);
    assert_int_equal(esched_abort(m->s, prefill->id), 1);
    assert_null(prefill->seq);

    ereq *dec = sim_add(m, NULL, 16, &sp, 0, 2);
    ereq *tail = sim_add(m, NULL, 16, &sp, 0, 3);
    for (int i = 0; i < 3; i++) sim_step(m);
    assert_int_equal(dec->status, EREQ_RUNNING);
    assert_int_equal(esched_abort(m->s, dec->id), 1);
    assert_int_equal(dec->status, EREQ_FINISHED_ABORTED);

    (void)tail;
    sim_run(m, 100);
    sim_free(m);

    /* preempted (waiting again), then an error finish of a running one */
    p = sim_params(1000, 8, 256, 8, 16);
    p.enable_prefix_caching = false;
    m = sim_new(&p, false);
    sp.max_tokens = 20;
    ereq *r[3];
    for (int i = 0; i < 3; i++) r[i] = sim_add(m, NULL, 32, &sp, 0, i);
    sim_step(m);
    sim_step(m);
    assert_int_equal(r[2]->status, EREQ_PREEMPTED);
    assert_int_equal(esched_abort(m->s, r[2]->id), 1);
    assert_int_equal(r[2]->status, EREQ_FINISHED_ABORTED);
    assert_int_equal(esched_finish_request(m->s, r[1]->id, EREQ_RUNNING), VC_ERR_INVALID);
    assert_int_equal(esched_finish_request(m->s, r[1]->id, EREQ_FINISHED_ERROR), 1);
    assert_string_equal(ereq_finish_reason(r[1]), "error");
    assert_int_equal(esched_abort(m->s, r[0]->id), 1);
    esched_stats stt;
    esched_get_stats(m->s, &stt);
    assert_int_equal(stt.num_running + stt.num_waiting, 0);
    sim_check_pool_full(m);
    sim_free(m);
}

static void test_abort_in_flight_async(void **st) {
    (void)st;
    esched_params p = sim_params(256, 8, 512, 64, 16);
    sim *m = sim_new(&p, true);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 10;
    ereq *a = sim_add(m, NULL, 20, &sp, 0, 0);
    ereq *b = sim_add(m, NULL, 20, &sp, 0, 1);
    sim_step(m);
    sim_step(m); /* step 1 in flight, step 0 updated */
    assert_int_equal(a->num_inflight, 1);
    assert_int_equal(esched_abort(m->s, a->id), 1);
    assert_false(ereq_can_free(a)); /* a step that names it is in flight */
    int32_t na = a->num_tokens;
    sim_step(m); /* updates step 1: a's token is dropped */
    assert_int_equal(a->num_tokens, na);
    assert_true(ereq_can_free(a));
    sim_run(m, 50);
    assert_int_equal(ereq_num_output(b), 10);
    sim_free(m);
}

/* ---- stop rules */

static void stop_case(int32_t min_tokens, bool ignore_eos, const int32_t *script, int32_t n_script, int32_t max_tokens,
                      int32_t max_len, int32_t prompt, ereq_status want, int32_t want_out, int32_t want_stop_id) {
    esched_params p = sim_params(256, 4, max_len, 64, 16);
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.eos_token_id = 2;
    sp.ignore_eos = ignore_eos;
    sp.min_tokens = min_tokens;
    sp.max_tokens = max_tokens;
    sp.stop_token_ids[0] = 5;
    sp.stop_token_ids[1] = 7;
    sp.n_stop_token_ids = 2;
    m->script[0] = script;
    m->script_len[0] = n_script;
    ereq *r = sim_add(m, NULL, prompt, &sp, 0, 0);
    sim_run(m, 200);
    assert_int_equal(r->status, want);
    assert_int_equal(ereq_num_output(r), want_out);
    if (want_stop_id >= 0) {
        assert_true(r->stop_by_id);
        assert_int_equal(r->stop_reason_id, want_stop_id);
    } else {
        assert_false(r->stop_by_id);
    }
    sim_free(m);
}

static void test_stop_rules(void **st) {
    (void)st;
    const int32_t eos_first[] = {2, 11, 12, 2, 13};
    const int32_t stop_first[] = {7, 11, 5, 12};
    const int32_t plain[] = {11, 12, 13, 14, 15, 16, 17, 18};
    /* EOS */
    stop_case(0, false, eos_first, 5, 16, 512, 10, EREQ_FINISHED_STOPPED, 1, -1);
    /* min_tokens skips the early EOS; the later one stops */
    stop_case(2, false, eos_first, 5, 16, 512, 10, EREQ_FINISHED_STOPPED, 4, -1);
    /* ignore_eos */
    stop_case(0, true, eos_first, 5, 5, 512, 10, EREQ_FINISHED_LENGTH, 5, -1);
    /* stop token id, with its reason */
    stop_case(0, false, stop_first, 4, 16, 512, 10, EREQ_FINISHED_STOPPED, 1, 7);
    stop_case(1, false, stop_first, 4, 16, 512, 10, EREQ_FINISHED_STOPPED, 1, 7);
    stop_case(2, false, stop_first, 4, 16, 512, 10, EREQ_FINISHED_STOPPED, 3, 5);
    /* max_tokens */
    stop_case(0, false, plain, 8, 6, 512, 10, EREQ_FINISHED_LENGTH, 6, -1);
    /* max_model_len: 10 prompt + 5 outputs = 15 */
    stop_case(0, false, plain, 8, 100, 15, 10, EREQ_FINISHED_LENGTH, 5, -1);
    /* EOS on the max_tokens-th token counts as a stop, not length */
    const int32_t eos_last[] = {11, 12, 2};
    stop_case(0, false, eos_last, 3, 3, 512, 10, EREQ_FINISHED_STOPPED, 3, -1);
    /* min_tokens == max_tokens: an EOS in range is ignored until then */
    stop_case(3, false, eos_first, 5, 3, 512, 10, EREQ_FINISHED_LENGTH, 3, -1);
}

/* ---- prefix caching */

static void test_prefix_caching_shared_prefix(void **st) {
    (void)st;
    esched_params p = sim_params(4096, 8, 4096, 400, 16);
    sim *m = sim_new(&p, false);
    int32_t *pa = malloc(sizeof *pa * 1040), *pb = malloc(sizeof *pb * 1030);
    for (int i = 0; i < 1000; i++) pa[i] = pb[i] = (i * 37) % 900 + 10;
    for (int i = 1000; i < 1040; i++) pa[i] = 1;
    for (int i = 1000; i < 1030; i++) pb[i] = 3;
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 4;
    ereq *a = sim_add(m, pa, 1040, &sp, 0, 0);
    sim_run(m, 20);
    ereq *b = sim_add(m, pb, 1030, &sp, 0, 1);
    sim_step(m);
    /* 1000 shared tokens = 62 full blocks of 16 (992 tokens) */
    assert_int_equal(m->out[0].items[0].start, 992);
    assert_int_equal(m->out[0].items[0].num_tokens, 1030 - 992);
    assert_int_equal(b->num_cached_prompt, 992);
    assert_int_equal(a->num_cached_prompt, 0);
    sim_run(m, 20);
    esched_stats stt;
    esched_get_stats(m->s, &stt);
    assert_int_equal(stt.prefix_queries_total, 1040 + 1030);
    assert_int_equal(stt.prefix_hits_total, 992);
    assert_int_equal(ereq_num_output(b), 4);
    sim_free(m);
    free(pa);
    free(pb);
}

/* ---- async */

static void test_async_placeholders(void **st) {
    (void)st;
    esched_params p = sim_params(256, 8, 512, 64, 16);
    sim *m = sim_new(&p, true);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 5;
    ereq *r = sim_add(m, NULL, 20, &sp, 0, 0);
    sim_step(m); /* prefill in flight */
    assert_int_equal(r->num_output_placeholders, 1);
    assert_int_equal(r->num_computed, 20);
    assert_int_equal(r->num_tokens, 20);
    sim_step(m); /* decode of the unseen token scheduled, then prefill's token arrives */
    const esched_item *it = &m->out[1].items[0];
    assert_int_equal(it->start, 20);
    assert_int_equal(it->num_tokens, 1);
    assert_int_equal(it->num_placeholder_inputs, 1);
    assert_true(it->sample);
    assert_int_equal(r->num_tokens, 21);
    assert_int_equal(r->num_output_placeholders, 1);
    /* steps: the scheduler must not schedule past max_tokens */
    int32_t scheduled_samples = 2;
    while (!sim_all_finished(m)) {
        sim_step(m);
        for (int32_t k = 0; k < m->out[1].n_items; k++) scheduled_samples += m->out[1].items[k].sample;
    }
    assert_int_equal(ereq_num_output(r), 5);
    assert_int_equal(scheduled_samples, 5);
    sim_free(m);
}

/* ---- validation */

static void test_validation(void **st) {
    (void)st;
    esched_params p = sim_params(256, 8, 100, 8, 16); /* 7 usable blocks = 112 tokens */
    sim *m = sim_new(&p, false);
    int32_t prompt[200];
    for (int i = 0; i < 200; i++) prompt[i] = i;
    ereq_sampling sp = ereq_sampling_default();
    struct {
        int32_t n, max_tokens, min_tokens;
        const char *msg;
    } bad[] = {
        {100, 16, 0, "maximum model length"}, {99, 0, 0, "max_tokens"}, {10, 5, 6, "min_tokens"},
        {90, 20, 11, "min_tokens"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sp.max_tokens = bad[i].max_tokens;
        sp.min_tokens = bad[i].min_tokens;
        ereq *r = ereq_create(1000 + (int64_t)i, prompt, bad[i].n, &sp);
        assert_int_equal(esched_add_request(m->s, r), VC_ERR_INVALID);
        assert_non_null(strstr(vc_err_msg(), bad[i].msg));
        assert_null(r->seq);
        ereq_free(r);
    }
    /* duplicate id, double add */
    sp = ereq_sampling_default();
    ereq *a = sim_add(m, prompt, 10, &sp, 0, 0);
    ereq *dup = ereq_create(a->id, prompt, 10, &sp);
    assert_int_equal(esched_add_request(m->s, dup), VC_ERR_INVALID);
    ereq_free(dup);
    assert_int_equal(esched_add_request(m->s, a), VC_ERR_INVALID);
    /* the longest it can grow must fit in the KV cache */
    esched_params p2 = sim_params(256, 8, 1000, 8, 16);
    esched *s2 = esched_create(&p2);
    sp.max_tokens = 200;
    ereq *huge = ereq_create(1, prompt, 10, &sp);
    assert_int_equal(esched_add_request(s2, huge), VC_ERR_INVALID);
    assert_non_null(strstr(vc_err_msg(), "KV blocks"));
    ereq_free(huge);
    esched_free(s2);
    /* bad scheduler parameters */
    esched_params bp = sim_params(0, 8, 100, 8, 16);
    assert_null(esched_create(&bp));
    bp = sim_params(10, 8, 100, 0, 16);
    assert_null(esched_create(&bp));
    /* update with the wrong number of tokens */
    esched_output o = {0};
    assert_int_equal(esched_schedule(m->s, &o), VC_OK);
    int32_t toks[8], n = 0;
    sim_execute(m, &o, toks, &n);
    assert_int_equal(n, 1);
    int32_t good = toks[0];
    assert_int_equal(esched_update(m->s, &o, toks, 2, NULL), VC_ERR_INVALID);
    toks[0] = -1;
    assert_int_equal(esched_update(m->s, &o, toks, 1, NULL), VC_ERR_INVALID);
    assert_int_equal(a->num_tokens, 10); /* nothing changed */
    toks[0] = good;
    assert_int_equal(esched_update(m->s, &o, toks, 1, NULL), VC_OK);
    assert_int_equal(a->num_tokens, 11);
    esched_output_free(&o);
    sim_run(m, 50);
    sim_free(m);
}

/* Many live requests with scattered ids: lookup, duplicate refusal and
 * removal stay consistent through the id index. */
static void test_id_index(void **st) {
    (void)st;
    esched_params p = sim_params(256, 8, 512, 2000, 16);
    esched *s = esched_create(&p);
    assert_non_null(s);
    enum { N = 700 };
    ereq **r = calloc(N, sizeof *r);
    int32_t prompt[4] = {1, 2, 3, 4};
    ereq_sampling sp = ereq_sampling_default();
    for (int i = 0; i < N; i++) {
        r[i] = ereq_create((int64_t)i * 1000003 - 5000, prompt, 4, &sp);
        assert_int_equal(esched_add_request(s, r[i]), VC_OK);
    }
    assert_int_equal(esched_num_unfinished(s), N);
    for (int i = 0; i < N; i += 3) assert_int_equal(esched_abort(s, r[i]->id), 1);
    for (int i = 0; i < N; i++) {
        ereq *f = esched_find(s, r[i]->id);
        if (i % 3 == 0) assert_null(f);
        else assert_ptr_equal(f, r[i]);
        ereq *dup = ereq_create(r[i]->id, prompt, 4, &sp);
        assert_int_equal(esched_add_request(s, dup), i % 3 == 0 ? VC_OK : VC_ERR_INVALID);
        if (i % 3 == 0) {
            assert_int_equal(esched_abort(s, dup->id), 1);
        }
        ereq_free(dup);
    }
    assert_null(esched_find(s, 42));
    for (int i = 0; i < N; i++) esched_abort(s, r[i]->id);
    assert_int_equal(esched_num_unfinished(s), 0);
    assert_int_equal(kv_mgr_num_free_blocks(esched_kv(s)), 1999);
    esched_free(s);
    for (int i = 0; i < N; i++) ereq_free(r[i]);
    free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_prefill_budgets),
        cmocka_unit_test(test_iteration_tokens),
        cmocka_unit_test(test_long_prefill_threshold),
        cmocka_unit_test(test_running_first),
        cmocka_unit_test(test_no_chunked_prefill_waits),
        cmocka_unit_test(test_fcfs_order_and_max_seqs),
        cmocka_unit_test(test_preemption_fcfs_tail),
        cmocka_unit_test(test_preempt_self),
        cmocka_unit_test(test_priority_victim),
        cmocka_unit_test(test_priority_victim_already_scheduled),
        cmocka_unit_test(test_abort_every_state),
        cmocka_unit_test(test_abort_in_flight_async),
        cmocka_unit_test(test_stop_rules),
        cmocka_unit_test(test_prefix_caching_shared_prefix),
        cmocka_unit_test(test_async_placeholders),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_id_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
