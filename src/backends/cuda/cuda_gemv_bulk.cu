/* cuda_gemv_bulk — the persistent decode GEMV: weights through shared memory
 * by bulk copies (cp.async.bulk), see cuda_gemv.h.
 *
 * Why: the register-pipelined GEMV (k_gemv_half_u, cuda_matmul.cu) keeps
 * 2 x 16 bytes per lane in flight (32 KB per SM) in many short CTAs; the
 * one-wave matrices (4096x4096, 4096x14336) lose their ramp and tail and
 * the several-wave ones the last partial wave. Here a grid of <= cps CTAs
 * per SM is launched once; CTA b owns tiles [b * tpc, (b + 1) * tpc) of 8
 * items (tpc = ceil(tiles / (n_sm * cps)), so every CTA but the last has
 * the same work and no wave is partial), and one producer warp streams
 * them as stages of 8 (GLU: 16) row segments of `chunk` bytes, one
 * cp.async.bulk per segment (long contiguous reads), into a ring of `ns`
 * stages, while 8 consumer warps each dot one segment with x.
 *
 * Stage i of a CTA is tile t0 + i / nch, chunk k = i % nch of its rows
 * (nch = ceil(row bytes / chunk)). Barriers: full[s] (the producer's
 * arrive + the copies' bytes), empty[s] (the 8 consumer warps). The
 * producer issues its first `pre` stages before griddepcontrol.wait
 * (weights do not depend on the previous kernel; only x does, and the
 * consumers wait before reading it); a large pre-wait burst delays the
 * latency-bound kernel it overlaps (BENCHMARKS.md, "L2 prefetch before the
 * PDL wait"), hence the bound.
 *
 * x goes to shared memory (once per CTA) when it fits in GB_X_SMEM: with
 * the ring taking most of the SM's shared memory, L1 kept too little of it
 * and each stage waited on L2 for x (measured: 0.3-0.5 of the copy rate).
 *
 * Sum order: lane l of a row's warp adds values 8j..8j+7 of each chunk for
 * j = l, l + 32, ..., chunks in order, then the warp's butterfly sum; it
 * depends on the shape and `chunk` only (never on n).
 */
#include "backends/cuda/cuda_gemv.h"

#include <cuda_fp16.h>

#define GB_WARPS 8                        /* consumer warps: one item of a tile each */
#define GB_THREADS (32 * (GB_WARPS + 1)) /* + the producer warp */
#define GB_BAR_BYTES 256                  /* 2 x 16 mbarriers before the ring */
#define GB_MAX_STAGES 16
#define GB_X_SMEM (64 << 10)              /* bytes of x [n, in] kept in shared memory */

/* ---- tuning ------------------------------------------------------------ */

/* The best single tuning of the H200 table (test_cuda_speed, BENCHMARKS.md)
 * on the large matrices. */
static const cuda_gemv_bulk_cfg gb_default = {160, 8192, 1, 1, 0};

cuda_gemv_bulk_cfg cuda_gemv_bulk_cfg_env(void) {
    cuda_gemv_bulk_cfg c = gb_default;
    const char *e = getenv("VLLM_CUDA_GEMV_BULK");
    if (!e || !*e) return c;
    int v[5] = {-1, -1, -1, -1, -1};
    const char *p = e;
    for (int i = 0; i < 5 && *p; i++) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) break;
        v[i] = x >= 0 && x < 1 << 20 ? (int)x : -1;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
    if (v[0] >= 16 && v[0] <= 248 && v[0] % 8 == 0) c.ring_kb = v[0];
    if (v[1] >= 512 && v[1] <= 65536 && (v[1] & (v[1] - 1)) == 0) c.chunk = v[1];
    if (v[2] >= 0 && v[2] <= 15) c.pre = v[2];
    if (v[3] >= 1 && v[3] <= 3) c.cps = v[3];
    if (v[4] == 0 || v[4] == 1) c.ef = v[4];
    return c;
}

