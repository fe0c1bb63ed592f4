/* cuda_flash_dec — tensor-core decode attention for PAGED_ATTENTION over
 * bf16/f16 caches: batches of decode rows (few queries per sequence) with
 * enough (row, kv head) pairs to fill the GPU, where the SIMT split-KV
 * kernel k_fd (cuda_paged_attn.cu) is bound by its instructions (~0.2-0.4
 * of the bandwidth on the H200 at 64-256 rows of 1,024 keys).
 *
 * Work split. One warp per (query row i, kv head g): the warp's 16-row
 * m-tile holds the G <= 16 query heads of the group (packed row r = head
 * g*G + r; rows >= G are zero and never stored), so every K/V row is read
 * once per group. A CTA of NW independent warps (no block barrier)
 * loops over the (row, head) items, item += all warps of the grid, and the
 * grid is at most one wave (n_sm CTAs: its shared memory allows one CTA
 * per SM). Each warp has its own NST-stage ring of K/V tiles of TN
 * keys in shared memory ([TN][hd + FL_PAD] bf16/f16 for K, then V),
 * filled by 16-byte cp.async from the paged cache (fl_load_rows: keys past
 * the row's last key zero-filled, a bad block id reads block 0 and raises
 * the flag); NST - 1 tiles are in flight while one is computed.
 *
 * Per tile, as k_flash (cuda_flash.cu) for one m-tile: S = Q K^T by
 * mma.sync m16n8k16 (Q fragments in registers, K via ldmatrix), scores in
 * the log2 domain with the scale folded into the exponent's FMA (soft-cap
 * transforms them first), masked only in a tile that crosses the row's key
 * range lo..hi, online softmax per packed row (a quad of lanes shares a
 * row), P rounded to the cache dtype as the A operand of O += P V (V via
 * ldmatrix.trans). out = O / l (0 for a row with no keys). Precision as
 * the flash kernels: q and p rounded to the cache dtype (~1e-3 normalised
 * against the f32 reference), f32 accumulation.
 *
 * Shapes: cuda_flash_eligible (hd 64/128, power-of-two blocks, 16-byte
 * aligned rows, 32-bit strides) and G <= 16; q / out f32 or bf16 rows.
 */
#include "backends/cuda/cuda_flash.h"
#include "backends/cuda/cuda_flash_common.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FD2_MAXG 16

/* Bytes of shared memory of a CTA: W warps x ST stages x (K, V) [N][hd + FL_PAD]. */
static size_t fd2_smem(int hd, int n, int st, int w) { return (size_t)w * st * 2 * n * (hd + FL_PAD) * 2; }

