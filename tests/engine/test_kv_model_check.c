/* Model check: random scheduler-like workloads (admission with prefix
 * hits, chunked prefill, decode with sync and async token arrival,
 * lookahead, preemption, finish, cache reset) run against the manager and
 * against a deliberately naive reference model written here from vLLM's
 * rules (arrays and linear scans, hashes recomputed from scratch). After
 * every operation the two must agree on every block's ref count and hash,
 * the exact free-queue order, every block table, hits, allocation results
 * and statistics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/kv_cache_manager.h"

enum { NB = 40, B = 4, MAXS = 8, MAXT = 160, MAXBL = MAXT / B + 4 };

/* ---------------------------------------------------------------- model */

typedef struct {
    int32_t ref;
    bool has;
    kv_block_hash h;
    int64_t stamp; /* insertion order into the cache: lookups take the oldest */
} mblock;

typedef struct {
    bool live;
    kv_seq *real;
    int32_t tok[MAXT + 8], ntok;
    int32_t table[MAXBL], ntable;
    int32_t ncached;
    int32_t nfrees;
    int32_t computed;
    bool running;
    bool salted;
} mseq;

typedef struct {
    mblock b[NB];
    int32_t q[NB], nq; /* free queue, head first */
    int64_t clock;
    mseq s[MAXS];
    kv_block_hash none;
    kv_prefix_stats st;
    kv_hash_mode mode;
} model;

static uint64_t rs;
static uint32_t rnd(uint32_t n) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs % n);
}

/* Hashes from scratch: block i = H(block i-1, tokens, salt on block 0). */
static int32_t m_hashes(const model *M, const mseq *s, kv_block_hash *out) {
    int32_t n = s->ntok / B;
    kv_extra_key salt = {KV_EXTRA_CACHE_SALT, "salt", 4};
    for (int32_t i = 0; i < n; i++)
        kv_hash_block(M->mode, i ? &out[i - 1] : &M->none, s->tok + i * B, B, &salt,
                      (i == 0 && s->salted) ? 1 : 0, &out[i]);
    return n;
}

static int32_t m_lookup(const model *M, const kv_block_hash *h) {
    int32_t best = -1;
    for (int32_t i = 1; i < NB; i++)
        if (M->b[i].has && kv_hash_eq(&M->b[i].h, h) && (best < 0 || M->b[i].stamp < M->b[best].stamp))
            best = i;
    return best;
}

static void q_remove(model *M, int32_t id) {
    for (int32_t i = 0; i < M->nq; i++)
        if (M->q[i] == id) {
            memmove(M->q + i, M->q + i + 1, sizeof *M->q * (size_t)(M->nq - i - 1));
            M->nq--;
            return;
        }
    fail_msg("model: block %d not in queue", id);
}

static int32_t m_get_hit(model *M, mseq *s, int32_t *ids) {
    kv_block_hash hs[MAXBL];
    int32_t nh = m_hashes(M, s, hs);
    int32_t maxb = s->ntok > 0 ? (s->ntok - 1) / B : 0;
    if (maxb > nh) maxb = nh;
    int32_t n = 0;
    while (n < maxb && (ids[n] = m_lookup(M, &hs[n])) >= 0) n++;
    if (s->nfrees) {
        M->st.preempted_requests++;
        M->st.preempted_queries += s->ntok;
        M->st.preempted_hits += n * B;
    } else {
        M->st.requests++;
        M->st.queries += s->ntok;
        M->st.hits += n * B;
    }
    return n;
}

static int m_allocate(model *M, mseq *s, int32_t computed, int32_t nnew, const int32_t *hit, int32_t nh,
                      int32_t look) {
    int32_t local = computed + nh * B;
    int32_t need = local + nnew + look;
    int32_t required = (need + B - 1) / B;
    int32_t newb = required - nh - s->ntable;
    if (newb < 0) newb = 0;
    int32_t evictable = 0;
    for (int32_t i = 0; i < nh; i++) evictable += M->b[hit[i]].ref == 0;
    if (newb + evictable > M->nq) return KV_ALLOC_NO_SPACE;
    for (int32_t i = 0; i < nh; i++) {
        if (M->b[hit[i]].ref == 0) q_remove(M, hit[i]);
        M->b[hit[i]].ref++;
        s->table[s->ntable++] = hit[i];
    }
    if (nh) s->ncached = nh;
    for (int32_t i = 0; i < newb; i++) {
        int32_t id = M->q[0];
        q_remove(M, id);
        M->b[id].has = false;
        M->b[id].ref = 1;
        s->table[s->ntable++] = id;
    }
    int32_t upto = local + nnew < s->ntok ? local + nnew : s->ntok;
    int32_t nfull = upto / B;
    kv_block_hash hs[MAXBL];
    m_hashes(M, s, hs);
    for (int32_t i = s->ncached; i < nfull; i++) {
        mblock *b = &M->b[s->table[i]];
        if (b->has) continue;
        b->has = true;
        b->h = hs[i];
        b->stamp = ++M->clock;
    }
    if (nfull > s->ncached) s->ncached = nfull;
    return KV_ALLOC_OK;
}

