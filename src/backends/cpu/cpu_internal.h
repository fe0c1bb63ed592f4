/* cpu_internal — private interface of the CPU backend.
 *
 * Map of the backend:
 *   cpu_backend.c        vtable, factory, op registration, scratch memory
 *   cpu_threadpool.c     persistent workers (cpu_pool_run)
 *   cpu_features.c       ISA detection, VLLM_CPU_ISA override, kernel tables
 *   cpu_matmul.c         MATMUL driver: activation prep, tiling, threading
 *   cpu_gemm.c           MATMUL driver of the chain types (Q4_0, Q4_1, Q8_0,
 *                        Q4_K, Q6_K with SIMD): 8-row GEMV for a few rows,
 *                        8-token GEMM tiles on unpacked weight panels past
 *                        each kernel's break-even (batched decode, prefill)
 *   cpu_gemm_avx2.c      their AVX2 kernels
 *   cpu_gemm_avx512vnni.c  VNNI GEMM tiles of Q4_0/Q4_1/Q8_0/Q4_K/Q6_K (when the CPU has it)
 *   cpu_matmul_ref.c     scalar dot kernels + activation quantizers (reference)
 *   cpu_*_avx2.c/avx512.c  SIMD versions of the hot row kernels
 *   cpu_simd_avx2.h      exp/sigmoid/horizontal helpers for the AVX2 files
 *   cpu_norm.c, cpu_rope.c, cpu_elementwise.c, cpu_attention.c,
 *   cpu_embed.c, cpu_copy.c   the other ops (driver + scalar row kernels)
 *   cpu_paged.c          KV_STORE and PAGED_ATTENTION (attention row kernel
 *                        with block-table addressing)
 *   cpu_sample.c         SAMPLE (the host sampler, sample/batch.h)
 *   cpu_fused.c          ADD_RMSNORM, QK_ROPE_STORE: the unfused ops' row
 *                        kernels and arithmetic, one pass
 *   cpu_combine.c        COMBINE (async scheduling's splice of sampled ids)
 *
 * Each op driver splits work into tasks for the pool (cpu_parallel: tiny
 * ops run on the caller) and calls row kernels through a cpu_kernels table
 * chosen once per backend (by CPU detection or VLLM_CPU_ISA). The scalar
 * table is the reference the SIMD ones are tested against
 * (tests/backends/cpu). Every kernel's accumulation order depends only on
 * shapes, never on the thread count, so outputs are bit-identical for any
 * number of threads.
 *
 * A backend runs one op at a time (its scratch buffer and pool are shared
 * by all ops); callers serialise ops on a backend.
 */
#ifndef CPU_INTERNAL_H
#define CPU_INTERNAL_H

#include "backends/cpu/cpu_threadpool.h"
#include "runtime/ops.h"
#include "runtime/quant_blocks.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { CPU_ISA_SCALAR = 0, CPU_ISA_AVX2, CPU_ISA_AVX512, CPU_ISA_COUNT } cpu_isa;

/* Activation block for Q4_0/Q4_1/Q8_0 weights: 32 int8 with an f32 scale
 * (x ~ d*qs), s = d * sum(qs) (Q4_1's offset term) and sum = sum(qs)
 * (Q4_0's -8 offset, exact). */
typedef struct {
    float d, s;
    int32_t sum;
    int8_t qs[RT_QK];
} cpu_block_q8a;

/* Activations of 8 tokens interleaved for the GEMM tiles (cpu_gemm_*):
 * qs[(8*s + t)*4 + i] is element 4s+i of token t, so one 32-byte load
 * feeds a 4-element step of all 8 tokens (lanes = tokens). */
typedef struct {
    float d[8];
    int32_t sum[8];
    int8_t qs[8 * RT_QK];
} cpu_block_q8a_x8;

/* Q8_K of 8 tokens: as above, plus per token the 16-element group sums as
 * int16 pairs: bs[p][t] = (bsums[2p], bsums[2p+1]) (Q6_K's -32 offset) and
 * the 32-element sums as[p][t] = (s_{2p}, s_{2p+1}), s_j = bsums[2j] +
 * bsums[2j+1] (Q4_K/Q5_K mins). */
typedef struct {
    float d[8];
    int32_t bs[8][8];
    int32_t as[4][8];
    int8_t qs[8 * RT_QK_K];
} cpu_block_q8k_x8;

/* Max activation rows one matmul micro-kernel call handles, and max weight
 * rows of a prefill (mmp) call. */
#define CPU_MM_M 4
#define CPU_MMP_R 4

