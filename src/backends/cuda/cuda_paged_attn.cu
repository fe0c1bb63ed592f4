/* cuda_paged_attn — PAGED_ATTENTION, flash-decoding style (split-KV, GQA).
 *
 * Decode (k_fd). One CTA (4 warps) per (kv head g, query row i, split sp).
 * It serves all G = h / kvh query heads of its kv head, so every K/V row is
 * read once for the whole group. The context of row i, keys lo..hi (see
 * ops.h), is cut into ns_i <= n_splits ranges of len_i keys, both from the
 * row's real length in the kernel (fd_meta); split sp < ns_i takes keys
 * lo + sp*len_i .. that + len_i - 1 (clipped to hi), CTAs of splits
 * sp >= ns_i exit once the lengths are known.
 *
 * Inside a CTA, warp w takes keys in runs of U consecutive keys (run r:
 * kb + (4r + w)*U ..; U = 8 for 16-bit caches of hd <= 128, fewer for
 * wider rows and for G > 4 so that U*GM <= 32 and a buffer of U K rows + U
 * V rows stays at 16 registers of raw cache words per lane). Lane l holds
 * dims l*DPL .. l*DPL+DPL-1 (hd = 32*DPL). The loads are software-pipelined
 * so that each warp keeps two runs (K and V: 2 x U x 2 rows) in flight:
 * while run r is computed, the K/V rows of run r+1 and the block-table
 * entries of run r+2 are already requested (V does not wait for the
 * scores). The block-table entries of the first two runs are requested
 * before the sequence lengths arrive (speculatively at the split's start
 * for rows of up to n_splits x chunk_min keys, inside the table row; redone
 * when a window or a longer row moves it), so a CTA's chain of dependent
 * DRAM trips is metadata -> K/V -> partials.
 *
 * Scores of a run: each lane forms the U x GM partial dot products, then a
 * butterfly reduce-scatter (offsets 16, 8, .., each step halving the values
 * a lane keeps) leaves lane l with the full score of one (head, key) pair:
 * U*GM - 1 shuffles instead of 5 per pair, and scale / softcap / expf run
 * once per pair rather than on all 32 lanes. The running max of a head is
 * shared by its 32 / GM lanes (a few xor-max steps per run); p and the
 * rescale factor go to all lanes through shared memory for acc += p V.
 * The 4 warps' (acc, m, l) are merged through shared memory. With one split
 * the CTA writes the normalised output; with several it writes (acc, m, l)
 * partials, and the last CTA of the row and kv head to finish (an atomic
 * counter) merges them:
 *   M = max m_s, L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L,
 * first the factors e^(m_s - M) / L into shared memory (one warp per head),
 * then sums over the splits of float4 columns with independent loads (no
 * chain of dependent loads per split).
 *
 * Variant v2 (template VAR = 1; VLLM_CUDA_FD_V2, by default only for
 * launches of T <= FD_V2_MAX_T rows, where it measured faster; slower at
 * T = 8 and 64 on the H200): the first run's K/V rows are requested with
 * its block-table entries, before the sequence lengths arrive
 * (speculatively, assuming no window or long row moves the split: reads
 * stay inside the table row and, through a bad id, block 0; rows past the
 * context are then zeroed, and a moved split loads the real runs), so the chain of
 * dependent DRAM trips is block table -> K/V -> partials; K and V share one
 * 32-bit (block, slot) byte offset (equal strides: fd_v2_ok) and the key
 * position advances by a precomputed step without divisions; the merge
 * loads a lane's (m, l) pairs in one trip and keeps up to 16 column loads
 * in flight per thread, the first 16 requested with the (m, l) pairs
 * (VLLM_CUDA_FD_MPF, default 1). The VAR = 0 instances are the original kernel.
 *
 * Variant v2 with pre-wait loads (VAR = 2; VLLM_CUDA_FD_PRE, on by default
 * wherever v2 runs): under programmatic dependent launch a k_fd CTA is
 * resident while the previous kernel (QK_ROPE_STORE in a decode layer)
 * still runs. Before griddepcontrol.wait it reads the lengths, the block
 * table and the first run's K/V rows of the keys before the sequence's new
 * tokens; after the wait, q and the new tokens' K/V rows (which the
 * previous kernel may just have stored). So the chain after the wait is
 * q -> scores -> partials -> merge. This assumes that the kernel just before
 * the attention writes neither the metadata (block table, query start
 * locations, lengths: uploaded before the step) nor K/V rows of earlier
 * tokens: true of every model's layer (the KV store writes the new tokens'
 * slots only).
 *
 * The grid's split count n_splits is chosen from the host-known upper
 * bound of the context (block-table width x block size, or the window), T
 * and kvh only, never from the device-side seq_lens, so the launch shape
 * depends only on the batch shape (CUDA-graph friendly): about FD_CTAS
 * CTAs per SM in total (VLLM_CUDA_FD_CTAS=1..4 overrides), at least one run
 * per warp per split, at most FD_MAXS splits. Each row then takes its
 * split length from its own context n (fd_meta): len = max(chunk_min,
 * ceil(n / n_splits) rounded up to U), chunk_min = one run per warp, and
 * ns = ceil(n / len) active splits; the other CTAs exit as soon as the
 * lengths arrive (no K/V load but v2's speculative first run), the merge
 * counts (and the counter waits for) ns partials; a row of one active
 * split writes its output directly. So a short row under a wide table
 * (vllm serve with the model's full context: 8192 blocks of 16 at 131,072
 * keys) gets as many splits as under a table of its own size.
 * VLLM_CUDA_FD_SPLIT=width restores the old rule (every row cut by the
 * width's split length; splits past a row's end write an empty partial).
 * v1, v2 and v2 with pre-wait loads apply either rule alike. The lengths are uploaded by the host (stream-ordered copies
 * before the step's graph or kernels) and no kernel of a step writes
 * them, so the pre-wait variant may read them before its wait.
 *
 * K/V: f32, f16 or bf16 caches [num_blocks, B, kvh, hd]; hd in {64, 128,
 * 256}, G <= 8 (instances GM = 1, 2, 4, 8) and vector-aligned rows
 * (cuda_fd_eligible); other shapes use the tiled kernel of
 * cuda_attention.cu. Scores and softmax are f32 with expf, like the CPU
 * reference.
 *
 * Batches of mostly prompt rows (T >= 4 rows per sequence on average,
 * T >= 64, hd 64 or 128) go from cuda_fd_run to the prefill tiles kernel
 * k_pf of cuda_paged_pf.cu instead; both kernels take fd_args
 * (cuda_fd_args.cuh).
 */