static void m_free(model *M, mseq *s) {
    int32_t order[MAXBL], n = 0;
    for (int32_t i = s->ntable - 1; i >= 0; i--) order[n++] = s->table[i];
    for (int32_t i = 0; i < n; i++) M->b[order[i]].ref--;
    int32_t fresh[MAXBL], nf = 0;
    for (int32_t i = 0; i < n; i++) {
        mblock *b = &M->b[order[i]];
        if (b->ref != 0) continue;
        if (b->has)
            M->q[M->nq++] = order[i];
        else
            fresh[nf++] = order[i];
    }
    memmove(M->q + nf, M->q, sizeof *M->q * (size_t)M->nq);
    memcpy(M->q, fresh, sizeof *fresh * (size_t)nf);
    M->nq += nf;
    s->ntable = 0;
    s->ncached = 0;
    s->nfrees++;
}

/* ------------------------------------------------------------ comparing */

static void compare(model *M, kv_manager *m) {
    kv_block_pool *p = kv_mgr_pool(m);
    for (int32_t i = 1; i < NB; i++) {
        assert_int_equal(kv_pool_ref_cnt(p, i), M->b[i].ref);
        kv_block_hash h;
        bool has = kv_pool_block_hash(p, i, &h);
        assert_int_equal(has, M->b[i].has);
        if (has) assert_true(kv_hash_eq(&h, &M->b[i].h));
    }
    int32_t q[NB];
    assert_int_equal(kv_pool_free_queue(p, q, NB), M->nq);
    assert_memory_equal(q, M->q, sizeof *q * (size_t)M->nq);
    for (int k = 0; k < MAXS; k++) {
        mseq *s = &M->s[k];
        if (!s->live) continue;
        int32_t n;
        const int32_t *t = kv_seq_block_ids(s->real, &n);
        assert_int_equal(n, s->ntable);
        if (n) assert_memory_equal(t, s->table, sizeof *t * (size_t)n);
        assert_int_equal(kv_seq_num_cached_blocks(s->real), s->ncached);
        assert_int_equal(kv_seq_num_tokens(s->real), s->ntok);
    }
}

static void append(model *M, kv_manager *m, mseq *s, int32_t tok) {
    (void)M;
    s->tok[s->ntok++] = tok;
    assert_int_equal(kv_seq_append_tokens(m, s->real, &tok, 1), VC_OK);
}

/* Prompts mix a few shared "families" of prefixes so hits are common. */
static void new_seq(model *M, kv_manager *m, mseq *s) {
    memset(s, 0, sizeof *s);
    s->live = true;
    s->salted = rnd(5) == 0;
    kv_seq_params sp = {.cache_salt = "salt", .cache_salt_len = 4};
    s->real = kv_seq_create(m, s->salted ? &sp : NULL);
    assert_non_null(s->real);
    int32_t fam = (int32_t)rnd(3);
    int32_t shared = (int32_t)rnd(30);
    int32_t len = 1 + (int32_t)rnd(60);
    if (shared > len) shared = len;
    for (int32_t i = 0; i < len; i++)
        s->tok[i] = i < shared ? fam * 1000 + i : 10000 + (int32_t)rnd(5000);
    s->ntok = len;
    /* append in random pieces */
    for (int32_t i = 0; i < len;) {
        int32_t k = 1 + (int32_t)rnd(9);
        if (k > len - i) k = len - i;
        assert_int_equal(kv_seq_append_tokens(m, s->real, s->tok + i, k), VC_OK);
        i += k;
    }
    (void)M;
}

static void preempt(model *M, kv_manager *m, mseq *s) {
    m_free(M, s);
    kv_mgr_free_blocks(m, s->real);
    s->running = false;
    s->computed = 0;
}

