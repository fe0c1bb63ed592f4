/* cuda_rope_pf — QK_ROPE_STORE for prefill-sized batches with head_dim 128
 * and full rotary (Qwen3, Llama): included by cuda_fused.cu after rs_args,
 * rs_src and the rs_ld4 loads, which it shares.
 *
 * Why: at 2048 tokens the vector kernel (one 8-warp block per token, a warp
 * per head row, 4 values of 8 bytes per lane, cos/sin through shared memory
 * behind a block barrier) took 23.9 us per layer for ~34 MB of traffic on
 * the H200 (Qwen3-0.6B shape, ncu), ~4x its bandwidth time: per block a
 * short chain of dependent steps (slot / position loads, the angle table,
 * the barrier, then 4 rows per warp with one row loaded ahead), too few
 * bytes in flight per SM. Here a half-warp takes a head row (lane m:
 * values 8m .. 8m+7, one 16-byte load of bf16 or two of f32), two warps a
 * token (4 tokens per 256-thread block), and each half-warp loads
 * RS_PF_AHEAD rows before it works on them; a lane's cos/sin of its 8
 * values come from sincosf once per token into registers (no shared
 * memory, no block barrier), the neox partner value from lane m ^ 8 by a
 * shuffle.
 *
 * Arithmetic is the vector kernel's, step for step: the per-lane square
 * sums of values 8m..8m+3 and 8m+4..8m+7 are that kernel's lanes 2m and
 * 2m+1, and the four xor levels here (8, 4, 2, 1 over a, b) with the last
 * a + b are its five (16 .. 1), so the norm scale, the rotation and every
 * store round the same (test_cuda_rope_pf compares the two kernels).
 * VLLM_CUDA_RS_PF=1 (read at each call) turns it on for batches of at
 * least RS_PF_MIN_N tokens; default off until measured on the device.
 */
#ifndef CUDA_ROPE_PF_CUH
#define CUDA_ROPE_PF_CUH

#define RS_PF_TOK 4    /* tokens per 256-thread block (two warps each) */
#define RS_PF_AHEAD 4  /* head rows a half-warp loads before working on them */
#define RS_PF_MIN_N 512

/* A row's 8 values as loaded (raw: bf16 kept packed, 4 registers, so the
 * rows loaded ahead cost half the registers; widened by cvt when the row's
 * turn comes: the values of a load straight to floats). */
template <typename A> struct rs_pf_raw;
template <> struct rs_pf_raw<__nv_bfloat16> {
    uint4 u;
    __device__ __forceinline__ void ld(const __nv_bfloat16 *p) { u = *(const uint4 *)p; }
    __device__ __forceinline__ void cvt(float *x) const {
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 f = __bfloat1622float2(h[i]);
            x[2 * i] = f.x, x[2 * i + 1] = f.y;
        }
    }
};
template <> struct rs_pf_raw<float> {
    float4 a, b;
    __device__ __forceinline__ void ld(const float *p) { a = rs_ld4(p), b = rs_ld4(p + 4); }
    __device__ __forceinline__ void cvt(float *x) const {
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    }
};

template <typename T> __device__ __forceinline__ void rs_pf_st8(T *p, const float *x) {
    cuda_st4(p, make_float4(x[0], x[1], x[2], x[3]));
    cuda_st4(p + 4, make_float4(x[4], x[5], x[6], x[7]));
}

/* Head row j of token t, values 8m .. 8m+7 in x: QK-norm, RoPE, store.
 * hm: the half-warp's lanes (shuffles stay within it: the other half may
 * hold a row of another kind). */
