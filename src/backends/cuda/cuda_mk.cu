/* cuda_mk — the megakernel lab: a chain of dependent bf16 GEMV phases run
 * by one persistent kernel with grid-wide barriers between phases, and
 * the weights streamed by a producer warp that never waits for them.
 *
 * Why: at batch 1 a decode step is ~8 kernels a layer; each costs a launch
 * gap (hidden in part by PDL), a ramp (a GEMV starts with nothing in
 * flight) and a tail (its last wave), so the 0.6B step runs at 0.29 of the
 * weight-bandwidth roofline and the 8B at 0.80 (issue 6's gates: 0.90).
 * Weights do not depend on activations: a producer that streams the next
 * phases' weight rows into shared memory while the consumers wait at a
 * grid barrier for the previous phase's output keeps the memory system
 * busy across the barrier. This file measures that idea on the layer's
 * GEMV chain alone (no norms, rope or attention): if the chain streams
 * near the copy rate, the decode megakernel is worth building around it.
 *
 * The chain: phase i computes out_i = W_i v_i (+ res_i) over bf16 W_i
 * [R_i, C_i] (row-major, rows 16-byte aligned, C_i % 256 == 0) and f32 v;
 * GLU phases (stacked gate | up rows, as MATMUL_GLU) give silu(gate) *
 * up, R_i / 2 outputs. v_i is x or an earlier phase's output (its first
 * C_i values), optionally RMS-normalised (each CTA normalises the whole
 * vector itself: no extra barrier); res_i, x or an earlier output, makes
 * the phase a residual add. So a decode layer without attention is four
 * phases: norm + QKV, Wo + residual (the attention output's stand-in:
 * the first q_dim values of QKV), norm + gate|up, down + residual. Every
 * out_i is kept (f32, one buffer) so a test can check each phase.
 *
 * Kernel (grid: one CTA an SM, cooperative launch so all are resident;
 * 288 threads): warp 0 is the producer, warps 1-8 the consumers. CTA b
 * owns rows [b R / P, (b + 1) R / P) of a phase (GLU: those outputs, their
 * gate and up rows). Its rows are cut into chunks of one ring stage
 * (MK_SB bytes): whole rows when they fit, else one row's column range
 * (a multiple of 256 values). The producer walks every phase's chunks in
 * order: waits for the stage to be free, then one 1-D bulk copy (two for
 * GLU: gate rows, up rows) onto the stage's "full" mbarrier with the byte
 * count. The consumers, per phase: wait for the grid counter (every CTA
 * done with the previous phase), load v into shared memory (f32), zero
 * the row accumulators, then per chunk: wait "full"; a warp takes whole
 * rows of the chunk (8 or more rows) or a share of one row's 8-value
 * vectors (8 / rows warps a row), lanes stride the vectors, the warp's
 * sum goes into the row's accumulator by a shared atomic add, and each
 * warp arrives on "empty"; after the last chunk they
 * write the outputs (GLU: silu(g) * u) and thread 0 publishes the phase
 * (fence, atomic add on the grid counter). The counter is zeroed before
 * each launch (a memset on the stream).
 * Sums: per lane over its vectors, then the lanes' shuffle tree, then
 * the warps of a row (and a long row's column ranges) in shared-atomic
 * order: not deterministic in the last bits (a lab; the test allows f32
 * reordering).
 */
#include "backends/cuda/cuda_internal.h"

#include "backends/cuda/cuda_flash_wgmma.cuh" /* mbarrier helpers */

#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#define MK_SB 16384       /* bytes a ring stage */
#define MK_MAX_ACC 2048   /* row accumulators a CTA (rows of a phase, GLU: gate + up) */
#define MK_THREADS 288    /* producer warp + 8 consumer warps */
#define MK_SMEM_MAX 232448 /* 227 KB: a block's opt-in limit on sm_90 */

