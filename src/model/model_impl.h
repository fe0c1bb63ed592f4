/* model_impl — private to src/model: the model struct shared by model.c
 * (loading, batches, sequences) and the architecture files (forward). */
#ifndef MDL_MODEL_IMPL_H
#define MDL_MODEL_IMPL_H

#include "model/model.h"
#include "model/weights.h"
#include "runtime/comm.h"
#include "runtime/ops.h"

#include <stdatomic.h>

typedef struct {
    rt_tensor attn_norm;           /* [d] f32 */
    rt_tensor wq, wk, wv, wo;      /* [h*hd,d] [kvh*hd,d] [kvh*hd,d] [d,h*hd] any dtype */
    rt_tensor bq, bk, bv, bo;      /* optional biases f32 (data NULL when absent) */
    rt_tensor q_norm, k_norm;      /* optional [hd] f32 (Qwen3 QK-norm) */
    rt_tensor ffn_norm;            /* [d] f32 (Gemma: pre_feedforward_layernorm) */
    rt_tensor post_attn_norm;      /* optional [d] f32 (Gemma sandwich norm on the attn output) */
    rt_tensor post_ffn_norm;       /* optional [d] f32 (Gemma sandwich norm on the FFN output) */
    rt_tensor w_gate, w_up, w_down; /* [ff,d] [ff,d] [d,ff] */
    /* Stacked copies (weights_fuse.c), data NULL when not built: on a
     * backend that holds weight copies anyway, wq/wk/wv (and w_gate/w_up)
     * are row views of one allocation, so one matmul computes all three. */
    rt_tensor wqkv;                /* [h*hd + 2*kvh*hd, d] */
    rt_tensor bqkv;                /* [h*hd + 2*kvh*hd] f32 when bq, bk, bv all exist */
    rt_tensor w_gu;                /* [2*ff, d] gate rows then up rows */
} mdl_layer;

typedef struct mdl_arch_impl mdl_arch_impl;

/* One resident ticket of the device mirror (model_mirror.c). The enqueuing
 * thread writes a slot only when claiming it for a new ticket, which needs
 * the slot's previous ticket collected; mdl_collect (any thread) reads it
 * and sets `collected` last. */
#define MDL_MIRROR 2
typedef struct {
    rt_tensor ids;          /* [B] i32 on the device: the step's sampled ids */
    int32_t *host;          /* [B] their host copy (rt_backend_host_alloc: pinned) */
    void *ev;               /* recorded behind the host copy */
    mdl_ticket ticket;      /* 0: free */
    int32_t n;              /* ids of the step */
    bool on_device;         /* `ids` holds them (false: computed on the host, TP) */
    bool queued;            /* the host copy was queued: collect waits for ev */
    atomic_bool collected;  /* a wait observed the copy (or there was none) */
    int64_t trace_T;        /* VLLM_STEP_TRACE: the step's tokens and host times (s) at */
    double trace_t[3];      /* enqueue start, forward queued, ids queued */
    char trace_ops[192];    /* the host time of the step's ops (rt_op_trace_take, taken on the
                               thread that queued them, printed at the collect) */
} mdl_mirror;

struct mdl_model {
    mdl_config cfg;
    rt_backend *be;
    mdl_wsrc *src;
    const mdl_arch_impl *arch;
    int64_t max_batch;
    bool upcast_weights;
    rt_dtype kv_dtype; /* KV cache elements: RT_F32, RT_F16 or RT_BF16 */

    rt_tensor tok_embd;   /* [V,d] any dtype */
    rt_tensor out_norm;   /* [d] f32 */
    rt_tensor output;     /* [V,d] (== tok_embd when tied) */
    rt_tensor inv_freq;   /* [rot_dim/2] f32, rope scaling folded in */
    rt_tensor inv_freq_swa; /* [rot_dim/2] f32 for sliding layers when cfg.rope_theta_swa > 0
                               (Gemma 3: local base, unscaled), else data NULL */
    float embed_scale;    /* token embeddings are multiplied by this (0 = not at all) */
    mdl_layer *layers;

