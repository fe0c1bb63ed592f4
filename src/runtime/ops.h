/* ops — the op set and its registry keyed by (op, device).
 *
 * Model code calls the typed wrappers below (rt_matmul, rt_rmsnorm, ...).
 * Each wrapper checks shapes and dtypes, packs an rt_op_args and dispatches
 * to the kernel that the backend registered for the tensors' device. A
 * backend registers kernels from its *_backend_register() hook with
 * rt_op_register(). All float activations are f32 unless stated.
 *
 * Shapes (row-major, outermost first; n = tokens, d = hidden,
 * h = heads, kvh = kv heads, hd = head_dim, V = vocab):
 *   EMBED      dst[n,d] f32  <- table[V,d] (any dtype) at ids[n] i32
 *   MATMUL     dst[n,out] f32 = x[n,in] f32 · w[out,in]^T (w any dtype)
 *              (+ bias[out] f32 when src[2] != NULL). x and dst may be bf16
 *              on backends that ask for bf16 activations (rt_backend_act_dtype).
 *   RMSNORM    dst[r,d] = x[r,d] * rsqrt(mean(x^2) + eps) * (w_offset + w[d])
 *              (in place allowed; use a [n*h, hd] view for per-head QK-norm)
 *   ROPE       x[n,h,hd] rotated in place; pos[n] i32; inv_freq[rot_dim/2] f32
 *              (already scaled: llama3/linear scaling are folded into
 *              inv_freq by the caller). neox=false rotates pairs (2i,2i+1)
 *              (GGUF/llama2.c "normal" layout), neox=true rotates (i, i+rot/2)
 *              (HF rotate_half). Dims >= rot_dim pass through. cos/sin are
 *              multiplied by attn_factor.
 *   GLU        dst[n,f] = act(gate[n,f]) * up[n,f]; act = SiLU or GELU(tanh)
 *   ADD        dst = a + b (same shape; in place allowed)
 *   SCALE      dst = a * s
 *   SOFTMAX    dst[r,c] = softmax over c of src[r,c] (in place allowed)
 *   ATTENTION  dst[n,h,hd] f32 = causal GQA attention of q[n,h,hd] f32 over
 *              k_cache[ctx,kvh,hd], v_cache[ctx,kvh,hd] (f32 or f16).
 *              Query i is at absolute position n_past+i and sees keys
 *              0..n_past+i (and only the last `window` of them if window>0).
 *              score = (q·k)*scale, then softcap*tanh(score/softcap) if
 *              softcap>0. The caller has already stored this step's K/V.
 *   KV_STORE   cache[slots, kvh, hd] (any leading view: [num_blocks, B, kvh, hd]
 *              is slot-major) gets src[T, kvh, hd] row t at slot slots[t] (i32);
 *              slot < 0 skips the row (padding). f32 src into f32/f16/bf16 cache.
 *   PAGED_ATTENTION  dst[T,h,hd] = causal GQA attention for a varlen batch
 *              of sequences over a paged cache k/v[num_blocks, B, kvh, hd].
 *              Sequence s owns query rows [qsl[s], qsl[s+1]) (qsl i32[S+1])
 *              and has seq_lens[s] tokens in the cache incl. this step's, so
 *              its query row i sits at position seq_lens[s] - q_len + i and
 *              sees keys 0..pos (last `window` only if window > 0). Key j of
 *              s lives in block block_tables[s, j / B] (i32 [S, max_blocks]),
 *              slot j % B. scale/softcap as ATTENTION. q and dst f32, or
 *              both bf16 where the backend asks for bf16 activations.
 *   COPY       dst <- src, same shape, dtype conversion f32<->f16/bf16 and
 *              quantized->f32 allowed; strided views allowed.
 *   ARGMAX     dst[r] i32 = argmax over the last dim of src[r,c] f32
 *              (lowest index wins ties).
 *   SAMPLE     dst[r] i32 = one token per row of logits src[0] f32 [r,V]
 *              (contiguous; overwritten: used as scratch), drawn as the
 *              host sampler (sample/batch.h) does for a row that needs only
 *              penalties, temperature, min_p, top_k, top_p: NaN -> -inf,
 *              penalties over the row's history, then argmax (temperature
 *              0, lowest id on ties) or temperature -> min_p -> top_k ->
 *              top_p -> inverse-CDF draw in id order with the row's uniform.
 *              src[1] f32 [r, RT_SAMPLE_NF] and src[2] i32 [r, RT_SAMPLE_NI]:
 *              per-row parameters (columns below); src[3] i32 [n_hist]: the
 *              histories, row i's prompt ids at [hist_off, +n_prompt) then
 *              its output ids (+n_output); NULL when every history is empty.
 *              src[4] i32 [r,V]: counting scratch for the penalties, all
 *              zero on entry and left zero (backends that need it; required
 *              with src[3]). Ids in histories must be in [0, V).
 *   COMBINE    dst[pos[j]] = vals[sel[j]] for j < n: dst i32 [N] (contiguous,
 *              written in place), src[0] vals i32 [P], src[1] pos i32 [n],
 *              src[2] sel i32 [n] (all contiguous, on the device). Async
 *              scheduling splices the ids the previous step sampled (kept on
 *              the device) into the next step's input ids and sampler
 *              history. pos must not repeat. An entry with an index out of
 *              range is not written and fails the op: at once on the CPU
 *              (which then writes no entry), at the next sync / event wait
 *              on accelerators (the indices are device data).
 *
 * Fused ops (a decode layer is ~20 small kernels on a GPU; these cut it).
 * Each equals the sequence of unfused ops it replaces, and the wrappers fall
 * back to that sequence when the backend has no kernel for the fused op:
 *   ADD_RMSNORM  x[r,d] += res[r,d]; dst[r,d] = RMSNORM(x) (w, eps, w_offset).
 *              src = {x (updated in place), res, w}; dst may be res itself.
 *              res may be bf16 (GPU backends, tensor parallelism: the bf16
 *              all-reduce sum; widened exactly, then added in f32).
 *   QK_ROPE_STORE  per token t of q[n,h,hd], k[n,kvh,hd], v[n,kvh,hd] (f32,
 *              or all four with dst bf16 on a backend with bf16 activations:
 *              math in f32, q rounded once into dst; head rows contiguous, tokens may be strided views of one
 *              fused QKV output): q head rows -> RMSNORM(q_norm) (when
 *              given) -> ROPE -> dst[n,h,hd] (may be q itself); k head rows
 *              -> RMSNORM(k_norm) -> ROPE -> KV_STORE into k_cache at
 *              slots[t]; v -> KV_STORE into v_cache. v is not modified;
 *              k's contents are unspecified afterwards (the fallback works
 *              in place). src = {q, k, v, pos, inv_freq, slots}; the caches,
 *              the norm weights and the scalars in p.rope_store.
 *   MATMUL_GLU dst[n,f] = act(x[n,d] . Wg^T) * (x . Wu^T) for a stacked
 *              w[2f,d] = [Wg; Wu] (rows 0..f-1 gate, f..2f-1 up): MATMUL into
 *              scratch[n,2f] (f32, contiguous; contents unspecified after)
 *              then GLU of its halves, or one kernel where the backend has
 *              one (GPU decode: the GLU in the GEMV's epilogue).
 *              src = {x, w, scratch}; p.glu.act.
 *   MATMUL3    three MATMULs over one x without bias: dst = x . W0^T,
 *              y1 = x . W1^T, y2 = x . W2^T (each as MATMUL; the weights
 *              may differ in dtype and rows). src = {x, w0, w1, w2};
 *              p.mm3.y1, p.mm3.y2. Where q, k and v weights are not one
 *              stacked matrix (their GGUF types differ), one launch
 *              instead of three (GPU decode).
 *   MATMUL_ADD dst[n,out] += x[n,d] . W^T (+ bias): dst f32 (the residual
 *              stream, updated in place), x f32 or bf16. src = {x, w, bias,
 *              scratch}; scratch f32 [n, out] is used by the fallback only
 *              (MATMUL into it, then ADD). A GPU runs one GEMM that reads dst
 *              as its C operand (cuBLAS beta = 1): the residual add costs
 *              the GEMM's epilogue a read instead of a kernel that reads the
 *              GEMM's output and the residual and writes the residual back,
 *              and the next norm is a plain RMSNORM (prefill: 28 -> 12 bytes
 *              a hidden value, f32 residual). Models use it only where
 *              rt_matmul_add_native says the backend has it for the call.
 *   MATMUL_ROPE_STORE  the stacked QKV projection and QK_ROPE_STORE in one:
 *              qkv[n, (h + 2 kvh) hd] = x[n,d] . Wqkv^T (no bias), then
 *              QK_ROPE_STORE of its q, k and v column blocks (dst [n,h,hd],
 *              the caches, the norm weights and scalars as QK_ROPE_STORE).
 *              src = {x, w, qkv, pos, inv_freq, slots}; p.rope_store. The
 *              fallback writes qkv and runs the two ops; a GPU kernel may
 *              never write qkv (its contents are unspecified after) and
 *              does the norm, the rotation and the stores in its GEMM's
 *              epilogue (prefill: the QKV product is not written and read
 *              back).
 */
