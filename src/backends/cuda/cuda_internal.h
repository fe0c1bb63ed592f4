/* cuda_internal — private interface of the CUDA backend (CUDA C++ only).
 *
 * Map of the backend:
 *   cuda_backend.cu    vtable, factory, memory (stream-ordered caching pool),
 *                      copies, sync, error checking, op registration
 *   cuda_dequant.cuh   device decoders of the GGUF block formats (32 values
 *                      at a time), shared by EMBED, COPY and MATMUL
 *   cuda_matmul.cu     MATMUL and MATMUL_GLU entry points; dequantize-in-GEMV
 *                      for n <= CUDA_GEMV_MAX_N tokens
 *   cuda_gemm.cu       the larger n: cuBLAS GEMM (f32 SGEMM without TF32,
 *                      f16/bf16 GemmEx with fp32 accumulation, quantized
 *                      weights dequantized to bf16 scratch), MATMUL_GLU's
 *                      GEMM + GLU, MATMUL_ADD (beta = 1 into the residual)
 *   cuda_gemm_glu.cu   MATMUL_GLU of bf16 prefill rows as one wgmma GEMM
 *                      with the GLU in its epilogue: a cooperative and a
 *                      ping-pong kernel (by shape; VLLM_CUDA_GEMM_GLU,
 *                      _PP, _CL override)
 *   cuda_attention.cu  ATTENTION and PAGED_ATTENTION (one kernel: a block
 *                      per (head, query row), K/V tiles in shared memory,
 *                      online softmax) and KV_STORE; prompt-heavy
 *                      bf16/f16-cache batches go to cuda_flash.cu
 *   cuda_flash.cu      tensor-core (mma.sync m16n8k16) FlashAttention-2
 *                      prefill over the paged cache, GQA heads packed per tile
 *                      (cuda_flash.h); cuda_flash_wg.cu its Hopper wgmma
 *                      kernel for causal calls without window or soft-cap
 *                      (cuda_flash_common.cuh, cuda_flash_wgmma.cuh)
 *   cuda_paged_attn.cu split-KV flash-decoding PAGED_ATTENTION (k_fd) for the
 *                      shapes of cuda_fd_eligible; its prefill tiles kernel
 *                      (k_pf) in cuda_paged_pf.cu, the arguments both take
 *                      (fd_args) in cuda_fd_args.cuh
 *   cuda_rows.cu       RMSNORM, SOFTMAX, ARGMAX (one block per row), ROPE
 *   cuda_elementwise.cu GLU, ADD, SCALE, COPY, EMBED
 *   cuda_sample.cu     SAMPLE (penalties, temperature, min_p/top_k/top_p,
 *                      the draw: one block per row, radix selects);
 *                      cuda_sample_cl.cu its cluster-per-row kernel (the
 *                      default), cuda_sample.cuh their shared device code
 *   cuda_fused.cu      ADD_RMSNORM, QK_ROPE_STORE (fused decode-layer ops);
 *                      QK_ROPE_STORE's prefill kernel in cuda_rope_pf.cuh
 *   cuda_norm.cuh      the RMSNORM / ADD_RMSNORM kernels (rows in registers,
 *                      f32 or bf16 out), shared by cuda_rows.cu and cuda_fused.cu
 *   cuda_store.cuh     f32 -> f32/f16/bf16 stores, one or four values
 *   cuda_combine.cu    COMBINE (async scheduling's splice of sampled ids)
 *   cuda_comm.cu       collectives over NCCL (tensor parallelism)
 *   cuda_profile.cu    VLLM_CUDA_PROFILE: GPU time per op from CUDA events
 *
 * Every tensor an op touches lives on the device (RT_DEV_CUDA), except EMBED's
 * ids, which may also be host memory. All work goes to the backend's one
 * stream; an op returns once its kernels are queued. Errors of the CUDA
 * runtime and of cuBLAS go through CU_TRY / CUBLAS_TRY, which record
 * file:line in vc_err and return VC_ERR_RUNTIME (library code never aborts).
 *
 * Indices that live on the device (EMBED ids, KV_STORE slots, paged block
 * tables) cannot be checked before the kernel runs without a round trip;
 * kernels flag bad ones in ctx->d_flags instead (and never touch memory
 * out of bounds), and the next sync() or device-to-host copy reports them as
 * VC_ERR_INVALID.
 */
#ifndef CUDA_INTERNAL_H
#define CUDA_INTERNAL_H