int cuda_gemv_bulk_pack(cuda_gemv_bulk_cfg c) {
    int lg = 0;
    while ((512 << lg) < c.chunk) lg++;
    return c.ring_kb / 8 | lg << 5 | c.pre << 8 | (c.cps - 1) << 12 | c.ef << 14;
}

cuda_gemv_bulk_cfg cuda_gemv_bulk_unpack(int code) {
    if (!code) return gb_default;
    cuda_gemv_bulk_cfg c;
    c.ring_kb = (code & 31) * 8;
    c.chunk = 512 << ((code >> 5) & 7);
    c.pre = (code >> 8) & 15;
    c.cps = ((code >> 12) & 3) + 1;
    c.ef = (code >> 14) & 1;
    return c;
}

/* ---- device helpers (sm_90) ----------------------------------------------- */

__device__ __forceinline__ uint32_t gb_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void gb_bar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void gb_bar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void gb_bar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void gb_bar_wait(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!ok);
}

/* bytes (a multiple of 16) from global src to shared dst; completes on bar. */
__device__ __forceinline__ void gb_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, bool ef,
                                        uint64_t pol) {
    if (ef)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                     " [%0], [%1], %2, [%3], %4;" ::"r"(dst),
                     "l"(src), "r"(bytes), "r"(bar), "l"(pol)
                     : "memory");
    else
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         dst),
                     "l"(src), "r"(bytes), "r"(bar)
                     : "memory");
}