    void *host_bufs;      /* chain of host buffers kept until mdl_free (repacked weights) */
    /* Device allocations owned by the model (converted weights, buffers). */
    void **owned;
    int n_owned, cap_owned;

    /* Activation buffers for max_batch tokens. */
    rt_tensor x, xb;               /* [B,d] */
    rt_tensor q, k, v, att;        /* [B,h*hd] [B,kvh*hd] [B,kvh*hd] [B,h*hd] */
    rt_tensor gate, up;            /* [B,ff] */
    rt_tensor qkv, gu;             /* [B,h*hd+2*kvh*hd] [B,2*ff]: outputs of the stacked
                                      matmuls (weights_fuse.c; data NULL when unused) */
    rt_dtype act_w;                /* layer 0's QKV weight dtype: what rt_backend_act_dtype is asked about */
    rt_tensor xn16, gate16;        /* [B,d] [B,ff] bf16: matmul inputs (normed rows, GLU
                                      output) for steps the backend runs on bf16
                                      activations (rt_backend_act_dtype); else NULL */
    /* Batch metadata on the device (mdl_batch copied in). */
    rt_tensor ids, pos, slots;     /* [B] i32 */
    rt_tensor qsl, seq_lens;       /* [B+1], [B] i32 */
    rt_tensor qsl_t;               /* [B+1] i32: qsl of the step's sequences after
                                      its decode prefix, rebased to 0 (att_dec) */
    int64_t att_dec;               /* sequences of the step's decode prefix (one query
                                      each) when prompt rows follow them, else 0: the
                                      attention runs in two calls (mdl_paged_attention) */
    bool att_split;                /* VLLM_ATTN_SPLIT (default 1; 0: one call per layer) */
    rt_tensor logit_rows;          /* [B] i32 */
    /* The last layer on the logit rows only (arch last_rows): past its KV
     * store, a step's other rows feed nothing but the cache, so where every
     * logit row is the last row of its own sequence and they are few (a
     * prompt's last row), that layer's attention, Wo, norm and MLP run on
     * those rows alone: one query per sequence (decode-style) over the
     * sequences' block-table rows (bt_p), qsl_p = 0 .. L, sl_p their
     * lengths. last_rows = L
     * for the step, else 0; only for L <= last_rows_max: any L by default
     * (VLLM_LAST_ROWS=1: a lone logit row; 0: never). A row count's first
     * step holds the host in its new GEMM shapes' first calls (CUDA's lazy
     * kernel loading, cuBLAS's choice): the engine's warm-up runs every row
     * count up to max_num_seqs (engine.c warm_up_rows; without it
     * concurrency-64 serving's mean TTFT was 64-75 vs 52-55 ms, sessions
     * 22-23). */
    rt_tensor qsl_p, sl_p;         /* [B+1], [B] i32 */
    rt_tensor bt_p;                /* [bt_p_cap] i32, grown on demand */
    int64_t bt_p_cap;
    int64_t last_rows, last_rows_max;
    /* The device mirror of sampled ids (model_mirror.c): ticket t's ids
     * live in mirror[t % MDL_MIRROR] (rank 0 only). */
    mdl_mirror mirror[MDL_MIRROR];
    mdl_ticket mirror_next;        /* the last ticket handed out (0: none) */
    const mdl_splice *splice;      /* the step's splice, set while it is enqueued */
    rt_tensor splice_dev;          /* [4, B] i32: ids rows, their sources, hist rows, their sources */
    int32_t *splice_host;          /* [2, B]: the hist entries, compacted */
    /* Device sampling (mdl_forward_batch_sample): rt_sample's inputs. */
    rt_tensor samp_f, samp_i;      /* [B, RT_SAMPLE_NF] f32, [B, RT_SAMPLE_NI] i32 */
    rt_tensor samp_hist;           /* [samp_hist_cap] i32, grown on demand */
    int64_t samp_hist_cap;
    rt_tensor samp_cnt;            /* [samp_cnt_rows, V] i32 penalty counts, kept all zero */
    int64_t samp_cnt_rows;
    rt_tensor block_tables;        /* [bt_cap] i32, grown on demand */
    int64_t bt_cap;
    rt_tensor logits;              /* [rows,V], grown on demand ([tp, rows, V/tp] under TP) */
    int64_t logits_rows;
    /* Decode steps recorded as backend graphs (model_graph.c; tp_size 1). */
    struct mdl_graph_entry *graphs;
    int n_graphs;
    int graphs_on;                 /* 0 not decided yet, 1 eager only, 2 graphs */
    int32_t *pad_host;             /* padded step metadata (host) */
    int64_t pad_cap;

