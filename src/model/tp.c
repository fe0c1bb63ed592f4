/* tp — tensor parallelism inside the model layer (Megatron-style, as vLLM).
 *
 * Rank r of W holds: query heads [r*h/W, ...) and KV heads [r*kvh/W, ...)
 * (Wq/Wk/Wv and their biases split by output rows, Wo by input columns),
 * FFN columns [r*ff/W, ...) (Wgate/Wup by rows, Wdown by columns), LM-head
 * rows [r*V/W, ...); norms and the embedding table are replicated. A layer
 * needs two all-reduces (after Wo and after Wdown) and the logits one
 * all-gather. Row-parallel biases are added by rank 0 only.
 *
 * Execution: one thread per rank. mdl_load returns rank 0; its group
 * (mdl_tp_group) owns ranks 1..W-1 and a thread each. mdl_tp_run hands
 * every thread the same job (a function + argument), runs rank 0 on the
 * caller's thread and waits for all — the caller sees one model. Ranks
 * meet only inside the collectives (runtime/comm.h), which every rank
 * issues in the same order because they run the same code on the same
 * batch.
 *
 * Sequence-parallel steps (big prefills; mdl_sp_*): the row-parallel
 * partial sums are reduce-scattered by rows, each rank norms its 1/W of
 * the rows, and an all-gather rebuilds the next GEMM's input: the bytes
 * of an all-reduce, 1/W of the norm work.
 *
 * Shards are views into the mmap where the split is along rows (zero
 * copy on the CPU); a column split copies each row's slice (quantized
 * weights: the slice must start and end on a block boundary).
 */
#include "model/model_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct mdl_tp_group {
    int world;
    mdl_model **ranks;  /* [world], ranks[0] = rank 0 (not owned) */
    rt_comm **comms;    /* [world] */
    pthread_t *threads; /* [world], [0] unused */
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    uint64_t job_seq;   /* incremented per job */
    int pending;        /* ranks 1.. still running the current job */
    bool stop;
    mdl_tp_fn fn;
    void *arg;
    mdl_kv *kv0;
    int *rcs;           /* [world] statuses of the current job */
    int n_started;      /* threads of ranks 1..n_started were created (joined by mdl_tp_group_stop) */
    char err[256];      /* first worker error message */
} mdl_tp_group;

typedef struct {
    mdl_tp_group *g;
    int rank;
} tp_worker_arg;

int mdl_tp_setup(mdl_model *m, int rank, int size) {
    const mdl_config *c = &m->cfg;
    m->tp_rank = rank;
    m->tp_size = size;
    if (size > 1) {
        /* KV heads: split when size divides them, else replicated (vLLM):
         * with size a multiple of kvh, rank r holds KV head r*kvh/size. */
        bool kv_ok = c->n_kv_heads % size == 0 || size % c->n_kv_heads == 0;
        if (c->n_heads % size || !kv_ok || c->intermediate % size || c->vocab % size)
            return vc_err_set(VC_ERR_UNSUPPORTED,
                              "tensor parallel size %d must divide the heads (%lld), FFN width (%lld) and vocab "
                              "(%lld), and divide or be a multiple of the KV heads (%lld)",
                              size, (long long)c->n_heads, (long long)c->intermediate, (long long)c->vocab,
                              (long long)c->n_kv_heads);
    }
    m->h_l = c->n_heads / size;
    m->kvh_l = c->n_kv_heads % size == 0 ? c->n_kv_heads / size : 1;
    m->ff_l = c->intermediate / size;
    m->vocab_l = c->vocab / size;
    return VC_OK;
}

int mdl_find_split_host(mdl_model *m, const char *canon, int ndim, const int64_t *shape, int split_dim,
                        bool required, rt_tensor *out) {
    int rc = mdl_find_host(m, canon, ndim, shape, required, out);
    if (rc < 0 || !out->data || m->tp_size <= 1 || split_dim < 0) return rc;
    int64_t W = m->tp_size, r = m->tp_rank, kvh = m->cfg.n_kv_heads;
    if (split_dim == 2 && kvh % W != 0) {
        /* K/V projection rows of a replicated KV head (W a multiple of kvh). */
        int64_t per = shape[0] / kvh;
        *out = rt_tensor_slice0(out, (r * kvh / W) * per, per);
        return VC_OK;
    }
    if (split_dim == 0 || split_dim == 2) {
        /* Output rows: a contiguous range of the file's rows. */
        int64_t n = shape[0] / W;
        *out = rt_tensor_slice0(out, r * n, n);
        return VC_OK;
    }
    return vc_err_set(VC_ERR_RUNTIME, "internal: '%s' split along dim %d is not a view", canon, split_dim);
}

