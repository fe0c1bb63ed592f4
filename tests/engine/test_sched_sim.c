/* Scheduler batch invariance: the same random workload run under many
 * configurations (token budgets, max_num_seqs, tiny KV caches that force
 * preemption, long-prefill thresholds, FCFS and priority, prefix caching on
 * and off, sync and async scheduling, requests arriving over time) must give
 * every request exactly the tokens of a roomy reference run, while each step
 * respects the budget and max_num_seqs, the modelled KV cache reads back
 * what was written, and the pool ends full. */
#include "sched_sim.h"

#define N_REQ 24

typedef struct {
    int32_t prompt_len, max_tokens, min_tokens, prio;
    int32_t arrive_step; /* added before this step */
    int32_t shared;      /* prompt starts with a common prefix of this many tokens */
    bool eos;            /* scripted EOS after a few tokens */
} job;

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static void make_jobs(job *j, uint64_t seed) {
    rng_state = seed;
    for (int i = 0; i < N_REQ; i++) {
        j[i].prompt_len = 1 + (int32_t)rnd(i % 5 == 0 ? 300 : 60);
        j[i].max_tokens = 1 + (int32_t)rnd(40);
        j[i].min_tokens = (int32_t)rnd((uint32_t)j[i].max_tokens + 1) / 2;
        j[i].prio = (int32_t)rnd(4);
        j[i].arrive_step = (int32_t)rnd(30);
        j[i].shared = rnd(3) == 0 ? 64 : 0;
        j[i].eos = rnd(4) == 0;
    }
}

typedef struct {
    int32_t n_out[N_REQ];
    int32_t *out[N_REQ];
    ereq_status status[N_REQ];
    int64_t preemptions;
    bool aborted[N_REQ];
} result;

static const int32_t eos_script[] = {11, 12, 13, 2, 14, 15};

/* abort_seed != 0: abort random live requests now and then */
static void run_config(const job *jobs, const esched_params *p, bool async, uint64_t abort_seed, result *res) {
    memset(res->aborted, 0, sizeof res->aborted);
    uint64_t ab = abort_seed;
    sim *m = sim_new(p, async);
    int32_t added = 0;
    int32_t *prompt = malloc(sizeof *prompt * 400);
    for (int32_t step = 0; step < 5000; step++) {
        for (int i = 0; i < N_REQ; i++) {
            if (jobs[i].arrive_step != step) continue;
            for (int32_t t = 0; t < jobs[i].prompt_len; t++)
                prompt[t] = t < jobs[i].shared ? 100 + t : (int32_t)(sim_mix((uint64_t)i, (uint64_t)t) % 900) + 10;
            ereq_sampling sp = ereq_sampling_default();
            sp.max_tokens = jobs[i].max_tokens;
            sp.min_tokens = jobs[i].min_tokens;
            sp.eos_token_id = 2;
            if (jobs[i].eos) {
                m->script[m->n_reqs] = eos_script;
                m->script_len[m->n_reqs] = 6;
            }
            ereq *r = sim_add(m, prompt, jobs[i].prompt_len, &sp, jobs[i].prio, (double)i);
            assert_int_equal(r->id, i); /* jobs are added in index order per step */
            added++;
        }
        if (added == N_REQ && sim_all_finished(m)) break;
        if (abort_seed && added > 0) {
            ab = ab * 6364136223846793005ull + 1442695040888963407ull;
            if ((ab >> 60) == 0) { /* 1 in 16 steps */
                int32_t victim = (int32_t)((ab >> 33) % (uint64_t)added);
                if (esched_abort(m->s, victim) == 1) res->aborted[victim] = true;
            }
        }
        sim_step(m);
        esched_stats st;
        esched_get_stats(m->s, &st);
        assert_true(st.num_running <= p->max_num_seqs);
        if (p->max_num_seqs < N_REQ && st.num_running > 0) assert_true(m->max_items_seen <= p->max_num_seqs);
    }
    free(prompt);
    assert_int_equal(added, N_REQ);
    sim_run(m, 5000);
    for (int i = 0; i < N_REQ; i++) {
        ereq *r = m->reqs[i];
        res->n_out[i] = ereq_num_output(r);
        res->out[i] = malloc(sizeof(int32_t) * (size_t)(res->n_out[i] + 1));
        memcpy(res->out[i], r->tokens + r->num_prompt, sizeof(int32_t) * (size_t)res->n_out[i]);
        res->status[i] = r->status;
    }
    esched_stats st;
    esched_get_stats(m->s, &st);
    res->preemptions = st.num_preemptions_total;
    assert_int_equal(st.num_running + st.num_waiting, 0);
    sim_free(m);
}

static void free_result(result *r) {
    for (int i = 0; i < N_REQ; i++) free(r->out[i]);
}

/* jobs arrive by step index, so the per-step id order is index order only
 * when sorted; keep them sorted by arrival. */
static void sort_jobs(job *j) {
    for (int a = 1; a < N_REQ; a++)
        for (int b = a; b > 0 && j[b - 1].arrive_step > j[b].arrive_step; b--) {
            job t = j[b];
            j[b] = j[b - 1];
            j[b - 1] = t;
        }
}

