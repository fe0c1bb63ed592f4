/* comm — collective communication between the ranks of a tensor-parallel
 * group (vLLM's device communicator), behind a per-device vtable.
 *
 * A group is W ranks, one backend each (rank r drives bes[r]), created at
 * once; then each rank's thread calls the collectives on its own rt_comm,
 * in the same order on every rank (like NCCL). One thread per rank in one
 * process: the engine stays one binary and one address space, and NCCL's
 * single-process init (ncclCommInitAll) needs no launcher or rendezvous.
 *
 *   rt_comm *c[2];
 *   rt_comm_group_create(bes, 2, c);           // bes[r]: rank r's backend
 *   ... on rank r's thread:
 *   rt_comm_all_reduce_sum(c[r], &partial);    // in place, [n, d] -> sum over ranks
 *   rt_comm_all_gather(c[r], &shard, &full);   // [m] per rank -> [W * m], rank-major
 *   rt_comm_reduce_scatter_sum(c[r], &full, &shard); // [W * m] -> block r of the sum, [m]
 *   rt_comm_all_reduce_start(c[r], &half, 0);  // overlapped with the work queued next ...
 *   rt_comm_wait(c[r], 0);                     // ... until here (before `half` is read)
 *   rt_comm_group_free(c, 2);
 *
 * Implementations register per device from rt_backends_init(): the CPU
 * backend's works on host memory (threads, a fixed summation order: the
 * result is bit-identical on every rank and run to run); the CUDA backend's
 * uses NCCL on each rank's stream (NVLink multicast off: NCCL_NVLS_ENABLE=0
 * unless the user set it). Tensors must be contiguous, f32/f16/bf16, on
 * the rank's device; every rank passes the same shape.
 */
#ifndef RT_COMM_H
#define RT_COMM_H

#include "runtime/backend.h"

typedef struct rt_comm rt_comm;

typedef struct {
    const char *name;
    int (*all_reduce_sum)(rt_comm *c, rt_tensor *t);
    int (*all_gather)(rt_comm *c, const rt_tensor *src, rt_tensor *dst);
    /* Frees the whole group (called once, with every rank's comm). */
    void (*group_free)(rt_comm **comms, int world);
    /* Optional (NULL: rt_comm_all_reduce_start runs the all-reduce at
     * once and rt_comm_wait does nothing). */
    int (*all_reduce_start)(rt_comm *c, rt_tensor *t, int slot);
    int (*wait)(rt_comm *c, int slot);
    int (*reduce_scatter_sum)(rt_comm *c, const rt_tensor *src, rt_tensor *dst);
    /* Optional (NULL: rt_comm_all_gather_start gathers at once). */
    int (*all_gather_start)(rt_comm *c, const rt_tensor *src, rt_tensor *dst, int slot);
    /* Optional (NULL: rt_comm_group_alloc_sym is unsupported). */
    int (*group_alloc_sym)(rt_comm **comms, int world, size_t bytes, void **ptrs);
    int (*all_to_all)(rt_comm *c, const rt_tensor *src, rt_tensor *dst);
    /* Optional (NULL: rt_comm_all_to_all_start exchanges at once). */
    int (*all_to_all_start)(rt_comm *c, const rt_tensor *src, rt_tensor *dst, int slot);
} rt_comm_vtable;

struct rt_comm {
    const rt_comm_vtable *vt;
    void *ctx;
    int rank, world;
    rt_backend *be;
};

/* What the group's user would like; a device implementation honours what
 * it can and ignores the rest (never an error): prefer_zero_cta asks for
 * collectives that leave the SMs to the work beside them (NCCL >= 2.28's
 * zero-CTA policy: copy engines, symmetric buffers); an explicit
 * VLLM_TP_NCCL_CTA wins over it. NULL: no preferences. */
typedef struct {
    bool prefer_zero_cta;
} rt_comm_opts;

/* Creates comms[0..world) on the backends' device (all bes[] must be on
 * one device kind). world = 1 always works and makes the collectives
 * no-ops (a TP size of 1). */