int mdl_bind_split(mdl_model *m, rt_tensor *t, const char *canon, int ndim, const int64_t *shape, int split_dim,
                   bool required) {
    memset(t, 0, sizeof *t);
    if (m->tp_size <= 1 || split_dim < 0) return mdl_bind(m, t, canon, ndim, shape, required);
    rt_tensor host;
    int rc;
    if (split_dim != 1) {
        rc = mdl_find_split_host(m, canon, ndim, shape, split_dim, required, &host);
        if (rc < 0 || !host.data) return rc;
        return mdl_bind_host(m, t, &host, false);
    }
    rc = mdl_find_host(m, canon, ndim, shape, required, &host);
    if (rc < 0 || !host.data) return rc;
    int64_t W = m->tp_size, r = m->tp_rank;
    if (ndim != 2)
        return vc_err_set(VC_ERR_RUNTIME, "internal: bad split of '%s' (dim %d of %d)", canon, split_dim, ndim);
    /* Input columns: copy each row's [r*k, (r+1)*k) slice (whole blocks). */
    int64_t rows = shape[0], cols = shape[1], k = cols / W;
    const rt_dtype_traits *di = rt_dtype_info(host.dtype);
    if (k % di->block_elems)
        return vc_err_set(VC_ERR_UNSUPPORTED, "%s: %lld columns per rank do not split %s blocks of %d", canon,
                          (long long)k, di->name, di->block_elems);
    size_t rb = rt_dtype_row_bytes(host.dtype, k), off = rt_dtype_row_bytes(host.dtype, r * k);
    char *buf = malloc((size_t)rows * rb);
    if (!buf) return vc_err_set(VC_ERR_OOM, "out of memory splitting %s", canon);
    for (int64_t i = 0; i < rows; i++) memcpy(buf + (size_t)i * rb, (const char *)rt_tensor_row(&host, i) + off, rb);
    int64_t s2[2] = {rows, k};
    rt_tensor v = rt_tensor_make(buf, host.dtype, RT_DEV_CPU, 2, s2);
    rc = mdl_bind_host(m, t, &v, true);
    free(buf);
    return rc;
}

mdl_model *mdl_tp_rank_model(mdl_model *m0, int rank) { return m0->tp->ranks[rank]; }

int mdl_tp_all_reduce(mdl_model *m, rt_tensor *t) { return m->comm ? rt_comm_all_reduce_sum(m->comm, t) : VC_OK; }

static uint64_t g_sp_steps; /* sequence-parallel steps run (rank 0), for tests */

uint64_t mdl_sp_step_count(void) { return __atomic_load_n(&g_sp_steps, __ATOMIC_RELAXED); }

bool mdl_sp_plan(mdl_model *m, int64_t n, bool big, mdl_sp *sp) {
    memset(sp, 0, sizeof *sp);
    if (m->tp_size <= 1 || !m->comm || !m->sp_zero.data || n < 2) return false;
    const char *e = getenv("VLLM_TP_SP");
    bool force = e && !strcmp(e, "force");
    if ((e && !strcmp(e, "0")) || (!big && !force)) return false;
    int64_t W = m->tp_size, mr = (n + W - 1) / W;
    if (mr * W > m->max_batch) return false; /* the pad rows must fit the buffers */
    *sp = (mdl_sp){.n = n, .n_pad = mr * W, .m = mr, .r0 = mr * m->tp_rank};
    if (m->tp_rank == 0) __atomic_add_fetch(&g_sp_steps, 1, __ATOMIC_RELAXED);
    return true;
}

int mdl_sp_reduce(mdl_model *m, const mdl_sp *sp, rt_tensor *full) {
    if (sp->n_pad > sp->n) {
        rt_tensor pad = rt_tensor_slice0(full, sp->n, sp->n_pad - sp->n);
        rt_tensor z = rt_tensor_2d(m->sp_zero.data, full->dtype, full->device, pad.shape[0], pad.shape[1]);
        MDL_TRY(rt_tensor_copy_bytes(m->be, &pad, &z));
    }
    rt_tensor own = rt_tensor_slice0(full, sp->r0, sp->m);
    return rt_comm_reduce_scatter_sum(m->comm, full, &own);
}