static void test_batch_invariance(void **st) {
    (void)st;
    int64_t total_preemptions = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        job jobs[N_REQ];
        make_jobs(jobs, seed);
        sort_jobs(jobs);
        esched_params ref_p = sim_params(8192, 256, 512, 2000, 16);
        result ref;
        run_config(jobs, &ref_p, false, 0, &ref);
        for (int i = 0; i < N_REQ; i++) {
            /* every request ran to a proper end */
            assert_true(ref.status[i] == EREQ_FINISHED_LENGTH || ref.status[i] == EREQ_FINISHED_STOPPED);
            if (ref.status[i] == EREQ_FINISHED_LENGTH) assert_int_equal(ref.n_out[i], jobs[i].max_tokens);
        }
        struct {
            int32_t budget, seqs, blocks, B, thr;
            esched_policy pol;
            bool cache, chunked, async;
        } cfg[] = {
            {8192, 256, 2000, 16, 0, ESCHED_FCFS, true, true, true},
            {32, 4, 2000, 16, 0, ESCHED_FCFS, true, true, false},
            {64, 8, 40, 16, 0, ESCHED_FCFS, false, true, false}, /* tight KV: preemption */
            {64, 8, 40, 16, 0, ESCHED_FCFS, true, true, true},
            {100, 16, 45, 8, 17, ESCHED_PRIORITY, true, true, false},
            {100, 16, 45, 8, 17, ESCHED_PRIORITY, false, true, true},
            {512, 3, 30, 32, 0, ESCHED_FCFS, true, false, false}, /* no chunked prefill */
            {7, 2, 2000, 4, 3, ESCHED_PRIORITY, true, true, true},
        };
        for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
            esched_params p = sim_params(cfg[c].budget, cfg[c].seqs, 512, cfg[c].blocks, cfg[c].B);
            p.long_prefill_token_threshold = cfg[c].thr;
            p.policy = cfg[c].pol;
            p.enable_prefix_caching = cfg[c].cache;
            p.enable_chunked_prefill = cfg[c].chunked;
            result got;
            run_config(jobs, &p, cfg[c].async, 0, &got);
            for (int i = 0; i < N_REQ; i++) {
                if (got.n_out[i] != ref.n_out[i] || got.status[i] != ref.status[i] ||
                    memcmp(got.out[i], ref.out[i], sizeof(int32_t) * (size_t)ref.n_out[i]) != 0)
                    fail_msg("seed %llu config %zu: request %d differs (%d vs %d tokens, status %d vs %d)",
                             (unsigned long long)seed, c, i, got.n_out[i], ref.n_out[i], got.status[i],
                             ref.status[i]);
            }
            total_preemptions += got.preemptions;
            free_result(&got);
        }
        free_result(&ref);
    }
    /* the tight configurations really did preempt */
    assert_true(total_preemptions > 0);
}

/* Aborting some requests at random moments (waiting, prefilling, decoding,
 * preempted, with a step in flight) leaves the others' tokens untouched,
 * the aborted ones with a prefix of theirs, and the pool full. */
static void test_random_aborts(void **st) {
    (void)st;
    int32_t n_aborted = 0;
    for (uint64_t seed = 4; seed <= 6; seed++) {
        job jobs[N_REQ];
        make_jobs(jobs, seed);
        sort_jobs(jobs);
        esched_params ref_p = sim_params(8192, 256, 512, 2000, 16);
        result ref;
        run_config(jobs, &ref_p, false, 0, &ref);
        for (int a = 0; a < 2; a++) {
            esched_params p = sim_params(48, 6, 512, 40, 16);
            p.policy = a ? ESCHED_PRIORITY : ESCHED_FCFS;
            result got;
            run_config(jobs, &p, a == 1, seed * 977 + (uint64_t)a, &got);
            for (int i = 0; i < N_REQ; i++) {
                if (got.aborted[i]) {
                    n_aborted++;
                    assert_int_equal(got.status[i], EREQ_FINISHED_ABORTED);
                    assert_true(got.n_out[i] <= ref.n_out[i]);
                } else {
                    assert_int_equal(got.status[i], ref.status[i]);
                    assert_int_equal(got.n_out[i], ref.n_out[i]);
                }
                assert_memory_equal(got.out[i], ref.out[i], sizeof(int32_t) * (size_t)got.n_out[i]);
            }
            free_result(&got);
        }
        free_result(&ref);
    }
    assert_true(n_aborted > 3);
}

/* Stops by length only, everything queued at once, more requests than
 * seats: async scheduling plans exactly the steps of sync scheduling (same
 * requests, starts and token counts, step by step), so a device whose
 * kernels depend on the batch shape still gives async == sync. */
static void step_signatures(const esched_params *p, bool async, uint64_t *comp, int32_t *steps) {
    sim *m = sim_new(p, async);
    for (int i = 0; i < 40; i++) {
        ereq_sampling sp = ereq_sampling_default();
        sp.max_tokens = 1 + (int32_t)((i * 37) % 23);
        sp.ignore_eos = true;
        sim_add(m, NULL, 1 + (i * 53) % 200, &sp, 0, (double)i);
    }
    sim_run(m, 4000);
    assert_true(m->steps <= SIM_MAX_STEPS);
    memcpy(comp, m->comp, sizeof(uint64_t) * (size_t)m->steps);
    *steps = m->steps;
    sim_free(m);
}

static void test_async_same_steps(void **st) {
    (void)st;
    static uint64_t a[SIM_MAX_STEPS], b[SIM_MAX_STEPS];
    const int32_t budgets[] = {4096, 256, 64}, seqs[] = {8, 16, 3};
    for (int k = 0; k < 3; k++) {
        esched_params p = sim_params(budgets[k], seqs[k], 512, 2000, 16);
        int32_t na, nb;
        step_signatures(&p, false, a, &na);
        step_signatures(&p, true, b, &nb);
        /* async runs one extra, empty-handed step at most to flush */
        for (int32_t i = 0; i < na; i++)
            if (a[i] != b[i]) fail_msg("budget %d, %d seats: step %d differs (sync %d steps, async %d)", budgets[k],
                                       seqs[k], i, na, nb);
        assert_true(nb >= na && nb <= na + 1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_random_aborts),
        cmocka_unit_test(test_async_same_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