#include "backends/cuda/cuda_fd_args.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

#include <stdlib.h>
#include <type_traits>

#define FD_WARPS 4
#define FD_NT (FD_WARPS * 32)
#define FD_CTAS 2    /* CTAs per SM the split count aims at */
#define FD_MAXS 128  /* most splits: the merge keeps a factor per split and head in shared memory */
#define FD_FULL 0xffffffffu
#define FD_V2_MAX_T 1 /* VLLM_CUDA_FD_V2=auto: the v2 kernel for launches of at most this many rows
                        * (H200, session 5: faster at T = 1 and <= 640 keys, slower at T = 2) */
#define FD_V2_MAX_CTX 0 /* ... and contexts of at most this many keys (0: any; VLLM_CUDA_FD_V2_CTX) */
#define FD_V2_MAX_T2 2 /* ... and also for launches of at most this many rows ... */
#define FD_V2_T2_CTX 1024 /* ... whose context bound is at most this many keys (H200, session 6:
                           * v3 11.4 vs v1 14.5 us at T = 2 and 640 keys, slower at 2048) */

/* Keys per warp run of k_fd: 16 raw 32-bit words of K (and as many of V)
 * per lane and buffer, at most 8 keys, and U * GM <= 32 score pairs. */
__host__ __device__ constexpr int fd_keys(int kv_bytes, int dpl, int gm) {
    int u = 64 / (dpl * kv_bytes);
    if (u > 8) u = 8;
    if (u > 32 / gm) u = 32 / gm;
    return u;
}

/* k_fd's raw rows: RW 32-bit words per lane (DPL cache elements). */
template <int RW> __device__ __forceinline__ void fd_ld(const char *p, uint32_t *w) {
    if constexpr (RW == 1) {
        w[0] = *(const uint32_t *)p;
    } else if constexpr (RW == 2) {
        uint2 x = *(const uint2 *)p;
        w[0] = x.x, w[1] = x.y;
    } else {
#pragma unroll
        for (int c = 0; c < RW / 4; c++) {
            uint4 x = ((const uint4 *)p)[c];
            w[4 * c] = x.x, w[4 * c + 1] = x.y, w[4 * c + 2] = x.z, w[4 * c + 3] = x.w;
        }
    }
}

template <typename KV, int DPL> __device__ __forceinline__ void fd_cvt(const uint32_t *w, float *f) {
    if constexpr (std::is_same_v<KV, float>) {
#pragma unroll
        for (int d = 0; d < DPL; d++) f[d] = __uint_as_float(w[d]);
    } else if constexpr (std::is_same_v<KV, __nv_bfloat16>) {
#pragma unroll
        for (int e = 0; e < DPL / 2; e++) {
            f[2 * e] = __uint_as_float(w[e] << 16);
            f[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int e = 0; e < DPL / 2; e++) {
            f[2 * e] = __half2float(__ushort_as_half((unsigned short)(w[e] & 0xffffu)));
            f[2 * e + 1] = __half2float(__ushort_as_half((unsigned short)(w[e] >> 16)));
        }
    }
}

/* Block-table entries of keys j .. j+U-1 (raw; checked where used). Keys
 * past the table row read nothing, so j may run ahead of the context. One
 * division per run: the table index steps with the key. */
template <int U> __device__ __forceinline__ void fd_bt(const fd_args &a, const int32_t *btrow, int j, int *bl) {
    const int cap = a.max_blocks * a.B;
    int b = j / a.B, r = j - b * a.B;
#pragma unroll
    for (int u = 0; u < U; u++) {
        bl[u] = j + u < cap ? btrow[b] : 0;
        if (++r == a.B) r = 0, b++;
    }
}

/* K and V rows of keys j .. j+U-1 (zero past ke). A bad block id of a key
 * in range is flagged and block 0 read instead (memory stays in bounds). */
template <int RW, int U>
__device__ __forceinline__ void fd_kv(const fd_args &a, const char *kbase, const char *vbase, int j, int ke,
                                      const int *bl, uint32_t (*K)[RW], uint32_t (*V)[RW]) {
    int slot = j % a.B;
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (j + u <= ke) {
            int blk = bl[u];
            if (blk < 0 || blk >= a.num_blocks) {
                atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
                blk = 0;
            }
            fd_ld<RW>(kbase + blk * a.k_s0 + slot * a.k_sb, K[u]);
            fd_ld<RW>(vbase + blk * a.v_s0 + slot * a.v_sb, V[u]);
        } else {
#pragma unroll
            for (int w = 0; w < RW; w++) K[u][w] = V[u][w] = 0u;
        }
        if (++slot == a.B) slot = 0;
    }
}

/* v2: key j = b*B + r of a row's context; runs advance by a fixed step (db
 * blocks + dr slots, dr < B), so the loop needs no division. */
struct fd_pos {
    int j, b, r;
};

__device__ __forceinline__ fd_pos fd_at(const fd_args &a, int j) {
    const int b = j / a.B;
    return {j, b, j - b * a.B};
}

__device__ __forceinline__ fd_pos fd_adv(const fd_args &a, fd_pos p, int step, int db, int dr) {
    p.j += step, p.b += db, p.r += dr;
    if (p.r >= a.B) p.r -= a.B, p.b++;
    return p;
}

/* v2: block-table entries of keys p.j .. p.j+U-1 (raw; checked where
 * used). Keys past the table row read nothing, so p may run ahead. */