/* One phase, as the device reads it. */
struct mk_phase {
    const __nv_bfloat16 *w; /* [rows][cols] */
    const float *in;        /* v: cols floats */
    const float *nw;        /* RMSNorm weight (cols) applied to v first; NULL: none */
    const float *res;       /* out = res + W v (rows floats); NULL: none */
    float *out;             /* rows (GLU: rows / 2) floats */
    int64_t rows, cols;     /* W's */
    int glu;
    float eps;
};

/* Chunking of a CTA's share of phase p: outputs [o0, o1) (GLU: gate rows
 * o0.., up rows f + o0..); cr rows a chunk of cc columns each. */
struct mk_share {
    int64_t o0, o1, cr, cc;
};
__host__ __device__ inline mk_share mk_share_of(const mk_phase &p, int b, int P) {
    mk_share s;
    const int64_t outs = p.glu ? p.rows / 2 : p.rows, h = p.glu ? 2 : 1;
    s.o0 = outs * b / P;
    s.o1 = outs * (b + 1) / P;
    const int64_t row_b = p.cols * 2 * h; /* bytes of one output's rows */
    if (row_b <= MK_SB) {
        s.cc = p.cols;
        s.cr = MK_SB / row_b;
    } else {
        s.cr = 1;
        s.cc = (MK_SB / (2 * h)) / 256 * 256;
    }
    return s;
}