__device__ __forceinline__ void gb_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <rt_dtype T> __device__ __forceinline__ void gb_unpack8(const uint4 &p, float *w) {
    const uint32_t u[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (T == RT_BF16) {
            w[2 * i] = __uint_as_float(u[i] << 16);
            w[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
        } else {
            __half2 h = *(const __half2 *)&u[i];
            float2 f = __half22float2(h);
            w[2 * i] = f.x;
            w[2 * i + 1] = f.y;
        }
    }
}

/* acc[t] += w[8 values] . x_t[col .. col + 7] (XS: x in shared memory,
 * else through the read-only path). */
template <bool XS>
__device__ __forceinline__ void gb_fma8(float *acc, const float *wv, const float *x, int64_t x_ld, int64_t col,
                                        int n) {
#pragma unroll
    for (int t = 0; t < CUDA_GEMV_MAX_N; t++) {
        if (t >= n) break;
        const float4 *xs = (const float4 *)(x + t * x_ld + col);
        float4 a = XS ? xs[0] : __ldg(xs), b = XS ? xs[1] : __ldg(xs + 1);
        acc[t] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y + wv[6] * b.z +
                  wv[7] * b.w;
    }
}

__device__ __forceinline__ float gb_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- the kernel ----------------------------------------------------------- */

template <rt_dtype T, bool GLU, bool XS>
__global__ void __launch_bounds__(GB_THREADS, 2) k_gemv_bulk(const char *w, int64_t ws, const float *x, int64_t x_ld,
                                                          float *y, int64_t y_ld, const float *bias, int64_t items,
                                                          int64_t in, int n, int act, int chunk, int ns, int pre,
                                                          int ef, int64_t tpc, int x_bytes) {
    constexpr int NR = GLU ? 2 : 1; /* segments per item: the gate and up rows */
    extern __shared__ __align__(128) char gb_sm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t ntiles = (items + GB_WARPS - 1) / GB_WARPS, t0 = (int64_t)blockIdx.x * tpc;
    const int64_t t1 = t0 + tpc < ntiles ? t0 + tpc : ntiles;
    const int64_t rowb = in * 2, nch = (rowb + chunk - 1) / chunk;
    const int64_t total = t1 > t0 ? (t1 - t0) * nch : 0;
    const uint32_t stage = (uint32_t)(GB_WARPS * NR * chunk);
    const uint32_t full0 = gb_smem(gb_sm), empty0 = full0 + 8 * GB_MAX_STAGES,
                   ring0 = full0 + GB_BAR_BYTES + (uint32_t)x_bytes;
    if (threadIdx.x == 0) {
        for (int s = 0; s < ns; s++) {
            gb_bar_init(full0 + 8 * s, 1);
            gb_bar_init(empty0 + 8 * s, GB_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == GB_WARPS) { /* producer */
        uint64_t pol = 0;
        if (ef) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
        for (int64_t i = 0; i < total; i++) {
            if (i == pre) gb_pdl_wait();
            const int s = (int)(i % ns);
            if (i >= ns) gb_bar_wait(empty0 + 8 * s, (uint32_t)((i / ns - 1) & 1));
            const int64_t tile = t0 + i / nch, k = i % nch;
            const int64_t left = rowb - k * chunk, vi = items - tile * GB_WARPS;
            const uint32_t cb = (uint32_t)(left < chunk ? left : chunk);
            const int segs = (int)(vi < GB_WARPS ? vi : GB_WARPS) * NR;
            if (lane == 0) gb_bar_expect(full0 + 8 * s, cb * (uint32_t)segs);
            __syncwarp();
            if (lane < segs) {
                const int64_t item = tile * GB_WARPS + lane / NR;
                const int64_t row = GLU ? item + (lane % NR) * items : item;
                gb_copy(ring0 + (uint32_t)s * stage + (uint32_t)lane * (uint32_t)chunk, w + row * ws + k * chunk, cb,
                        full0 + 8 * s, ef != 0, pol);
            }
        }
        return;
    }
    CUDA_PDL_ENTER(); /* consumers: x and y belong to the kernels around */
    float *xsm = (float *)(gb_sm + GB_BAR_BYTES);
    if (XS) { /* x [n, in] into shared memory, rows in apart */
        const int64_t q = in / 4;
        for (int t = 0; t < n; t++)
            for (int64_t j = threadIdx.x; j < q; j += 32 * GB_WARPS)
                ((float4 *)xsm)[t * q + j] = __ldg((const float4 *)(x + t * x_ld) + j);
        asm volatile("bar.sync 1, %0;" ::"n"(32 * GB_WARPS) : "memory");
    }
    const float *xp = XS ? xsm : x;
    const int64_t xp_ld = XS ? in : x_ld;
    float acc[NR][CUDA_GEMV_MAX_N];
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int t = 0; t < CUDA_GEMV_MAX_N; t++) acc[r][t] = 0.0f;
    for (int64_t i = 0; i < total; i++) {
        const int s = (int)(i % ns);
        gb_bar_wait(full0 + 8 * s, (uint32_t)((i / ns) & 1));
        const int64_t tile = t0 + i / nch, k = i % nch, item = tile * GB_WARPS + warp;
        if (item < items) {
            const int64_t left = rowb - k * chunk;
            const int nv = (int)((left < chunk ? left : chunk) / 16); /* 16-byte groups of 8 values */
            const int64_t col0 = k * (chunk / 2);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const uint4 *seg = (const uint4 *)(gb_sm + GB_BAR_BYTES + x_bytes + (size_t)s * stage +
                                                   (size_t)(warp * NR + r) * chunk);
                for (int j0 = lane; j0 < nv; j0 += 128) {
                    uint4 q[4];
#pragma unroll
                    for (int u = 0; u < 4; u++) q[u] = j0 + 32 * u < nv ? seg[j0 + 32 * u] : make_uint4(0, 0, 0, 0);
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        if (j0 + 32 * u >= nv) break;
                        float wv[8];
                        gb_unpack8<T>(q[u], wv);
                        gb_fma8<XS>(acc[r], wv, xp, xp_ld, col0 + 8 * (j0 + 32 * u), n);
                    }
                }
            }
        }
        __syncwarp();
        if (lane == 0) gb_bar_arrive(empty0 + 8 * s);
        if (k == nch - 1) {
#pragma unroll
            for (int t = 0; t < CUDA_GEMV_MAX_N; t++) {
                if (t >= n) break;
                float g = gb_warp_sum(acc[0][t]), u = GLU ? gb_warp_sum(acc[NR - 1][t]) : 0.0f;
                if (lane == 0 && item < items)
                    y[t * y_ld + item] = GLU ? cuda_glu_act(act, g) * u : g + (bias ? bias[item] : 0.0f);
#pragma unroll
                for (int r = 0; r < NR; r++) acc[r][t] = 0.0f;
            }
        }
    }
}