template <int U> __device__ __forceinline__ void fd_bt2(const fd_args &a, const int32_t *btrow, fd_pos p, int *bl) {
    int b = p.b, r = p.r;
#pragma unroll
    for (int u = 0; u < U; u++) {
        bl[u] = b < a.max_blocks ? btrow[b] : 0;
        if (++r == a.B) r = 0, b++;
    }
}

/* v2: K and V rows of keys p.j .. p.j+U-1: those <= ke (all of them when
 * SPEC: requested before ke is known; the caller masks them later), zero
 * past ke. A bad block id reads block 0 (memory stays in bounds) and, for
 * a key in range, sets *bad. */
template <int RW, int U, bool SPEC>
__device__ __forceinline__ void fd_kv2(const fd_args &a, const char *kbase, const char *vbase, fd_pos p, int ke,
                                       const int *bl, uint32_t (*K)[RW], uint32_t (*V)[RW], bool *bad) {
    int r = p.r;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const bool in = p.j + u <= ke;
        const bool ok = (unsigned)bl[u] < (unsigned)a.num_blocks;
        if (!SPEC) *bad |= in && !ok;
        if (SPEC || in) {
            const int64_t off = (int64_t)(ok ? bl[u] : 0) * a.kv_s0 + r * a.kv_sb;
            fd_ld<RW>(kbase + off, K[u]);
            fd_ld<RW>(vbase + off, V[u]);
        } else {
#pragma unroll
            for (int w = 0; w < RW; w++) K[u][w] = V[u][w] = 0u;
        }
        if (++r == a.B) r = 0;
    }
}

/* Reduce-scatter of a warp's partial scores s[0..N-1], step K (offset
 * 16 >> K): while a lane holds c = N >> K >= 2 values it keeps the lower
 * (bit o of the lane clear) or upper half and adds its partner's copy of
 * that half; once one value is left the step is a plain xor-sum. After the
 * 5 steps lane l holds the full sum of pair l / (32 / N) in s[0]. Template
 * steps so that every index is a constant (s stays in registers). */
template <int N, int K> __device__ __forceinline__ void fd_rs(float *s, int lane) {
    if constexpr (K < 5) {
        constexpr int o = 16 >> K;
        if constexpr ((N >> K) >= 2) {
            constexpr int hh = N >> (K + 1);
            const bool up = lane & o;
#pragma unroll
            for (int x = 0; x < hh; x++) {
                const float lo = s[x], hi = s[x + hh];
                const float send = up ? lo : hi, keep = up ? hi : lo;
                s[x] = keep + __shfl_xor_sync(FD_FULL, send, o);
            }
        } else {
            s[0] += __shfl_xor_sync(FD_FULL, s[0], o);
        }
        fd_rs<N, K + 1>(s, lane);
    }
}

/* Row i's key range in split sp: keys kb..ke (kb > ke: none) of its
 * context lo..hi (ops.h); fresh = the first key of the sequence's new
 * tokens, stored by this step's KV store; ns = the row's active splits
 * (CTAs of split sp >= ns have nothing to do and exit; the merge counts
 * ns). Bad lengths are flagged (once per row and kv head) and leave hi =
 * -1 (no keys, ns = 1: split 0 writes zeros).
 *
 * Per-row rule (a.chunk_min > 0): the row's n = hi - lo + 1 keys are cut
 * into splits of len = max(chunk_min, ceil(n / n_splits) rounded up to U)
 * keys, ns = ceil(n / len) <= n_splits of them (len * n_splits >= n). A
 * row of n <= n_splits * chunk_min keys gets len = chunk_min exactly, so
 * its splits start at lo + sp * chunk_min: where the kernel speculates
 * (fd_spec_kb). Width rule (chunk_min = 0): len = split_len, ns =
 * n_splits, from the block-table width (splits past the row's end write
 * empty partials). */
struct fd_rowmeta {
    int hi, lo, kb, ke, fresh, ns;
};

template <bool CG> __device__ __forceinline__ int fd_ld32(const int32_t *p) { return CG ? __ldcg(p) : *p; }