    /* Tensor parallelism (tp.c). Rank tp_rank of tp_size holds heads
     * [r*h_l, (r+1)*h_l) (and likewise KV heads), FFN columns
     * [r*ff_l, ...) and vocab rows [r*vocab_l, ...) of the LM head and of
     * the embedding table (vocab-parallel, model_embed.c). tp_size 1: the
     * *_l equal the config's. */
    int tp_rank, tp_size;
    int64_t h_l, kvh_l, ff_l, vocab_l;
    rt_comm *comm;                 /* NULL when tp_size == 1 */
    rt_tensor logits_l;            /* [rows, vocab_l] this rank's LM-head output (TP) */
    rt_tensor sp_zero;             /* [tp_size - 1, d] f32 zeros: pad rows of sequence-parallel steps */
    rt_tensor sp_recv;             /* [B, d] partial sums received by the all-to-all (VLLM_TP_SP_A2A=1) */
    struct mdl_tp_group *tp;       /* rank 0 of a TP group: the other ranks and their threads */
};

struct mdl_kv {
    mdl_model *m;
    int32_t num_blocks, block_size;
    rt_tensor *k, *v;  /* per layer [num_blocks, B, kvh_l, hd] of m->kv_dtype */
    mdl_kv **ranks;    /* TP rank 0: ranks[r] is rank r's cache (ranks[0] == this) */
};

struct mdl_seq {
    mdl_model *m;
    mdl_kv *kv;
    int64_t max_ctx, len;
    int32_t *block_table; /* identity 0..nb-1 */
    int32_t nb;
};

struct mdl_arch_impl {
    const char *family;
    /* Bind weights (m->cfg filled, m->src open). */
    int (*load)(mdl_model *m);
    /* Forward the batch whose metadata is on the device (T tokens, S
     * sequences, max_blocks per block-table row); writes logits of the
     * n_logits rows listed in m->logit_rows into m->logits. */
    int (*forward)(mdl_model *m, mdl_kv *kv, int64_t T, int64_t S, int64_t max_blocks, int64_t n_logits);
    /* forward runs its last layer past the KV store on the logit rows only
     * when m->last_rows > 0 (model.c decides per step) */
    bool last_rows;
};

/* Device buffers of a step (model.c): grown on demand; uploads are queued. */
int mdl_ensure_logits(mdl_model *m, int64_t rows);
int mdl_ensure_block_tables(mdl_model *m, int64_t n);
int mdl_upload_i32(mdl_model *m, const rt_tensor *dst, const int32_t *src, int64_t n);
/* Rows [0, L) of m->logits to the host: logits [L, V] (may be NULL when
 * only ids are wanted), and under TP with ids != NULL their argmax [L]
 * computed on the host (one rank reduces on the device: mdl_reduce_ids). */
int mdl_fetch_logits(mdl_model *m, int64_t L, float *logits, int32_t *ids);
/* Validate the batch, then run its forward pass (a decode graph when it
 * can), splicing m->splice into the ids: logits of the n_logits rows are
 * left in m->logits on the device. */
int mdl_forward_step(mdl_model *m, mdl_kv *kv, const mdl_batch *b);
/* Sample rows [0, L) of m->logits on the device into dst [L] (sa's
 * parameters; the history patched by m->splice's hist entries). */
int mdl_sample_rows(mdl_model *m, int64_t L, rt_tensor *dst, const mdl_sample_args *sa);