/* The project's C headers carry no extern "C" guards; the libc headers they
 * pull in come first so that C++ sees them outside the extern block. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "base/err.h"
#include "runtime/ops.h"
}

/* The GLU activations of GLU / MATMUL_GLU (rt_act), as the CPU computes
 * them: SiLU g / (1 + e^-g); GELU in its tanh form. */
__device__ __forceinline__ float cuda_silu(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ float cuda_gelu_tanh(float g) {
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * g * (1.0f + tanhf(k0 * (g + 0.044715f * g * g * g)));
}
__device__ __forceinline__ float cuda_glu_act(int act, float g) {
    return act == RT_ACT_SILU ? cuda_silu(g) : cuda_gelu_tanh(g);
}
/* The same activations as one hardware exp2 and one reciprocal, no branch
 * (ex2 and rcp .approx.ftz: a few f32 ulps), for values rounded to bf16 next:
 * expf and the IEEE division put a slow-path branch in every value, which
 * kept the GEMM-GLU epilogue's 64 values a thread from overlapping
 * (session 20: that epilogue took longer than a 64 x 256 x 1024 tile's
 * products). GELU as 1 - 1 / (1 + e^2z) = 0.5 (1 + tanh z), which, like
 * the CPU's tanh form, gives exactly 0 far in the negative tail. Not for
 * f32 outputs: in the tail (SiLU below ~ -80, GELU below ~ -4.7) the
 * results differ from the CPU's by more than the f32 bound of the tests. */
__device__ __forceinline__ float cuda_ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float cuda_rcp_ftz(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
template <int ACT> __device__ __forceinline__ float cuda_glu_act_fast(float g) {
    const float l2e = 1.4426950408889634f; /* log2(e); ftz: e^x below f32's normals is 0, 1 + it is 1 */
    if (ACT == RT_ACT_SILU) return g * cuda_rcp_ftz(1.0f + cuda_ex2_ftz(-l2e * g));
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    return g * (1.0f - cuda_rcp_ftz(1.0f + cuda_ex2_ftz(2.0f * l2e * k0 * (g + 0.044715f * g * g * g))));
}

/* 16 bytes of weights read once: around L1 (no allocation; the kernel's
 * reused operands stay cached) with a 256-byte L2 prefetch hint. */
__device__ __forceinline__ uint4 cuda_ld_stream16(const uint4 *p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

/* Sequence of query row i in a varlen batch of S sequences whose rows
 * start at qsl[0..S] (ops.h): the last s with qsl[s] <= i (binary search;
 * the caller checks the row against qsl[s + 1]). */
__device__ __forceinline__ int cuda_row_seq(const int32_t *qsl, int S, int64_t i) {
    int s0 = 0, s1 = S - 1;
    while (s0 < s1) {
        int mid = (s0 + s1 + 1) / 2;
        if (qsl[mid] <= i) s0 = mid;
        else s1 = mid - 1;
    }
    return s0;
}

/* Bits of ctx->d_flags (set by kernels, reported by sync/copy). */
#define CUDA_FLAG_BAD_TOKEN 1 /* EMBED: id out of range */
#define CUDA_FLAG_BAD_SLOT 2  /* KV_STORE: slot out of range */
#define CUDA_FLAG_BAD_PAGED 4 /* PAGED_ATTENTION: bad block table / lengths */
#define CUDA_FLAG_BAD_COMBINE 8 /* COMBINE: index out of range */

/* Max tokens of the GEMV path; larger batches go to cuBLAS. */
#define CUDA_GEMV_MAX_N 8

/* Pinned staging for host->device uploads (see cuda_ctx). */
#define CUDA_STAGE_CHUNKS 4
#define CUDA_STAGE_CHUNK_BYTES ((size_t)4 << 20)

/* A persistent device workspace, grown stream-ordered when an op needs
 * more (never while a graph is recorded: the eager run of the same shape
 * before the recording has grown it). An outgrown block stays allocated
 * until the backend goes (old): decode graphs recorded with it still read
 * it when replayed after a larger eager step grew the workspace. Growth at
 * least doubles, so the retired blocks add up to less than the live one. */
#define CUDA_WS_OLD 24
typedef struct {
    void *p;
    size_t bytes;
    void *old[CUDA_WS_OLD];
    int n_old;
} cuda_ws;

typedef struct {
    int device;
    int n_sm; /* streaming multiprocessors (work sizing) */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws; /* cuBLAS workspace, allocated once (32 MiB, Hopper's recommendation) */
    size_t blas_ws_bytes;
    cudaMemPool_t pool; /* the device's default pool, release threshold raised to "never" */
    int *d_flags;       /* [1] device error flags */
    int *h_flags;       /* [1] pinned host mirror */
    /* Pinned staging for asynchronous host->device copies: CUDA_STAGE_CHUNKS
     * chunks used round-robin; stage_ev[i] is recorded after every copy out
     * of chunk i, and a chunk is refilled only once its event completed. */
    char *stage;
    size_t stage_fill; /* bytes used in the current chunk */
    int stage_cur;
    cudaEvent_t stage_ev[CUDA_STAGE_CHUNKS];
    /* Graph recording (graph_begin .. graph_end): ops must not allocate or
     * copy to/from the host meanwhile; they use the persistent workspaces. */
    bool capturing;
    float *fd_ws; /* flash-decoding partials, CUDA_FD_WS_FLOATS(n_sm) floats */
    int *fd_cnt;  /* flash-decoding split counters, 4 * n_sm ints, zero between launches */
    int gemv_cfg; /* 0: not read yet, else 1 + the f16/bf16 GEMV variant (VLLM_CUDA_GEMV, cuda_matmul.cu) */
    int bf16_act; /* act_dtype: 0 not read yet, 1 f32 always, 2 bf16 above the GEMV's tokens */
    int skinny_max; /* cuda_skinny.cu: most tokens it takes (VLLM_CUDA_SKINNY); -1 off, 0 not read */
    int skinny_ks;  /* cuda_skinny.cu: forced slices per group (VLLM_CUDA_SKINNY_KS); 0 by the rule */
    int skinny_f32x; /* cuda_skinny.cu: takes f32 x rows too (VLLM_CUDA_SKINNY_F32X=0: not) */
    int skinny_quant; /* cuda_skinny_q.cu: GGUF block W too (VLLM_CUDA_SKINNY_QUANT) */
    int gemv_q; /* cuda_gemv_q.cu: 0 not read, 1 off (VLLM_CUDA_GEMV_Q=0), 2 on */
    int gemv_d4; /* cuda_gemv_d4.cu: 0 not read, 1 off (VLLM_CUDA_GEMV_D4=0), 2 on */
    int gemv_d4_seg, gemv_d4_cps, gemv_d4_n1; /* cuda_gemv_d4.cu: segment multiplier, blocks per SM, n = 1 instance */
    int gemv_xr; /* cuda_gemv_xr.cu: 0 not read, 1 off (VLLM_CUDA_GEMV_XR=0), else xr_mode's flags */
    int gemv_max_n; /* act_dtype: f32 (GEMV) up to this many tokens over unquantized W (VLLM_CUDA_GEMV_MAX_N); -1 by x bytes; 0 not read */
    cuda_ws xh; /* GEMM activations converted to f16/bf16 (cuda_gemm.cu) */
    cuda_ws mq; /* cuda_mmq.cu: x in int8 with its scales, split-K partials */
    int mmq;        /* cuda_mmq.cu: 0 not read, 1 off (VLLM_CUDA_MMQ=0), 2 int8 always (=int8), 3 bf16 x to cuda_mmq_bf.cu */
    int mmq_max_n;  /* cuda_mmq.cu: most rows it takes (VLLM_CUDA_MMQ_MAX_N) */
    int mmq_split;  /* cuda_mmq.cu: forced K splits (VLLM_CUDA_MMQ_SPLIT); 0 by the rule */
    int mmq_tn;     /* cuda_mmq_bf.cu: largest token tile (VLLM_CUDA_MMQ_TN: 64, or 32) */
    int mmq_min_n;  /* cuda_mmq.cu: decode rows from which GGUF matmuls leave the GEMV (VLLM_CUDA_MMQ_MIN_N) */
} cuda_ctx;

/* Partials of the split-KV attention never exceed 64 * n_sm (row, head,
 * split) triples of hd + 2 <= 258 floats (see cuda_paged_attn.cu). */
#define CUDA_FD_WS_FLOATS(n_sm) ((size_t)64 * (size_t)(n_sm) * 258)

/* Record a CUDA / cuBLAS failure with its location; returns VC_ERR_RUNTIME. */
int cuda_fail(cudaError_t e, const char *expr, const char *file, int line);
int cuda_blas_fail(cublasStatus_t s, const char *expr, const char *file, int line);

#define CU_TRY(call)                                                          \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) return cuda_fail(e_, #call, __FILE__, __LINE__); \
    } while (0)

#define CUBLAS_TRY(call)                                                      \
    do {                                                                      \
        cublasStatus_t s_ = (call);                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                      \
            return cuda_blas_fail(s_, #call, __FILE__, __LINE__);             \
    } while (0)

/* After a kernel launch: report a bad launch configuration. */
#define CU_LAUNCHED() CU_TRY(cudaGetLastError())

/* Make the backend's device current (cheap when it already is). */
int cuda_enter(const cuda_ctx *c);

/* Stream-ordered temporary device memory for one op (freed with cuda_tmp_free
 * on the same stream, so it may be released before the kernels using it
 * ran). NULL + vc_err on failure, and always while recording a graph. */
void *cuda_tmp_alloc(cuda_ctx *c, size_t bytes);
void cuda_tmp_free(cuda_ctx *c, void *p);

/* At least `bytes` of workspace w (16 MiB at least; NULL + vc_err when it
 * cannot grow: out of memory, while recording, or grown too often); all
 * its blocks are freed by cuda_ws_release. */
void *cuda_ws_get(cuda_ctx *c, cuda_ws *w, size_t bytes, const char *what);
void cuda_ws_release(cuda_ctx *c, cuda_ws *w);

/* A tensor viewed as rows of its last dimension: row r starts at
 * data + sum over the outer dims of idx_i * stride[i] (r decomposed
 * row-major over shape[0..ndim-2]); element j of a row is at
 * + j * stride[ndim-1] (plain dtypes). Passed to kernels by value. */
typedef struct {
    char *data;
    int ndim;
    int64_t shape[RT_MAX_DIMS];
    int64_t stride[RT_MAX_DIMS];
} cuda_view;

cuda_view cuda_view_of(const rt_tensor *t);

__host__ __device__ static inline char *cuda_row(const cuda_view &v, int64_t r) {
    int64_t off = 0;
    for (int i = v.ndim - 2; i >= 0; i--) {
        int64_t idx = r % v.shape[i];
        r /= v.shape[i];
        off += idx * v.stride[i];
    }
    return v.data + off;
}

/* Checks that a tensor's data is device memory of this backend. */
int cuda_check_dev(const rt_tensor *t, const char *op);

/* Programmatic dependent launch (Hopper): a kernel launched with
 * cuda_launch() may be scheduled while the previous kernel of the stream is
 * still running; it waits at its first statement (CUDA_PDL_ENTER, which
 * every kernel of the backend starts with) until that kernel completed and
 * its memory is visible, then lets its own successor launch. This hides
 * the launch gap between the ~20 small kernels of a decode layer (also
 * inside CUDA graphs). The wait is a no-op for a kernel launched plainly.
 * VLLM_CUDA_PDL=0 launches plainly (cuda_pdl_enabled). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CUDA_PDL_ENTER() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define CUDA_PDL_ENTER() ((void)0)
#endif

extern bool cuda_pdl_enabled;

template <typename... KArgs, typename... Args>
static inline void cuda_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                               Args... args) {
    if (!cuda_pdl_enabled) {
        kernel<<<grid, block, smem, st>>>(args...);
        return;
    }
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...); /* errors: cudaGetLastError (CU_LAUNCHED) */
}

/* Clusters of cl CTAs of `kernel` (1-D, `threads` a CTA, smem bytes of
 * dynamic shared memory, already opted in) that can be resident at once on
 * the current device; 0 when it cannot run them (the query's error is
 * cleared). */
template <typename... KArgs>
static inline int cuda_cluster_occupancy(void (*kernel)(KArgs...), unsigned cl, unsigned threads, size_t smem) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cl;
    at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(cl);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* cuda_launch in 1-D clusters of cl CTAs (grid.x a multiple of cl), with
 * PDL where enabled; a runtime that refuses PDL with clusters gets the
 * plain cluster launch. Returns the launch's error (cleared). */
template <typename... KArgs, typename... Args>
static inline cudaError_t cuda_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                              cudaStream_t st, unsigned cl, Args... args) {
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cl;
    at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = cuda_pdl_enabled ? 2 : 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
    if (e != cudaSuccess && cfg.numAttrs == 2) { /* the runtime refused PDL with a cluster: launch plainly */
        (void)cudaGetLastError();
        cfg.numAttrs = 1;
        e = cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
    }
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e;
}

/* Blocks of `threads` to cover n items, capped for 1-D grids. */
static inline unsigned cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b > 1048576 ? 1048576 : b);
}

