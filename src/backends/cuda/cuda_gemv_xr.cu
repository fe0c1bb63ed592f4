/* cuda_gemv_xr — the batch-1 decode GEMV over GGUF blocks (Q4_K, Q5_K,
 * Q6_K, Q4_0, Q4_1, Q8_0) with x in registers: MATMUL and MATMUL_GLU of one
 * or two f32 x rows, and MATMUL3 of one.
 *
 * Why: the dp4a GEMV (cuda_gemv_d4.cu) keeps x (int8) in shared memory and
 * stages every W segment through it; at one row its L1/shared pipe was the
 * busiest unit (Nsight, session 13: 72% L1 throughput, 33% excess shared
 * wavefronts, DRAM 26%, 8B Q4_K gate|up 1.2 TB/s). Here each lane owns one
 * fixed 128-value slice ("unit") of every row: a K-quant half super-block
 * (Q4_K/Q5_K: 4 sub-blocks of 32; Q6_K: 8 of 16) or 4 blocks of 32. The
 * block quantizes x once into shared memory (8 bits per 32 values, d4's
 * arithmetic: same d, q and sums); each lane keeps its slice in registers
 * (32 words + 4 scales + 8 sums) and then streams only W: 16-byte loads
 * from global (through L1) straight into registers, R rows at a time. A
 * unit's sum is d4's per 32 values, bit for bit; only the order of the
 * final adds differs (lanes, then a shuffle tree).
 *
 * Layout of a call: NU = in / 128 units a row (in % 128 == 0; K-quants
 * 256). Rows of up to 32 units ("small" mode): a team of TT = the power of
 * two >= NU lanes takes a row, 128 / TT teams a block, reduced by xor
 * shuffles inside the team. Longer
 * rows (to 256 units: in <= 32768) take the whole block (TT = 32 ceil(NU
 * / 32) threads): a warp reduces, then one thread adds the warps' partials
 * in warp order from shared memory. Persistent grid (blocks per SM from the
 * occupancy calculator); a team walks tasks (outputs; MATMUL_GLU: the gate
 * and up rows of one output) R rows a step. The first step's W loads are
 * issued before the PDL wait.
 *
 * Q6_K super-blocks (210 bytes) and Q4_0 / Q8_0 units (72 / 136) start on
 * any even byte, Q4_1's (80) on any fourth: each region is read as the
 * 16-byte vectors that cover it, and the lane's words are cut out of them
 * with a funnel shift (2-byte phase) and two levels of selects (word
 * phase). Q4_K (144) and Q5_K (176) rows are 16-byte aligned when the
 * tensor is (checked per call).
 *
 * Two x rows (batched decode at two requests): each W row loaded once
 * meets both rows' x slices (two register sets of x, R 2). MATMUL3 (q, k,
 * v weights over one x): the weights of one GGUF type are row segments of
 * one launch (Q4_K_M's q, k Q4_K and v Q6_K: two launches, not three).
 *
 * VLLM_CUDA_GEMV_XR=0 leaves every call to d4 (A/B); see xr_mode for the
 * other settings. */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_gemv.cuh"
#include "backends/cuda/cuda_gemv_xr.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define XR_UV 128  /* values a lane unit */
#define XR_CTA 128 /* threads a block in small mode */
#define XR_MAXT 256 /* the most threads a block (big mode) */
#define XR_MAXU 256 /* units a row at most (in <= 32768): one lane each in a big-mode block */

static uint64_t g_xr_launches; /* calls that ran k_gemv_xr (tests) */

extern "C" uint64_t cuda_gemv_xr_launches(void) { return __atomic_load_n(&g_xr_launches, __ATOMIC_RELAXED); }

/* The lane's x slice: int8 x 4 words, the scale of each 32 values, the sum
 * of each 16 values' int8. */
struct xr_x {
    int q[32];
    float d[4];
    int s[8];
};

/* word k (compile-time after unrolling) of a vector array of NWD words;
 * 0 past them */
template <int NWD> __device__ __forceinline__ uint32_t xr_wd(const uint4 *v, int k) {
    if (k >= NWD) return 0u;
    const uint4 &q = v[k >> 2];
    return (k & 3) == 0 ? q.x : (k & 3) == 1 ? q.y : (k & 3) == 2 ? q.z : q.w;
}

/* NW words from byte ph (even, 0..14) of the NWD words of v: a funnel shift
 * by the 2-byte phase, then two levels of selects by the word phase. */
template <int NW, int NWD> __device__ __forceinline__ void xr_window(const uint4 *v, int ph, uint32_t *out) {
    const int sh = 8 * (ph & 3), a = ph >> 2;
    uint32_t t[NW + 3];
#pragma unroll
    for (int k = 0; k < NW + 3; k++) t[k] = __funnelshift_r(xr_wd<NWD>(v, k), xr_wd<NWD>(v, k + 1), sh);
    uint32_t u[NW + 2];
#pragma unroll
    for (int k = 0; k < NW + 2; k++) u[k] = (a & 1) ? t[k + 1] : t[k];
#pragma unroll
    for (int j = 0; j < NW; j++) out[j] = (a & 2) ? u[j + 2] : u[j];
}