#ifndef RT_OPS_H
#define RT_OPS_H

#include "runtime/backend.h"

typedef enum {
    RT_OP_EMBED = 0,
    RT_OP_MATMUL,
    RT_OP_RMSNORM,
    RT_OP_ROPE,
    RT_OP_GLU,
    RT_OP_ADD,
    RT_OP_SCALE,
    RT_OP_SOFTMAX,
    RT_OP_ATTENTION,
    RT_OP_COPY,
    RT_OP_ARGMAX,
    RT_OP_KV_STORE,
    RT_OP_PAGED_ATTENTION,
    RT_OP_SAMPLE,
    RT_OP_ADD_RMSNORM,
    RT_OP_QK_ROPE_STORE,
    RT_OP_MATMUL_GLU,
    RT_OP_COMBINE,
    RT_OP_MATMUL3,
    RT_OP_MATMUL_ADD,
    RT_OP_MATMUL_ROPE_STORE,
    RT_OP_COUNT
} rt_op;

/* SAMPLE parameter columns. f32: temperature (0: greedy; else the
 * effective one, >= 1e-2), top_p (1: off), min_p (0: off), logf(min_p)
 * (-inf when off: backends whose logf may differ from the host's use it),
 * repetition (1: off), frequency and presence penalties (0: off). i32:
 * top_k (0: off, else 1..V-1), history offset, prompt ids used (0 unless
 * repetition is on), output ids, and the row's uniform in [0, 1) as the
 * low and high 32 bits of an IEEE double. */