extern "C" {
int cuda_op_embed(rt_backend *be, const rt_op_args *a);
int cuda_op_matmul(rt_backend *be, const rt_op_args *a);
int cuda_op_rmsnorm(rt_backend *be, const rt_op_args *a);
int cuda_op_rope(rt_backend *be, const rt_op_args *a);
int cuda_op_glu(rt_backend *be, const rt_op_args *a);
int cuda_op_add(rt_backend *be, const rt_op_args *a);
int cuda_op_scale(rt_backend *be, const rt_op_args *a);
int cuda_op_softmax(rt_backend *be, const rt_op_args *a);
int cuda_op_attention(rt_backend *be, const rt_op_args *a);
int cuda_op_copy(rt_backend *be, const rt_op_args *a);
int cuda_op_sample(rt_backend *be, const rt_op_args *a); /* cuda_sample.cu */
int cuda_op_argmax(rt_backend *be, const rt_op_args *a);
int cuda_op_kv_store(rt_backend *be, const rt_op_args *a);
int cuda_op_paged_attention(rt_backend *be, const rt_op_args *a);
int cuda_op_add_rmsnorm(rt_backend *be, const rt_op_args *a);   /* cuda_fused.cu */
int cuda_op_qk_rope_store(rt_backend *be, const rt_op_args *a); /* cuda_fused.cu */
int cuda_op_matmul_glu(rt_backend *be, const rt_op_args *a);    /* cuda_matmul.cu */
int cuda_op_combine(rt_backend *be, const rt_op_args *a); /* cuda_combine.cu */
int cuda_op_matmul_add(rt_backend *be, const rt_op_args *a); /* cuda_gemm.cu */
}