typedef int (*rt_comm_group_factory)(rt_backend **bes, int world, const rt_comm_opts *opts, rt_comm **comms);
void rt_comm_register(rt_device dev, rt_comm_group_factory f);
int rt_comm_group_create(rt_backend **bes, int world, rt_comm **comms);
int rt_comm_group_create_opts(rt_backend **bes, int world, const rt_comm_opts *opts, rt_comm **comms);
void rt_comm_group_free(rt_comm **comms, int world);
/* As rt_comm_group_create, but always the device's own implementation,
 * world 1 included (no no-op shortcut): tests run NCCL on one GPU so. */
int rt_comm_group_create_native(rt_backend **bes, int world, rt_comm **comms);

/* The backends of a TP group of `tp` ranks on one device kind: accelerator
 * ordinals p->device_id + r; on the CPU the threads p->n_threads (<= 0:
 * all cores) are shared out, at least one per rank. out[0..tp) are freed
 * with rt_backends_free_group. */
int rt_backends_create_group(rt_device dev, int tp, const rt_backend_params *p, rt_backend **out);
void rt_backends_free_group(rt_backend **bes, int tp);

int rt_comm_all_reduce_sum(rt_comm *c, rt_tensor *t);
/* dst [W * m] = the ranks' src [m] in rank order. src may be dst's own
 * block (rank * m elements in): an in-place gather. */
int rt_comm_all_gather(rt_comm *c, const rt_tensor *src, rt_tensor *dst);
/* Reduce-scatter (sequence-parallel prefill): src [W * m] on every rank,
 * dst [m] = block `rank` of the element-wise sum over the ranks (summed in
 * f32 on the CPU, in the dtype by NCCL, as the all-reduce). dst may be
 * src's own block (in place); the other blocks of src are left unspecified. */
int rt_comm_reduce_scatter_sum(rt_comm *c, const rt_tensor *src, rt_tensor *dst);
/* All-to-all: src and dst [W * m] each (separate buffers); block q of dst
 * = rank q's block `rank` of src (dst's own block: a copy of src's). */
int rt_comm_all_to_all(rt_comm *c, const rt_tensor *src, rt_tensor *dst);

/* Overlap of communication with compute (tensor-parallel prefill): the
 * all-reduce of t is queued after the work already queued on the rank's
 * backend and runs beside what is queued after it (CUDA: NCCL on a second,
 * high-priority stream). Until rt_comm_wait(c, slot) the caller must queue
 * nothing that reads or writes t; the wait makes the backend's later work
 * wait for the sum (it does not block the host). Slots 0..RT_COMM_SLOTS-1
 * name the collectives in flight; every started slot must be waited before
 * the next synchronous collective or a backend sync that reads t (a start
 * on a slot still in flight waits for it first). Where
 * the device has no second queue (CPU, world 1, a CUDA graph recording)
 * the start runs the all-reduce at once and the wait does nothing. Every
 * rank issues the same sequence of starts and synchronous collectives. */
#define RT_COMM_SLOTS 2

/* Symmetric buffers (called once for the whole group, from one thread):
 * ptrs[r] = `bytes` of rank r's device memory registered with the group as
 * one symmetric window (CUDA: ncclMemAlloc + ncclCommWindowRegister with
 * NCCL_WIN_COLL_SYMMETRIC), freed with the group. Collectives whose
 * buffers lie in such a window at the same offset on every rank may use
 * NCCL's symmetric kernels, and under VLLM_TP_NCCL_CTA=zero the all-gather
 * may run on the copy engines (no SMs taken from the GEMMs beside it).
 * VC_ERR_UNSUPPORTED where the device has none (CPU, world 1). */
int rt_comm_group_alloc_sym(rt_comm **comms, int world, size_t bytes, void **ptrs);
int rt_comm_all_reduce_start(rt_comm *c, rt_tensor *t, int slot);
/* The all-gather in the same overlapped form: until the wait, the caller
 * may read src (its own block of dst, in place) but must not touch the
 * other blocks of dst. */
int rt_comm_all_gather_start(rt_comm *c, const rt_tensor *src, rt_tensor *dst, int slot);
/* And the all-to-all: until the wait, nothing may write src's blocks of
 * the other ranks or touch dst; src's own block may be written (dst's own
 * block is then unspecified: the sequence-parallel steps send the peers'
 * rows of a partial sum while the GEMM of the own rows runs). */
int rt_comm_all_to_all_start(rt_comm *c, const rt_tensor *src, rt_tensor *dst, int slot);
int rt_comm_wait(rt_comm *c, int slot);

#endif
