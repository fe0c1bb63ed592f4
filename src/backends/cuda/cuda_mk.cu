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
 * Measured (session 15, docs/BENCHMARKS.md "The megakernel lab on the
 * device"): no variant here beats the engine's separate kernels on the
 * 0.6B chain (0.24-0.33 of d2d vs 0.44), and on the 8B chain the best
 * (k_mk_chain, 64 KB stages, MODE 24: 0.85) stays below them (0.88). A
 * phase costs 2.9-5.3 us of latency even without data (tiny layers; the
 * engine: 1.7 us a GEMV with its norms), so grid barriers in software are
 * slower than graphed kernel boundaries with PDL on this device.
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
 * out_i is kept (f32, one buffer) so a test can check each phase. An
 * attention phase (CUDA_MK_ATTN, cuda_mk.h) takes a QKV output: one
 * decode token's q / k RMSNorm, neox rope, the new k, v stored into a
 * paged bf16 cache, and attention over positions 0 .. pos, `splits` CTAs
 * a kv head (work items (kv head, split); the other CTAs go straight to
 * the barrier), the split partials merged by the last CTA of each head
 * (a counter), so the following Wo phase reads a plain vector.
 *
 * Kernel (grid: one CTA an SM, cooperative launch so all are resident;
 * 288 threads): warp 0 is the producer (GEMV phases only), warps 1-8 the consumers. CTA b
 * owns rows [b R / P, (b + 1) R / P) of a phase (GLU: those outputs, their
 * gate and up rows). Its rows are cut into chunks of one ring stage
 * (sb bytes, VLLM_MK_SB, default MK_SB): whole rows when they fit, else one row's column range
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
#include "backends/cuda/cuda_mk.h"

#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#define MK_SB 16384       /* bytes a ring stage (default) */
#define MK_MAX_ACC 2048   /* row accumulators a CTA (rows of a phase, GLU: gate + up) */
#define MK_THREADS 288    /* producer warp + 8 consumer warps */
#define MK_SMEM_MAX 232448 /* 227 KB: a block's opt-in limit on sm_90 */
#define MK_REC 132         /* floats of an attention partial: m, l, 2 unused, o[128] */
#define MK_MAX_G 8         /* q heads a kv head in the attention phase */

/* One phase, as the device reads it. */
struct mk_phase {
    int kind;               /* CUDA_MK_GEMV / CUDA_MK_ATTN */
    const __nv_bfloat16 *w; /* [rows][cols] */
    const float *in;        /* v: cols floats (ATTN: q | k | v) */
    const float *nw;        /* RMSNorm weight (cols) applied to v first; NULL: none */
    const float *res;       /* out = res + W v (rows floats); NULL: none */
    float *out;             /* rows (GLU: rows / 2) floats (ATTN: h x 128) */
    int64_t rows, cols;     /* W's (ATTN: 0, 0: no chunks) */
    int glu;
    float eps;
    /* ATTN */
    __nv_bfloat16 *kc, *vc;  /* [blocks][B][kvh][128] */
    const int32_t *bt;       /* block table */
    const float *inv_freq;   /* 64 */
    const float *qn, *kn;    /* 128 or NULL */
    float *ws;               /* partials: [h][splits][MK_REC] */
    unsigned *hcnt;          /* per kv head: splits done (zeroed per launch) */
    int h, kvh, pos, B, splits;
    float scale;
};

/* Chunking of a CTA's share of phase p: outputs [o0, o1) (GLU: gate rows
 * o0.., up rows f + o0..); cr rows a chunk of cc columns each. */
struct mk_share {
    int64_t o0, o1, cr, cc;
};
__host__ __device__ inline mk_share mk_share_of(const mk_phase &p, int b, int P, int64_t sb) {
    mk_share s;
    const int64_t outs = p.glu ? p.rows / 2 : p.rows, h = p.glu ? 2 : 1;
    s.o0 = outs * b / P;
    s.o1 = outs * (b + 1) / P;
    const int64_t row_b = p.cols * 2 * h; /* bytes of one output's rows */
    if (row_b <= sb) {
        s.cc = p.cols;
        s.cr = sb / row_b;
    } else {
        s.cr = 1;
        s.cc = (sb / (2 * h)) / 256 * 256;
    }
    return s;
}

__device__ __forceinline__ void mk_bulk(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ unsigned mk_ld_relaxed(const unsigned *p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned mk_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* This CTA is done with a phase (its outputs written, a block barrier
 * before): FAST a release reduction, else a fence and an atomic add. */
template <bool FAST> __device__ __forceinline__ void mk_publish(unsigned *cnt) {
    if (FAST) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(cnt) : "memory");
    } else {
        __threadfence();
        atomicAdd(cnt, 1u);
    }
}

/* Where float4 k of v (values 4k .. 4k+3) lives in shared memory: plain,
 * or (XI) the lo half for even k, the hi half for odd k, at k / 2. */
template <bool XI> __device__ __forceinline__ float4 &mk_xslot(float *xs, float *xlo, float *xhi, int64_t k) {
    if (XI) return ((float4 *)((k & 1) ? xhi : xlo))[k >> 1];
    return ((float4 *)xs)[k];
}

/* Head vector (128 values, 4 a lane) RMS-normalised by nw (NULL: not)
 * and rotated (neox: value i pairs with i +- 64, angle pos inv_freq[i %
 * 64]); lane l holds values 4l .. 4l+3. */
__device__ __forceinline__ void mk_norm_rope(float4 &x, const float *nw, const float *inv_freq, int pos, float eps,
                                             int lane) {
    if (nw) {
        float ss = x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float sc = 1.0f / sqrtf(ss / 128.0f + eps);
        const float4 g = ((const float4 *)nw)[lane];
        x.x *= sc * g.x, x.y *= sc * g.y, x.z *= sc * g.z, x.w *= sc * g.w;
    }
    /* partner values i +- 64 live in lane l ^ 16 */
    float4 y;
    y.x = __shfl_xor_sync(0xffffffffu, x.x, 16), y.y = __shfl_xor_sync(0xffffffffu, x.y, 16);
    y.z = __shfl_xor_sync(0xffffffffu, x.z, 16), y.w = __shfl_xor_sync(0xffffffffu, x.w, 16);
    const bool lo = lane < 16; /* values 0 .. 63 */
    float c[4], s[4];
    for (int u = 0; u < 4; u++) sincosf((float)pos * inv_freq[(4 * lane + u) & 63], &s[u], &c[u]);
    /* first half: x c - x' s; second half: x c + x' s (x' the partner) */
    x.x = lo ? x.x * c[0] - y.x * s[0] : x.x * c[0] + y.x * s[0];
    x.y = lo ? x.y * c[1] - y.y * s[1] : x.y * c[1] + y.y * s[1];
    x.z = lo ? x.z * c[2] - y.z * s[2] : x.z * c[2] + y.z * s[2];
    x.w = lo ? x.w * c[3] - y.w * s[3] : x.w * c[3] + y.w * s[3];
}

__device__ __forceinline__ float4 mk_ld_bf16x4(const __nv_bfloat16 *p) {
    const uint2 u = __ldcg((const uint2 *)p);
    const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x), b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}