template <bool CG, int U> __device__ __forceinline__ fd_rowmeta fd_meta(const fd_args &a, int s0, int64_t i, int sp) {
    const int r0 = fd_ld32<CG>(a.qsl + s0), r1 = fd_ld32<CG>(a.qsl + s0 + 1), sl = fd_ld32<CG>(a.seq_lens + s0);
    const int q_len = r1 - r0;
    const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || i < r0 || i >= r1;
    if (bad && threadIdx.x == 0 && sp == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
    fd_rowmeta m;
    m.hi = bad ? -1 : sl - q_len + (int)(i - r0);
    m.lo = a.window > 0 && m.hi - a.window + 1 > 0 ? m.hi - a.window + 1 : 0;
    int len = a.split_len;
    m.ns = a.n_splits;
    if (a.chunk_min > 0) {
        const int n = m.hi - m.lo + 1; /* >= 0; 0 for a bad row */
        len = ((n + a.n_splits - 1) / a.n_splits + U - 1) / U * U;
        len = max(len, a.chunk_min);
        m.ns = n > 0 ? (n + len - 1) / len : 1;
    }
    m.kb = m.lo + sp * len; /* sp < m.ns: kb <= hi (or the empty range of a bad row) */
    m.ke = min(m.hi, m.kb + len - 1);
    m.fresh = bad ? 0 : sl - q_len;
    return m;
}

/* Where split sp's keys start if the window moves nothing and the row is
 * short (n <= n_splits * chunk_min) or the width rule holds: the position
 * of the speculative loads before the lengths arrive. Second guess (v1 and
 * the pre-wait variant, block-table entries only; fd_two): sp * split_len,
 * right for a row whose own length is the width's (n within about
 * n_splits * U keys of the bound: tight tables, vllm run / bench). */
__device__ __forceinline__ int fd_spec_kb(const fd_args &a, int sp) {
    return sp * (a.chunk_min > 0 ? a.chunk_min : a.split_len);
}

__device__ __forceinline__ bool fd_two(const fd_args &a) { return a.chunk_min > 0 && a.split_len != a.chunk_min; }

template <typename KV, int DPL, int GM, int VAR> __global__ void __launch_bounds__(FD_NT) k_fd(fd_args a) {
    constexpr bool V2 = VAR >= 1, PRE = VAR == 2; /* VAR: 0 the original, 1 v2, 2 v2 with pre-wait loads */
    if constexpr (!PRE) CUDA_PDL_ENTER();
    constexpr int HD = 32 * DPL, RW = DPL * (int)sizeof(KV) / 4, U = fd_keys((int)sizeof(KV), DPL, GM);
    constexpr int N = U * GM;                                                     /* score pairs of a run */
    constexpr int DUP = 32 / N, GL = 32 / GM; /* lanes per pair, lanes per head */
    static_assert(N >= 2 && N <= 32 && (N & (N - 1)) == 0, "k_fd: U * GM must be a power of two <= 32");
    __shared__ float sm_acc[FD_WARPS][GM][HD];
    __shared__ float sm_m[FD_WARPS][GM], sm_l[FD_WARPS][GM];
    __shared__ __align__(16) float sm_p[FD_WARPS][N];
    __shared__ float sm_c[FD_WARPS][GM];
    __shared__ float sm_f[GM][FD_MAXS];
    __shared__ float4 sm_red[FD_NT];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = blockIdx.x, sp = blockIdx.z, G = a.G;
    const int64_t i = blockIdx.y;
    const int step = FD_WARPS * U;
    const int kb_spec = fd_spec_kb(a, sp); /* split sp's first key, speculated (fd_meta) */

    const int s0 = cuda_row_seq(a.qsl, a.S, i); /* the sequence of row i */
    const int32_t *btrow = a.bt + (int64_t)s0 * a.max_blocks;
    const char *kbase = nullptr, *vbase = nullptr; /* this lane's dims of kv head g in block 0, slot 0 */
    /* Block-table entries of the warp's first two runs assuming kb =
     * kb_spec (and in v2 the first run's K/V rows), requested before the
     * lengths arrive. */
    int bl0[U], bl1[U];
    [[maybe_unused]] int blb0[V2 ? 1 : U], blb1[V2 ? 1 : U]; /* v1: the second guess (fd_two) */
    uint32_t K0[V2 ? U : 1][RW], V0[V2 ? U : 1][RW]; /* v2: K/V rows of the first run */
    fd_pos p0 = {0, 0, 0}; /* v2: the position of the warp's current run */
    int db = 0, dr = 0;    /* v2: a step of the warp, in blocks and slots */
    bool badk = false;     /* v2: a bad block id of a key in range seen */
    fd_rowmeta mpre = {0, 0, 0, 0, 0, 1}; /* PRE: the row's keys, known before the wait */
    if constexpr (PRE) {
        /* Before the wait: the lengths, the block table and K/V rows of
         * keys the previous kernel cannot have written (those before the
         * sequence's new tokens: see the file comment); the rest after it. */
        kbase = a.k + (int64_t)g * a.k_s1 + lane * DPL * (int)sizeof(KV);
        vbase = a.v + (int64_t)g * a.v_s1 + lane * DPL * (int)sizeof(KV);
        db = step / a.B, dr = step - db * a.B;
        p0 = fd_at(a, kb_spec + warp * U);
        fd_bt2<U>(a, btrow, p0, bl0); /* assuming kb = kb_spec, with the lengths */
        const bool two = fd_two(a);
        const fd_pos pb = fd_at(a, sp * a.split_len + warp * U);
        int blb[U];
        if (two) fd_bt2<U>(a, btrow, pb, blb); /* the second guess */
        mpre = fd_meta<true, U>(a, s0, i, sp);
        if (sp >= mpre.ns) return; /* past the row's active splits (before the wait: nothing written) */
        if (mpre.kb != kb_spec) {  /* a window or a long row moved the split */
            if (two && mpre.kb == sp * a.split_len) {
                p0 = pb;
#pragma unroll
                for (int u = 0; u < U; u++) bl0[u] = blb[u];
            } else {
                p0 = fd_at(a, mpre.kb + warp * U);
                fd_bt2<U>(a, btrow, p0, bl0);
            }
        }
        fd_bt2<U>(a, btrow, fd_adv(a, p0, step, db, dr), bl1);
        fd_kv2<RW, U, false>(a, kbase, vbase, p0, min(mpre.ke, mpre.fresh - 1), bl0, K0, V0, &badk);
        CUDA_PDL_ENTER();
        if (p0.j + U > mpre.fresh && p0.j <= mpre.ke) { /* the first run holds new keys: load them now */
            int r = p0.r;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int j = p0.j + u;
                if (j >= mpre.fresh && j <= mpre.ke) {
                    const bool ok = (unsigned)bl0[u] < (unsigned)a.num_blocks;
                    badk |= !ok;
                    const int64_t off = (int64_t)(ok ? bl0[u] : 0) * a.kv_s0 + r * a.kv_sb;
                    fd_ld<RW>(kbase + off, K0[u]);
                    fd_ld<RW>(vbase + off, V0[u]);
                }
                if (++r == a.B) r = 0;
            }
        }
    } else if constexpr (V2) {
        kbase = a.k + (int64_t)g * a.k_s1 + lane * DPL * (int)sizeof(KV);
        vbase = a.v + (int64_t)g * a.v_s1 + lane * DPL * (int)sizeof(KV);
        db = step / a.B, dr = step - db * a.B;
        p0 = fd_at(a, kb_spec + warp * U);
        fd_bt2<U>(a, btrow, p0, bl0);
        fd_bt2<U>(a, btrow, fd_adv(a, p0, step, db, dr), bl1);
        fd_kv2<RW, U, true>(a, kbase, vbase, p0, 0, bl0, K0, V0, &badk);
    } else {
        fd_bt<U>(a, btrow, kb_spec + warp * U, bl0);
        fd_bt<U>(a, btrow, kb_spec + warp * U + step, bl1);
        if (fd_two(a)) { /* the second guess */
            fd_bt<U>(a, btrow, sp * a.split_len + warp * U, blb0);
            fd_bt<U>(a, btrow, sp * a.split_len + warp * U + step, blb1);
        }
    }
    float qr[GM][DPL], acc[GM][DPL];
#pragma unroll
    for (int gg = 0; gg < GM; gg++) {
#pragma unroll
        for (int d = 0; d < DPL; d++) acc[gg][d] = qr[gg][d] = 0.0f;
        if (gg < G) {
            const float *qp = (const float *)(a.q + i * a.q_s0 + (int64_t)(g * G + gg) * a.q_s1) + lane * DPL;
#pragma unroll
            for (int d = 0; d < DPL; d++) qr[gg][d] = qp[d];
        }
    }
    const fd_rowmeta mt = PRE ? mpre : fd_meta<false, U>(a, s0, i, sp);
    const int kb = mt.kb, ke = mt.ke, nsr = mt.ns; /* kb > ke: no keys; nsr: the row's active splits */
    if (sp >= nsr) return; /* past the row's active splits: no partial, not counted by the merge */
    if constexpr (PRE) {
        /* the first runs are loaded (before and after the wait) */
    } else if constexpr (V2) {
        if (kb != kb_spec) { /* a window or a long row moved the split: the real first runs */
            p0 = fd_at(a, kb + warp * U);
            fd_bt2<U>(a, btrow, p0, bl0);
            fd_bt2<U>(a, btrow, fd_adv(a, p0, step, db, dr), bl1);
            fd_kv2<RW, U, false>(a, kbase, vbase, p0, ke, bl0, K0, V0, &badk);
        } else { /* keep the speculative rows of keys <= ke only */
#pragma unroll
            for (int u = 0; u < U; u++) {
                const bool in = p0.j + u <= ke;
                badk |= in && (unsigned)bl0[u] >= (unsigned)a.num_blocks;
#pragma unroll
                for (int w = 0; w < RW; w++) {
                    K0[u][w] = in ? K0[u][w] : 0u;
                    V0[u][w] = in ? V0[u][w] : 0u;
                }
            }
        }
    } else {
        if (kb != kb_spec) { /* a window or a long row moved the split */
            if (fd_two(a) && kb == sp * a.split_len) {
#pragma unroll
                for (int u = 0; u < U; u++) bl0[u] = blb0[u], bl1[u] = blb1[u];
            } else {
                fd_bt<U>(a, btrow, kb + warp * U, bl0);
                fd_bt<U>(a, btrow, kb + warp * U + step, bl1);
            }
        }
        kbase = a.k + (int64_t)g * a.k_s1 + lane * DPL * (int)sizeof(KV);
        vbase = a.v + (int64_t)g * a.v_s1 + lane * DPL * (int)sizeof(KV);
    }

    /* This lane's score pair after the reduce-scatter: head gl, key ul of the run. */
    const int idx = lane / DUP, gl = idx / U, ul = idx % U;
    float m_run = -INFINITY, l_run = 0.0f; /* head gl's running max (shared by its lanes), partial sum */
    int j0 = kb + warp * U; /* = p0.j in v2 */
    uint32_t K[U][RW], V[U][RW];
    if constexpr (V2) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int w = 0; w < RW; w++) K[u][w] = K0[u][w], V[u][w] = V0[u][w];
    } else {
        fd_kv<RW, U>(a, kbase, vbase, j0, ke, bl0, K, V);
    }
    for (; j0 <= ke; j0 += step) {
        uint32_t Kn[U][RW], Vn[U][RW];
        int bl2[U];
        if constexpr (V2) {
            const fd_pos p1 = fd_adv(a, p0, step, db, dr);
            fd_kv2<RW, U, false>(a, kbase, vbase, p1, ke, bl1, Kn, Vn, &badk);
            fd_bt2<U>(a, btrow, fd_adv(a, p1, step, db, dr), bl2);
            p0 = p1;
        } else {
            fd_kv<RW, U>(a, kbase, vbase, j0 + step, ke, bl1, Kn, Vn);
            fd_bt<U>(a, btrow, j0 + 2 * step, bl2);
        }
        float s[N]; /* s[gg * U + u]: this lane's part of q_gg . k_u */
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[DPL];
            fd_cvt<KV, DPL>(K[u], kf);
#pragma unroll
            for (int gg = 0; gg < GM; gg++) {
                float t = 0.0f;
#pragma unroll
                for (int d = 0; d < DPL; d++) t += qr[gg][d] * kf[d];
                s[gg * U + u] = t;
            }
        }
        fd_rs<N, 0>(s, lane);
        float sc = s[0] * a.scale;
        if (a.softcap > 0.0f) sc = a.softcap * tanhf(sc / a.softcap);
        const bool valid = j0 + ul <= ke;
        const float t = valid ? sc : -INFINITY;
        float mx = t;