/* a W vector: LC 1 through L1 (__ldg; the default: a lane's 16-byte loads
 * are half sectors whose other half a neighbouring load reads, which then
 * hits or merges there), 0 streamed past it (no_allocate) */
template <int LC> __device__ __forceinline__ uint4 xr_ld(const uint4 *p) { return LC ? __ldg(p) : cuda_ld_stream16(p); }

__device__ __forceinline__ float xr_h2f(uint32_t h) { return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFF))); }

/* Per format: SB bytes a super-block (K-quants, HALF: a unit is half of
 * one) or a unit (4 blocks of 32), NV 16-byte vectors a unit,
 * load<LC>(v, super-block or unit address, half) and dot(v, address,
 * half, x) = the unit's 128 products with the lane's x slice. */
template <rt_dtype T> struct xr_fmt;

template <> struct xr_fmt<RT_Q4_K> {
    enum { SB = 144, NV = 5, HALF = 1 };
    template <int LC> static __device__ __forceinline__ void load(uint4 *v, const char *b, int h) {
        v[0] = xr_ld<LC>((const uint4 *)b); /* d, dmin, 12 bytes of scales */
#pragma unroll
        for (int i = 0; i < 4; i++) v[1 + i] = xr_ld<LC>((const uint4 *)(b + 16 + 64 * h) + i);
    }
    static __device__ __forceinline__ float dot(const uint4 *v, const char *, int h, const xr_x &x) {
        const uint32_t Y = v[0].y, Z = v[0].z, W = v[0].w;
        const uint32_t SC = h ? (W & 0x0F0F0F0Fu) | ((Y >> 2) & 0x30303030u) : Y & 0x3F3F3F3Fu;
        const uint32_t MN = h ? ((W >> 4) & 0x0F0F0F0Fu) | ((Z >> 2) & 0x30303030u) : Z & 0x3F3F3F3Fu;
        const float d = xr_h2f(v[0].x), dm = xr_h2f(v[0].x >> 16);
        float acc = 0.0f;
#pragma unroll
        for (int cc = 0; cc < 2; cc++) { /* a 32-byte chunk: sub-block 2cc in the low nibbles, 2cc + 1 in the high */
            int lo = 0, hi = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t w = xr_wd<16>(v + 1, 8 * cc + i);
                lo = __dp4a((int)(w & 0x0F0F0F0Fu), x.q[16 * cc + i], lo);
                hi = __dp4a((int)((w >> 4) & 0x0F0F0F0Fu), x.q[16 * cc + 8 + i], hi);
            }
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int jj = 2 * cc + e, s = e ? hi : lo;
                const int sc = (int)((SC >> (8 * jj)) & 0xFF), m = (int)((MN >> (8 * jj)) & 0xFF);
                acc += x.d[jj] * (d * (float)(sc * s) - dm * (float)(m * (x.s[2 * jj] + x.s[2 * jj + 1])));
            }
        }
        return acc;
    }
};

template <> struct xr_fmt<RT_Q5_K> {
    enum { SB = 176, NV = 7, HALF = 1 };
    template <int LC> static __device__ __forceinline__ void load(uint4 *v, const char *b, int h) {
        v[0] = xr_ld<LC>((const uint4 *)b);
        v[1] = xr_ld<LC>((const uint4 *)(b + 16)); /* qh: bit j of byte l is value 32 j + l's fifth bit */
        v[2] = xr_ld<LC>((const uint4 *)(b + 32));
#pragma unroll
        for (int i = 0; i < 4; i++) v[3 + i] = xr_ld<LC>((const uint4 *)(b + 48 + 64 * h) + i);
    }
    static __device__ __forceinline__ float dot(const uint4 *v, const char *, int h, const xr_x &x) {
        const uint32_t Y = v[0].y, Z = v[0].z, W = v[0].w;
        const uint32_t SC = h ? (W & 0x0F0F0F0Fu) | ((Y >> 2) & 0x30303030u) : Y & 0x3F3F3F3Fu;
        const uint32_t MN = h ? ((W >> 4) & 0x0F0F0F0Fu) | ((Z >> 2) & 0x30303030u) : Z & 0x3F3F3F3Fu;
        const float d = xr_h2f(v[0].x), dm = xr_h2f(v[0].x >> 16);
        float acc = 0.0f;
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
            const int cc = jj >> 1, sh = 4 * (jj & 1), j = 4 * h + jj;
            int s = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t lo = (xr_wd<16>(v + 3, 8 * cc + i) >> sh) & 0x0F0F0F0Fu;
                const uint32_t hb = ((xr_wd<8>(v + 1, i) >> j) & 0x01010101u) << 4;
                s = __dp4a((int)(lo | hb), x.q[8 * jj + i], s);
            }
            const int sc = (int)((SC >> (8 * jj)) & 0xFF), m = (int)((MN >> (8 * jj)) & 0xFF);
            acc += x.d[jj] * (d * (float)(sc * s) - dm * (float)(m * (x.s[2 * jj] + x.s[2 * jj + 1])));
        }
        return acc;
    }
};