/* The attention phase's work of one CTA (consumer warps only): item (kv
 * head g, split sp) when b < kvh x splits. Warp cw takes keys k0 + cw,
 * k0 + cw + 8, ... of the split; lane l holds dims 4l .. 4l+3 of the G =
 * h / kvh q heads (q in registers), an online softmax per head per warp,
 * then the 8 warps merge in shared memory (sm: 8 x G x MK_REC floats) and the
 * item's partial goes to ws; the last split of the head to finish merges
 * the head's partials into out. Records: MK_REC floats (m, l, 2 unused,
 * o[128]: o 16-byte aligned). */
__device__ __noinline__ void mk_attn(const mk_phase &p, int b, int cw, int lane, int ct, float *sm) {
    const int G = p.h / p.kvh, L = p.pos + 1;
    if (b >= p.kvh * p.splits) return;
    const int g = b / p.splits, sp = b % p.splits;
    const int k0 = (int)((int64_t)L * sp / p.splits), k1 = (int)((int64_t)L * (sp + 1) / p.splits);
    constexpr int MG = MK_MAX_G; /* G <= 8 (checked on the host) */
    float4 q[MG];
#pragma unroll
    for (int j = 0; j < MG; j++) {
        if (j >= G) break;
        q[j] = __ldcg((const float4 *)(p.in + (int64_t)(g * G + j) * 128) + lane);
        mk_norm_rope(q[j], p.qn, p.inv_freq, p.pos, p.eps, lane);
        q[j].x *= p.scale, q[j].y *= p.scale, q[j].z *= p.scale, q[j].w *= p.scale;
    }
    /* the new token's k, v (the split that holds position pos stores them) */
    const bool mine = k1 == L;
    float4 kn4 = make_float4(0, 0, 0, 0), vn4 = make_float4(0, 0, 0, 0);
    if (mine) {
        const float *kin = p.in + (int64_t)p.h * 128 + (int64_t)g * 128, *vin = kin + (int64_t)p.kvh * 128;
        kn4 = __ldcg((const float4 *)kin + lane);
        vn4 = __ldcg((const float4 *)vin + lane);
        mk_norm_rope(kn4, p.kn, p.inv_freq, p.pos, p.eps, lane);
        /* round as the cache holds them */
        __nv_bfloat162 ka = __floats2bfloat162_rn(kn4.x, kn4.y), kb = __floats2bfloat162_rn(kn4.z, kn4.w);
        __nv_bfloat162 va = __floats2bfloat162_rn(vn4.x, vn4.y), vb = __floats2bfloat162_rn(vn4.z, vn4.w);
        if (cw == 0) {
            const int32_t blk = p.bt[p.pos / p.B];
            const int64_t o = (((int64_t)blk * p.B + p.pos % p.B) * p.kvh + g) * 128 + 4 * lane;
            uint2 ku, vu;
            ku.x = *(uint32_t *)&ka, ku.y = *(uint32_t *)&kb, vu.x = *(uint32_t *)&va, vu.y = *(uint32_t *)&vb;
            *(uint2 *)(p.kc + o) = ku;
            *(uint2 *)(p.vc + o) = vu;
        }
        float2 f;
        f = __bfloat1622float2(ka), kn4.x = f.x, kn4.y = f.y;
        f = __bfloat1622float2(kb), kn4.z = f.x, kn4.w = f.y;
        f = __bfloat1622float2(va), vn4.x = f.x, vn4.y = f.y;
        f = __bfloat1622float2(vb), vn4.z = f.x, vn4.w = f.y;
    }
    float m[MG], l[MG];
    float4 o[MG];
#pragma unroll
    for (int j = 0; j < MG; j++) m[j] = -INFINITY, l[j] = 0.0f, o[j] = make_float4(0, 0, 0, 0);
    for (int t = k0 + cw; t < k1; t += 8) {
        float4 kv, vv;
        if (t == p.pos) {
            kv = kn4, vv = vn4;
        } else {
            const int64_t off = (((int64_t)p.bt[t / p.B] * p.B + t % p.B) * p.kvh + g) * 128 + 4 * lane;
            kv = mk_ld_bf16x4(p.kc + off);
            vv = mk_ld_bf16x4(p.vc + off);
        }
#pragma unroll
        for (int j = 0; j < MG; j++) {
            if (j >= G) break;
            float sdot = q[j].x * kv.x + q[j].y * kv.y + q[j].z * kv.z + q[j].w * kv.w;
            for (int x = 16; x > 0; x >>= 1) sdot += __shfl_xor_sync(0xffffffffu, sdot, x);
            const float mn = fmaxf(m[j], sdot), cr = expf(m[j] - mn), pe = expf(sdot - mn);
            l[j] = l[j] * cr + pe;
            o[j].x = o[j].x * cr + pe * vv.x, o[j].y = o[j].y * cr + pe * vv.y;
            o[j].z = o[j].z * cr + pe * vv.z, o[j].w = o[j].w * cr + pe * vv.w;
            m[j] = mn;
        }
    }
    /* the 8 warps' states -> shared memory (records of MK_REC floats: m,
     * l, 2 unused, o[128]), merged by warp 0 */
#pragma unroll
    for (int j = 0; j < MG; j++) {
        if (j >= G) break;
        float *e = sm + ((int64_t)cw * G + j) * MK_REC;
        if (lane == 0) e[0] = m[j], e[1] = l[j];
        ((float4 *)(e + 4))[lane] = o[j];
    }
    flw_named_sync(1, 256);
    if (cw == 0) {
        for (int j = 0; j < G; j++) {
            float M = -INFINITY;
            for (int w = 0; w < 8; w++) M = fmaxf(M, sm[((int64_t)w * G + j) * MK_REC]);
            float Ls = 0.0f;
            float4 O = make_float4(0, 0, 0, 0);
            for (int w = 0; w < 8; w++) {
                const float *e = sm + ((int64_t)w * G + j) * MK_REC;
                const float f = e[0] == -INFINITY ? 0.0f : expf(e[0] - M);
                const float4 v = ((const float4 *)(e + 4))[lane];
                Ls += f * e[1];
                O.x += f * v.x, O.y += f * v.y, O.z += f * v.z, O.w += f * v.w;
            }
            float *wsp = p.ws + ((int64_t)(g * G + j) * p.splits + sp) * MK_REC;
            if (lane == 0) wsp[0] = M, wsp[1] = Ls;
            ((float4 *)(wsp + 4))[lane] = O;
        }
        __syncwarp();
        /* the last split of head g merges all of them */
        unsigned last = 0;
        if (lane == 0) {
            __threadfence();
            last = atomicAdd(&p.hcnt[g], 1u) == (unsigned)(p.splits - 1);
            if (last) __threadfence();
        }
        last = __shfl_sync(0xffffffffu, last, 0);
        if (last) {
            for (int j = 0; j < G; j++) {
                const float *base = p.ws + (int64_t)(g * G + j) * p.splits * MK_REC;
                float M = -INFINITY;
                for (int k = 0; k < p.splits; k++) M = fmaxf(M, __ldcg(base + (int64_t)k * MK_REC));
                float Ls = 0.0f;
                float4 O = make_float4(0, 0, 0, 0);
                for (int k = 0; k < p.splits; k++) {
                    const float *e = base + (int64_t)k * MK_REC;
                    const float mk = __ldcg(e), f = mk == -INFINITY ? 0.0f : expf(mk - M);
                    const float4 v = __ldcg((const float4 *)(e + 4) + lane);
                    Ls += f * __ldcg(e + 1);
                    O.x += f * v.x, O.y += f * v.y, O.z += f * v.z, O.w += f * v.w;
                }
                const float inv = Ls > 0.0f ? 1.0f / Ls : 0.0f;
                ((float4 *)(p.out + (int64_t)(g * G + j) * 128))[lane] = make_float4(O.x * inv, O.y * inv, O.z * inv, O.w * inv);
            }
        }
    }
    (void)ct;
}