#pragma unroll
        for (int o = 1; o < GL; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(FD_FULL, mx, o));
        const float mn = fmaxf(m_run, mx);
        const float corr = expf(m_run - mn); /* 0 on the first run (m = -inf) */
        const float p = valid ? expf(t - mn) : 0.0f;
        m_run = mn;
        l_run = l_run * corr + (lane % DUP == 0 ? p : 0.0f);
        if (lane % DUP == 0) sm_p[warp][idx] = p;
        if (lane % GL == 0) sm_c[warp][gl] = corr;
        __syncwarp();
#pragma unroll
        for (int gg = 0; gg < GM; gg++) {
            const float c = sm_c[warp][gg];
#pragma unroll
            for (int d = 0; d < DPL; d++) acc[gg][d] *= c;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float vf[DPL];
            fd_cvt<KV, DPL>(V[u], vf);
#pragma unroll
            for (int gg = 0; gg < GM; gg++) {
                const float pp = sm_p[warp][gg * U + u];
#pragma unroll
                for (int d = 0; d < DPL; d++) acc[gg][d] += pp * vf[d];
            }
        }
        __syncwarp(); /* sm_p / sm_c read before the next run writes them */
#pragma unroll
        for (int u = 0; u < U; u++) {
            bl1[u] = bl2[u];
#pragma unroll
            for (int w = 0; w < RW; w++) K[u][w] = Kn[u][w], V[u][w] = Vn[u][w];
        }
    }
    if constexpr (V2)
        if (badk) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);

    /* Merge the warps. */