/* Q6_K: ql (128 bytes: low 4 bits), qh (64: high 2 bits), 16 int8 scales
 * (one a 16 values), d. Half h: ql [64h, +64), qh [128 + 32h, +32), scales
 * [192 + 8h, +8); all read from the 16-byte boundary below (v[0..4] ql,
 * v[5..7] qh, v[8..9] bytes 192.. of the boundary: scales and d). */
template <> struct xr_fmt<RT_Q6_K> {
    enum { SB = 210, NV = 10, HALF = 1 };
    template <int LC> static __device__ __forceinline__ void load(uint4 *v, const char *b, int h) {
        const uint4 *a = (const uint4 *)((uintptr_t)b & ~(uintptr_t)15);
#pragma unroll
        for (int i = 0; i < 5; i++) v[i] = xr_ld<LC>(a + 4 * h + i);
#pragma unroll
        for (int i = 0; i < 3; i++) v[5 + i] = xr_ld<LC>(a + 8 + 2 * h + i);
        v[8] = xr_ld<LC>(a + 12);
        v[9] = xr_ld<LC>(a + 13);
    }
    static __device__ __forceinline__ float dot(const uint4 *v, const char *b, int h, const xr_x &x) {
        const int ph = (int)((uintptr_t)b & 15);
        uint32_t ql[16], qh[8], tl[5];
        xr_window<16, 20>(v, ph, ql);
        xr_window<8, 12>(v + 5, ph, qh);
        xr_window<5, 8>(v + 8, ph, tl); /* bytes 192..212: 16 scales, d (ph + 18 <= 32) */
        const uint32_t s_lo = h ? tl[2] : tl[0], s_hi = h ? tl[3] : tl[1];
        const float d = xr_h2f(tl[4]);
        float facc = 0.0f;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const int shl = kk < 2 ? 0 : 4, shh = 2 * kk;
            int s0 = 0, s1 = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t w = ((ql[8 * (kk & 1) + i] >> shl) & 0x0F0F0F0Fu) | (((qh[i] >> shh) & 0x03030303u) << 4);
                if (i < 4) s0 = __dp4a((int)w, x.q[8 * kk + i], s0);
                else s1 = __dp4a((int)w, x.q[8 * kk + i], s1);
            }
            const uint32_t sw = kk < 2 ? s_lo : s_hi;
            const int c0 = (int)(int8_t)(sw >> (16 * (kk & 1))), c1 = (int)(int8_t)(sw >> (16 * (kk & 1) + 8));
            facc += d * x.d[kk] * (float)(c0 * (s0 - 32 * x.s[2 * kk]) + c1 * (s1 - 32 * x.s[2 * kk + 1]));
        }
        return facc;
    }
};

/* 32-value block formats: a unit is 4 blocks (SB bytes, at any even byte:
 * Q4_0 18 and Q8_0 34 bytes a block), read as the 16-byte vectors that
 * cover it; the last only where it holds unit bytes (it may lie past the
 * tensor otherwise). xr_window cuts the unit's words out; the blocks then
 * sit at fixed offsets in them. */
template <int LC, int NV, int UB>
__device__ __forceinline__ void xr_load_unit(uint4 *v, const char *b) {
    const uint4 *a = (const uint4 *)((uintptr_t)b & ~(uintptr_t)15);
    const int ph = (int)((uintptr_t)b & 15);
#pragma unroll
    for (int i = 0; i < NV - 1; i++) v[i] = xr_ld<LC>(a + i);
    v[NV - 1] = ph + UB > 16 * (NV - 1) ? xr_ld<LC>(a + NV - 1) : make_uint4(0, 0, 0, 0);
}

/* the word at byte 2 of words w[k], w[k + 1] */
__device__ __forceinline__ uint32_t xr_mid(uint32_t lo, uint32_t hi) { return __funnelshift_r(lo, hi, 16); }

template <> struct xr_fmt<RT_Q4_0> { /* block: d, 16 bytes (low nibbles values 0..15, high 16..31) */
    enum { SB = 72, NV = 6, HALF = 0 };
    template <int LC> static __device__ __forceinline__ void load(uint4 *v, const char *b, int) { xr_load_unit<LC, NV, SB>(v, b); }
    static __device__ __forceinline__ float dot(const uint4 *v, const char *b, int, const xr_x &x) {
        uint32_t W[18];
        xr_window<18, 24>(v, (int)((uintptr_t)b & 15), W);
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) { /* block i at byte 18 i: d, then qs at 18 i + 2 */
            const int w0 = (18 * i) >> 2, odd = i & 1;
            const uint32_t dh = odd ? W[w0] >> 16 : W[w0];
            int s = 0, t = 0;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t q = odd ? W[w0 + 1 + j] : xr_mid(W[w0 + j], W[w0 + j + 1]);
                s = __dp4a((int)(q & 0x0F0F0F0Fu), x.q[8 * i + j], s);
                t = __dp4a((int)((q >> 4) & 0x0F0F0F0Fu), x.q[8 * i + 4 + j], t);
            }
            acc += xr_h2f(dh) * x.d[i] * (float)(s + t - 8 * (x.s[2 * i] + x.s[2 * i + 1]));
        }
        return acc;
    }
};