/* Dot products of one weight row w (k elements, weight dtype) with m <= 4
 * prepared activation rows act + j*act_stride (bytes): y[j*y_stride] = dot.
 * Every output is accumulated in the same order whatever m is, so results do
 * not depend on tiling or thread count. */
typedef void (*cpu_mm_fn)(int64_t k, const void *w, const void *act, size_t act_stride, int m,
                          float *y, size_t y_stride);

/* Prefill variant: nr (1..mmp_rows) weight rows, w + r*w_stride bytes, against
 * m <= 4 activation rows: y[j*y_stride + r]. Optional (NULL: use cpu_mm_fn
 * row by row); results per (row, token) must not depend on nr or m. */
typedef void (*cpu_mmp_fn)(int64_t k, const void *w, size_t w_stride, int nr, const void *act,
                           size_t act_stride, int m, float *y, size_t y_stride);

/* Attention of nh (<= CPU_ATTN_HB) query heads that share one kv head, for
 * one query over keys lo..hi (may be empty: lo > hi). With ml == NULL the
 * output is normalised; otherwise the unnormalised sum of exp(s-m)*v goes to
 * out and (m, l) of each head to ml[2h], ml[2h+1] for a later combine of
 * context splits (see cpu_attention.c). */
#define CPU_ATTN_HB 8
#define CPU_ATTN_MAX_HD 512
typedef struct {
    const float *q;            /* head h at q + h*q_stride, [hd] each */
    size_t q_stride;           /* floats */
    int nh;
    const char *k, *v;         /* key/value of position 0 for this kv head */
    size_t k_stride, v_stride; /* bytes between positions (within a block) */
    /* Paged caches: position p lives in block bt[p / B], slot p % B, and
     * blocks are k_blk/v_blk bytes apart. bt == NULL: contiguous. */
    const int32_t *bt;
    int64_t B;
    size_t k_blk, v_blk;
    int kv_f16;                /* cache dtype: 0 f32, 1 f16, 2 bf16 */
    int64_t hd, lo, hi;        /* keys lo..hi inclusive */
    float scale, softcap;
    float *out;                /* head h at out + h*out_stride, [hd] each */
    size_t out_stride;         /* floats */
    float *ml;                 /* NULL or [2*nh] */
} cpu_attn_job;

/* Row address of position p in a K (or V) cache described by a job. */
static inline const char *cpu_attn_row(const cpu_attn_job *j, const char *base, size_t stride,
                                       size_t blk, int64_t p) {
    if (!j->bt) return base + p * (int64_t)stride;
    return base + (int64_t)j->bt[p / j->B] * (int64_t)blk + (p % j->B) * (int64_t)stride;
}

/* Keys in the chunk starting at p0: at most `chunk`, never past hi, and for
 * paged caches never across a block end (so a chunk's rows are evenly
 * strided). */
static inline int cpu_attn_chunk(const cpu_attn_job *j, int64_t p0, int chunk) {
    int64_t cnt = j->hi - p0 + 1 < chunk ? j->hi - p0 + 1 : chunk;
    if (j->bt && j->B - p0 % j->B < cnt) cnt = j->B - p0 % j->B;
    return (int)cnt;
}

/* "Chain" dtypes (cpu_kernels.chain[dt]): every output element is one
 * float chain over the k blocks in order, acc = fma(dw*da, (float)isum_b,
 * acc) (K-quants with mins: then acc = fma(-(dmw*da), (float)msum_b, acc)),
 * with exact integer block sums. Any kernel that follows it (per row, 8
 * rows in lanes, 8 tokens in lanes) gives bit-identical results, so decode
 * and prefill tiles agree and SIMD matches the scalar reference exactly.
 *
 * GEMV (lanes = weight rows): 8 rows w + r*w_stride against m <= 4 rows of
 * the plain prepared activations: y[j*y_stride + r]. Full k. */
typedef void (*cpu_gv_fn)(int64_t k, const void *w, size_t w_stride, const void *act,
                          size_t act_stride, int m, float *y, size_t y_stride);
/* GEMM tile (lanes = tokens): weights are first unpacked (cpu_pk_fn) into
 * a panel of 4 rows x k (bytes plus ready-made scales; layout private to
 * the kernel file, cpu_kernels.pk_bytes[dt] bytes per 256 elements of k),
 * once per task; then nr (1..4) panel rows meet one group of 8
 * interleaved tokens (cpu_block_q8a_x8 / cpu_block_q8k_x8 blocks):
 * y[t*y_stride + r] for the group's first nt (1..8) tokens (a partial last
 * group is padded with zero activations). Full k. */