/* model_mirror.c: the mirror's buffers (rank 0), and the splice of the
 * previous ticket's device ids into this step's ids [T] / sampler history
 * (no-ops without m->splice). */
int mdl_mirror_init(mdl_model *m);
void mdl_mirror_free(mdl_model *m);
int mdl_splice_ids(mdl_model *m, int64_t T);
int mdl_splice_hist(mdl_model *m, rt_tensor *hist);

/* Decode steps as graphs (model_graph.c). mdl_graph_step returns true when
 * it ran the (validated) batch's forward pass itself (logits left in
 * m->logits, m->splice applied), with the status in *rc; false: run it
 * eagerly. */
bool mdl_graph_step(mdl_model *m, mdl_kv *kv, const mdl_batch *b, int *rc);
void mdl_graph_drop_kv(mdl_model *m, const mdl_kv *kv);
void mdl_graph_free_all(mdl_model *m);

/* Bind a weight by canonical name with the expected shape; required=false
 * leaves t->data NULL when absent. Small (1-D) tensors are converted to f32. */
int mdl_bind(mdl_model *m, rt_tensor *t, const char *canon, int ndim, const int64_t *shape,
             bool required);

/* mdl_bind's first half: the host (mmap) view of a weight with its shape
 * checked; data NULL when absent and not required. */
int mdl_find_host(mdl_model *m, const char *canon, int ndim, const int64_t *shape, bool required,
                  rt_tensor *out);
/* mdl_bind's second half: place a host view of a weight (shape already
 * checked) on the model's device; temp: the host memory is a scratch copy
 * that must not be referenced after the call. */
int mdl_bind_host(mdl_model *m, rt_tensor *t, const rt_tensor *host, bool temp);

/* Load one TP rank (mdl_load = rank 0 of size tp + the group). */
mdl_model *mdl_load_rank(const char *path, rt_backend *be, const mdl_params *p, int rank, int size);

/* Views of one forward step over the model's buffers, shared by the
 * architecture files: the batch metadata for T tokens and S sequences,
 * the activations, and their per-head views q3/att3 [T, h, hd],
 * k3/v3 [T, kvh, hd], q2 [T*h, hd], k2 [T*kvh, hd] (this rank's heads). */
typedef struct {
    rt_tensor ids, pos, slots, qsl, seq_lens, bt;
    int64_t dec_S;  /* the decode prefix's sequences (= rows) when the step splits its
                       attention (m->att_dec), else 0 */
    rt_tensor qsl_t; /* [S - dec_S + 1]: the rest's qsl, rebased (dec_S > 0) */
    rt_tensor x, xb, q, k, v, att, gate, up;
    rt_tensor q3, k3, v3, att3, q2, k2;
} mdl_step_views;
void mdl_step_views_make(mdl_model *m, int64_t n, int64_t S, int64_t max_blocks, mdl_step_views *sv);
/* PAGED_ATTENTION of one layer over the step: sv->att3 = attention of
 * sv->q3 over the layer's cache. A step whose first sequences decode (one
 * query each) and whose others bring prompt rows attends in two calls, the
 * decode prefix and the rest, as vLLM's attention backends split decodes
 * from prefills: each call then gets the backend's kernel for its kind
 * (one call would hand the decode rows to the prompt kernel, whose query
 * tiles then walk one decode sequence after the other). Same math per row. */
int mdl_paged_attention(mdl_model *m, const mdl_step_views *sv, const rt_tensor *k_cache, const rt_tensor *v_cache,
                        float scale, float softcap, int32_t window);
/* The step's tail: gather the n_logits rows, final RMSNorm (weight offset
 * w_off), LM head into m->logits (under TP: this rank's vocab rows, then
 * the all-gather). */
int mdl_logits_head(mdl_model *m, const mdl_step_views *sv, int64_t n_logits, float eps, float w_off);
/* The same, with the last layer's residual add still to do: logits of the
 * rows of x + res. When few of the step's n rows need logits (a prefill),
 * only those rows are added (gathered first: a 2048-token prefill of a
 * d = 4096 model skips a 100 MB add); otherwise x += res over all rows.
 * x is left unspecified either way. */