template <> struct xr_fmt<RT_Q4_1> { /* block: d, m, 16 bytes; 20-byte blocks keep 4-byte words */
    enum { SB = 80, NV = 6, HALF = 0 };
    template <int LC> static __device__ __forceinline__ void load(uint4 *v, const char *b, int) { xr_load_unit<LC, NV, SB>(v, b); }
    static __device__ __forceinline__ float dot(const uint4 *v, const char *b, int, const xr_x &x) {
        uint32_t W[20];
        xr_window<20, 24>(v, (int)((uintptr_t)b & 15), W);
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int s = 0, t = 0;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t q = W[5 * i + 1 + j];
                s = __dp4a((int)(q & 0x0F0F0F0Fu), x.q[8 * i + j], s);
                t = __dp4a((int)((q >> 4) & 0x0F0F0F0Fu), x.q[8 * i + 4 + j], t);
            }
            acc += x.d[i] * (xr_h2f(W[5 * i]) * (float)(s + t) + xr_h2f(W[5 * i] >> 16) * (float)(x.s[2 * i] + x.s[2 * i + 1]));
        }
        return acc;
    }
};

template <> struct xr_fmt<RT_Q8_0> { /* block: d, 32 int8 */
    enum { SB = 136, NV = 10, HALF = 0 };
    template <int LC> static __device__ __forceinline__ void load(uint4 *v, const char *b, int) { xr_load_unit<LC, NV, SB>(v, b); }
    static __device__ __forceinline__ float dot(const uint4 *v, const char *b, int, const xr_x &x) {
        uint32_t W[34];
        xr_window<34, 40>(v, (int)((uintptr_t)b & 15), W);
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) { /* block i at byte 34 i */
            const int w0 = (34 * i) >> 2, odd = i & 1;
            const uint32_t dh = odd ? W[w0] >> 16 : W[w0];
            int s = 0, t = 0;
#pragma unroll
            for (int j = 0; j < 8; j += 2) {
                const uint32_t q0 = odd ? W[w0 + 1 + j] : xr_mid(W[w0 + j], W[w0 + j + 1]);
                const uint32_t q1 = odd ? W[w0 + 2 + j] : xr_mid(W[w0 + j + 1], W[w0 + j + 2]);
                s = __dp4a((int)q0, x.q[8 * i + j], s);
                t = __dp4a((int)q1, x.q[8 * i + j + 1], t);
            }
            acc += xr_h2f(dh) * x.d[i] * (float)(s + t);
        }
        return acc;
    }
};

/* x of the block's units into shared memory, 32 values a thread-step (two
 * in flight), d4's arithmetic: per 32 values d = amax / 127, q = round(x
 * 127 / amax), the sum of each 16 q; so a unit's sum equals d4's. Shared
 * layout: q [4 nu][8] words, d [4 nu], sums [8 nu]. */
__device__ __forceinline__ void xr_quant_group(const float *x, int g, int *sq, float *sd, int *ss) {
    const float4 *p = (const float4 *)(x + (int64_t)g * 32);
    float4 v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = __ldg(p + i);
    float a = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) a = fmaxf(a, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
    const float id = a > 0.0f ? 127.0f / a : 0.0f;
    int s0 = 0, s1 = 0, q[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int q0 = __float2int_rn(v[i].x * id), q1 = __float2int_rn(v[i].y * id), q2 = __float2int_rn(v[i].z * id),
                  q3 = __float2int_rn(v[i].w * id);
        q[i] = (int)((uint32_t)(q0 & 255) | ((uint32_t)(q1 & 255) << 8) | ((uint32_t)(q2 & 255) << 16) | ((uint32_t)q3 << 24));
        if (i < 4) s0 += q0 + q1 + q2 + q3;
        else s1 += q0 + q1 + q2 + q3;
    }
    ((int4 *)sq)[2 * g] = make_int4(q[0], q[1], q[2], q[3]);
    ((int4 *)sq)[2 * g + 1] = make_int4(q[4], q[5], q[6], q[7]);
    sd[g] = a / 127.0f;
    ss[2 * g] = s0;
    ss[2 * g + 1] = s1;
}

/* Every thread of the block takes part (a barrier); lanes past nu get
 * zeros. NB x rows (x_ld floats apart), row t's groups after row t - 1's. */