typedef void (*cpu_pk_fn)(int64_t k, const void *w, size_t w_stride, int nr, void *panel);
typedef void (*cpu_gm_fn)(int64_t k, const void *panel, int nr, const void *act8, int nt, float *y,
                          size_t y_stride);

typedef struct {
    const char *name;
    /* MATMUL: indexed by weight dtype; NULL = unsupported */
    cpu_mm_fn mm[RT_DTYPE_COUNT];
    cpu_mmp_fn mmp[RT_DTYPE_COUNT]; /* prefill (n > CPU_MM_M); optional */
    int mmp_rows;                   /* weight rows per mmp call (<= CPU_MMP_R) */
    unsigned char chain[RT_DTYPE_COUNT]; /* mm follows the chain arithmetic (full k) */
    cpu_gv_fn gv[RT_DTYPE_COUNT];   /* chain dtypes: 8-row GEMV; optional */
    cpu_gm_fn gm[RT_DTYPE_COUNT];   /* chain dtypes: 8-token GEMM tile; needs gv, pk */
    cpu_pk_fn pk[RT_DTYPE_COUNT];
    size_t pk_bytes[RT_DTYPE_COUNT];
    /* smallest partial last group (tokens, 1..8) that takes a zero-padded
     * tile rather than the GEMV: where a tile costs about as much as this
     * many GEMV tokens (measured per kernel; 0 or 8: full groups only) */
    unsigned char gm_min[RT_DTYPE_COUNT];
    void (*quant_q8a)(const float *x, cpu_block_q8a *y, int64_t k);
    void (*quant_q8k)(const float *x, rt_block_q8_K *y, int64_t k);
    /* row kernels */
    void (*rmsnorm)(const float *x, const float *w, float *y, int64_t d, float eps, float w_off);
    void (*softmax)(const float *x, float *y, int64_t n);
    void (*glu)(const float *g, const float *u, float *y, int64_t n, int act);
    void (*add)(const float *a, const float *b, float *y, int64_t n);
    void (*scale)(const float *a, float s, float *y, int64_t n);
    void (*attn)(const cpu_attn_job *job);
    /* row conversions to f32 (EMBED of f16/bf16 tables, COPY) and f32 ->
     * f16 (COPY, f16 KV-cache stores; bit-identical to rt_f32_to_f16) */
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
    void (*bf16_to_f32)(const uint16_t *x, float *y, int64_t n);
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);
} cpu_kernels;

typedef struct {
    cpu_pool *pool;
    int n_threads;
    cpu_isa isa;
    const cpu_kernels *k;
    void *scratch; /* grown on demand, reused across calls (64-byte aligned) */
    size_t scratch_bytes;
} cpu_ctx;

/* cpu_features.c */
cpu_isa cpu_isa_detect(void);          /* best level this CPU runs */
cpu_isa cpu_isa_select(void);          /* detect, capped by VLLM_CPU_ISA */
const char *cpu_isa_name(cpu_isa isa);
const cpu_kernels *cpu_kernels_for(cpu_isa isa);

/* cpu_backend.c: scratch of at least `bytes` (NULL + vc_err on OOM). */
void *cpu_scratch(cpu_ctx *c, size_t bytes);

/* Runs tasks 0..n_tasks-1 on the pool, or serially on the caller when the
 * whole op is smaller than CPU_MIN_PAR_WORK (`work` ~ multiply-adds or
 * elements touched): waking workers costs microseconds, more than a tiny
 * op. Results are the same either way. */
#define CPU_MIN_PAR_WORK 65536
void cpu_parallel(cpu_ctx *c, int64_t n_tasks, cpu_task_fn fn, void *ctx, int64_t work);

/* Units 0..n_units-1 split into one contiguous range per thread, each
 * walked front to back in claims of `claim` units (fn(ctx, u0, u1,
 * thread), a sequential stream per thread; `thread` indexes per-thread
 * scratch); a thread done with its range takes claims from the back of
 * the others', so a late or preempted thread does not hold the op up.
 * Used by decode matmuls. */
typedef void (*cpu_range_fn)(void *ctx, int64_t u0, int64_t u1, int thread);
void cpu_parallel_ranges(cpu_ctx *c, int64_t n_units, int64_t claim, cpu_range_fn fn, void *ctx,
                         int64_t work);

/* cpu_matmul.c: quantize n activation rows (x every xs bytes) to Q8_K
 * (kquant) or Q8a rows of arow bytes at act, in parallel. */
void cpu_quant_rows(cpu_ctx *c, int kquant, const void *x, size_t xs, char *act, size_t arow,
                    int64_t n, int64_t in);
