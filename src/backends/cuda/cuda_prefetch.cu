/* cuda_prefetch — the backend's prefetch hint (rt_backend_prefetch): bulk
 * L2 prefetches of weights that the next kernels will read, issued while
 * the kernel before still runs.
 *
 * Why: a decode step streams each layer's weights once, GEMV after GEMV,
 * and between the GEMVs (rope / KV store, attention, norms, the kernel
 * boundaries) the DRAM is mostly idle: ~16 us a layer on the 8B shape
 * (BENCHMARKS "Where an 8B decode step goes"). Moving the next GEMV's
 * first megabytes into the L2 (50 MB on the H100 / H200) in those windows
 * lets that GEMV read them from the L2.
 *
 * How: a grid of one-warp CTAs, each taking PF_CTA bytes (its lanes one
 * 32nd each): the first version (one warp for the whole hint) ran at
 * ~0.2-0.3 TB/s and held the stream (measured: 8B decode 222 -> 120
 * tok/s with a 32 MiB hint), as one SM's bulk prefetches go no faster
 * and a CTA retires only when they are done. Under programmatic dependent
 * launch the CTAs start while the kernel before runs (that one triggers
 * its dependents at its start), issue `cp.async.bulk.prefetch.L2` (no
 * data comes back), then release their own dependents and wait for the
 * kernel before to finish, so that this kernel's completion still implies
 * that one's (the next kernel's wait covers both, as stream order
 * requires). Without PDL the prefetches start after the kernel before, as
 * a plain launch.
 */
#include "backends/cuda/cuda_internal.h"

#include <stdlib.h>

#define PF_CTA_DEFAULT (256u << 10) /* bytes per CTA; VLLM_L2PF_CTA_KB */

/* grid: ceil(n / cta) CTAs of 32 lanes; lane l of CTA b prefetches
 * [b*cta + l*cta/32, +cta/32) clipped to n (cta a multiple of 512). */
__global__ void __launch_bounds__(32) k_l2_prefetch(const char *p, size_t n, unsigned cta) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const size_t lane_bytes = cta / 32, off = (size_t)blockIdx.x * cta + threadIdx.x * lane_bytes;
    if (off < n) {
        const size_t left = n - off;
        const uint32_t len = (uint32_t)(left < lane_bytes ? left : lane_bytes);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(len) : "memory");
    }
    asm volatile("griddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;" ::: "memory");
#endif
}

int cuda_l2_prefetch(cuda_ctx *c, const void *p, size_t n) {
    if ((uintptr_t)p % 16) return VC_OK; /* the instruction wants 16-byte alignment; a hint may be skipped */
    n &= ~(size_t)15;
    if (!n) return VC_OK;
    if (!c->pf_cta) {
        const char *e = getenv("VLLM_L2PF_CTA_KB");
        long kb = e && *e ? atol(e) : 0;
        c->pf_cta = kb >= 16 && kb <= (1 << 20) ? (unsigned)kb << 10 : PF_CTA_DEFAULT;
    }
    const size_t grid = (n + c->pf_cta - 1) / c->pf_cta;
    cuda_launch(k_l2_prefetch, dim3((unsigned)grid), 32, 0, c->stream, (const char *)p, n, c->pf_cta);
    CU_LAUNCHED();
    return VC_OK;
}