enum { RT_SAMPLE_TEMP, RT_SAMPLE_TOP_P, RT_SAMPLE_MIN_P, RT_SAMPLE_LOG_MIN_P, RT_SAMPLE_REP, RT_SAMPLE_FREQ,
       RT_SAMPLE_PRES, RT_SAMPLE_NF = 8 };
enum { RT_SAMPLE_TOP_K, RT_SAMPLE_HIST_OFF, RT_SAMPLE_N_PROMPT, RT_SAMPLE_N_OUTPUT, RT_SAMPLE_U_LO, RT_SAMPLE_U_HI,
       RT_SAMPLE_NI = 8 };

typedef enum { RT_ACT_SILU = 0, RT_ACT_GELU_TANH = 1 } rt_act;

typedef struct {
    rt_tensor *dst;
    const rt_tensor *src[6];
    union {
        struct { float eps, w_offset; } rmsnorm;
        struct { int rot_dim; int neox; float attn_factor; } rope;
        struct { int act; } glu;
        struct { rt_tensor *y1, *y2; } mm3;
        struct { float s; } scale;
        /* shard: the table holds vocab rows [base, base + rows) of a
         * vocab-parallel embedding; other ids give zero rows (summed over
         * the ranks by an all-reduce). 0: every id must be a row. */
        struct { int shard; int64_t base; } embed;
        struct { int64_t n_past; float scale, softcap; int32_t window; } attn;
        struct { float scale, softcap; int32_t window; } paged;
        struct {
            rt_tensor *k_cache, *v_cache;        /* [..., kvh, hd] f32/f16/bf16, contiguous */
            const rt_tensor *q_norm, *k_norm;    /* [hd] f32, or NULL: no QK-norm */
            float eps, w_offset;                 /* of the QK-norm */
            int rot_dim, neox;
            float attn_factor;
        } rope_store;
    } p;
} rt_op_args;