static void run_workload(kv_hash_mode mode, uint64_t seed, int steps) {
    rs = seed;
    kv_mgr_params p = kv_mgr_params_default();
    p.num_blocks = NB;
    p.block_size = B;
    p.hash_mode = mode;
    kv_manager *m = kv_mgr_create(&p);
    assert_non_null(m);
    static model M;
    memset(&M, 0, sizeof M);
    M.mode = mode;
    kv_hash_none(mode, NULL, 0, &M.none);
    for (int32_t i = 1; i < NB; i++) M.q[M.nq++] = i;
    int hits = 0, nospace = 0, preempts = 0;

    for (int step = 0; step < steps; step++) {
        mseq *s = &M.s[rnd(MAXS)];
        uint32_t op = rnd(20);
        if (!s->live) {
            new_seq(&M, m, s);
        } else if (!s->running) { /* admit with a lookup */
            int32_t mh[MAXBL];
            int32_t nh = m_get_hit(&M, s, mh);
            kv_hit h;
            kv_mgr_get_computed_blocks(m, s->real, &h);
            assert_int_equal(h.num_blocks, nh);
            if (nh) assert_memory_equal(h.block_ids, mh, sizeof *mh * (size_t)nh);
            hits += nh > 0;
            int32_t owed = s->ntok - nh * B;
            int32_t chunk = 1 + (int32_t)rnd((uint32_t)owed);
            int r = kv_mgr_allocate_slots(m, s->real, 0, chunk, &h, 0);
            assert_int_equal(r, m_allocate(&M, s, 0, chunk, mh, nh, 0));
            if (r == KV_ALLOC_OK) {
                s->running = true;
                s->computed = nh * B + chunk;
            } else {
                nospace++;
            }
        } else if (op < 2 || s->ntok >= MAXT) { /* finished or aborted */
            m_free(&M, s);
            kv_seq_release(m, s->real);
            s->live = false;
        } else if (op < 3) {
            preempt(&M, m, s);
            preempts++;
        } else {
            int32_t n, look = 0;
            if (s->computed < s->ntok) { /* more prefill */
                n = 1 + (int32_t)rnd((uint32_t)(s->ntok - s->computed));
            } else {
                /* decode: the token for position `computed` is appended
                 * first (sync) or a step later (async, computed may run one
                 * ahead of the tokens) */
                if (s->computed > s->ntok - 1 && (s->computed == s->ntok + 1 || rnd(2)))
                    append(&M, m, s, 20000 + (int32_t)rnd(50));
                n = 1;
                look = (int32_t)rnd(3);
            }
            int r = kv_mgr_allocate_slots(m, s->real, s->computed, n, NULL, look);
            assert_int_equal(r, m_allocate(&M, s, s->computed, n, NULL, 0, look));
            if (r == KV_ALLOC_OK) {
                s->computed += n;
            } else { /* preempt it (the scheduler would pick a victim) */
                preempt(&M, m, s);
                nospace++;
            }
        }
        if (rnd(200) == 0) {
            bool idle = M.nq == NB - 1;
            assert_int_equal(kv_mgr_reset_prefix_cache(m), idle);
            if (idle)
                for (int32_t i = 1; i < NB; i++) M.b[i].has = false;
        }
        compare(&M, m);
        if (step % 64 == 0) {
            assert_int_equal(kv_pool_check(kv_mgr_pool(m)), VC_OK);
            kv_prefix_stats st;
            kv_mgr_take_prefix_stats(m, &st);
            st.reset = false;
            assert_memory_equal(&st, &M.st, sizeof st);
            memset(&M.st, 0, sizeof M.st);
        }
    }
    /* The workload must have exercised the interesting paths. */
    assert_true(hits > steps / 50);
    assert_true(nospace > 0);
    assert_true(preempts > 0);
    for (int k = 0; k < MAXS; k++)
        if (M.s[k].live) kv_seq_release(m, M.s[k].real);
    assert_int_equal(kv_mgr_num_free_blocks(m), NB - 1);
    assert_int_equal(kv_pool_check(kv_mgr_pool(m)), VC_OK);
    kv_mgr_free(m);
}

static void test_model_sha256(void **st) {
    (void)st;
    for (uint64_t seed = 1; seed <= 6; seed++) run_workload(KV_HASH_SHA256, seed * 0x9e3779b97f4a7c15ull, 4000);
}

static void test_model_fast64(void **st) {
    (void)st;
    for (uint64_t seed = 1; seed <= 3; seed++) run_workload(KV_HASH_FAST64, seed * 0xdeadbeefcafef00dull, 4000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_sha256),
        cmocka_unit_test(test_model_fast64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