/* N keys per tile, ST stages per warp, W warps per CTA (one CTA per SM). */
template <typename KV, typename A, int HD, int TN, int NST, int NW>
__global__ void __launch_bounds__(NW * 32, 1) k_flash_dec(fl_args a, int kvh, int n_items) {
    CUDA_PDL_ENTER();
    constexpr int LD = HD + FL_PAD; /* smem row pitch, elements */
    constexpr int KS = HD / 16;     /* k-steps of Q K^T */
    constexpr int NO = HD / 8;      /* n-tiles of O */
    constexpr int NJ = TN / 8;   /* n-tiles of S */
    constexpr uint32_t STAGE = 2 * TN * LD * 2; /* bytes: K then V */
    extern __shared__ __align__(16) uint16_t fd2_sm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int mi = lane >> 3, rr = lane & 7; /* ldmatrix: matrix and row this lane addresses */
    uint16_t *const ring = fd2_sm + (size_t)warp * NST * 2 * TN * LD;
    const int lc = lane % (HD / 8), lj0 = lane / (HD / 8); /* this lane's 16-byte chunk and first row */
    const uint32_t sm_kv = fl_smem_addr(ring) + (uint32_t)(lj0 * LD + lc * 8) * 2;
    const int G = a.G;

    for (int item = (int)blockIdx.x * NW + warp; item < n_items; item += (int)gridDim.x * NW) {
        const int64_t i = item / kvh;
        const int g = item % kvh;
        const int s = cuda_row_seq(a.qsl, a.S, i);
        const int r0 = a.qsl[s], q_len = a.qsl[s + 1] - r0, sl = a.seq_lens[s];
        const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || i < r0 || i >= r0 + q_len;
        if (bad && lane == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        const int hi = bad ? -1 : sl - q_len + (int)(i - r0);
        const int lo = a.window > 0 && hi - a.window + 1 > 0 ? hi - a.window + 1 : 0;
        const int32_t *btrow = a.bt + (int64_t)s * a.max_blocks;
        const int kin = g * a.k_s1 + lc * 16, vin = g * a.v_s1 + lc * 16;
        const int n_kt = hi >= lo ? (hi - lo) / TN + 1 : 0;

        /* the first NST - 1 tiles in flight before Q is read */
#pragma unroll
        for (int st = 0; st < NST - 1; st++) {
            if (st < n_kt)
                fl_load_rows<HD, TN, 32>(a, btrow, kin, vin, lo + st * TN, hi, sm_kv + st * STAGE, lane);
            fl_cp_commit();
        }

        /* Q fragments (row-major 16 x HD): rows gq and gq + 8 = heads of the group */
        uint32_t qf[KS][4];
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int r = gq + 8 * h2;
            const bool live = r < G && !bad;
            const char *qrow = a.q + i * a.q_s0 + (int64_t)(g * G + (live ? r : 0)) * a.q_s1;
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int half = 0; half < 2; half++)
                    qf[ks][h2 + 2 * half] =
                        live ? fl_ld_q2<A, KV>(qrow + (int64_t)(ks * 16 + half * 8 + 2 * tq) * (int64_t)sizeof(A)) : 0u;
        }

        float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < NO; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

        for (int it = 0; it < n_kt; it++) {
            fl_cp_wait<NST - 2>(); /* tile it landed (this lane's part) */
            __syncwarp();             /* ... and the warp's; stage (it - 1) % NST is free */
            {
                const int nx = it + NST - 1;
                if (nx < n_kt)
                    fl_load_rows<HD, TN, 32>(a, btrow, kin, vin, lo + nx * TN, hi,
                                                sm_kv + (uint32_t)(nx % NST) * STAGE, lane);
                fl_cp_commit();
            }
            const int kt0 = lo + it * TN;
            const uint16_t *ks_ = ring + (size_t)(it % NST) * 2 * TN * LD, *vs = ks_ + TN * LD;

            /* S = Q K^T: 16 rows x TN keys, NJ n-tiles of 8 keys */
            float sc[NJ][4];
#pragma unroll
            for (int j = 0; j < NJ; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
#pragma unroll
                for (int jp = 0; jp < NJ / 2; jp++) { /* two n-tiles per ldmatrix.x4 */
                    uint32_t b[4];
                    fl_ldsm_x4(b, ks_ + (jp * 16 + (mi >> 1) * 8 + rr) * LD + ks * 16 + (mi & 1) * 8);
                    fl_mma<KV>(sc[2 * jp], qf[ks], b[0], b[1]);
                    fl_mma<KV>(sc[2 * jp + 1], qf[ks], b[2], b[3]);
                }
            }

            /* scores into the log2 domain (soft-cap or an odd scale here,
             * else folded into the exponent's FMA) */
            float scl = a.scale_log2;
            if (a.softcap > 0.0f || !(scl > 0.0f)) {
                const bool cap = a.softcap > 0.0f;
                const float pre = a.scale_log2 * 0.6931471805599453f / a.softcap,
                            post = a.softcap * 1.4426950408889634f;
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) sc[j][e] = cap ? post * tanhf(sc[j][e] * pre) : sc[j][e] * a.scale_log2;
                scl = 1.0f;
            }
            /* keys past hi (the last tile) masked; tiles start at lo */
            if (kt0 + TN - 1 > hi) {
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[j][e] = kt0 + j * 8 + 2 * tq + (e & 1) <= hi ? sc[j][e] : -INFINITY;
            }
            float mb[2], corr[2];
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) {
                float mv[NJ];
#pragma unroll
                for (int j = 0; j < NJ; j++) mv[j] = fmaxf(sc[j][2 * h2], sc[j][2 * h2 + 1]);
#pragma unroll
                for (int w = NJ / 2; w >= 1; w >>= 1)
#pragma unroll
                    for (int j = 0; j < w; j++) mv[j] = fmaxf(mv[j], mv[j + w]);
                float mx = mv[0];
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mn = fmaxf(m[h2], mx * scl);
                mb[h2] = mn == -INFINITY ? 0.0f : mn;
                corr[h2] = mn == -INFINITY || mn == m[h2] ? 1.0f : fl_exp2(m[h2] - mn);
                m[h2] = mn;
                l[h2] *= corr[h2];
            }
            if (!__all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f)) {
#pragma unroll
                for (int j = 0; j < NO; j++) {
                    o[j][0] *= corr[0];
                    o[j][1] *= corr[0];
                    o[j][2] *= corr[1];
                    o[j][3] *= corr[1];
                }
            }
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int j = 0; j < NJ; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) sc[j][e] = fl_exp2(fmaf(sc[j][e], scl, -mb[e >> 1]));
                s0 += sc[j][0] + sc[j][1];
                s1 += sc[j][2] + sc[j][3];
            }
            l[0] += s0;
            l[1] += s1;

            /* O += P V: P from the score registers, V via ldmatrix.trans */