typedef int (*rt_op_fn)(rt_backend *be, const rt_op_args *a);

const char *rt_op_name(rt_op op);
void rt_op_register(rt_op op, rt_device dev, rt_op_fn fn);
bool rt_op_supported(rt_backend *be, rt_op op, const rt_op_args *a);
/* Dispatch without the wrapper checks (the wrappers call this). */
int rt_op_exec(rt_backend *be, rt_op op, const rt_op_args *a);
/* The step trace's host times (VLLM_STEP_TRACE=1, this thread): add s
 * seconds to op row (RT_OP_COUNT: a backend copy); take: the three op
 * rows of most host time and the longest call into buf, then reset. */
void rt_op_trace_add(int row, double s);
void rt_op_trace_take(char *buf, size_t n);

/* EMBED: dst f32, or bf16 (a bf16 residual stream; backends that have it:
 * CUDA) rows of table. */
int rt_embed(rt_backend *be, rt_tensor *dst, const rt_tensor *table, const rt_tensor *ids);
/* Vocab-parallel EMBED: table = rows [base, base + rows) of the vocabulary;
 * ids outside them give zero rows (ids < 0 are still an error). */
int rt_embed_shard(rt_backend *be, rt_tensor *dst, const rt_tensor *table, const rt_tensor *ids, int64_t base);
int rt_matmul(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w,
              const rt_tensor *bias);
/* MATMUL3: y0 = x W0^T, y1 = x W1^T, y2 = x W2^T (no bias), as one op
 * where the backend has one, else three MATMULs. */
int rt_matmul3(rt_backend *be, rt_tensor *y0, rt_tensor *y1, rt_tensor *y2, const rt_tensor *x, const rt_tensor *w0,
               const rt_tensor *w1, const rt_tensor *w2);
/* MATMUL_ADD: dst += x W^T (+ bias); dst f32, or bf16 (a bf16 residual
 * stream: the backend's own kernel only, fl_bf16(dst + acc)). scratch: f32
 * [n, out] contiguous, for the fallback (MATMUL + ADD) where the backend
 * has no kernel; NULL is allowed where rt_matmul_add_native is true. */
int rt_matmul_add(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, const rt_tensor *bias,
                  rt_tensor *scratch);
/* Whether the backend runs this MATMUL_ADD as one kernel (else the caller
 * is better off with MATMUL and a fused ADD_RMSNORM after it). */
bool rt_matmul_add_native(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w,
                          const rt_tensor *bias);
/* RMSNORM: dst = x / sqrt(mean(x^2) + eps) * (w_offset + w); x f32 or
 * bf16 (a bf16 residual stream: CUDA), dst f32 or bf16 (CUDA). */
int rt_rmsnorm(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, float eps,
               float w_offset);