template <typename KV, typename A>
__device__ __forceinline__ void rs_pf_row(const rs_args &p, int64_t t, int j, int32_t slot, bool store, float *x,
                                          const float *cs, const float *sn, int m, unsigned hm) {
    const int hd = 128;
    const int kind = j < p.h ? 0 : j < p.h + p.kvh ? 1 : 2;
    const int head = kind == 0 ? j : kind == 1 ? j - (int)p.h : j - (int)(p.h + p.kvh);
    const int64_t coff = ((int64_t)slot * p.kvh + head) * hd + 8 * m;
    if (kind == 2) {
        if (store) rs_pf_st8((KV *)p.vc + coff, x);
        return;
    }
    const float *nw = kind == 0 ? p.qn : p.kn;
    if (nw) { /* uniform per half-warp */
        float a = 0.0f, b = 0.0f;
        a += x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3];
        b += x[4] * x[4] + x[5] * x[5] + x[6] * x[6] + x[7] * x[7];
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) {
            a += __shfl_xor_sync(hm, a, o);
            b += __shfl_xor_sync(hm, b, o);
        }
        float ss = a + b;
        float s = 1.0f / sqrtf(ss / (float)hd + p.eps);
        const float4 *wv = (const float4 *)(nw + 8 * m);
        float4 w0 = wv[0], w1 = wv[1];
        float w[8] = {p.w_off + w0.x, p.w_off + w0.y, p.w_off + w0.z, p.w_off + w0.w,
                      p.w_off + w1.x, p.w_off + w1.y, p.w_off + w1.z, p.w_off + w1.w};
#pragma unroll
        for (int u = 0; u < 8; u++) x[u] = x[u] * s * w[u];
    }
    float o[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
        const int i = 8 * m + u;
        const bool first = p.neox ? i < 64 : (u & 1) == 0;
        float xs = __shfl_xor_sync(hm, x[u], 8); /* neox partner: value i +- 64 */
        float xp = p.neox ? xs : x[u ^ 1];
        o[u] = first ? x[u] * cs[u] - xp * sn[u] : xp * sn[u] + x[u] * cs[u];
    }
    if (kind == 0) rs_pf_st8((A *)(p.dst + t * p.d_s0 + head * p.d_s1) + 8 * m, o);
    else if (store) rs_pf_st8((KV *)p.kc + coff, o);
}

/* rs_pf_bps<A>() blocks of 8 warps per SM. 3: at most 85 registers (ptxas: 72
 * with rows ahead as floats, no spills); 24 warps x 4 rows ahead x 512
 * bytes = 48 KB of loads in flight per SM; but 2048 tokens are 512 blocks
 * = 1.29 waves of 396 (session 16's ncu in the engine: 27.6% achieved
 * occupancy, a third of the stall samples on the rows' loads). 4 with
 * bf16 activations (64 registers, no spills: the rows ahead kept raw, 4
 * registers each): 528 slots, one wave (gpu_s16f.sh: 12.5 vs 17.1-17.6
 * us a call alone at 16/8 heads, 19.7 vs 32.9 at 32/8; in the engine
 * 19.5 vs 27.8 us under ncu; outputs unchanged). f32 activations keep 3
 * (their raw rows are 8 registers; at 64 they spill). */