/* cpu_gemm.c: MATMUL for weight types with gv kernels; y rows every ys
 * floats, x rows every xs bytes. */
int cpu_matmul_chain(cpu_ctx *c, const rt_tensor *x, size_t xs, const rt_tensor *w, float *y,
                     size_t ys, const float *bias);

/* Op entry points (registered with rt_op_register). */
int cpu_op_embed(rt_backend *be, const rt_op_args *a);
int cpu_op_matmul(rt_backend *be, const rt_op_args *a);
int cpu_op_rmsnorm(rt_backend *be, const rt_op_args *a);
int cpu_op_rope(rt_backend *be, const rt_op_args *a);
int cpu_op_glu(rt_backend *be, const rt_op_args *a);
int cpu_op_add(rt_backend *be, const rt_op_args *a);
int cpu_op_scale(rt_backend *be, const rt_op_args *a);
int cpu_op_softmax(rt_backend *be, const rt_op_args *a);
int cpu_op_attention(rt_backend *be, const rt_op_args *a);
int cpu_op_copy(rt_backend *be, const rt_op_args *a);
int cpu_op_argmax(rt_backend *be, const rt_op_args *a);
int cpu_op_sample(rt_backend *be, const rt_op_args *a); /* cpu_sample.c */
int cpu_op_kv_store(rt_backend *be, const rt_op_args *a);
int cpu_op_paged_attention(rt_backend *be, const rt_op_args *a);
int cpu_op_add_rmsnorm(rt_backend *be, const rt_op_args *a);   /* cpu_fused.c */
int cpu_op_qk_rope_store(rt_backend *be, const rt_op_args *a); /* cpu_fused.c */
int cpu_op_combine(rt_backend *be, const rt_op_args *a); /* cpu_combine.c */

/* Scalar kernels (cpu_matmul_ref.c, cpu_norm.c, cpu_elementwise.c, cpu_attention.c). */
void cpu_mm_f32_ref(int64_t, const void *, const void *, size_t, int, float *, size_t);
void cpu_mm_f16_ref(int64_t, const void *, const void *, size_t, int, float *, size_t);
void cpu_mm_bf16_ref(int64_t, const void *, const void *, size_t, int, float *, size_t);
void cpu_mm_q4_0_ref(int64_t, const void *, const void *, size_t, int, float *, size_t);
void cpu_mm_q4_1_ref(int64_t, const void *, const void *, size_t, int, float *, size_t);
void cpu_mm_q8_0_ref(int64_t, const void *, const void *, size_t, int, float *, size_t);
void cpu_mm_q4_K_ref(int64_t, const void *, const void *, size_t, int, float *, size_t);
void cpu_mm_q5_K_ref(int64_t, const void *, const void *, size_t, int, float *, size_t);
void cpu_mm_q6_K_ref(int64_t, const void *, const void *, size_t, int, float *, size_t);
void cpu_quant_q8a_ref(const float *x, cpu_block_q8a *y, int64_t k);
void cpu_quant_q8k_ref(const float *x, rt_block_q8_K *y, int64_t k);
void cpu_rmsnorm_ref(const float *x, const float *w, float *y, int64_t d, float eps, float w_off);
void cpu_softmax_ref(const float *x, float *y, int64_t n);
void cpu_glu_ref(const float *g, const float *u, float *y, int64_t n, int act);
void cpu_add_ref(const float *a, const float *b, float *y, int64_t n);
void cpu_scale_ref(const float *a, float s, float *y, int64_t n);
void cpu_attn_ref(const cpu_attn_job *job);
void cpu_f16_to_f32_ref(const uint16_t *x, float *y, int64_t n);
void cpu_bf16_to_f32_ref(const uint16_t *x, float *y, int64_t n);
void cpu_f32_to_f16_ref(const float *x, uint16_t *y, int64_t n);

/* AVX2 (cpu_*_avx2.c) and AVX-512 (cpu_*_avx512.c) kernels: each file
 * overrides the table entries it implements; the tables are only used when
 * cpu_isa_detect() says the CPU runs them. */
void cpu_fill_matmul_avx2(cpu_kernels *k);
void cpu_fill_elementwise_avx2(cpu_kernels *k);
void cpu_fill_attention_avx2(cpu_kernels *k);
void cpu_fill_matmul_avx512(cpu_kernels *k);
void cpu_fill_gemm_avx2(cpu_kernels *k);
void cpu_fill_gemm_avx512vnni(cpu_kernels *k); /* AVX512-VNNI (+VL) GEMM tiles */


#endif