/* Flash-decoding PAGED_ATTENTION (cuda_paged_attn.cu) for the shapes it
 * takes (cuda_fd_eligible); the tiled kernel handles the rest. */
bool cuda_fd_eligible(const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc);
int cuda_fd_run(cuda_ctx *c, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale, float softcap,
                int32_t window);

/* cuda_backend.cu: the most tokens whose f32 rows the decode GEMV takes
 * over W of dtype w with rows of `in` values (rt_backend_act_dtype's rule). */
int64_t cuda_gemv_rows(cuda_ctx *c, rt_dtype w, int64_t in);

/* cuda_skinny.cu: MATMUL / MATMUL_GLU of 2..16 bf16 x rows (or 2..8 f32
 * rows, VLLM_CUDA_SKINNY_F32X) over bf16 W on tensor cores (W streamed
 * once). fits: the shape, dtypes and alignment it takes, and f32 rows
 * only at counts the GEMV would be bound by (the callers fall back
 * otherwise). y: f32 or bf16, rows y_ld elements apart; GLU: W =
 * [gate; up] of 2f rows, y [n, f]. */
bool cuda_skinny_fits(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, int64_t in,
                      int64_t n, rt_dtype yt, bool glu);
/* Whether GGUF block weights take the skinny path (VLLM_CUDA_SKINNY_QUANT=1;
 * cuda_skinny_q.cu: bf16 x, f32 MATMUL y, bf16 GLU y). */