template <int NB>
__device__ __forceinline__ void xr_quant_x(const float *x, int64_t x_ld, int nu, int li, xr_x *X) {
    extern __shared__ int4 xr_sm[];
    int *sq = (int *)xr_sm;
    float *sd = (float *)(sq + 32 * nu * NB);
    int *ss = (int *)(sd + 4 * nu * NB);
    const int G = 4 * nu, B = (int)blockDim.x;
#pragma unroll
    for (int t = 0; t < NB; t++)
        for (int g = threadIdx.x; g < G; g += 2 * B) {
            xr_quant_group(x + t * x_ld, g, sq + 32 * nu * t, sd + 4 * nu * t, ss + 8 * nu * t);
            if (g + B < G) xr_quant_group(x + t * x_ld, g + B, sq + 32 * nu * t, sd + 4 * nu * t, ss + 8 * nu * t);
        }
    __syncthreads();
    const bool on = li < nu;
#pragma unroll
    for (int t = 0; t < NB; t++) {
        const int u = nu * t + li; /* row t's unit li */
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int4 q = on ? ((const int4 *)sq)[8 * u + i] : make_int4(0, 0, 0, 0);
            X[t].q[4 * i] = q.x, X[t].q[4 * i + 1] = q.y, X[t].q[4 * i + 2] = q.z, X[t].q[4 * i + 3] = q.w;
        }
#pragma unroll
        for (int g = 0; g < 4; g++) X[t].d[g] = on ? sd[4 * u + g] : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) X[t].s[i] = on ? ss[8 * u + i] : 0;
    }
}

static size_t xr_smem(int nu, int nb) { return (size_t)nu * nb * 4 * (32 + 4 + 8); }

/* MATMUL3's further W segments (q, k and v weights of one GGUF type in
 * one launch): segment 0 is the kernel's w / ws / y, rows 0 .. end[0] - 1;
 * segment 1 rows end[0] .. end[1] - 1 from w[0] (ws[0] bytes a row) into
 * y[0]; segment 2 rows end[1] .. out - 1 from w[1] into y[1] (two
 * segments: end[1] = out). Unused by one-segment launches (NS = 1). */
struct xr_more {
    const char *w[2];
    int64_t ws[2];
    float *y[2];
    int64_t end[2];
};

/* R rows a step (MATMUL_GLU: R / 2 outputs, gate and up rows); BIG: one
 * team of blockDim.x threads a block (rows of more than 32 units). NB x
 * rows (1 or 2, x_ld / y_ld apart): each W row loaded once meets both.
 * NS: W segments (1, or 3 for MATMUL3; rows picked by selects, not a
 * dynamic index into the parameters). The parameters after act are
 * unused at NB = NS = 1, which therefore compiles to the code of the
 * one-row kernel before them (cubin_cmp). */