/* ---- launch --------------------------------------------------------------- */

template <rt_dtype T, bool GLU, bool XS>
static int gb_launch(cuda_ctx *c, const cuda_gemv_bulk_cfg *cfg, const char *w, int64_t ws, const float *x,
                     int64_t x_ld, float *y, int64_t y_ld, const float *bias, int64_t items, int64_t in, int n,
                     int act) {
    /* the opt-in shared memory limit, set once per device (bit d of set) */
    static unsigned set;
    static int optin;
    if (!optin) {
        int v = 0;
        CU_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device));
        optin = v > 0 ? v : 48 << 10;
    }
    const int nr = GLU ? 2 : 1;
    const size_t xb = XS ? (size_t)n * (size_t)in * 4 : 0, fixed = GB_BAR_BYTES + (xb + 127) / 128 * 128;
    int chunk = cfg->chunk;
    while (chunk > 512 && (size_t)2 * GB_WARPS * nr * chunk + fixed > (size_t)optin) chunk /= 2;
    size_t stage = (size_t)GB_WARPS * nr * chunk;
    int ns = (int)((size_t)cfg->ring_kb * 1024 / stage);
    if (ns < 2) ns = 2;
    if (ns > GB_MAX_STAGES) ns = GB_MAX_STAGES;
    while (ns > 2 && ns * stage + fixed > (size_t)optin) ns--;
    size_t smem = ns * stage + fixed;
    if (c->device >= 0 && c->device < 32 && !(set & 1u << c->device)) {
        CU_TRY(cudaFuncSetAttribute(k_gemv_bulk<T, GLU, XS>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
        set |= 1u << c->device;
    }
    int64_t tiles = (items + GB_WARPS - 1) / GB_WARPS, slots = (int64_t)c->n_sm * cfg->cps;
    int64_t tpc = (tiles + slots - 1) / slots, grid = (tiles + tpc - 1) / tpc;
    cuda_launch(k_gemv_bulk<T, GLU, XS>, dim3((unsigned)grid), dim3(GB_THREADS), smem, c->stream, w, ws, x, x_ld,
                y, y_ld, bias, items, in, n, act, chunk, ns, cfg->pre, cfg->ef, tpc, (int)(fixed - GB_BAR_BYTES));
    CU_LAUNCHED();
    return VC_OK;
}

int cuda_gemv_bulk(cuda_ctx *c, const cuda_gemv_bulk_cfg *cfg, rt_dtype t, bool glu, const char *w, int64_t ws,
                   const float *x, int64_t x_ld, float *y, int64_t y_ld, const float *bias, int64_t items,
                   int64_t in, int n, int act) {
    if (items <= 0) return VC_OK;
    /* x in shared memory up to GB_X_SMEM bytes (the L1 left beside the ring
     * is too small to keep it: each stage would wait on L2 for x) */
    const bool xs = (int64_t)n * in * 4 <= GB_X_SMEM;
#define GB_GO(TT, G, X) return gb_launch<TT, G, X>(c, cfg, w, ws, x, x_ld, y, y_ld, G ? NULL : bias, items, in, n, act)
    if (t == RT_F16) {
        if (glu) { if (xs) GB_GO(RT_F16, true, true); GB_GO(RT_F16, true, false); }
        if (xs) GB_GO(RT_F16, false, true);
        GB_GO(RT_F16, false, false);
    }
    if (t == RT_BF16) {
        if (glu) { if (xs) GB_GO(RT_BF16, true, true); GB_GO(RT_BF16, true, false); }
        if (xs) GB_GO(RT_BF16, false, true);
        GB_GO(RT_BF16, false, false);
    }
#undef GB_GO
    return vc_err_set(VC_ERR_UNSUPPORTED, "cuda gemv bulk: weight dtype %s", rt_dtype_name(t));
}