bool cuda_skinny_quant_on(cuda_ctx *c);
/* cuda_gemv_q.cu: the decode GEMV over GGUF block weights (1..8 f32 x
 * rows, 16-byte aligned x and W base; MATMUL with bias, or MATMUL_GLU
 * into f32 y of out / 2 columns). */
bool cuda_gemv_q_fits(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, int64_t n);
int cuda_gemv_q(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                const float *bias, int64_t out, int64_t in, int n, bool glu, int act);
/* cuda_gemv_d4.cu: the same on dp4a with x quantized to 8 bits per 32
 * values; default on. Asked only of calls cuda_gemv_q_fits accepted:
 * whether their x fits shared memory. */
bool cuda_gemv_d4_fits(cuda_ctx *c, const rt_tensor *w, int64_t n);
int cuda_gemv_d4(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                 const float *bias, int64_t out, int64_t in, int n, bool glu, int act);
/* cuda_mmq.cu: MATMUL over GGUF block W on int8 tensor cores (x f32 or
 * bf16 rows quantized to 8 bits per 32 values; y f32 or bf16, rows y_ld
 * apart; bias f32 or NULL). fits: on (VLLM_CUDA_MMQ), 1..VLLM_CUDA_MMQ_MAX_N
 * rows, a format it decodes, aligned x rows; the caller falls back to
 * cuBLAS over a dequantized copy otherwise. */