int rt_rope(rt_backend *be, rt_tensor *x, const rt_tensor *pos, const rt_tensor *inv_freq,
            int rot_dim, bool neox, float attn_factor);
int rt_glu(rt_backend *be, rt_tensor *dst, const rt_tensor *gate, const rt_tensor *up, rt_act act);
int rt_add(rt_backend *be, rt_tensor *dst, const rt_tensor *a, const rt_tensor *b);
int rt_scale(rt_backend *be, rt_tensor *dst, const rt_tensor *a, float s);
int rt_softmax(rt_backend *be, rt_tensor *dst, const rt_tensor *src);
int rt_attention(rt_backend *be, rt_tensor *dst, const rt_tensor *q, const rt_tensor *k_cache,
                 const rt_tensor *v_cache, int64_t n_past, float scale, float softcap,
                 int32_t window);
int rt_copy(rt_backend *be, rt_tensor *dst, const rt_tensor *src);
int rt_argmax(rt_backend *be, rt_tensor *dst, const rt_tensor *src);
/* src: logits, fparams, iparams, hist (may be NULL), counts (NULL unless hist) */
/* One row of SAMPLE's parameters (f [RT_SAMPLE_NF], i [RT_SAMPLE_NI]) from
 * the effective values (temperature 0: greedy; top_p 1, min_p 0, top_k 0,
 * repetition 1, frequency / presence 0: off), the row's history layout
 * (hist_off, n_prompt, n_output; zeros without penalties) and its uniform
 * u in [0, 1). */
void rt_sample_row(float *f, int32_t *i, float temperature, float top_p, float min_p, int32_t top_k, float repetition,
                   float frequency, float presence, int32_t hist_off, int32_t n_prompt, int32_t n_output, double u);
int rt_sample(rt_backend *be, rt_tensor *dst, rt_tensor *logits, const rt_tensor *fparams, const rt_tensor *iparams,
              const rt_tensor *hist, const rt_tensor *counts);
/* dst[pos[j]] = vals[sel[j]], j < n (COMBINE) */
int rt_combine(rt_backend *be, rt_tensor *dst, const rt_tensor *vals, const rt_tensor *pos, const rt_tensor *sel);
int rt_kv_store(rt_backend *be, rt_tensor *cache, const rt_tensor *src, const rt_tensor *slots);
/* src[0..5] = q, k_cache, v_cache, block_tables, qsl, seq_lens */
int rt_paged_attention(rt_backend *be, rt_tensor *dst, const rt_tensor *q, const rt_tensor *k_cache,
                       const rt_tensor *v_cache, const rt_tensor *block_tables,
                       const rt_tensor *qsl, const rt_tensor *seq_lens, float scale,
                       float softcap, int32_t window);

/* Fused ops (see the table above). */
int rt_add_rmsnorm(rt_backend *be, rt_tensor *dst, rt_tensor *x, const rt_tensor *res, const rt_tensor *w,
                   float eps, float w_offset);
typedef struct {
    const rt_tensor *q_norm, *k_norm; /* [hd] f32 or NULL */
    float eps, w_offset;              /* QK-norm */
    const rt_tensor *pos, *inv_freq;  /* as ROPE */
    int rot_dim;
    bool neox;
    float attn_factor;
    rt_tensor *k_cache, *v_cache;     /* as KV_STORE */
    const rt_tensor *slots;
} rt_rope_store_params;
int rt_qk_rope_store(rt_backend *be, rt_tensor *dst, const rt_tensor *q, const rt_tensor *k, const rt_tensor *v,
                     const rt_rope_store_params *p);
int rt_matmul_glu(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, rt_act act,
                  rt_tensor *scratch);
/* MATMUL_ROPE_STORE: qkv [n, (h + 2 kvh) hd] (the caches give kvh) */
int rt_matmul_rope_store(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, rt_tensor *qkv,
                         const rt_rope_store_params *p);

#endif
