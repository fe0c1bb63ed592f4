/* runner_int — the runner's private state, shared by runner.c (staging a
 * step on the engine thread) and runner_queue.c (running staged steps: on
 * the caller's thread, or in order on the execution-queue worker).
 *
 * A step is staged into one of ERUN_SLOTS slots (step t uses slot t % 3).
 * Everything the step needs is copied into the slot at staging time, so the
 * executor never reads ereq fields the engine thread may be changing (token
 * arrays grow, block tables change, requests finish). The only inputs not
 * on the host at staging time are the tokens sampled by the previous step
 * (async scheduling placeholders): the slot lists where they go (fill_*),
 * staged as 0. Three slots suffice because the engine stages step t only
 * after it has waited for step t - 2: step t - 3's slot is then consumed,
 * and its tokens were read by step t - 2 when that started.
 *
 * Placeholders, two ways:
 *  - the device mirror (r->mirror, the default where the model can splice;
 *    VLLM_ASYNC_DEVICE_IDS=0 turns it off): a step's sampled ids stay on
 *    the device under a model ticket (sl->mt); the next step is enqueued
 *    with its placeholders spliced in on the device (mdl_splice) before
 *    those ids reach the host. The worker only enqueues; the engine thread
 *    collects the ids in erun_wait (sl->pending). A step sampled on the
 *    host reads the previous ids through mdl_collect and puts its own on
 *    the device (mdl_mirror_put).
 *  - host fill: the executor copies them from the previous slot's results
 *    when it starts the step (every forward returns its ids synchronously).
 */
#ifndef ERUN_RUNNER_INT_H
#define ERUN_RUNNER_INT_H

#include "engine/runner.h"

#include <pthread.h>
#include <stdbool.h>

#define ERUN_SLOTS 3

typedef struct {
    int64_t ticket; /* step number (1, 2, ...); 0 = never used */
    int32_t S, T;   /* requests, tokens */
    int32_t n_sample, n_plp;
    /* forward inputs */
    int32_t *ids, *pos, *slots, *rows; /* [T] (rows: sampling rows, then prompt-logprob rows) */
    int64_t *slots64;                  /* [T] kv_slot_mapping output */
    int32_t *qsl, *seq_lens;           /* [S+1], [S] */
    int32_t *bt;                       /* [S, M] */
    /* prompt logprobs, row j: request, predicted position, its token, k */
    const ereq **plp_req;              /* [T] */
    int32_t *plp_pos, *plp_next, *plp_k;
    /* sampling rows and their history (prompt + outputs, copied) */
    smp_row *srows;                    /* [S] */
    int32_t *hist;                     /* [hist_cap] */
    int64_t hist_cap;
    int64_t *hist_off;                 /* [S] */
    int32_t *hist_len;                 /* [S] */
    /* in-flight tokens: fill_src[i] = sampling row of the previous step whose
     * token goes to ids[fill_ids[i]] and, when >= 0, hist[fill_hist[i]] */
    int32_t n_fill;
    int32_t *fill_ids, *fill_src;      /* [S] */
    int64_t *fill_hist;                /* [S] */
    int32_t *fill_row;                 /* [S] this step's sampling row the token feeds */
    /* device mirror: the model ticket of the sampled ids (0: none) and
     * whether they still have to be collected into `tokens` */
    mdl_ticket mt;
    bool pending;
    /* results (valid once the step completed) */
    smp_batch_out out;                 /* points at the arrays below */
    int32_t *tokens, *ranks, *n_lp;    /* [S] */
    int32_t *lp_ids;                   /* [S, stride] */
    float *lp_vals;                    /* [S, stride] */
    int rc;                            /* 0 or the step's failure */
    char err[256];
} erun_slot;

/* Per-request sampler state, found by request id (open addressing). */
typedef struct {
    int64_t id; /* -1 empty, -2 deleted */
    smp_req *s;
    int64_t last_ticket; /* the last step that sampled it, and its row there */
    int32_t last_row;
} samp_slot;

struct erun_runner {
    mdl_model *m;
    mdl_kv *kv;
    erun_params p;
    int32_t max_blocks; /* M: block-table row length */
    int64_t vocab;
    float *logits;      /* [logits_cap, V], the executor's */
    int64_t logits_cap;
    erun_prompt_lp_fn plp_cb;
    void *plp_ctx;
    smp_batch *sampler; /* the executor's */
    /* Device sampling (runner_queue.c): on when the model can sample on its
     * device and VLLM_DEVICE_SAMPLING allows; the executor's scratch. */
    bool dev_sample;
    float *dfp;         /* [S, RT_SAMPLE_NF] */
    int32_t *dip;       /* [S, RT_SAMPLE_NI] */
    double *dus;        /* [S] */
    int32_t *dhist;     /* [dhist_cap] penalised rows' histories */
    int64_t dhist_cap;
    /* Device mirror (see the top): on, and the executor's scratch. */
    bool mirror;
    int32_t *prev_ids;  /* [S] the previous step's ids, for a host-sampled step's history */
    int32_t *drow_last; /* [S] per sampling row: its in-flight token's index in dhist, or -1 */
    int32_t *dsp_hist;  /* [S] per fill: the same, handed to the splice */
    samp_slot *samp;    /* the engine thread's */
    int64_t samp_cap, samp_used;
    erun_slot slots[ERUN_SLOTS];
    const smp_batch_out *last_out; /* erun_execute's */
    /* Steps: staged up to `staged`, completed up to `done` (under mu),
     * waited for by the engine up to `waited`. */
    int64_t staged, waited;
    bool worker_on;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t submitted, done; /* under mu */
    bool stop;               /* under mu */
};

/* Stage step t = r->staged + 1 from so into its slot (engine thread). */
int erun_stage(erun_runner *r, const esched_output *so, erun_slot **out);
/* Run a staged slot: fill in-flight tokens, forward, prompt logprobs,
 * sample, copy the results into the slot. Sets sl->rc (and sl->err). */
void erun_exec_slot(erun_runner *r, erun_slot *sl);
/* After the step ran (or was enqueued): its device-mirror ids into the
 * slot's tokens (waits for their copy). Engine thread. */
int erun_collect_slot(erun_runner *r, erun_slot *sl);

#endif
