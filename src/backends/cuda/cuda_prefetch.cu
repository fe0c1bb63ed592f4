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
 * How: one warp; under programmatic dependent launch the kernel starts
 * while the kernel before it runs (that one triggers its dependents at its
 * start), each lane issues `cp.async.bulk.prefetch.L2` for its chunks (no
 * data comes back: the instruction returns at once), then the kernel
 * releases its own dependents and waits for the kernel before it to
 * finish, so that its completion still implies that one's (the next
 * kernel's wait covers both, as stream order requires). Without PDL the
 * prefetches start after the kernel before, as a plain launch.
 */
#include "backends/cuda/cuda_internal.h"

#define PF_CHUNK (256u << 10) /* bytes per bulk prefetch */

__global__ void __launch_bounds__(32) k_l2_prefetch(const char *p, size_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    for (size_t off = (size_t)threadIdx.x * PF_CHUNK; off < n; off += 32 * (size_t)PF_CHUNK) {
        const size_t left = n - off;
        const uint32_t len = (uint32_t)(left < PF_CHUNK ? left : PF_CHUNK);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(len) : "memory");
    }
    asm volatile("griddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;" ::: "memory");
#endif
}

int cuda_l2_prefetch(cuda_ctx *c, const void *p, size_t n) {
    if ((uintptr_t)p % 16) return VC_OK; /* the instruction wants 16-byte alignment; a hint may be skipped */
    n &= ~(size_t)15;
    if (!n) return VC_OK;
    cuda_launch(k_l2_prefetch, dim3(1), 32, 0, c->stream, (const char *)p, n);
    CU_LAUNCHED();
    return VC_OK;
}