/* Session 15: the consumers, meeting at every stage, are this kernel's
 * limit (8B chain 0.39 of d2d at 16 KB stages with or without the
 * copies, 0.92 with no arithmetic; 64 KB stages with MODE 24: 0.85).
 * MODE bits (VLLM_MK_MODE, the lab's A/B; 1, 2 and 4 give wrong outputs
 * and exist to time the parts): 1 consumers skip the arithmetic (the
 * stream alone), 2 the producer skips the copies (arrives on "full"
 * itself: the consumers alone), 4 no wait at the grid barrier; 8 v in
 * shared memory split in halves (values 8j..8j+3 of every group of 8 in
 * one, 8j+4..8j+7 in the other) so a lane's two float4 reads are
 * consecutive across the warp (no bank conflicts); 16 the barrier
 * published by red.release.gpu and polled by ld.acquire without sleeps
 * (no separate fences). */
template <int MODE>
__global__ void __launch_bounds__(MK_THREADS, 1)
    k_mk_chain(const mk_phase *__restrict__ ph, int n_phase, int max_cols, int att_n, int ns, int sb, unsigned *cnt) {
    constexpr bool NOCOMP = MODE & 1, NOCOPY = MODE & 2, NOBAR = MODE & 4, XI = MODE & 8, FBAR = MODE & 16;
    extern __shared__ __align__(16) uint8_t mk_sm[];
    float *xs = (float *)mk_sm;                          /* v: max_cols floats */
    float *acc = xs + max_cols;                          /* MK_MAX_ACC floats */
    float *att = acc + MK_MAX_ACC;                       /* att_n floats: the attention merge (8 x G records) */
    uint8_t *ring = (uint8_t *)(att + att_n); /* ns stages, 16-byte aligned (max_cols % 256, att_n % 4 == 0) */
    const uint32_t ring_a = (uint32_t)__cvta_generic_to_shared(ring);
    const uint32_t bars = ring_a + (uint32_t)ns * (uint32_t)sb; /* full[ns], empty[ns] */
    float *xlo = xs, *xhi = xs + max_cols / 2; /* MODE 8: the two halves */
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
                if (p.kind != CUDA_MK_GEMV) continue; /* attention reads the cache itself */
                const mk_share s = mk_share_of(p, b, P, sb);
                const int64_t f = p.glu ? p.rows / 2 : 0;
                for (int64_t r0 = s.o0; r0 < s.o1; r0 += s.cr) {
                    const int64_t nr = s.o1 - r0 < s.cr ? s.o1 - r0 : s.cr;
                    for (int64_t c0 = 0; c0 < p.cols; c0 += s.cc) {
                        const int64_t nc = p.cols - c0 < s.cc ? p.cols - c0 : s.cc;
                        flw_bar_wait(bars + 8 * (ns + st), par ^ 1); /* the consumers freed the stage */
                        const uint32_t full = bars + 8 * st, dst = ring_a + (uint32_t)st * (uint32_t)sb;
                        /* whole rows: one copy of nr rows; a column range: one row's */
                        const uint32_t bytes = (uint32_t)((nc == p.cols ? nr * p.cols : nc) * 2);
                        if (NOCOPY) {
                            flw_bar_arrive(full);
                        } else {
                            flw_bar_expect(full, bytes * (p.glu ? 2u : 1u));
                            mk_bulk(dst, p.w + r0 * p.cols + c0, bytes, full);
                            if (p.glu) mk_bulk(dst + bytes, p.w + (f + r0) * p.cols + c0, bytes, full);
                        }
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
        if (i > 0) { /* every CTA done with phase i - 1: its output (this phase's input) is complete */
            if (ct == 0 && !NOBAR) {
                if (FBAR) {
                    while (mk_ld_acquire(cnt) < (unsigned)(i * P)) {
                    }
                } else {
                    while (mk_ld_acquire(cnt) < (unsigned)(i * P)) __nanosleep(64);
                    __threadfence();
                }
            }
            flw_named_sync(1, 256);
        }
        if (p.kind == CUDA_MK_ATTN) {
            mk_attn(p, b, cw, lane, ct, att);
            flw_named_sync(1, 256); /* att free; this CTA's outputs written */
            if (ct == 0) mk_publish<FBAR>(cnt);
            continue;
        }
        const mk_share s = mk_share_of(p, b, P, sb);
        /* v: written by other CTAs in this kernel, so through L2 (coherent), not the read-only path */
        float ss = 0.0f;
        for (int64_t k = ct; k < p.cols / 4; k += 256) {
            const float4 v = __ldcg((const float4 *)p.in + k);
            mk_xslot<XI>(xs, xlo, xhi, k) = v;
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
                float4 &v = mk_xslot<XI>(xs, xlo, xhi, k);
                const float4 g = ((const float4 *)p.nw)[k];
                v.x = v.x * sc * g.x, v.y = v.y * sc * g.y, v.z = v.z * sc * g.z, v.w = v.w * sc * g.w;
            }
        }
        flw_named_sync(1, 256);
        for (int64_t r0 = s.o0; r0 < s.o1; r0 += s.cr) {
            const int64_t nr = s.o1 - r0 < s.cr ? s.o1 - r0 : s.cr;
            for (int64_t c0 = 0; c0 < p.cols; c0 += s.cc) {
                const int64_t nc = p.cols - c0 < s.cc ? p.cols - c0 : s.cc;
                flw_bar_wait(bars + 8 * st, par);
                const uint4 *wv = (const uint4 *)(ring + (size_t)st * (size_t)sb);
                const int64_t vpr = nc / 8, nrow = nr * (p.glu ? 2 : 1);
                /* warp cw: whole rows cw, cw + 8, ... when the chunk has 8 or
                 * more; else part cw % wpr of row cw / wpr (wpr warps a row) */
                const int wpr = nrow >= 8 ? 1 : 8 / (int)nrow;
                for (int64_t row = cw / wpr; !NOCOMP && row < nrow && cw / wpr < nrow; row += 8 / wpr) {
                    const int part = cw % wpr;
                    const int64_t v0 = vpr * part / wpr, v1 = vpr * (part + 1) / wpr;
                    float d = 0.0f;
                    for (int64_t v = v0 + lane; v < v1; v += 32) {
                        const uint4 u = wv[row * vpr + v];
                        const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
                        const int64_t col = c0 + v * 8;
                        const float4 xa = XI ? ((const float4 *)xlo)[col / 8] : *(const float4 *)(xs + col);
                        const float4 xb = XI ? ((const float4 *)xhi)[col / 8] : *(const float4 *)(xs + col + 4);
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
        if (ct == 0) mk_publish<FBAR>(cnt);
    }
}

#define MK3_NW 15                   /* consumer warps of k_mk_chain3 */
#define MK3_THREADS (32 + 32 * MK3_NW) /* + the prefetch warp */
#define MK3_U 8                     /* 16-byte loads in flight a lane */

/* Row r of a phase's CTA share (GLU: gate rows 0 .. nout-1, then up rows)
 * as 8-value vectors. */
__device__ __forceinline__ const uint4 *mk3_row(const mk_phase &p, int o0, int nout, int r) {
    const int64_t wr = r < nout ? (int64_t)o0 + r : p.rows / 2 + o0 + (r - nout);
    return (const uint4 *)(p.w + wr * p.cols);
}

/* Consumer warp w's share of a phase's tv vectors (rows x vectors a row,
 * flattened): [mk3_split(tv, w), mk3_split(tv, w + 1)), cut at multiples
 * of 32 (a row holds a multiple of 32 vectors, so 32 vectors lie in one
 * row). */
__device__ __forceinline__ int mk3_split(int tv, int w) { return (int)((int64_t)tv * w / MK3_NW) / 32 * 32; }

__device__ __forceinline__ void mk3_prefetch(const void *p, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}

/* One batch of a consumer warp's loads: up to MK3_U vectors a lane from
 * vector `base` of its range on (those below z), walking the loads' row /
 * vector (lr, lc) and row pointer lp across row ends. */
__device__ __forceinline__ void mk3_load_batch(uint4 *u, const mk_phase &p, int o0, int nout, int vpr, int lane,
                                               int base, int z, int &lr, int &lc, const uint4 *&lp) {
#pragma unroll
    for (int j = 0; j < MK3_U; j++) {
        if (base + 32 * j < z) {
            u[j] = __ldg(lp + lc + lane);
            lc += 32;
            if (lc == vpr) lc = 0, lr++, lp = mk3_row(p, o0, nout, lr);
        }
    }
}

/* A warp's partial dot product of one row (da + db over its lanes) into
 * the row's accumulator. */
__device__ __forceinline__ void mk3_flush(float da, float db, int lane, float *acc) {
    float d = da + db;
    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    if (lane == 0) atomicAdd(acc, d);
}

/* The chain with direct loads (VLLM_MK_MODE 64; + 1: no prefetch, + 2:
 * the barrier polled with relaxed loads, sleeps and one fence, + 4: no
 * barrier wait): 15 consumer warps split the CTA's share of a phase
 * (rows x 16-byte vectors, flattened) into equal ranges and read the
 * weights from global memory themselves, 8 loads in flight a lane, the
 * first 8 issued before the grid barrier (weights do not depend on the
 * previous phase); one prefetch warp walks every phase's pieces (pv
 * vectors of one warp's range, in the consumers' order: piece k of every
 * warp, then k + 1) issuing bulk L2 prefetches, at most `win` pieces
 * ahead of those the consumers have finished (a shared counter; pieces
 * the consumers passed are skipped), so the memory system streams the
 * next phases' weights while the consumers wait at a grid barrier.
 * Phase set-up and outputs as k_mk_chain's MODE 8 and 16 (v in halves,
 * release / acquire barriers), the norm's scale applied at the end (v
 * times the norm weight at load) and the residual as the accumulators'
 * start (one round trip with v). Session 15 (docs/BENCHMARKS.md): 8B
 * chain 0.78-0.80 of d2d with the prefetcher (0.44 without it), 0.6B
 * 0.27-0.33; a phase's latency 2.9 us without the prefetcher, 5.3 with
 * it (the engine's kernels: 1.7 us a GEMV). The spin loops trap after
 * ~2 s with the state printed (a lab bug, not a wait). */
template <int MODE>
__global__ void __launch_bounds__(MK3_THREADS, 1)
    k_mk_chain3(const mk_phase *__restrict__ ph, int n_phase, int max_cols, int pv, int win, unsigned *cnt) {
    constexpr bool NOPF = MODE & 1, RELAXED = MODE & 2, NOBAR = MODE & 4;
    extern __shared__ __align__(16) uint8_t mk_sm[];
    float *xs = (float *)mk_sm;
    float *acc = xs + max_cols;
    float *att = acc + MK_MAX_ACC;
    const float4 *xlo4 = (const float4 *)xs, *xhi4 = (const float4 *)(xs + max_cols / 2);
    __shared__ unsigned s_done; /* pieces the consumers have finished */
    __shared__ float red[MK3_NW];
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31, P = (int)gridDim.x, b = (int)blockIdx.x;
    if (tid == 0) s_done = 0;
    __syncthreads();
    if (warp == 0) { /* the prefetcher */
        if (lane == 0 && !NOPF) {
            unsigned issued = 0;
            for (int i = 0; i < n_phase; i++) {
                const mk_phase p = ph[i];
                if (p.kind != CUDA_MK_GEMV) continue;
                const int o0 = (int)((p.glu ? p.rows / 2 : p.rows) * b / P);
                const int nout = (int)((p.glu ? p.rows / 2 : p.rows) * (b + 1) / P) - o0;
                const int vpr = (int)(p.cols / 8), nrows = nout * (p.glu ? 2 : 1), tv = nrows * vpr;
                for (int k = 0;; k++) {
                    bool any = false;
                    for (int w = 0; w < MK3_NW; w++) {
                        const int a = mk3_split(tv, w) + k * pv, e = mk3_split(tv, w + 1);
                        if (a >= e) continue;
                        any = true;
                        const int z = a + pv < e ? a + pv : e;
                        /* signed: the consumers (loading for themselves) may be ahead */
                        for (long spin = 0; (int)(issued - *(volatile unsigned *)&s_done) >= win; spin++) {
                            __nanosleep(100);
                            if (spin == (1l << 24)) { /* ~2 s: a lab bug, not a wait */
                                printf("mk3 prefetcher stuck: cta %d phase %d issued %u done %u\n", b, i, issued,
                                       *(volatile unsigned *)&s_done);
                                __trap();
                            }
                        }
                        if ((int)(issued - *(volatile unsigned *)&s_done) < 0) { /* consumed already: skip */
                            issued++;
                            continue;
                        }
                        /* [a, z) in at most two runs of rows (GLU: the gate / up boundary) */
                        const int ra = a / vpr, rz = (z - 1) / vpr;
                        const int cut = p.glu && ra < nout && rz >= nout ? nout * vpr : z;
                        mk3_prefetch(mk3_row(p, o0, nout, ra) + (a - ra * vpr), (uint32_t)(cut - a) * 16u);
                        if (cut < z) mk3_prefetch(mk3_row(p, o0, nout, nout), (uint32_t)(z - cut) * 16u);
                        issued++;
                    }
                    if (!any) break;
                }
            }
        }
        return;
    }
    constexpr int NC = 32 * MK3_NW;
    const int ct = tid - 32, cw = warp - 1;
    for (int i = 0; i < n_phase; i++) {
        const mk_phase p = ph[i];
        /* a GEMV phase's geometry and this warp's first batch of weights
         * before the barrier: they do not depend on the previous phase, so
         * their latency overlaps the wait (the whole share of a small phase) */
        const bool gemv = p.kind == CUDA_MK_GEMV;
        const int outs = (int)(p.glu ? p.rows / 2 : p.rows);
        const int o0 = gemv ? (int)((int64_t)outs * b / P) : 0;
        const int nout = gemv ? (int)((int64_t)outs * (b + 1) / P) - o0 : 0, cols = (int)p.cols;
        const int vpr = gemv ? cols / 8 : 32, tv = nout * (p.glu ? 2 : 1) * vpr;
        const int s0 = mk3_split(tv, cw), e0 = mk3_split(tv, cw + 1);
        int lr = s0 / vpr, lc = s0 - lr * vpr, cr = lr, cc = lc; /* the loads' and the sums' row, vector */
        const uint4 *lp = gemv ? mk3_row(p, o0, nout, lr) : NULL;
        uint4 u[MK3_U];
        mk3_load_batch(u, p, o0, nout, vpr, lane, s0, s0 + pv < e0 ? s0 + pv : e0, lr, lc, lp);
        if (i > 0) {
            if (ct == 0 && !NOBAR) {
                /* RELAXED: poll with relaxed loads and short sleeps, one
                 * acquire fence after (an acquire load a poll may cost the
                 * SM's other loads) */
                for (long spin = 0; (RELAXED ? mk_ld_relaxed(cnt) : mk_ld_acquire(cnt)) < (unsigned)(i * P); spin++) {
                    if (RELAXED) __nanosleep(32);
                    if (spin == (1l << 26)) {
                        printf("mk3 barrier stuck: cta %d phase %d count %u of %u\n", b, i, mk_ld_acquire(cnt),
                               (unsigned)(i * P));
                        __trap();
                    }
                }
                if (RELAXED) asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
            }
            flw_named_sync(2, NC);
        }
        if (!gemv) {
            if (cw < 8) mk_attn(ph[i], b, cw, lane, ct, att); /* its 8 warps (named barrier 1) */
            flw_named_sync(2, NC);
            if (ct == 0) mk_publish<true>(cnt);
            continue;
        }
        float ss = 0.0f;
        for (int k = ct; k < cols / 4; k += NC) {
            float4 v = __ldcg((const float4 *)p.in + k);
            if (p.nw) {
                ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
                const float4 w = ((const float4 *)p.nw)[k];
                v.x *= w.x, v.y *= w.y, v.z *= w.z, v.w *= w.w;
            }
            ((float4 *)(xs + ((k & 1) ? max_cols / 2 : 0)))[k >> 1] = v;
        }
        const bool res_early = p.res && !p.nw && !p.glu;
        for (int k = ct; k < nout * (p.glu ? 2 : 1); k += NC) acc[k] = res_early ? __ldcg(p.res + o0 + k) : 0.0f;
        if (p.nw) {
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (lane == 0) red[cw] = ss;
        }
        flw_named_sync(2, NC);
        /* pieces of pv vectors; the loads and the sums walk the range
         * continuously (lr / lc / lp, cr / cc), a piece's partial row
         * flushed at its end */
        for (int a = s0; a < e0; a += pv) {
            const int z = a + pv < e0 ? a + pv : e0;
            float da = 0.0f, db = 0.0f;
            for (int base = a; base < z; base += 32 * MK3_U) {
                if (base != s0) /* the first batch came before the barrier */
                    mk3_load_batch(u, p, o0, nout, vpr, lane, base, z, lr, lc, lp);
#pragma unroll
                for (int j = 0; j < MK3_U; j++) {
                    if (base + 32 * j < z) {
                        const float4 xa = xlo4[cc + lane], xb = xhi4[cc + lane];
                        const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u[j];
                        const float2 f0 = __bfloat1622float2(h2[0]), f1 = __bfloat1622float2(h2[1]);
                        const float2 f2 = __bfloat1622float2(h2[2]), f3 = __bfloat1622float2(h2[3]);
                        da = fmaf(f0.x, xa.x, da);
                        db = fmaf(f2.x, xb.x, db);
                        da = fmaf(f0.y, xa.y, da);
                        db = fmaf(f2.y, xb.y, db);
                        da = fmaf(f1.x, xa.z, da);
                        db = fmaf(f3.x, xb.z, db);
                        da = fmaf(f1.y, xa.w, da);
                        db = fmaf(f3.y, xb.w, db);
                        cc += 32;
                        if (cc == vpr) { /* row cr complete in this warp's range */
                            mk3_flush(da, db, lane, &acc[cr]);
                            da = db = 0.0f, cc = 0, cr++;
                        }
                    }
                }
            }
            if (cc != 0) /* the piece ends inside row cr (the next piece goes on with it) */
                mk3_flush(da, db, lane, &acc[cr]);
            if (lane == 0) atomicAdd(&s_done, 1u);
        }
        flw_named_sync(2, NC); /* every accumulator complete */
        float sc = 1.0f;
        if (p.nw) {
            float t = 0.0f;
            for (int k = 0; k < MK3_NW; k++) t += red[k];
            sc = 1.0f / sqrtf(t / (float)cols + p.eps);
        }
        for (int k = ct; k < nout; k += NC) {
            float y = acc[k] * sc;
            if (p.glu) y = y / (1.0f + expf(-y)) * (acc[nout + k] * sc);
            else if (p.res && !res_early) y += __ldcg(p.res + o0 + k);
            p.out[o0 + k] = y;
        }
        flw_named_sync(2, NC);
        if (ct == 0) mk_publish<true>(cnt);
    }
}

/* A prepared chain: the phase table on the device, the counters (the
 * grid's, then each attention phase's per kv head), the attention
 * workspaces. */
struct cuda_mk_plan {
    cuda_ctx *c;
    mk_phase *d_ph;
    unsigned *d_cnt;
    float *d_ws;
    int n, max_cols, att_n, ns, n_cnt, sb, mode, win;
    size_t smem;
};

/* the lab's A/B settings: VLLM_MK_SB stage bytes (4096 .. 65536, a
 * multiple of 4096), VLLM_MK_MODE the kernel's MODE bits (k_mk_chain) */
static int mk_env_int(const char *name, int dflt, int lo, int hi, int mult) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end = NULL;
    const long v = strtol(e, &end, 10);
    if (*end || v < lo || v > hi || v % mult) return -1;
    return (int)v;
}

typedef void (*mk_kernel)(const mk_phase *, int, int, int, int, int, unsigned *);
static mk_kernel mk_kernel_of(int mode) {
    switch (mode) {
    case 0: return k_mk_chain<0>;
    case 1: return k_mk_chain<1>;
    case 2: return k_mk_chain<2>;
    case 4: return k_mk_chain<4>;
    case 5: return k_mk_chain<5>;
    case 8: return k_mk_chain<8>;
    case 16: return k_mk_chain<16>;
    case 24: return k_mk_chain<24>;
    case 28: return k_mk_chain<28>;
    default: return NULL;
    }
}
typedef void (*mk3_kernel)(const mk_phase *, int, int, int, int, unsigned *);
static mk3_kernel mk3_kernel_of(int mode) {
    switch (mode) {
    case 64: return k_mk_chain3<0>;
    case 65: return k_mk_chain3<1>;
    case 66: return k_mk_chain3<2>;
    case 67: return k_mk_chain3<3>;
    case 68: return k_mk_chain3<4>;
    case 69: return k_mk_chain3<5>;
    default: return NULL;
    }
}

static bool mk_fits_gemv(const cuda_mk_desc *d, int i, const int64_t *len, int64_t x_len, const cuda_ctx *c) {
    const rt_tensor *t = d->w, *nw = d->norm_w;
    if (!t || t->dtype != RT_BF16 || t->ndim != 2) return false;
    const int64_t R = t->shape[0], C = t->shape[1], nout = d->glu ? R / 2 : R;
    const int fi = d->in_from, ri = d->res_from;
    const int64_t in_len = fi == -1 ? x_len : fi >= 0 && fi < i ? len[fi] : -1;
    const int64_t res_len = ri == -2 ? nout : ri == -1 ? x_len : ri >= 0 && ri < i ? len[ri] : -1;
    return t->stride[1] == 2 && t->stride[0] == C * 2 && C % 256 == 0 && C > 0 && R > 0 && (uintptr_t)t->data % 16 == 0 &&
           !(d->glu && R % 2) && C <= in_len && res_len >= nout && !(d->glu && ri != -2) &&
           !(nw && (nw->dtype != RT_F32 || rt_tensor_nelem(nw) < C || (uintptr_t)nw->data % 16)) &&
           (nout + c->n_sm - 1) / c->n_sm * (d->glu ? 2 : 1) <= MK_MAX_ACC;
}

static bool mk_fits_attn(const cuda_mk_desc *d, int i, const int64_t *len, const cuda_ctx *c) {
    const int64_t h = d->n_heads, kvh = d->n_kv_heads, fi = d->in_from;
    const rt_tensor *kc = d->k_cache, *vc = d->v_cache, *bt = d->block_table;
    if (h <= 0 || kvh <= 0 || h % kvh || h / kvh > MK_MAX_G || fi < 0 || fi >= i || len[fi] < (h + 2 * kvh) * 128 ||
        !kc || !vc || !bt || !d->inv_freq || d->splits <= 0 || kvh * d->splits > c->n_sm || d->pos < 0)
        return false;
    if (kc->dtype != RT_BF16 || vc->dtype != RT_BF16 || kc->ndim != 4 || vc->ndim != 4 || kc->shape[2] != kvh ||
        kc->shape[3] != 128 || !rt_tensor_is_contiguous(kc) || !rt_tensor_is_contiguous(vc) ||
        vc->shape[0] != kc->shape[0] || vc->shape[1] != kc->shape[1] || bt->dtype != RT_I32)
        return false;
    const int64_t B = kc->shape[1];
    if (B <= 0 || (B & (B - 1)) || (d->pos / B) >= rt_tensor_nelem(bt) || d->inv_freq->dtype != RT_F32 ||
        rt_tensor_nelem(d->inv_freq) < 64 || (d->q_norm && rt_tensor_nelem(d->q_norm) < 128) ||
        (d->k_norm && rt_tensor_nelem(d->k_norm) < 128) || d->pos >= INT32_MAX)
        return false;
    return true;
}

extern "C" {

cuda_mk_plan *cuda_mk_plan_create(rt_backend *be, int n, const cuda_mk_desc *d, float eps, const rt_tensor *x,
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
    int64_t off = 0, max_cols = 256, ws_n = 0, maxg = 0;
    int n_cnt = 1;
    const int64_t x_len = rt_tensor_nelem(x), avail = rt_tensor_nelem(out);
    if (x->dtype != RT_F32 || out->dtype != RT_F32 || (uintptr_t)x->data % 16 || (uintptr_t)out->data % 16) {
        free(h), free(len);
        vc_err_set(VC_ERR_INVALID, "cuda mk: x and out must be 16-byte aligned f32");
        return NULL;
    }
    bool room = true;
    for (int i = 0; i < n && room; i++) {
        const cuda_mk_desc *e = &d[i];
        const bool attn = e->kind == CUDA_MK_ATTN;
        if ((e->kind != CUDA_MK_GEMV && !attn) || (attn ? !mk_fits_attn(e, i, len, c) : !mk_fits_gemv(e, i, len, x_len, c))) {
            free(h), free(len);
            vc_err_set(VC_ERR_UNSUPPORTED, "cuda mk: phase %d outside the lab's limits", i);
            return NULL;
        }
        mk_phase &q = h[i];
        q.kind = e->kind;
        q.in = e->in_from < 0 ? (const float *)x->data : h[e->in_from].out;
        q.eps = eps;
        if (attn) {
            const int64_t nout = e->n_heads * 128;
            if (off + nout > avail) {
                room = false;
                break;
            }
            q.out = (float *)out->data + off;
            q.kc = (__nv_bfloat16 *)e->k_cache->data, q.vc = (__nv_bfloat16 *)e->v_cache->data;
            q.bt = (const int32_t *)e->block_table->data;
            q.inv_freq = (const float *)e->inv_freq->data;
            q.qn = e->q_norm ? (const float *)e->q_norm->data : NULL;
            q.kn = e->k_norm ? (const float *)e->k_norm->data : NULL;
            q.h = (int)e->n_heads, q.kvh = (int)e->n_kv_heads, q.pos = (int)e->pos, q.B = (int)e->k_cache->shape[1];
            q.splits = e->splits, q.scale = e->scale;
            q.ws = (float *)(intptr_t)ws_n;        /* an offset until the workspace exists */
            q.hcnt = (unsigned *)(intptr_t)n_cnt; /* likewise */
            ws_n += e->n_heads * e->splits * MK_REC;
            n_cnt += (int)e->n_kv_heads;
            if (e->n_heads / e->n_kv_heads > maxg) maxg = e->n_heads / e->n_kv_heads;
            len[i] = nout;
            off += nout;
        } else {
            const int64_t R = e->w->shape[0], C = e->w->shape[1], nout = e->glu ? R / 2 : R;
            if (off + nout > avail || nout % 4) { /* every output 16-byte aligned: inputs are read as float4 */
                room = false;
                break;
            }
            q.w = (const __nv_bfloat16 *)e->w->data;
            q.nw = e->norm_w ? (const float *)e->norm_w->data : NULL;
            q.res = e->res_from == -2 ? NULL : e->res_from == -1 ? (const float *)x->data : h[e->res_from].out;
            q.out = (float *)out->data + off;
            q.rows = R, q.cols = C, q.glu = e->glu;
            len[i] = nout;
            off += nout;
            if (C > max_cols) max_cols = C;
        }
    }
    free(len);
    if (!room) {
        free(h);
        vc_err_set(VC_ERR_INVALID, "cuda mk: the out buffer is smaller than the phases' outputs, or an output is not "
                                   "a multiple of 4 values");
        return NULL;
    }
    const int att_n = (int)(maxg ? 8 * maxg * MK_REC : 0);
    const int sb = mk_env_int("VLLM_MK_SB", MK_SB, 4096, 65536, 4096), mode = mk_env_int("VLLM_MK_MODE", 0, 0, 127, 1);
    const int win = mk_env_int("VLLM_MK_PF", 16, 1, 4096, 1);
    if (sb < 0 || mode < 0 || win < 0 || !(mk_kernel_of(mode) || mk3_kernel_of(mode))) {
        free(h);
        vc_err_set(VC_ERR_INVALID, "cuda mk: VLLM_MK_SB (4096 .. 65536, a multiple of 4096) or VLLM_MK_MODE (0 1 2 4 5 "
                                   "8 16 24 28 64 65 66 67 68 69) or VLLM_MK_PF (1 .. 4096) out of range");
        return NULL;
    }
    const size_t fixed = (size_t)max_cols * 4 + MK_MAX_ACC * 4 + (size_t)att_n * 4 + 1024;
    const int ns = mode >= 64 ? 0 : fixed < MK_SMEM_MAX ? (int)((MK_SMEM_MAX - fixed) / ((size_t)sb + 16)) : 0;
    if (mode >= 64 ? fixed > MK_SMEM_MAX : ns < 2) {
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
    p->c = c, p->n = n, p->max_cols = (int)max_cols, p->att_n = att_n, p->ns = ns, p->n_cnt = n_cnt;
    p->sb = sb, p->mode = mode, p->win = win;
    p->smem = (size_t)max_cols * 4 + MK_MAX_ACC * 4 + (size_t)att_n * 4 + (size_t)ns * sb + (size_t)ns * 16;
    bool ok = cudaMalloc(&p->d_ph, (size_t)n * sizeof *h) == cudaSuccess &&
              cudaMalloc(&p->d_cnt, (size_t)n_cnt * sizeof(unsigned)) == cudaSuccess &&
              (ws_n == 0 || cudaMalloc(&p->d_ws, (size_t)ws_n * sizeof(float)) == cudaSuccess);
    if (ok) {
        for (int i = 0; i < n; i++)
            if (h[i].kind == CUDA_MK_ATTN) { /* offsets -> device addresses */
                h[i].ws = p->d_ws + (intptr_t)h[i].ws;
                h[i].hcnt = p->d_cnt + (intptr_t)h[i].hcnt;
            }
        ok = cudaMemcpy(p->d_ph, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice) == cudaSuccess &&
             (mode >= 64 ? cudaFuncSetAttribute(mk3_kernel_of(mode), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)p->smem)
                         : cudaFuncSetAttribute(mk_kernel_of(mode), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)p->smem)) == cudaSuccess;
    }
    free(h);
    if (!ok) {
        (void)cudaGetLastError();
        cudaFree(p->d_ph), cudaFree(p->d_cnt), cudaFree(p->d_ws);
        free(p);
        vc_err_set(VC_ERR_RUNTIME, "cuda mk: device set-up");
        return NULL;
    }
    return p;
}

int cuda_mk_plan_run(cuda_mk_plan *p) {
    cuda_ctx *c = p->c;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    CU_TRY(cudaMemsetAsync(p->d_cnt, 0, (size_t)p->n_cnt * sizeof(unsigned), c->stream));
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative; /* every CTA resident: the grid barrier needs it */
    at[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)c->n_sm);
    cfg.blockDim = dim3(p->mode >= 64 ? MK3_THREADS : MK_THREADS);
    cfg.dynamicSmemBytes = p->smem;
    cfg.stream = c->stream;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    const mk_phase *ph = p->d_ph;
    if (p->mode >= 64)
        CU_TRY(cudaLaunchKernelEx(&cfg, mk3_kernel_of(p->mode), ph, p->n, p->max_cols, p->sb / 16, p->win, p->d_cnt));
    else
        CU_TRY(cudaLaunchKernelEx(&cfg, mk_kernel_of(p->mode), ph, p->n, p->max_cols, p->att_n, p->ns, p->sb,
                                  p->d_cnt));
    return VC_OK;
}

void cuda_mk_plan_free(cuda_mk_plan *p) {
    if (!p) return;
    if (cuda_enter(p->c) >= 0) {
        cudaFree(p->d_ph);
        cudaFree(p->d_cnt);
        cudaFree(p->d_ws);
    }
    free(p);
}

} /* extern "C" */