#pragma unroll
            for (int kk = 0; kk < TN / 16; kk++) {
                uint32_t pa[4];
                pa[0] = fl_pack<KV>(sc[2 * kk][0], sc[2 * kk][1]);
                pa[1] = fl_pack<KV>(sc[2 * kk][2], sc[2 * kk][3]);
                pa[2] = fl_pack<KV>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
                pa[3] = fl_pack<KV>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
                for (int dp = 0; dp < NO / 2; dp++) {
                    uint32_t b[4];
                    fl_ldsm_x4_t(b, vs + (kk * 16 + (mi & 1) * 8 + rr) * LD + dp * 16 + (mi >> 1) * 8);
                    fl_mma<KV>(o[2 * dp], pa, b[0], b[1]);
                    fl_mma<KV>(o[2 * dp + 1], pa, b[2], b[3]);
                }
            }
        }
        fl_cp_wait<0>();
        __syncwarp(); /* the ring is free for the next item */

        /* out = O / l; l summed over the quad */
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 1);
            l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 2);
        }
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int r = gq + 8 * h2;
            if (r >= G) continue;
            const float inv = l[h2] > 0.0f ? 1.0f / l[h2] : 0.0f;
            char *orow = a.out + i * a.o_s0 + (int64_t)(g * G + r) * a.o_s1;
#pragma unroll
            for (int j = 0; j < NO; j++)
                fl_st_o2<A>(orow + (j * 8 + 2 * tq) * (int)sizeof(A), o[j][2 * h2] * inv, o[j][2 * h2 + 1] * inv);
        }
    }
}

/* ---- host side ---------------------------------------------------------- */

static uint64_t g_fd2_launches;
uint64_t cuda_flash_dec_launches(void) { return __atomic_load_n(&g_fd2_launches, __ATOMIC_RELAXED); }

/* VLLM_CUDA_FLASH_DEC: 0 never, 1 every eligible call (tests), unset or
 * any other value: calls of at least FD2_MIN_ITEMS (row, kv head) pairs. */
#define FD2_MIN_ITEMS 256

bool cuda_flash_dec_wanted(const cuda_ctx *c, const rt_tensor *q, const rt_tensor *kc) {
    (void)c;
    const int64_t T = q->shape[0], h = q->shape[1], kvh = kc->shape[2];
    if (kvh <= 0 || h % kvh || h / kvh > FD2_MAXG) return false;
    const char *e = getenv("VLLM_CUDA_FLASH_DEC");
    if (e && !strcmp(e, "0")) return false;
    if (e && !strcmp(e, "1")) return true;
    return T * kvh >= FD2_MIN_ITEMS;
}