int mdl_logits_head_res(mdl_model *m, const mdl_step_views *sv, int64_t n, int64_t n_logits, const rt_tensor *res,
                        float eps, float w_off);
/* The last layer past its KV store on the step's L = m->last_rows logit
 * rows only (see last_rows above), for an arch's forward to call after
 * the layer's KV store: q of those rows (sv->q3: f32 or the bf16 chain's)
 * gathered (f32) into the att buffer, the residual rows (sv->x: f32, or a
 * bf16 residual stream's view of x's buffer) gathered into x's first L
 * rows as f32 (through xb), then *sv made over L rows with one query per
 * logit sequence (qsl_p, sl_p, bt_p) and the attention output in q's
 * buffer (f32, the decode kernels' rows). The forward then runs the rest
 * of the layer over sv's L rows and ends with mdl_logits_head_first. */
int mdl_last_rows_views(mdl_model *m, mdl_step_views *sv, int64_t n, int64_t max_blocks);
/* The same tail for a step whose last layer ran on the logit rows only
 * (m->last_rows): those rows are the first n_logits of sv->x and res (NULL:
 * x holds the whole residual stream already), in logit-row order. */
/* Steps whose last layer ran on the logit rows only (process-wide):
 * tests check that the path they mean to cover ran. */
uint64_t mdl_last_rows_count(void);
int mdl_logits_head_first(mdl_model *m, const mdl_step_views *sv, int64_t n_logits, const rt_tensor *res, float eps,
                          float w_off);

#define MDL_TRY(x)               \
    do {                         \
        int rc_ = (x);           \
        if (rc_ < 0) return rc_; \
    } while (0)

/* tp.c — tensor parallelism inside the model layer. */
mdl_model *mdl_tp_rank_model(mdl_model *m0, int rank);
/* Fill tp_rank/tp_size and the per-rank sizes; checks divisibility. */
int mdl_tp_setup(mdl_model *m, int rank, int size);
/* Bind this rank's shard of a weight whose full shape is `shape`:
 * split_dim 0 = output rows (column-parallel: Wq/Wgate/Wup, the LM head,
 * biases of those), 1 = input columns (row-parallel: Wo, Wdown), 2 = K/V
 * projection rows (as 0 when the TP size divides the KV heads, else the
 * rows of this rank's replicated KV head), -1 = replicated. */
int mdl_bind_split(mdl_model *m, rt_tensor *t, const char *canon, int ndim, const int64_t *shape,
                   int split_dim, bool required);
/* mdl_bind_split's host half for split_dim -1, 0 and 2: this rank's shard
 * as a view of the mapped file (data NULL when absent and not required). */
int mdl_find_split_host(mdl_model *m, const char *canon, int ndim, const int64_t *shape, int split_dim,
                        bool required, rt_tensor *out);

/* weights_fuse.c — stacked weights for fewer, larger matmuls. Built only
 * when the backend holds its own weight copies (!rt_backend_is_host): on the
 * CPU the weights stay in the mmap and a stacked copy would be extra RSS.
 * mdl_bind_stacked binds the n 2-D weights canon[i] (shard split[i] of full
 * shape shapes[i]) as row views parts[i] of one tensor `whole`; returns 1
 * when built, 0 when not applicable (host backend, upcast weights, a
 * missing tensor, dtypes or widths that differ: nothing bound, bind them one
 * by one), < 0 on error. mdl_stack_bound stacks already bound 1-D f32
 * tensors (biases) the same way (0 when one is absent). */
int mdl_bind_stacked(mdl_model *m, rt_tensor *whole, int n, rt_tensor *const *parts, const char *const *canon,
                     const int64_t (*shapes)[2], const int *split);