template <rt_dtype T, int R, bool GLU, bool BIG, int LC, int NB, int NS>
__global__ void __launch_bounds__(XR_MAXT) k_gemv_xr(const char *w, int64_t ws, const float *x, float *y, const float *bias,
                                                    int64_t out, int nu, int tt, int act, int64_t x_ld, int64_t y_ld,
                                                    xr_more mo) {
    using F = xr_fmt<T>;
    constexpr int H = GLU ? 2 : 1, NT = R / H;
    __shared__ float red[2][R * NB][XR_MAXT / 32];
    const int tid = threadIdx.x;
    const int tpc = BIG ? 1 : XR_CTA / tt, li = BIG ? tid : tid % tt;
    const int64_t gt = BIG ? (int64_t)blockIdx.x : (int64_t)blockIdx.x * tpc + tid / tt, nteams = (int64_t)gridDim.x * tpc;
    const int64_t f = out / 2, P = GLU ? f : out;
    const int64_t nsteps = (P + nteams * NT - 1) / (nteams * NT); /* the same for every team: shuffles stay uniform */
    const bool act_u = li < nu;
    const int h = F::HALF ? li & 1 : 0;
    const int64_t boff = F::HALF ? (int64_t)(li >> 1) * F::SB : (int64_t)li * F::SB;
    auto seg_of = [&](int64_t r) { return NS == 1 || r < mo.end[0] ? 0 : r < mo.end[1] ? 1 : 2; };
    auto row_of = [&](int64_t s, int k, bool &ok) {
        const int64_t p = (s * nteams + gt) * NT + k / H, r = GLU && (k % H) ? p + f : p;
        ok = act_u && p < P;
        if (NS == 1) return w + r * ws + boff;
        const int g = seg_of(r);
        const int64_t lr = g == 0 ? r : r - (g == 1 ? mo.end[0] : mo.end[1]);
        const char *wb = g == 0 ? w : g == 1 ? mo.w[0] : mo.w[1];
        const int64_t wsg = g == 0 ? ws : g == 1 ? mo.ws[0] : mo.ws[1];
        return wb + lr * wsg + boff;
    };
    /* where output p of x row j goes */
    auto y_of = [&](int64_t p, int j) {
        if (NS == 1) return y + j * y_ld + p;
        const int g = seg_of(p);
        float *yb = g == 0 ? y : g == 1 ? mo.y[0] : mo.y[1];
        return yb + j * y_ld + (g == 0 ? p : p - (g == 1 ? mo.end[0] : mo.end[1]));
    };
    uint4 v[R][F::NV];
    auto load = [&](int64_t s, uint4 (&buf)[R][F::NV]) {
#pragma unroll
        for (int k = 0; k < R; k++) {
            bool ok;
            const char *b = row_of(s, k, ok);
            if (ok) F::template load<LC>(buf[k], b, h);
        }
    };
    if (nsteps > 0) load(0, v);
    CUDA_PDL_ENTER();
    xr_x X[NB];
    xr_quant_x<NB>(x, x_ld, nu, li, X);
    int par = 0;
    /* step s's sums from the W rows in buf: part[k * NB + j] = row k . x row j */
    auto dots = [&](int64_t s, const uint4 (&buf)[R][F::NV], float *part) {
#pragma unroll
        for (int k = 0; k < R; k++) {
            bool ok;
            const char *b = row_of(s, k, ok);
#pragma unroll
            for (int j = 0; j < NB; j++) part[k * NB + j] = ok ? F::dot(buf[k], b, h, X[j]) : 0.0f;
        }
    };
    /* reduce step s's sums over the team and store its outputs */
    auto finish = [&](int64_t s, float *part) {
        if (!BIG) {
#pragma unroll
            for (int k = 0; k < R * NB; k++)
                for (int o = tt >> 1; o > 0; o >>= 1) part[k] += __shfl_xor_sync(0xffffffffu, part[k], o);
            if (li == 0) {
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const int64_t p = (s * nteams + gt) * NT + t;
#pragma unroll
                    for (int j = 0; j < NB; j++)
                        if (p < P)
                            *y_of(p, j) = GLU ? cuda_glu_act(act, part[2 * t * NB + j]) * part[(2 * t + 1) * NB + j]
                                              : part[t * NB + j] + (bias ? bias[p] : 0.0f);
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < R * NB; k++) {
                const float r = warp_sum(part[k]);
                if ((tid & 31) == 0) red[par][k][tid >> 5] = r;
            }
            __syncthreads();
            if (tid < NT * NB) { /* thread: output tid / NB of the step, x row tid % NB */
                const int t = tid / NB, j = tid % NB;
                const int64_t p = (s * nteams + gt) * NT + t;
                if (p < P) {
                    const int nw = (int)(blockDim.x >> 5);
                    float a = 0.0f, b = 0.0f;
                    for (int i = 0; i < nw; i++) a += red[par][H * t * NB + j][i];
                    if (GLU)
                        for (int i = 0; i < nw; i++) b += red[par][(H * t + 1) * NB + j][i];
                    *y_of(p, j) = GLU ? cuda_glu_act(act, a) * b : a + (bias ? bias[p] : 0.0f);
                }
            }
            par ^= 1;
        }
    };
    for (int64_t s = 0; s < nsteps; s++) {
        float part[R * NB];
        dots(s, v, part);
        if (s + 1 < nsteps) load(s + 1, v); /* in flight during the reduce and the next step's wait */
        finish(s, part);
    }
}

/* VLLM_CUDA_GEMV_XR: "0" off; "2" / "4" force the rows a step (default
 * by format below); an "s" anywhere streams W past L1 (cuda_ld_stream16)
 * instead of through it (session 13's table: through L1 1.1-1.9x faster);
 * an "a" also takes Q8_0 (off by default: d4 streams it as fast); an "o"
 * leaves calls of two rows to d4 (session 14: two rows in xr, 8B Q4_K_M
 * `vllm bench` c = 2 470 vs 367 tok/s); a "t" turns MATMUL3 off (q, k, v
 * as three launches). Read at first use; stored as 1 (off) or 64 | R (0:
 * the default) | 16 (streamed) | 32 (Q8_0) | 128 (two rows) | 512
 * (MATMUL3). */
static int xr_mode(cuda_ctx *c) {
    if (!c->gemv_xr) {
        const char *e = getenv("VLLM_CUDA_GEMV_XR");
        if (e && !strcmp(e, "0")) {
            c->gemv_xr = 1;
        } else {
            c->gemv_xr = 64 | (e && e[0] == '4' ? 4 : e && e[0] == '2' ? 2 : 0);
            if (e && strchr(e, 's')) c->gemv_xr |= 16;
            if (e && strchr(e, 'a')) c->gemv_xr |= 32;
            if (!(e && strchr(e, 'o'))) c->gemv_xr |= 128;
            if (!(e && strchr(e, 't'))) c->gemv_xr |= 512;
        }
    }
    return c->gemv_xr == 1 ? 0 : c->gemv_xr;
}