int mdl_sp_gather(mdl_model *m, const mdl_sp *sp, rt_tensor *full, bool start) {
    rt_tensor own = rt_tensor_slice0(full, sp->r0, sp->m);
    return start ? rt_comm_all_gather_start(m->comm, &own, full, 0) : rt_comm_all_gather(m->comm, &own, full);
}

/* Every rank's sp_zero: (W - 1) rows of d f32 zeros on its device (the
 * most pad rows a step can have, in the widest dtype). */
static int sp_zero_alloc(mdl_model *m) {
    int64_t s[2] = {m->tp_size - 1, m->cfg.hidden};
    MDL_TRY(mdl_own_tensor(m, &m->sp_zero, RT_F32, 2, s));
    float *z = calloc((size_t)(s[0] * s[1]), sizeof *z);
    if (!z) return vc_err_set(VC_ERR_OOM, "out of memory");
    rt_tensor hz = rt_tensor_2d(z, RT_F32, RT_DEV_CPU, s[0], s[1]);
    int rc = rt_tensor_copy_bytes(m->be, &m->sp_zero, &hz);
    if (rc == 0) rc = rt_backend_sync(m->be);
    free(z);
    return rc;
}

int mdl_tp_gather_logits(mdl_model *m, int64_t L) {
    rt_tensor src = rt_tensor_slice0(&m->logits_l, 0, L);
    rt_tensor dst = rt_tensor_slice0(&m->logits, 0, m->tp_size * L);
    return rt_comm_all_gather(m->comm, &src, &dst);
}

static mdl_kv *rank_kv(mdl_kv *kv0, int r) { return kv0 ? (kv0->ranks ? kv0->ranks[r] : kv0) : NULL; }

static void *tp_worker(void *p) {
    tp_worker_arg *a = p;
    mdl_tp_group *g = a->g;
    int r = a->rank;
    free(a);
    uint64_t seen = 0;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && g->job_seq == seen) pthread_cond_wait(&g->cv_job, &g->mu);
        if (g->stop) break;
        seen = g->job_seq;
        mdl_tp_fn fn = g->fn;
        void *arg = g->arg;
        mdl_kv *kv = rank_kv(g->kv0, r);
        pthread_mutex_unlock(&g->mu);
        int rc = fn(g->ranks[r], kv, arg);
        pthread_mutex_lock(&g->mu);
        g->rcs[r] = rc;
        if (rc < 0 && !g->err[0]) snprintf(g->err, sizeof g->err, "TP rank %d: %s", r, vc_err_msg());
        if (--g->pending == 0) pthread_cond_signal(&g->cv_done);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int mdl_tp_run(mdl_model *m0, mdl_kv *kv0, mdl_tp_fn fn, void *arg) {
    mdl_tp_group *g = m0->tp;
    if (!g) return fn(m0, kv0, arg);
    pthread_mutex_lock(&g->mu);
    g->fn = fn;
    g->arg = arg;
    g->kv0 = kv0;
    g->err[0] = 0;
    g->pending = g->world - 1;
    g->job_seq++;
    pthread_cond_broadcast(&g->cv_job);
    pthread_mutex_unlock(&g->mu);
    int rc0 = fn(m0, kv0, arg);
    pthread_mutex_lock(&g->mu);
    while (g->pending > 0) pthread_cond_wait(&g->cv_done, &g->mu);
    int rc = rc0;
    for (int r = 1; r < g->world && rc == 0; r++)
        if (g->rcs[r] < 0) {
            rc = g->rcs[r];
            vc_err_set(rc, "%s", g->err);
        }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* VLLM_TP_SYM=1: the ranks' bf16 GEMM-input buffers xn16 (what the
 * sequence-parallel steps reduce-scatter into and all-gather in place)
 * move into symmetric buffers of the group (rt_comm_group_alloc_sym), so
 * that NCCL may use its symmetric kernels and, with VLLM_TP_NCCL_CTA=zero,
 * copy engines for the all-gather. Where that fails the step keeps its
 * own buffer (a warning). The first xn16 stays allocated (freed with the
 * model): an experiment's cost of max_batch x d bf16 per rank. */