int mdl_stack_bound(mdl_model *m, rt_tensor *whole, int n, rt_tensor *const *parts);
/* A contiguous tensor on the model's backend, freed by mdl_free (model.c). */
int mdl_own_tensor(mdl_model *m, rt_tensor *t, rt_dtype dt, int ndim, const int64_t *shape);
/* Rank 0: load ranks 1..size-1 on their backends and start their threads. */
int mdl_tp_group_start(mdl_model *m0, const char *path, const mdl_params *p);
void mdl_tp_group_stop(mdl_model *m0);
/* Run fn(rank_model, rank_kv, arg) on every rank (rank 0 on the calling
 * thread) and wait; the first failure's status is returned. */
typedef int (*mdl_tp_fn)(mdl_model *m, mdl_kv *kv, void *arg);
int mdl_tp_run(mdl_model *m0, mdl_kv *kv0, mdl_tp_fn fn, void *arg);
/* model_embed.c: bind token_embd (this rank's vocab rows under TP) and
 * output.weight (the tied LM head = tok_embd); x[n, d] = the rows of ids
 * (vocab-parallel lookup + all-reduce under TP). */
int mdl_bind_embedding(mdl_model *m);
int mdl_embed(mdl_model *m, rt_tensor *x, const rt_tensor *ids);
/* Under TP: all-reduce a partial sum (row-parallel output) in place. */
int mdl_tp_all_reduce(mdl_model *m, rt_tensor *t);
/* Sequence-parallel TP steps (Megatron-style; tp.c, arch_llama.c): a
 * row-parallel GEMM's partial sums are reduce-scattered by rows instead of
 * all-reduced, each rank runs the residual add + RMSNorm on its own rows
 * only, and the normed rows are all-gathered into the next column-parallel
 * GEMM's input. The step's n rows are padded to n_pad = W * m (pad rows
 * zero); rank r owns rows [r0, r0 + m). */
typedef struct {
    int64_t n, n_pad, m, r0;
} mdl_sp;
/* Whether a step of n tokens runs sequence-parallel: TP > 1 and `big` (the
 * caller's prefill rule), or VLLM_TP_SP=force (every TP step of 2+ tokens,
 * any backend: tests); VLLM_TP_SP=0 never; n_pad must fit max_batch. */
bool mdl_sp_plan(mdl_model *m, int64_t n, bool big, mdl_sp *sp);
/* Sequence-parallel steps planned so far (process-wide, rank 0's): tests
 * check that the path they force really ran. */
uint64_t mdl_sp_step_count(void);
/* full [n_pad, d] (contiguous) partial sums: rows [n, n_pad) are zeroed,
 * then reduce-scattered in place: rows [r0, r0 + m) hold the sum. */
int mdl_sp_reduce(mdl_model *m, const mdl_sp *sp, rt_tensor *full);
/* full [n_pad, d]: rows [r0, r0 + m) all-gathered in place; start: on
 * comm slot 0 (rt_comm_wait(m->comm, 0) before the other rows are read). */
int mdl_sp_gather(mdl_model *m, const mdl_sp *sp, rt_tensor *full, bool start);
/* The vocab-parallel embedding of a sequence-parallel step: x_full
 * [n_pad, d] f32, rows [r0, r0 + m) = the rank's rows of the lookup
 * (model_embed.c: the partial lookups reduce-scattered, not all-reduced). */
int mdl_embed_sp(mdl_model *m, const mdl_sp *sp, rt_tensor *x_full, const rt_tensor *ids);
/* The step's tail when the residual stream is sharded (model.c): logits of
 * the n_logits rows of x + res, each rank holding rows [r0, r0 + m) of
 * x_full and res_full ([n_pad, d] f32). */
int mdl_logits_head_sp(mdl_model *m, const mdl_step_views *sv, const mdl_sp *sp, int64_t n_logits,
                       rt_tensor *x_full, const rt_tensor *res_full, float eps, float w_off);
/* Under TP: the LM head's local logits [L, vocab_l] -> m->logits
 * [tp, L, vocab_l] on every rank (rank-major, see mdl_forward_batch). */
int mdl_tp_gather_logits(mdl_model *m, int64_t L);

extern const mdl_arch_impl mdl_arch_llama;
extern const mdl_arch_impl mdl_arch_gemma3;

#endif
