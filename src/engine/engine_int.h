/* engine_int — the engine's private state, shared by engine.c (create,
 * requests, output deltas) and engine_step.c (the sync and async steps). */
#ifndef ENG_ENGINE_INT_H
#define ENG_ENGINE_INT_H

#include "engine/engine.h"
#include "engine/runner.h"

/* Per-request engine state, hung on ereq->user. */
typedef struct {
    eout_req *out;
    void *user;
    bool reported_final;
    int64_t parent_id; /* == the request's id unless a child of n > 1 */
    int32_t index;
    eng_times t;
    int32_t n_lp, lp_rank; /* logprobs of the latest sampled token */
    int32_t *lp_ids;
    float *lp_vals;
    /* prompt logprobs [num_prompt, plp_stride] */
    int32_t plp_stride;
    bool plp_sent;
    int32_t *plp_ids, *plp_ranks;
    float *plp_vals;
} eng_req;

/* A parent of n > 1 children (ids id + 1 .. id + n) with children left. */
typedef struct {
    int64_t id;
    int32_t n, n_left;
} eng_parent;

/* A step submitted to the runner's queue and not yet processed. */
typedef struct {
    esched_output *so;
    int64_t ticket;
} eng_inflight;

/* A request whose sampler state is released once step `after` is waited. */
typedef struct {
    int64_t id, after;
} eng_release;

struct eng_engine {
    eng_params p;
    rt_backend *be;      /* rank 0's backend (== bes[0]) */
    rt_backend **bes;    /* [tp] one backend per tensor-parallel rank */
    int tp;
    mdl_model *m;
    tok_tokenizer *tok;
    esched *sched;
    erun_runner *runner;
    int32_t num_blocks, max_model_len;
    int64_t next_id;
    int64_t warm_tokens, warm_seqs; /* the warm-up's budget forward (engine_warm.c); 0 when none ran */

    ereq **live; /* every request not yet freed */
    int32_t n_live, cap_live;
    int64_t *aborted; /* ids aborted since the last step */
    int32_t n_aborted, cap_aborted;
    eng_parent *parents;
    int32_t n_parents, cap_parents;

    esched_output so[2]; /* sync: so[0]; async: alternating, one per step in flight */
    int cur;
    eng_inflight fl[2]; /* async: oldest first */
    int32_t n_fl;
    int64_t last_ticket; /* the latest step submitted */
    eng_release *rel;
    int32_t n_rel, cap_rel;
    esched_req_list finished;
    int32_t *sampled;
    eng_output *outs;
    int32_t cap_outs;
};

/* Delta of r (if any) appended to e->outs; now stamps the token times. */
int eng_emit(eng_engine *e, ereq *r, double now, int32_t *n_outs);
/* Free requests reported final and out of flight. */
void eng_reap(eng_engine *e);
ereq *eng_find_live(eng_engine *e, int64_t id);

/* engine_warm.c: the start-up warm-up on an accelerator (e->m loaded,
 * e->max_model_len set, before the KV cache is sized). *rows_io: in the
 * most rows to warm (max_num_seqs), out the rows warmed (0: none), which
 * the decode graphs' warm-up then covers. Failures are the caller's to
 * report (eng_create logs them and goes on). */
int eng_warm_up(eng_engine *e, int64_t *rows_io);

#endif