/* VLLM_TP_SYM / VLLM_TP_SP_A2A: "1" on, "0" off; unset: on where the
 * ranks have bf16 GEMM-input buffers (xn16: CUDA) -- the configuration
 * that measured fastest for TP=2 prefill (docs/DISTRIBUTED.md, session 7). */
static bool env_default_on(const char *name, const mdl_model *m0) {
    const char *e = getenv(name);
    return e && *e ? !strcmp(e, "1") : m0->xn16.data != NULL;
}

static bool sym_xn(mdl_tp_group *g) {
    mdl_model *m0 = g->ranks[0];
    if (!env_default_on("VLLM_TP_SYM", m0) || !m0->xn16.data || g->world > 64) return false;
    if (!g->comms[0]->vt->group_alloc_sym && !getenv("VLLM_TP_SYM")) return false; /* default, not offered: quietly */
    /* the comm layer takes only 16-byte blocks in symmetric buffers (NCCL
     * summed odd bf16 blocks wrongly): one row's share must be whole units */
    if (m0->cfg.hidden % (8 * g->world)) {
        VC_WARN("tensor parallel: hidden %lld is not a multiple of %d: xn stays in ordinary memory",
                (long long)m0->cfg.hidden, 8 * g->world);
        return false;
    }
    void *ptrs[64];
    size_t bytes = rt_tensor_nbytes(&m0->xn16);
    if (rt_comm_group_alloc_sym(g->comms, g->world, bytes, ptrs) < 0) {
        VC_WARN("tensor parallel: no symmetric buffers (%s): xn stays in ordinary memory", vc_err_msg());
        return false;
    }
    for (int r = 0; r < g->world; r++) g->ranks[r]->xn16.data = ptrs[r];
    VC_INFO("tensor parallel: xn in symmetric buffers (%zu bytes per rank)", bytes);
    return true;
}

/* VLLM_TP_SP_A2A=1: every rank's receive buffer sp_recv [max_batch, d] for
 * the all-to-all of the sequence-parallel partial sums (arch_llama.c
 * sp_row_parallel), in the partials' dtype (bf16 where xn16 exists, else
 * f32); symmetric when xn is (sym). */
static int sp_recv_alloc(mdl_tp_group *g, bool sym) {
    if (!env_default_on("VLLM_TP_SP_A2A", g->ranks[0])) return VC_OK;
    if (!g->comms[0]->vt->all_to_all) {
        VC_WARN("tensor parallel: %s has no all-to-all: VLLM_TP_SP_A2A ignored", g->comms[0]->vt->name);
        return VC_OK;
    }
    mdl_model *m0 = g->ranks[0];
    rt_dtype dt = m0->xn16.data ? RT_BF16 : RT_F32;
    int64_t s[2] = {m0->max_batch, m0->cfg.hidden};
    void *ptrs[64];
    if (sym) {
        rt_tensor probe = rt_tensor_make(NULL, dt, m0->be->device, 2, s);
        if (rt_comm_group_alloc_sym(g->comms, g->world, rt_tensor_nbytes(&probe), ptrs) == 0) {
            for (int r = 0; r < g->world; r++) {
                g->ranks[r]->sp_recv = probe;
                g->ranks[r]->sp_recv.data = ptrs[r];
            }
            return VC_OK;
        }
        VC_WARN("tensor parallel: no symmetric all-to-all buffer (%s): ordinary memory", vc_err_msg());
    }
    for (int r = 0; r < g->world; r++) MDL_TRY(mdl_own_tensor(g->ranks[r], &g->ranks[r]->sp_recv, dt, 2, s));
    return VC_OK;
}