#pragma unroll
    for (int o = 1; o < GL; o <<= 1) l_run += __shfl_xor_sync(FD_FULL, l_run, o);
    if (lane % GL == 0) {
        sm_m[warp][gl] = m_run;
        sm_l[warp][gl] = l_run;
    }
#pragma unroll
    for (int gg = 0; gg < GM; gg++)
#pragma unroll
        for (int d = 0; d < DPL; d++) sm_acc[warp][gg][lane * DPL + d] = acc[gg][d];
    __syncthreads();
    for (int e = threadIdx.x; e < G * HD; e += FD_NT) {
        int gg = e / HD, d = e % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < FD_WARPS; w++) M = fmaxf(M, sm_m[w][gg]);
        float L = 0.0f, A = 0.0f;
#pragma unroll
        for (int w = 0; w < FD_WARPS; w++) {
            float f = sm_m[w][gg] == -INFINITY ? 0.0f : expf(sm_m[w][gg] - M);
            L += sm_l[w][gg] * f;
            A += sm_acc[w][gg][d] * f;
        }
        int64_t hq = (int64_t)g * G + gg;
        if (nsr == 1) {
            ((float *)(a.out + i * a.o_s0 + hq * a.o_s1))[d] = L > 0.0f ? A / L : 0.0f;
        } else {
            int64_t pi = (i * a.h + hq) * a.n_splits + sp;
            a.part[pi * HD + d] = A;
            if (d == 0) {
                a.part_ml[pi * 2] = M;
                a.part_ml[pi * 2 + 1] = L;
            }
        }
    }
    if (nsr == 1) return;
    /* The last CTA of (row i, kv head g) to finish merges the row's nsr
     * partials (threadfence + counter: the others' writes are visible to
     * it) and resets the counter for the next launch or graph replay. The
     * partials of a row and head lie n_splits apart (the grid's count). */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *cnt = a.counters + i * gridDim.x + g;
        last = atomicAdd(cnt, 1) == nsr - 1;
        if (last) *cnt = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int ns = nsr, nst = a.n_splits; /* partials to merge, their stride */
    /* Columns of 4 dims, summed over the splits below (R threads per column
     * when there are fewer columns than threads, each taking every R-th
     * split). v2 with a.mpf: the first MU partials of this thread's first
     * column are requested now, so that they arrive with the (m, l) pairs
     * instead of one memory trip after them (same sums, same order). */
    constexpr int C4 = HD / 4, MU = V2 ? 16 : 8; /* loads in flight per thread */
    const int cols = G * C4, R = cols >= FD_NT ? 1 : FD_NT / cols;
    const float4 *p4 = (const float4 *)a.part;
    [[maybe_unused]] float4 xp[V2 ? MU : 1];
    if constexpr (V2) {
        const int c = R == 1 ? threadIdx.x : threadIdx.x % cols, r = R == 1 ? 0 : threadIdx.x / cols;
        const bool go = a.mpf && c < cols && r < R;
        const float4 *src = p4 + (i * a.h + (int64_t)g * G + (go ? c / C4 : 0)) * nst * C4 + (go ? c % C4 : 0);
#pragma unroll
        for (int k = 0; k < MU; k++) {
            const int t = r + k * R;
            xp[k] = go && t < ns ? __ldcg(src + (int64_t)t * C4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
    /* Factors e^(m_s - M) / L per head and split (one warp per head; in v2
     * a lane's (m, l) pairs are loaded once, all at the same time). */
    for (int gg = warp; gg < G; gg += FD_WARPS) {
        const float2 *ml = (const float2 *)a.part_ml + (i * a.h + (int64_t)g * G + gg) * nst;
        if constexpr (V2) {
            float2 v[FD_MAXS / 32];
            float M = -INFINITY;
#pragma unroll
            for (int k = 0; k < FD_MAXS / 32; k++) {
                v[k] = lane + 32 * k < ns ? __ldcg(ml + lane + 32 * k) : make_float2(-INFINITY, 0.0f);
                M = fmaxf(M, v[k].x);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(FD_FULL, M, o));
            float L = 0.0f;
#pragma unroll
            for (int k = 0; k < FD_MAXS / 32; k++) {
                v[k].x = v[k].x == -INFINITY ? 0.0f : expf(v[k].x - M);
                L += v[k].y * v[k].x;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(FD_FULL, L, o);
            const float inv = L > 0.0f ? 1.0f / L : 0.0f;
#pragma unroll
            for (int k = 0; k < FD_MAXS / 32; k++)
                if (lane + 32 * k < ns) sm_f[gg][lane + 32 * k] = v[k].x * inv;
        } else {
            float M = -INFINITY;
            for (int t = lane; t < ns; t += 32) M = fmaxf(M, __ldcg(ml + t).x);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(FD_FULL, M, o));
            float L = 0.0f;
            for (int t = lane; t < ns; t += 32) {
                const float2 v = __ldcg(ml + t);
                const float f = v.x == -INFINITY ? 0.0f : expf(v.x - M);
                sm_f[gg][t] = f;
                L += v.y * f;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(FD_FULL, L, o);
            const float inv = L > 0.0f ? 1.0f / L : 0.0f;
            for (int t = lane; t < ns; t += 32) sm_f[gg][t] *= inv;
        }
    }
    __syncthreads();
    for (int c0 = 0; c0 < cols; c0 += FD_NT) {
        const int c = c0 + (R == 1 ? threadIdx.x : threadIdx.x % cols), r = R == 1 ? 0 : threadIdx.x / cols;
        const int gg = c / C4;
        float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (c < cols && r < R) {
            const float4 *src = p4 + (i * a.h + (int64_t)g * G + gg) * nst * C4 + c % C4;
            int t = r;
            if constexpr (V2) {
                if (a.mpf && c0 == 0) { /* the prefetched partials first */
#pragma unroll
                    for (int k = 0; k < MU; k++, t += R) {
                        if (t >= ns) break;
                        const float f = sm_f[gg][t];
                        A.x += xp[k].x * f, A.y += xp[k].y * f, A.z += xp[k].z * f, A.w += xp[k].w * f;
                    }
                }
            }
#pragma unroll MU
            for (; t < ns; t += R) {
                const float4 x = __ldcg(src + (int64_t)t * C4);
                const float f = sm_f[gg][t];
                A.x += x.x * f, A.y += x.y * f, A.z += x.z * f, A.w += x.w * f;
            }
        }
        if (R > 1) {
            if (r < R) sm_red[threadIdx.x] = A;
            __syncthreads();
            if (threadIdx.x >= cols) break;
            for (int q = 1; q < R; q++) {
                const float4 x = sm_red[q * cols + threadIdx.x];
                A.x += x.x, A.y += x.y, A.z += x.z, A.w += x.w;
            }
        }
        if (c < cols) {
            float *o = (float *)(a.out + i * a.o_s0 + ((int64_t)g * G + gg) * a.o_s1) + (c % C4) * 4;
            o[0] = A.x, o[1] = A.y, o[2] = A.z, o[3] = A.w;
        }
    }
}

bool cuda_fd_eligible(const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc) {
    int64_t h = q->shape[1], hd = q->shape[2], kvh = kc->shape[2];
    if (hd != 64 && hd != 128 && hd != 256) return false;
    if (kvh <= 0 || h % kvh || h / kvh > 8) return false;
    if (kc->dtype != RT_F32 && kc->dtype != RT_F16 && kc->dtype != RT_BF16) return false;
    int64_t vec = (hd / 32) * (int64_t)rt_dtype_info(kc->dtype)->block_bytes; /* bytes a lane loads */
    const rt_tensor *ts[2] = {kc, vc};
    for (int t = 0; t < 2; t++)
        if ((uintptr_t)ts[t]->data % (uintptr_t)vec || ts[t]->stride[0] % vec || ts[t]->stride[1] % vec ||
            ts[t]->stride[2] % vec || ts[t]->stride[3] != rt_dtype_info(kc->dtype)->block_bytes)
            return false;
    return q->stride[2] == 4 && q->stride[1] % 4 == 0 && q->stride[0] % 4 == 0;
}

template <typename KV, int DPL, int VAR> static void fd_launch_g(const fd_args &a, dim3 grid, cudaStream_t st) {
    if (a.G <= 1) cuda_launch(k_fd<KV, DPL, 1, VAR>, grid, FD_NT, 0, st, a);
    else if (a.G <= 2) cuda_launch(k_fd<KV, DPL, 2, VAR>, grid, FD_NT, 0, st, a);
    else if (a.G <= 4) cuda_launch(k_fd<KV, DPL, 4, VAR>, grid, FD_NT, 0, st, a);
    else cuda_launch(k_fd<KV, DPL, 8, VAR>, grid, FD_NT, 0, st, a);
}

template <typename KV, int VAR> static void fd_launch_hd(const fd_args &a, int hd, dim3 grid, cudaStream_t st) {
    if (hd == 64) fd_launch_g<KV, 2, VAR>(a, grid, st);
    else if (hd == 128) fd_launch_g<KV, 4, VAR>(a, grid, st);
    else fd_launch_g<KV, 8, VAR>(a, grid, st);
}

template <typename KV> static void fd_launch_kv(const fd_args &a, int hd, int var, dim3 grid, cudaStream_t st) {
    if (var == 2) fd_launch_hd<KV, 2>(a, hd, grid, st);
    else if (var == 1) fd_launch_hd<KV, 1>(a, hd, grid, st);
    else fd_launch_hd<KV, 0>(a, hd, grid, st);
}

/* The v2 kernel addresses K and V rows with one 32-bit (block, slot) byte
 * offset: equal block and slot strides, a block's slots below 2^31. */
static bool fd_v2_ok(const rt_tensor *kc, const rt_tensor *vc) {
    return kc->stride[0] == vc->stride[0] && kc->stride[1] == vc->stride[1] && kc->stride[0] > 0 &&
           kc->stride[1] > 0 && kc->stride[0] <= INT32_MAX && kc->shape[1] * kc->stride[1] <= INT32_MAX;
}

/* Which k_fd for a launch of T rows over contexts of at most ctx keys
 * (read at each launch; a graph keeps the kernel of its capture): 0 the
 * original, 1 v2, 2 v2 with its first loads before the PDL wait.
 * VLLM_CUDA_FD_V2: 0 the original, 1 v2 at every T, auto (unset or any
 * other value) v2 for T <= FD_V2_MAX_T and ctx <= VLLM_CUDA_FD_V2_CTX
 * (default FD_V2_MAX_CTX; 0: no bound), and for T <= FD_V2_MAX_T2 and
 * ctx <= FD_V2_T2_CTX (or that bound if lower). ctx is the host's bound (block-table width x block
 * size, or the window), never the device-side lengths: a wide table (vllm
 * serve) keeps the original at T = 2. VLLM_CUDA_FD_PRE: 0 v2 waits first,
 * otherwise v2 is the pre-wait kernel. */
static int fd_variant(int64_t T, int64_t ctx, const rt_tensor *kc, const rt_tensor *vc) {
    if (!fd_v2_ok(kc, vc)) return 0;
    const char *e = getenv("VLLM_CUDA_FD_V2");
    bool v2;
    if (e && !strcmp(e, "0")) v2 = false;
    else if (e && !strcmp(e, "1")) v2 = true;
    else {
        const char *c = getenv("VLLM_CUDA_FD_V2_CTX");
        const long most = c && *c ? atol(c) : FD_V2_MAX_CTX;
        v2 = T <= FD_V2_MAX_T ? most <= 0 || ctx <= most
                              : T <= FD_V2_MAX_T2 && ctx <= (most > 0 && most < FD_V2_T2_CTX ? most : FD_V2_T2_CTX);
    }
    if (!v2) return 0;
    const char *p = getenv("VLLM_CUDA_FD_PRE");
    return p && !strcmp(p, "0") ? 1 : 2;
}

/* CTAs per SM the split count aims at (VLLM_CUDA_FD_CTAS, 1..4). */
static int fd_ctas_per_sm(void) {
    const char *e = getenv("VLLM_CUDA_FD_CTAS");
    int v = e ? atoi(e) : 0;
    return v >= 1 && v <= 4 ? v : FD_CTAS;
}

int cuda_fd_run(cuda_ctx *c, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale, float softcap,
                int32_t window) {
    fd_args a;
    memset(&a, 0, sizeof a);
    int64_t T = q->shape[0], h = q->shape[1], hd = q->shape[2], kvh = kc->shape[2];
    a.q = (const char *)q->data;
    a.k = (const char *)kc->data;
    a.v = (const char *)vc->data;
    a.out = (char *)dst->data;
    a.q_s0 = q->stride[0];
    a.q_s1 = q->stride[1];
    a.o_s0 = dst->stride[0];
    a.o_s1 = dst->stride[1];
    a.k_s0 = kc->stride[0];
    a.k_sb = kc->stride[1];
    a.k_s1 = kc->stride[2];
    a.v_s0 = vc->stride[0];
    a.v_sb = vc->stride[1];
    a.v_s1 = vc->stride[2];
    a.bt = (const int32_t *)bt->data;
    a.qsl = (const int32_t *)qsl->data;
    a.seq_lens = (const int32_t *)sl->data;
    a.S = (int)bt->shape[0];
    a.max_blocks = (int)bt->shape[1];
    a.B = (int)kc->shape[1];
    a.num_blocks = (int)kc->shape[0];
    a.G = (int)(h / kvh);
    a.h = (int)h;
    a.window = window;
    a.scale = scale;
    a.softcap = softcap;
    a.flags = c->d_flags;
    a.kv_s0 = (int)(kc->stride[0] <= INT32_MAX ? kc->stride[0] : 0); /* read by v2 only (fd_v2_ok) */
    a.kv_sb = (int)(kc->stride[1] <= INT32_MAX ? kc->stride[1] : 0);
    const char *mpf = getenv("VLLM_CUDA_FD_MPF");
    a.mpf = !(mpf && !strcmp(mpf, "0"));
    if ((int64_t)a.max_blocks * a.B > INT32_MAX / 2 || T > 65535 || kvh > 65535)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda paged attention: context or batch too large");
    /* Mostly prompt rows (T >= 4 rows per sequence on average): the
     * prefill kernel (cuda_paged_pf.cu), whose K/V tiles serve 32 queries at once. */
    if (T >= 4 * (int64_t)a.S && T >= 64 && (hd == 64 || hd == 128)) {
        if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
        return cuda_pf_run(c, a, T, hd, kvh, kc->dtype);
    }
    /* Upper bound of a row's context, then enough splits for about
     * fd_ctas_per_sm() CTAs per SM, each split at least one run of U keys
     * per warp (U as k_fd's), its length a multiple of U. */
    int64_t ctx = (int64_t)a.max_blocks * a.B;
    if (window > 0 && window < ctx) ctx = window;
    const int gm = a.G <= 1 ? 1 : a.G <= 2 ? 2 : a.G <= 4 ? 4 : 8;
    const int64_t U = fd_keys((int)rt_dtype_info(kc->dtype)->block_bytes, (int)(hd / 32), gm);
    int64_t want = ((int64_t)fd_ctas_per_sm() * c->n_sm + T * kvh - 1) / (T * kvh);
    int64_t most = (ctx + FD_WARPS * U - 1) / (FD_WARPS * U);
    int64_t ns = want < most ? want : most;
    if (ns > FD_MAXS) ns = FD_MAXS;
    if (ns < 1) ns = 1;
    int64_t len = (ctx + ns - 1) / ns;
    len = (len + U - 1) / U * U;
    ns = (ctx + len - 1) / len;
    a.n_splits = (int)ns;
    a.split_len = (int)len;
    /* Each row's split length from its real context in the kernel
     * (fd_meta), unless VLLM_CUDA_FD_SPLIT=width (the length above). */
    const char *split = getenv("VLLM_CUDA_FD_SPLIT");
    a.chunk_min = split && !strcmp(split, "width") ? 0 : (int)(FD_WARPS * U);
    void *tmp = NULL;
    if (ns > 1) { /* partials in the persistent workspace (graph-safe); the bound always holds */
        size_t n = (size_t)(T * h * ns);
        if (n * (size_t)(hd + 2) <= CUDA_FD_WS_FLOATS(c->n_sm)) {
            a.part = c->fd_ws;
        } else {
            tmp = cuda_tmp_alloc(c, n * (size_t)(hd + 2) * 4);
            if (!tmp) return VC_ERR_OOM;
            a.part = (float *)tmp;
        }
        a.part_ml = a.part + n * (size_t)hd;
        a.counters = c->fd_cnt; /* T * kvh < 4 * n_sm when ns > 1 (want > 1) */
    }
    if (cuda_enter(c) < 0) {
        cuda_tmp_free(c, tmp);
        return VC_ERR_RUNTIME;
    }
    dim3 grid((unsigned)kvh, (unsigned)T, (unsigned)ns);
    const int var = fd_variant(T, ctx, kc, vc);
    switch (kc->dtype) {
    case RT_BF16: fd_launch_kv<__nv_bfloat16>(a, (int)hd, var, grid, c->stream); break;
    case RT_F16: fd_launch_kv<__half>(a, (int)hd, var, grid, c->stream); break;
    default: fd_launch_kv<float>(a, (int)hd, var, grid, c->stream); break;
    }
    cudaError_t e = cudaGetLastError();
    cuda_tmp_free(c, tmp);
    if (e != cudaSuccess) return cuda_fail(e, "paged attention launch", __FILE__, __LINE__);
    return VC_OK;
}