/* Tile / stage / warp configurations (VLLM_CUDA_FLASH_DEC_CFG=N,ST,W picks
 * one for bf16 caches at hd 128, the A/B of the speed table; every other
 * call runs the first). Each fills ~204 KiB of shared memory at hd 128. */
static const int fd2_cfgs[][3] = {{32, 3, 4}, {16, 4, 6}, {32, 2, 6}, {16, 2, 8}, {16, 3, 8}};
enum { FD2_NCFG = sizeof fd2_cfgs / sizeof fd2_cfgs[0] };

static int fd2_cfg(void) {
    const char *e = getenv("VLLM_CUDA_FLASH_DEC_CFG");
    int n = 0, st = 0, w = 0;
    if (e && sscanf(e, "%d,%d,%d", &n, &st, &w) == 3)
        for (int k = 0; k < FD2_NCFG; k++)
            if (fd2_cfgs[k][0] == n && fd2_cfgs[k][1] == st && fd2_cfgs[k][2] == w) return k;
    return 0;
}

template <typename KV, typename A, int HD, int N, int ST, int W>
static int fd2_go(cuda_ctx *c, const fl_args &a, int kvh, int n_items) {
    const size_t smem = fd2_smem(HD, N, ST, W);
    cudaError_t e =
        cudaFuncSetAttribute(k_flash_dec<KV, A, HD, N, ST, W>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return cuda_fail(e, "flash decode smem opt-in", __FILE__, __LINE__);
    const int need = (n_items + W - 1) / W;
    const int grid = need < c->n_sm ? need : c->n_sm;
    cuda_launch(k_flash_dec<KV, A, HD, N, ST, W>, dim3((unsigned)grid), W * 32, smem, c->stream, a, kvh, n_items);
    CU_LAUNCHED();
    __atomic_add_fetch(&g_fd2_launches, 1, __ATOMIC_RELAXED);
    return VC_OK;
}

template <typename KV, typename A, int HD> static int fd2_go_cfg(cuda_ctx *c, const fl_args &a, int kvh, int n) {
    if constexpr (std::is_same<KV, __nv_bfloat16>::value && HD == 128) {
        switch (fd2_cfg()) {
        case 1: return fd2_go<KV, A, HD, 16, 4, 6>(c, a, kvh, n);
        case 2: return fd2_go<KV, A, HD, 32, 2, 6>(c, a, kvh, n);
        case 3: return fd2_go<KV, A, HD, 16, 2, 8>(c, a, kvh, n);
        case 4: return fd2_go<KV, A, HD, 16, 3, 8>(c, a, kvh, n);
        default: break;
        }
    }
    return fd2_go<KV, A, HD, 32, 3, 4>(c, a, kvh, n);
}

template <typename KV> static int fd2_go_hd(cuda_ctx *c, const fl_args &a, int64_t hd, rt_dtype at, int kvh, int n) {
    if (at == RT_BF16)
        return hd == 64 ? fd2_go_cfg<KV, __nv_bfloat16, 64>(c, a, kvh, n) : fd2_go_cfg<KV, __nv_bfloat16, 128>(c, a, kvh, n);
    return hd == 64 ? fd2_go_cfg<KV, float, 64>(c, a, kvh, n) : fd2_go_cfg<KV, float, 128>(c, a, kvh, n);
}

int cuda_flash_dec_run(cuda_ctx *c, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                       const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale, float softcap,
                       int32_t window) {
    fl_args a;
    cuda_fl_args(c, &a, dst, q, kc, vc, bt, qsl, sl, scale, softcap, window);
    const int64_t T = q->shape[0], hd = q->shape[2], kvh = kc->shape[2];
    if ((int64_t)a.max_blocks * a.B > INT32_MAX / 2 || T * kvh > INT32_MAX / 2)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda flash decode: context or batch too large");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    const int n = (int)(T * kvh);
    return kc->dtype == RT_BF16 ? fd2_go_hd<__nv_bfloat16>(c, a, hd, q->dtype, (int)kvh, n)
                                : fd2_go_hd<__half>(c, a, hd, q->dtype, (int)kvh, n);
}