int mdl_tp_group_start(mdl_model *m0, const char *path, const mdl_params *p) {
    int W = p->tp_size;
    mdl_tp_group *g = calloc(1, sizeof *g);
    if (!g) return vc_err_set(VC_ERR_OOM, "out of memory");
    g->world = W;
    g->ranks = calloc((size_t)W, sizeof *g->ranks);
    g->comms = calloc((size_t)W, sizeof *g->comms);
    g->threads = calloc((size_t)W, sizeof *g->threads);
    g->rcs = calloc((size_t)W, sizeof *g->rcs);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv_job, NULL);
    pthread_cond_init(&g->cv_done, NULL);
    m0->tp = g;
    if (!g->ranks || !g->comms || !g->threads || !g->rcs) return vc_err_set(VC_ERR_OOM, "out of memory");
    g->ranks[0] = m0;
    for (int r = 1; r < W; r++) {
        if (!p->tp_backends[r]) return vc_err_set(VC_ERR_INVALID, "tensor parallel: rank %d has no backend", r);
        g->ranks[r] = mdl_load_rank(path, p->tp_backends[r], p, r, W);
        if (!g->ranks[r]) return VC_ERR_INVALID;
    }
    for (int r = 0; r < W; r++) MDL_TRY(sp_zero_alloc(g->ranks[r]));
    /* The default configuration on CUDA (symmetric xn: env_default_on)
     * wants NCCL's zero-CTA policy (copy engines), chosen when the
     * communicators are made: asked for as a preference, which the comm
     * layer honours where its NCCL has it (an explicit VLLM_TP_NCCL_CTA
     * wins). If the symmetric buffers then cannot be had, the group is
     * made again without it (zero-CTA over ordinary buffers is untested:
     * an all-to-all between a symmetric and an ordinary buffer hung). */
    rt_comm_opts copts = {.prefer_zero_cta = env_default_on("VLLM_TP_SYM", m0) && m0->xn16.data && W <= 64 &&
                                             m0->cfg.hidden % (8 * W) == 0};
    int rc = rt_comm_group_create_opts(p->tp_backends, W, &copts, g->comms);
    if (rc < 0) return rc;
    for (int r = 0; r < W; r++) g->ranks[r]->comm = g->comms[r];
    bool sym = sym_xn(g);
    if (!sym && copts.prefer_zero_cta) {
        rt_comm_group_free(g->comms, W);
        for (int r = 0; r < W; r++) g->comms[r] = NULL, g->ranks[r]->comm = NULL;
        MDL_TRY(rt_comm_group_create(p->tp_backends, W, g->comms));
        for (int r = 0; r < W; r++) g->ranks[r]->comm = g->comms[r];
    }
    const char *cta = getenv("VLLM_TP_NCCL_CTA");
    if (!sym && cta && !strcmp(cta, "zero"))
        VC_WARN("tensor parallel: VLLM_TP_NCCL_CTA=zero without symmetric buffers is untested (an all-to-all "
                "between a symmetric and an ordinary buffer hung under it): use it with VLLM_TP_SYM=1");
    MDL_TRY(sp_recv_alloc(g, sym));
    for (int r = 1; r < W; r++) {
        tp_worker_arg *a = malloc(sizeof *a);
        if (!a) return vc_err_set(VC_ERR_OOM, "out of memory");
        *a = (tp_worker_arg){.g = g, .rank = r};
        if (pthread_create(&g->threads[r], NULL, tp_worker, a) != 0) {
            free(a);
            return vc_err_set(VC_ERR_RUNTIME, "tensor parallel: cannot start the thread of rank %d", r);
        }
        g->n_started = r;
    }
    VC_INFO("tensor parallel: %d ranks (%s collectives), %lld/%lld heads and %lld KV heads per rank", W,
            g->comms[0]->vt->name, (long long)m0->h_l, (long long)m0->cfg.n_heads, (long long)m0->kvh_l);
    return VC_OK;
}

void mdl_tp_group_stop(mdl_model *m0) {
    mdl_tp_group *g = m0->tp;
    if (!g) return;
    m0->tp = NULL;
    if (g->threads && g->rcs) {
        pthread_mutex_lock(&g->mu);
        g->stop = true;
        pthread_cond_broadcast(&g->cv_job);
        pthread_mutex_unlock(&g->mu);
        /* (rcs[] cannot tell: a finished job overwrites it with the status) */
        for (int r = 1; r <= g->n_started; r++) pthread_join(g->threads[r], NULL);
    }
    if (g->comms && g->comms[0]) rt_comm_group_free(g->comms, g->world);
    for (int r = 1; g->ranks && r < g->world; r++) {
        if (g->ranks[r]) {
            g->ranks[r]->comm = NULL;
            mdl_free(g->ranks[r]);
        }
    }
    m0->comm = NULL;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv_job);
    pthread_cond_destroy(&g->cv_done);
    free(g->ranks);
    free(g->comms);
    free(g->threads);
    free(g->rcs);
    free(g);
}