template <typename A> constexpr int rs_pf_bps() { return sizeof(A) == 2 ? 4 : 3; }
template <typename KV, typename A, bool SH>
__global__ void __launch_bounds__(256, rs_pf_bps<A>()) k_qk_rope_store_pf(rs_args p, int64_t n) {
    CUDA_PDL_ENTER();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t = (int64_t)blockIdx.x * RS_PF_TOK + (warp >> 1);
    if (t >= n) return; /* whole warps */
    const int m = lane & 15, j0 = (warp & 1) * 2 + (lane >> 4), rows = (int)(p.h + 2 * p.kvh);
    const unsigned hm = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    const int32_t slot = p.slots[t];
    const bool store = slot >= 0 && slot < p.n_slots; /* < 0: padding row, nothing stored */
    const float pf = (float)p.pos[t];
    float cs[8], sn[8];
    if (SH) {
        /* a token has 64 distinct angles (k = 0 .. 63): lane m of the
         * half-warp computes k = 4m .. 4m+3 and takes its 8 from the lanes
         * that hold them (neox: k = 8 (m % 8) + u, lanes 2 (m % 8) and
         * 2 (m % 8) + 1; pairwise: k = 4m + u / 2, its own). The same
         * sincosf of the same product: bit-identical to computing them
         * here, at an eighth of a token's sincosf (session 14's ncu: the
         * kernel issues 0.48 instructions a cycle per scheduler, SM 38%:
         * instruction-bound as much as memory-bound) */
        float c4[4], s4[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            float sv, cv;
            sincosf(pf * p.inv_freq[4 * m + q], &sv, &cv);
            c4[q] = cv * p.af;
            s4[q] = sv * p.af;
        }
        if (p.neox) { /* uniform: every lane of the half-warp shuffles */
#pragma unroll
            for (int u = 0; u < 8; u++) {
                cs[u] = __shfl_sync(hm, c4[u & 3], 2 * (m & 7) + (u >> 2), 16);
                sn[u] = __shfl_sync(hm, s4[u & 3], 2 * (m & 7) + (u >> 2), 16);
            }
        } else {
#pragma unroll
            for (int u = 0; u < 8; u++) cs[u] = c4[u >> 1], sn[u] = s4[u >> 1];
        }
    } else {
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = 8 * m + u, k = p.neox ? (i < 64 ? i : i - 64) : i >> 1;
            float sv, cv;
            sincosf(pf * p.inv_freq[k], &sv, &cv);
            cs[u] = cv * p.af;
            sn[u] = sv * p.af;
        }
    }
    for (int base = j0; base < rows; base += 4 * RS_PF_AHEAD) {
        rs_pf_raw<A> xr[RS_PF_AHEAD];
#pragma unroll
        for (int d = 0; d < RS_PF_AHEAD; d++)
            if (base + 4 * d < rows) xr[d].ld(rs_src<A>(p, t, base + 4 * d) + 8 * m);
#pragma unroll
        for (int d = 0; d < RS_PF_AHEAD; d++)
            if (base + 4 * d < rows) {
                float x[8];
                xr[d].cvt(x);
                rs_pf_row<KV, A>(p, t, base + 4 * d, slot, store, x, cs, sn, m, hm);
            }
    }
    if (slot >= p.n_slots && (threadIdx.x & 63) == 0) atomicOr(p.flags, CUDA_FLAG_BAD_SLOT);
}

/* On for this call? (VLLM_CUDA_RS_PF unset or not 0; head_dim 128, full
 * rotary, the vector kernel's alignment, at least RS_PF_MIN_N tokens.)
 * Default on since session 7's device call: warm 2048-token prefill
 * 6.25 -> 6.17 and 6.31 -> 6.20 ms (Qwen3-0.6B shape), 50.48 -> 49.99 ms
 * (8B shape); outputs identical to the vector kernel's with bf16
 * activations (test_cuda_rope_pf), memcheck clean. Returns 0 (off), 1
 * (VLLM_CUDA_RS_PF=1: every lane its own angles) or 2 (the default since
 * session 15: shared angles). */
static inline int rs_pf_use(const rs_args &p, int64_t n, bool vec) {
    if (!vec || p.hd != 128 || p.rot_dim != 128 || n < RS_PF_MIN_N) return 0;
    const char *e = getenv("VLLM_CUDA_RS_PF");
    if (e && !strcmp(e, "0")) return 0;
    return e && !strcmp(e, "1") ? 1 : 2;
}

/* mode 1: every lane computes its 8 angles (session 7's kernel,
 * VLLM_CUDA_RS_PF=1); 2: the half-warp's 64 angles once, shared by
 * shuffles (session 15: bit-identical, 17.1-17.6 vs 17.6-18.0 us a call
 * at 2048 tokens and 16/8 heads; TTFT within the noise) */
template <typename A> static void rs_launch_pf(cuda_ctx *c, const rs_args &p, int64_t n, rt_dtype kvt, int mode) {
    dim3 grid((unsigned)((n + RS_PF_TOK - 1) / RS_PF_TOK));
#define RS_PF_GO(SH)                                                                                  \
    if (kvt == RT_BF16) cuda_launch(k_qk_rope_store_pf<__nv_bfloat16, A, SH>, grid, 256, 0, c->stream, p, n); \
    else if (kvt == RT_F16) cuda_launch(k_qk_rope_store_pf<__half, A, SH>, grid, 256, 0, c->stream, p, n);   \
    else cuda_launch(k_qk_rope_store_pf<float, A, SH>, grid, 256, 0, c->stream, p, n);
    if (mode == 2) {
        RS_PF_GO(true)
    } else {
        RS_PF_GO(false)
    }
#undef RS_PF_GO
}

#endif