/* Rows a step by format, from session 13's table (8B shapes, one row):
 * 4 where the instance stays near 150-200 registers and wins (Q4_K; Q5_K
 * but its GLU), 2 where 4 spills or loses on the large shapes (Q6_K, Q8_0,
 * Q4_0 / Q4_1: gate|up 22.2 vs 28.3 us, LM head 78.5 vs 86.2 for Q4_0). */
static bool xr_r4(rt_dtype t, bool glu) { return t == RT_Q4_K || (t == RT_Q5_K && !glu); }

bool cuda_gemv_xr_fits(cuda_ctx *c, const rt_tensor *w, int64_t n) {
    const rt_dtype t = w->dtype;
    const bool kq = t == RT_Q4_K || t == RT_Q5_K || t == RT_Q6_K;
    const int m = xr_mode(c);
    if (!m || !(n == 1 || (n == 2 && (m & 128))) || !(kq || t == RT_Q4_0 || t == RT_Q4_1 || (t == RT_Q8_0 && (m & 32))))
        return false;
    const int64_t in = w->shape[1];
    /* two rows: x of both in 48 KB of shared memory (176 bytes a unit a row) */
    if (in % (kq ? 256 : XR_UV) || in / XR_UV > (n == 2 ? XR_MAXU / 2 : XR_MAXU)) return false;
    /* Q4_K / Q5_K super-blocks are read as aligned vectors; Q4_1 units at 4
     * bytes, the others at any even byte */
    const uintptr_t a = (uintptr_t)w->data | (uintptr_t)w->stride[0];
    return t == RT_Q4_K || t == RT_Q5_K ? !(a & 15) : t == RT_Q4_1 ? !(a & 3) : !(a & 1);
}

/* Lanes a team: the power of two >= nu (small mode), or whole warps. */
static int xr_tt(int nu) {
    return nu > 32 ? 32 * ((nu + 31) / 32) : nu <= 1 ? 1 : 1 << (32 - __builtin_clz((unsigned)(nu - 1)));
}

/* One call's operands (out: all W rows, mo's segments included). */
struct xr_call {
    const char *w;
    int64_t ws;
    const float *x;
    float *y;
    const float *bias; /* NULL for MATMUL_GLU and MATMUL3 */
    int64_t out, x_ld, y_ld;
    int nu, act;
    xr_more mo;
};

template <rt_dtype T, int R, bool GLU, bool BIG, int LC, int NB, int NS>
static void xr_launch(cuda_ctx *c, const xr_call &a) {
    const int tt = xr_tt(a.nu);
    const int threads = BIG ? tt : XR_CTA, tpc = BIG ? 1 : XR_CTA / tt;
    const size_t smem = xr_smem(a.nu, NB);
    /* blocks an SM (registers and this call's shared memory): asked once per
     * row length (threads and smem follow from nu) and instance, not per
     * launch; a full table asks again (benign race: same values) */
    static int memo_nu[8], memo_o[8];
    int o = 0;
    for (int i = 0; i < 8 && !o; i++)
        if (memo_nu[i] == a.nu) o = memo_o[i];
    if (!o) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, k_gemv_xr<T, R, GLU, BIG, LC, NB, NS>, threads, smem) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            o = 1;
        }
        if (o < 1) o = 1;
        for (int i = 0; i < 8; i++)
            if (!memo_nu[i]) {
                memo_o[i] = o;
                memo_nu[i] = a.nu;
                break;
            }
    }
    constexpr int NT = GLU ? R / 2 : R;
    const int64_t P = GLU ? a.out / 2 : a.out, teams = (P + NT - 1) / NT, blocks = (teams + tpc - 1) / tpc;
    const int64_t most = (int64_t)c->n_sm * o;
    cuda_launch(k_gemv_xr<T, R, GLU, BIG, LC, NB, NS>, (unsigned)(blocks < most ? blocks : most), threads, smem,
                c->stream, a.w, a.ws, a.x, a.y, a.bias, a.out, a.nu, tt, a.act, a.x_ld, a.y_ld, a.mo);
}

/* MATMUL3 launches (NS = 3) are never GLU and take one x row. */
template <rt_dtype T, int R, int LC, int NB, int NS> static void xr_go(cuda_ctx *c, const xr_call &a, bool glu) {
    if (a.nu > 32) {
        if (NS == 1 && glu) xr_launch<T, R, true, true, LC, NB, 1>(c, a);
        else xr_launch<T, R, false, true, LC, NB, NS>(c, a);
    } else {
        if (NS == 1 && glu) xr_launch<T, R, true, false, LC, NB, 1>(c, a);
        else xr_launch<T, R, false, false, LC, NB, NS>(c, a);
    }
}