bool cuda_mmq_fits(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, int64_t in, int64_t n);
int cuda_mmq(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *y, rt_dtype yt,
             int64_t y_ld, const float *bias, int64_t out, int64_t in, int64_t n);
/* The fewest rows a decode step hands to cuda_mmq over GGUF weights
 * (VLLM_CUDA_MMQ_MIN_N, default 3; CUDA_GEMV_MAX_N + 1 when it is off):
 * fewer stay on the decode GEMVs (cuda_gemv_rows). */
int cuda_mmq_min_n(cuda_ctx *c);
/* cuda_mmq_bf.cu: the same for bf16 x rows (x_ld % 8 == 0, 16-byte aligned),
 * W decoded to bf16 in registers; cuda_mmq calls it where it fits. */
bool cuda_mmq_bf_fits(const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld);
int cuda_mmq_bf(cuda_ctx *c, const rt_tensor *w, const void *x, int64_t x_ld, void *y, rt_dtype yt, int64_t y_ld,
                const float *bias, int64_t out, int64_t in, int64_t n);
/* Whether the skinny kernel is on at all (VLLM_CUDA_SKINNY != 0). */
bool cuda_skinny_on(cuda_ctx *c);
int cuda_skinny_q_run(cuda_ctx *c, const rt_tensor *w, const void *x, int64_t x_ld, void *y, int64_t y_ld,
                      const float *bias, int64_t rows, int64_t in, int n, int act, bool glu, int ks);
int cuda_skinny_matmul(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *y,
                       rt_dtype yt, int64_t y_ld, const float *bias, int64_t out, int64_t in, int n);
int cuda_skinny_glu(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *y, rt_dtype yt,
                    int64_t y_ld, int64_t f, int64_t in, int n, int act);

/* The cuBLAS half of MATMUL / MATMUL_GLU (cuda_gemm.cu), for n > CUDA_GEMV_MAX_N
 * and for bf16 activations (any n):
 * y[n, out] (row stride y_ld floats) = x[n, in] (xt f32 or bf16, row stride
 * x_ld elements) · W^T (+ bias). */
int cuda_gemm(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, float *y, int64_t y_ld,
              const float *bias, int64_t out, int64_t in, int64_t n);
int cuda_gemm_matmul(rt_backend *be, const rt_op_args *a); /* MATMUL with a bf16 x */
int cuda_gemm_glu(rt_backend *be, const rt_op_args *a);
bool cuda_matmul_add_fits(cuda_ctx *c, const rt_op_args *a); /* MATMUL_ADD's shapes (cuBLAS, beta = 1) */
/* MATMUL_ROPE_STORE as one ping-pong wgmma GEMM with QK-norm, RoPE and
 * the KV store in its epilogue (cuda_gemm_glu.cu; VLLM_CUDA_QKV_ROPE=0:
 * the runtime's MATMUL + QK_ROPE_STORE) */
extern "C" bool cuda_matmul_rope_store_fits(cuda_ctx *c, const rt_op_args *a);
extern "C" int cuda_op_matmul_rope_store(rt_backend *be, const rt_op_args *a);
/* MATMUL_GLU with the GLU in a wgmma GEMM's epilogue (cuda_gemm_glu.cu;
 * taken by shape, VLLM_CUDA_GEMM_GLU=0 / 1 override): 1 when it does not
 * take the call, else the launch's status. */
int cuda_gemm_glu_fused(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *h,
                        rt_dtype ht, int64_t h_ld, int64_t f, int64_t in, int64_t n, int act);
/* cuTensorMapEncodeTiled (a PFN_cuTensorMapEncodeTiled_v12000) through the
 * runtime's driver entry point, NULL without it (cuda_flash_wg.cu). */
void *cuda_tma_encode_fn(void);

/* VLLM_CUDA_PROFILE (cuda_profile.cu): per-op GPU time from CUDA events. */
void cuda_profile_install(const rt_op_fn *real);
int cuda_profile_init(void);
void cuda_profile_report(void);

/* What the kernels handle (the answer behind supports_op). */
bool cuda_matmul_supports(rt_dtype w);
bool cuda_float_or_quant(rt_dtype t); /* has a device decoder (cuda_dequant.cuh) */

#endif