__device__ __forceinline__ void mk_bulk(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ unsigned mk_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__global__ void __launch_bounds__(MK_THREADS, 1)
    k_mk_chain(const mk_phase *__restrict__ ph, int n_phase, int max_cols, int ns, unsigned *cnt) {
    extern __shared__ __align__(16) uint8_t mk_sm[];
    float *xs = (float *)mk_sm;                   /* v: max_cols floats */
    float *acc = xs + max_cols;                   /* MK_MAX_ACC floats */
    uint8_t *ring = (uint8_t *)(acc + MK_MAX_ACC); /* ns stages, 16-byte aligned (max_cols % 256 == 0) */
    const uint32_t ring_a = (uint32_t)__cvta_generic_to_shared(ring);
    const uint32_t bars = ring_a + (uint32_t)ns * MK_SB; /* full[ns], empty[ns] */
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31, P = (int)gridDim.x, b = (int)blockIdx.x;
    if (tid == 0) {
        for (int s = 0; s < ns; s++) {
            flw_bar_init(bars + 8 * s, 1);        /* full: the producer's expect + bytes */
            flw_bar_init(bars + 8 * (ns + s), 8); /* empty: the 8 consumer warps */
        }
        flw_bar_init_fence();
    }
    __syncthreads();
    if (warp == 0) { /* producer */
        if (lane == 0) {
            int st = 0;
            uint32_t par = 0;
            for (int i = 0; i < n_phase; i++) {
                const mk_phase p = ph[i];
                const mk_share s = mk_share_of(p, b, P);
                const int64_t f = p.glu ? p.rows / 2 : 0;
                for (int64_t r0 = s.o0; r0 < s.o1; r0 += s.cr) {
                    const int64_t nr = s.o1 - r0 < s.cr ? s.o1 - r0 : s.cr;
                    for (int64_t c0 = 0; c0 < p.cols; c0 += s.cc) {
                        const int64_t nc = p.cols - c0 < s.cc ? p.cols - c0 : s.cc;
                        flw_bar_wait(bars + 8 * (ns + st), par ^ 1); /* the consumers freed the stage */
                        const uint32_t full = bars + 8 * st, dst = ring_a + (uint32_t)st * MK_SB;
                        /* whole rows: one copy of nr rows; a column range: one row's */
                        const uint32_t bytes = (uint32_t)((nc == p.cols ? nr * p.cols : nc) * 2);
                        flw_bar_expect(full, bytes * (p.glu ? 2u : 1u));
                        mk_bulk(dst, p.w + r0 * p.cols + c0, bytes, full);
                        if (p.glu) mk_bulk(dst + bytes, p.w + (f + r0) * p.cols + c0, bytes, full);
                        if (++st == ns) st = 0, par ^= 1;
                    }
                }
            }
            /* leave only once every copy has landed and been consumed */
            for (int k = 0; k < ns; k++) {
                flw_bar_wait(bars + 8 * (ns + st), par ^ 1);
                if (++st == ns) st = 0, par ^= 1;
            }
        }
        return;
    }
    const int ct = tid - 32, cw = warp - 1; /* consumer thread 0 .. 255, warp 0 .. 7 */
    __shared__ float red[8];                 /* the norm's warp sums */
    int st = 0;
    uint32_t par = 0;
    for (int i = 0; i < n_phase; i++) {
        const mk_phase p = ph[i];
        const mk_share s = mk_share_of(p, b, P);
        if (i > 0) { /* every CTA done with phase i - 1: its output (this phase's input) is complete */
            if (ct == 0) {
                while (mk_ld_acquire(cnt) < (unsigned)(i * P)) __nanosleep(64);
                __threadfence();
            }
            flw_named_sync(1, 256);
        }
        /* v: written by other CTAs in this kernel, so through L2 (coherent), not the read-only path */
        float ss = 0.0f;
        for (int64_t k = ct; k < p.cols / 4; k += 256) {
            const float4 v = __ldcg((const float4 *)p.in + k);
            ((float4 *)xs)[k] = v;
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        const int64_t nout = s.o1 - s.o0, nacc = nout * (p.glu ? 2 : 1);
        for (int64_t k = ct; k < nacc; k += 256) acc[k] = 0.0f;
        if (p.nw) { /* v = rmsnorm(v) * nw, every CTA over the whole row (a few KB from L2) */
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (lane == 0) red[cw] = ss;
            flw_named_sync(1, 256);
            float t = 0.0f;
            for (int k = 0; k < 8; k++) t += red[k];
            const float sc = 1.0f / sqrtf(t / (float)p.cols + p.eps);
            for (int64_t k = ct; k < p.cols / 4; k += 256) {
                float4 v = ((float4 *)xs)[k];
                const float4 g = ((const float4 *)p.nw)[k];
                v.x = v.x * sc * g.x, v.y = v.y * sc * g.y, v.z = v.z * sc * g.z, v.w = v.w * sc * g.w;
                ((float4 *)xs)[k] = v;
            }
        }
        flw_named_sync(1, 256);
        for (int64_t r0 = s.o0; r0 < s.o1; r0 += s.cr) {
            const int64_t nr = s.o1 - r0 < s.cr ? s.o1 - r0 : s.cr;
            for (int64_t c0 = 0; c0 < p.cols; c0 += s.cc) {
                const int64_t nc = p.cols - c0 < s.cc ? p.cols - c0 : s.cc;
                flw_bar_wait(bars + 8 * st, par);
                const uint4 *wv = (const uint4 *)(ring + (size_t)st * MK_SB);
                const int64_t vpr = nc / 8, nrow = nr * (p.glu ? 2 : 1);
                /* warp cw: whole rows cw, cw + 8, ... when the chunk has 8 or
                 * more; else part cw % wpr of row cw / wpr (wpr warps a row) */
                const int wpr = nrow >= 8 ? 1 : 8 / (int)nrow;
                for (int64_t row = cw / wpr; row < nrow && cw / wpr < nrow; row += 8 / wpr) {
                    const int part = cw % wpr;
                    const int64_t v0 = vpr * part / wpr, v1 = vpr * (part + 1) / wpr;
                    float d = 0.0f;
                    for (int64_t v = v0 + lane; v < v1; v += 32) {
                        const uint4 u = wv[row * vpr + v];
                        const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
                        const int64_t col = c0 + v * 8;
                        const float4 xa = *(const float4 *)(xs + col), xb = *(const float4 *)(xs + col + 4);
                        const float2 f0 = __bfloat1622float2(h2[0]), f1 = __bfloat1622float2(h2[1]);
                        const float2 f2 = __bfloat1622float2(h2[2]), f3 = __bfloat1622float2(h2[3]);
                        d = fmaf(f0.x, xa.x, d);
                        d = fmaf(f0.y, xa.y, d);
                        d = fmaf(f1.x, xa.z, d);
                        d = fmaf(f1.y, xa.w, d);
                        d = fmaf(f2.x, xb.x, d);
                        d = fmaf(f2.y, xb.y, d);
                        d = fmaf(f3.x, xb.z, d);
                        d = fmaf(f3.y, xb.w, d);
                    }
                    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                    if (lane == 0) { /* GLU chunk: gate rows 0 .. nr-1, then up rows */
                        const int64_t lr = p.glu && row >= nr ? nout + (r0 - s.o0) + (row - nr) : (r0 - s.o0) + row;
                        atomicAdd(&acc[lr], d);
                    }
                }
                __syncwarp();
                if (lane == 0) flw_bar_arrive(bars + 8 * (ns + st)); /* this warp is done with the stage */
                if (++st == ns) st = 0, par ^= 1;
            }
        }
        flw_named_sync(1, 256); /* every accumulator complete */
        for (int64_t k = ct; k < nout; k += 256) {
            float y = acc[k];
            if (p.glu) {
                const float g = y;
                y = g / (1.0f + expf(-g)) * acc[nout + k];
            } else if (p.res) {
                y += __ldcg(p.res + s.o0 + k);
            }
            p.out[s.o0 + k] = y;
        }
        flw_named_sync(1, 256); /* outputs written; acc and xs free */
        if (ct == 0) {
            __threadfence();
            atomicAdd(cnt, 1u);
        }
    }
}

/* A prepared chain: the phase table on the device, the grid counter. */
struct cuda_mk_plan {
    cuda_ctx *c;
    mk_phase *d_ph;
    unsigned *d_cnt;
    int n, max_cols, ns;
    size_t smem;
};

extern "C" {

/* Phase i: w[i] bf16 [R_i, C_i] on this backend, contiguous; glu[i]:
 * stacked gate | up rows (SiLU(gate) * up, R_i / 2 outputs); its input v
 * is output in_from[i] (an earlier phase's; -1: x), its first C_i values,
 * RMS-normalised by norm_w[i] (f32 C_i; NULL: none; eps); res_from[i]
 * (an earlier phase's output or -1: x; -2: none; not with GLU) is added
 * to its R_i outputs. Phase outputs lie one after another in out (f32).
 * NULL (error set) when the chain does not fit the lab's limits. */
cuda_mk_plan *cuda_mk_plan_create(rt_backend *be, int n, const rt_tensor *const *w, const int *glu, const int *in_from,
                                  const rt_tensor *const *norm_w, const int *res_from, float eps, const rt_tensor *x,
                                  rt_tensor *out) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (n <= 0 || n > 4096) {
        vc_err_set(VC_ERR_INVALID, "cuda mk: %d phases", n);
        return NULL;
    }
    mk_phase *h = (mk_phase *)calloc((size_t)n, sizeof *h);
    int64_t *len = (int64_t *)calloc((size_t)n, sizeof *len);
    if (!h || !len) {
        free(h), free(len);
        vc_err_set(VC_ERR_OOM, "cuda mk: phase table");
        return NULL;
    }
    int64_t off = 0, max_cols = 0, avail = rt_tensor_nelem(out);
    const int64_t x_len = rt_tensor_nelem(x);
    for (int i = 0; i < n; i++) {
        const rt_tensor *t = w[i], *nw = norm_w ? norm_w[i] : NULL;
        const int64_t R = t->shape[0], C = t->shape[1], nout = glu[i] ? R / 2 : R;
        const int fi = in_from[i], ri = res_from ? res_from[i] : -2;
        const int64_t in_len = fi < 0 ? x_len : fi < i ? len[fi] : -1;
        const int64_t res_len = ri == -2 ? nout : ri == -1 ? x_len : ri >= 0 && ri < i ? len[ri] : -1;
        if (t->dtype != RT_BF16 || t->ndim != 2 || t->stride[1] != 2 || t->stride[0] != C * 2 || C % 256 ||
            (uintptr_t)t->data % 16 || (glu[i] && R % 2) || fi < -1 || C > in_len || res_len < nout ||
            (glu[i] && ri != -2) || (nw && (nw->dtype != RT_F32 || rt_tensor_nelem(nw) < C)) || off + nout > avail ||
            (nout + c->n_sm - 1) / c->n_sm * (glu[i] ? 2 : 1) > MK_MAX_ACC) {
            free(h), free(len);
            vc_err_set(VC_ERR_UNSUPPORTED, "cuda mk: phase %d ([%lld, %lld]) outside the lab's limits", i, (long long)R,
                       (long long)C);
            return NULL;
        }
        h[i].w = (const __nv_bfloat16 *)t->data;
        h[i].in = fi < 0 ? (const float *)x->data : h[fi].out;
        h[i].nw = nw ? (const float *)nw->data : NULL;
        h[i].res = ri == -2 ? NULL : ri == -1 ? (const float *)x->data : h[ri].out;
        h[i].out = (float *)out->data + off;
        h[i].rows = R;
        h[i].cols = C;
        h[i].glu = glu[i];
        h[i].eps = eps;
        len[i] = nout;
        off += nout;
        if (C > max_cols) max_cols = C;
    }
    free(len);
    const size_t fixed = (size_t)max_cols * 4 + MK_MAX_ACC * 4 + 1024;
    const int ns = (int)((MK_SMEM_MAX - fixed) / (MK_SB + 16));
    if (ns < 2) {
        free(h);
        vc_err_set(VC_ERR_UNSUPPORTED, "cuda mk: rows of %lld values leave no ring", (long long)max_cols);
        return NULL;
    }
    cuda_mk_plan *p = (cuda_mk_plan *)calloc(1, sizeof *p);
    if (!p || cuda_enter(c) < 0) {
        free(h), free(p);
        vc_err_set(VC_ERR_RUNTIME, "cuda mk: plan");
        return NULL;
    }
    p->c = c, p->n = n, p->max_cols = (int)max_cols, p->ns = ns;
    p->smem = (size_t)max_cols * 4 + MK_MAX_ACC * 4 + (size_t)ns * MK_SB + (size_t)ns * 16;
    if (cudaMalloc(&p->d_ph, (size_t)n * sizeof *h) != cudaSuccess || cudaMalloc(&p->d_cnt, sizeof(unsigned)) != cudaSuccess ||
        cudaMemcpy(p->d_ph, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaFuncSetAttribute(k_mk_chain, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->smem) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(p->d_ph), cudaFree(p->d_cnt);
        free(h), free(p);
        vc_err_set(VC_ERR_RUNTIME, "cuda mk: device set-up");
        return NULL;
    }
    free(h);
    return p;
}

/* Queues one run of the chain on the backend's stream. */
int cuda_mk_plan_run(cuda_mk_plan *p) {
    cuda_ctx *c = p->c;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    CU_TRY(cudaMemsetAsync(p->d_cnt, 0, sizeof(unsigned), c->stream));
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative; /* every CTA resident: the grid barrier needs it */
    at[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)c->n_sm);
    cfg.blockDim = dim3(MK_THREADS);
    cfg.dynamicSmemBytes = p->smem;
    cfg.stream = c->stream;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    const mk_phase *ph = p->d_ph;
    CU_TRY(cudaLaunchKernelEx(&cfg, k_mk_chain, ph, p->n, p->max_cols, p->ns, p->d_cnt));
    return VC_OK;
}

void cuda_mk_plan_free(cuda_mk_plan *p) {
    if (!p) return;
    if (cuda_enter(p->c) >= 0) {
        cudaFree(p->d_ph);
        cudaFree(p->d_cnt);
    }
    free(p);
}

} /* extern "C" */