/* One launch of a call (format t; n x rows; ns W segments). */
static int xr_run(cuda_ctx *c, rt_dtype t, const xr_call &a, int n, int ns, bool glu) {
    if (a.out <= 0) return VC_OK; /* no rows: no grid of zero blocks */
    const int m = xr_mode(c), l1 = !(m & 16);
    const int r4 = (m & 7) ? (m & 7) == 4 : xr_r4(t, glu);
    switch (t) {
#define X(T)                                                                                          \
    case T:                                                                                           \
        if (n == 2) xr_go<T, 2, 1, 2, 1>(c, a, glu);                                                  \
        else if (ns > 1 && r4) xr_go<T, 4, 1, 1, 3>(c, a, false);                                     \
        else if (ns > 1) xr_go<T, 2, 1, 1, 3>(c, a, false);                                           \
        else if (r4 && l1) xr_go<T, 4, 1, 1, 1>(c, a, glu);                                           \
        else if (r4) xr_go<T, 4, 0, 1, 1>(c, a, glu);                                                 \
        else if (l1) xr_go<T, 2, 1, 1, 1>(c, a, glu);                                                 \
        else xr_go<T, 2, 0, 1, 1>(c, a, glu);                                                         \
        break;
        X(RT_Q4_0) X(RT_Q4_1) X(RT_Q8_0) X(RT_Q4_K) X(RT_Q5_K) X(RT_Q6_K)
#undef X
    default: return vc_err_set(VC_ERR_UNSUPPORTED, "cuda gemv xr: weight dtype %s", rt_dtype_name(t));
    }
    __atomic_fetch_add(&g_xr_launches, 1, __ATOMIC_RELAXED);
    CU_LAUNCHED();
    return VC_OK;
}

int cuda_gemv_xr(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                 const float *bias, int64_t out, int64_t in, int n, bool glu, int act) {
    xr_call a = {};
    a.w = (const char *)w->data, a.ws = w->stride[0], a.x = x, a.y = y, a.bias = glu ? NULL : bias;
    a.out = out, a.x_ld = x_ld, a.y_ld = y_ld, a.nu = (int)(in / XR_UV), a.act = act;
    return xr_run(c, w->dtype, a, n, 1, glu);
}

/* MATMUL3 (off with VLLM_CUDA_GEMV_XR=t):
 * one x row, f32 x (16-byte aligned) and y, three GGUF weights this kernel
 * takes; the weights of one type share a launch as segments (Q4_K_M's
 * q, k (Q4_K) and v (Q6_K): two launches instead of three). */
bool cuda_matmul3_fits(cuda_ctx *c, const rt_op_args *a) {
    if (!(xr_mode(c) & 512)) return false;
    const rt_tensor *x = a->src[0];
    const rt_tensor *y[3] = {a->dst, a->p.mm3.y1, a->p.mm3.y2};
    if (x->dtype != RT_F32 || rt_tensor_nrows(x) != 1 || x->stride[x->ndim - 1] != 4 || ((uintptr_t)x->data & 15))
        return false;
    for (int i = 0; i < 3; i++) {
        const rt_tensor *w = a->src[1 + i];
        if (!y[i] || y[i]->dtype != RT_F32 || y[i]->stride[y[i]->ndim - 1] != 4 || !w || w->ndim != 2 ||
            w->shape[0] > INT_MAX || !cuda_gemv_xr_fits(c, w, 1))
            return false;
    }
    return true;
}

int cuda_op_matmul3(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0];
    rt_tensor *y[3] = {a->dst, a->p.mm3.y1, a->p.mm3.y2};
    for (int i = 0; i < 3; i++)
        if (cuda_check_dev(y[i], "matmul3") || cuda_check_dev(a->src[1 + i], "matmul3")) return VC_ERR_INVALID;
    if (cuda_check_dev(x, "matmul3")) return VC_ERR_INVALID;
    if (!cuda_matmul3_fits(c, a)) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul3: not a one-row GGUF call");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    bool done[3] = {false, false, false};
    for (int i = 0; i < 3; i++) {
        if (done[i]) continue;
        const rt_dtype t = a->src[1 + i]->dtype;
        xr_call k = {};
        int ns = 0;
        for (int j = i; j < 3; j++) { /* this type's weights, in order: segment ns */
            const rt_tensor *w = a->src[1 + j];
            if (done[j] || w->dtype != t) continue;
            done[j] = true;
            if (ns == 0) {
                k.w = (const char *)w->data, k.ws = w->stride[0], k.y = (float *)y[j]->data;
            } else {
                k.mo.w[ns - 1] = (const char *)w->data, k.mo.ws[ns - 1] = w->stride[0];
                k.mo.y[ns - 1] = (float *)y[j]->data;
                k.mo.end[ns - 1] = k.out;
            }
            k.out += w->shape[0];
            ns++;
        }
        if (ns == 2) k.mo.end[1] = k.out; /* no third segment */
        k.x = (const float *)x->data, k.bias = NULL;
        k.nu = (int)(x->shape[x->ndim - 1] / XR_UV), k.act = 0;
        const int rc = xr_run(c, t, k, 1, ns, false);
        if (rc < 0) return rc;
    }
    return VC_OK;
}
