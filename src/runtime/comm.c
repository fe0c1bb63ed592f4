#include "runtime/comm.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static rt_comm_group_factory g_comm_factories[RT_DEV_COUNT];

void rt_comm_register(rt_device dev, rt_comm_group_factory f) {
    VC_ASSERT((unsigned)dev < RT_DEV_COUNT);
    g_comm_factories[dev] = f;
}

/* World size 1: every collective is the identity (all_gather a copy). */
static int single_all_reduce(rt_comm *c, rt_tensor *t) {
    (void)c;
    (void)t;
    return 0;
}

static int single_all_gather(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    if (src->data == dst->data) return 0; /* in place */
    rt_tensor s = *src;
    return rt_tensor_copy_bytes(c->be, dst, &s);
}

static void single_group_free(rt_comm **comms, int world) {
    for (int r = 0; r < world; r++) free(comms[r]);
}

static const rt_comm_vtable g_single = {
    .name = "single",
    .all_reduce_sum = single_all_reduce,
    .all_gather = single_all_gather,
    .group_free = single_group_free,
    .reduce_scatter_sum = single_all_gather, /* one rank: the sum is src itself */
    .all_to_all = single_all_gather,         /* one rank: dst = src */
};

static int check_group(rt_backend **bes, int world, rt_comm **comms) {
    rt_backends_init();
    if (world < 1) return vc_err_set(VC_ERR_INVALID, "tensor-parallel size must be >= 1 (got %d)", world);
    for (int r = 0; r < world; r++) {
        comms[r] = NULL;
        if (!bes[r]) return vc_err_set(VC_ERR_INVALID, "comm: rank %d has no backend", r);
        if (bes[r]->device != bes[0]->device)
            return vc_err_set(VC_ERR_INVALID, "comm: ranks on different device kinds (%s vs %s)", bes[r]->vt->name,
                              bes[0]->vt->name);
    }
    return 0;
}

static int native_group(rt_backend **bes, int world, const rt_comm_opts *opts, rt_comm **comms) {
    rt_comm_group_factory f = g_comm_factories[bes[0]->device];
    if (!f)
        return vc_err_set(VC_ERR_UNSUPPORTED, "backend %s has no collective communication for %d ranks",
                          bes[0]->vt->name, world);
    return f(bes, world, opts, comms);
}

int rt_comm_group_create_native(rt_backend **bes, int world, rt_comm **comms) {
    int rc = check_group(bes, world, comms);
    return rc < 0 ? rc : native_group(bes, world, NULL, comms);
}

int rt_comm_group_create(rt_backend **bes, int world, rt_comm **comms) {
    return rt_comm_group_create_opts(bes, world, NULL, comms);
}

int rt_comm_group_create_opts(rt_backend **bes, int world, const rt_comm_opts *opts, rt_comm **comms) {
    int rc = check_group(bes, world, comms);
    if (rc < 0) return rc;
    if (world == 1) {
        rt_comm *c = calloc(1, sizeof *c);
        if (!c) return vc_err_set(VC_ERR_OOM, "out of memory");
        *c = (rt_comm){.vt = &g_single, .rank = 0, .world = 1, .be = bes[0]};
        comms[0] = c;
        return 0;
    }
    return native_group(bes, world, opts, comms);
}

void rt_comm_group_free(rt_comm **comms, int world) {
    if (world < 1 || !comms || !comms[0]) return;
    comms[0]->vt->group_free(comms, world);
    for (int r = 0; r < world; r++) comms[r] = NULL;
}

static int check_float(const rt_comm *c, const rt_tensor *t, const char *what) {
    if (t->dtype != RT_F32 && t->dtype != RT_F16 && t->dtype != RT_BF16)
        return vc_err_set(VC_ERR_INVALID, "comm %s: dtype %s not supported (f32/f16/bf16)", what,
                          rt_dtype_name(t->dtype));
    if (!rt_tensor_is_contiguous(t)) return vc_err_set(VC_ERR_INVALID, "comm %s: tensor must be contiguous", what);
    if (t->device != c->be->device) return vc_err_set(VC_ERR_INVALID, "comm %s: tensor on the wrong device", what);
    return 0;
}

int rt_comm_all_reduce_sum(rt_comm *c, rt_tensor *t) {
    int rc = check_float(c, t, "all_reduce");
    return rc < 0 ? rc : c->vt->all_reduce_sum(c, t);
}

int rt_comm_all_reduce_start(rt_comm *c, rt_tensor *t, int slot) {
    if (slot < 0 || slot >= RT_COMM_SLOTS)
        return vc_err_set(VC_ERR_INVALID, "comm all_reduce_start: slot %d not in [0, %d)", slot, RT_COMM_SLOTS);
    int rc = check_float(c, t, "all_reduce");
    if (rc < 0) return rc;
    return c->vt->all_reduce_start ? c->vt->all_reduce_start(c, t, slot) : c->vt->all_reduce_sum(c, t);
}

int rt_comm_wait(rt_comm *c, int slot) {
    if (slot < 0 || slot >= RT_COMM_SLOTS)
        return vc_err_set(VC_ERR_INVALID, "comm wait: slot %d not in [0, %d)", slot, RT_COMM_SLOTS);
    return c->vt->wait ? c->vt->wait(c, slot) : VC_OK;
}

/* part [m] and whole [W * m] of one dtype; part either outside whole or
 * exactly whole's block `rank` (in place). */
static int check_parts(const rt_comm *c, const rt_tensor *part, const rt_tensor *whole, const char *what) {
    int rc = check_float(c, part, what);
    if (rc == 0) rc = check_float(c, whole, what);
    if (rc < 0) return rc;
    int64_t m = rt_tensor_nelem(part);
    if (part->dtype != whole->dtype || rt_tensor_nelem(whole) != (int64_t)c->world * m)
        return vc_err_set(VC_ERR_INVALID, "comm %s: the whole must hold world (%d) x the part's elements of its dtype",
                          what, c->world);
    size_t es = rt_dtype_info(part->dtype)->block_bytes, pb = (size_t)m * es;
    const char *p = part->data, *w = whole->data, *own = w + (size_t)c->rank * pb;
    if (p != own && p + pb > w && p < w + (size_t)c->world * pb)
        return vc_err_set(VC_ERR_INVALID, "comm %s: the part overlaps the whole but is not block %d of it", what,
                          c->rank);
    return 0;
}

int rt_comm_all_gather(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    int rc = check_parts(c, src, dst, "all_gather");
    return rc < 0 ? rc : c->vt->all_gather(c, src, dst);
}

int rt_comm_all_gather_start(rt_comm *c, const rt_tensor *src, rt_tensor *dst, int slot) {
    if (slot < 0 || slot >= RT_COMM_SLOTS)
        return vc_err_set(VC_ERR_INVALID, "comm all_gather_start: slot %d not in [0, %d)", slot, RT_COMM_SLOTS);
    int rc = check_parts(c, src, dst, "all_gather");
    if (rc < 0) return rc;
    return c->vt->all_gather_start ? c->vt->all_gather_start(c, src, dst, slot) : c->vt->all_gather(c, src, dst);
}

/* src and dst: [W * m] each, one dtype, not overlapping. */
static int check_a2a(const rt_comm *c, const rt_tensor *src, const rt_tensor *dst) {
    int rc = check_float(c, src, "all_to_all");
    if (rc == 0) rc = check_float(c, dst, "all_to_all");
    if (rc < 0) return rc;
    int64_t ne = rt_tensor_nelem(src);
    if (src->dtype != dst->dtype || rt_tensor_nelem(dst) != ne || ne % c->world)
        return vc_err_set(VC_ERR_INVALID, "comm all_to_all: src and dst must hold world (%d) x m elements of one dtype",
                          c->world);
    size_t nb = rt_tensor_nbytes(src);
    const char *a = src->data, *b = dst->data;
    if (a < b + nb && b < a + nb) return vc_err_set(VC_ERR_INVALID, "comm all_to_all: src and dst overlap");
    return 0;
}

int rt_comm_all_to_all(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    int rc = check_a2a(c, src, dst);
    if (rc < 0) return rc;
    if (!c->vt->all_to_all) return vc_err_set(VC_ERR_UNSUPPORTED, "comm %s: no all_to_all", c->vt->name);
    return c->vt->all_to_all(c, src, dst);
}

int rt_comm_all_to_all_start(rt_comm *c, const rt_tensor *src, rt_tensor *dst, int slot) {
    if (slot < 0 || slot >= RT_COMM_SLOTS)
        return vc_err_set(VC_ERR_INVALID, "comm all_to_all_start: slot %d not in [0, %d)", slot, RT_COMM_SLOTS);
    int rc = check_a2a(c, src, dst);
    if (rc < 0) return rc;
    if (c->vt->all_to_all_start) return c->vt->all_to_all_start(c, src, dst, slot);
    if (!c->vt->all_to_all) return vc_err_set(VC_ERR_UNSUPPORTED, "comm %s: no all_to_all", c->vt->name);
    return c->vt->all_to_all(c, src, dst);
}

int rt_comm_group_alloc_sym(rt_comm **comms, int world, size_t bytes, void **ptrs) {
    for (int r = 0; r < world; r++) ptrs[r] = NULL;
    if (world < 1 || !comms[0]) return vc_err_set(VC_ERR_INVALID, "comm alloc_sym: no group");
    if (!comms[0]->vt->group_alloc_sym)
        return vc_err_set(VC_ERR_UNSUPPORTED, "comm %s: no symmetric buffers", comms[0]->vt->name);
    if (bytes == 0) return vc_err_set(VC_ERR_INVALID, "comm alloc_sym: zero bytes");
    return comms[0]->vt->group_alloc_sym(comms, world, bytes, ptrs);
}

int rt_comm_reduce_scatter_sum(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    int rc = check_parts(c, dst, src, "reduce_scatter");
    if (rc < 0) return rc;
    if (!c->vt->reduce_scatter_sum)
        return vc_err_set(VC_ERR_UNSUPPORTED, "comm %s: no reduce_scatter", c->vt->name);
    return c->vt->reduce_scatter_sum(c, src, dst);
}

int rt_backends_create_group(rt_device dev, int tp, const rt_backend_params *p, rt_backend **out) {
    if (tp < 1 || tp > 64) return vc_err_set(VC_ERR_INVALID, "tensor-parallel size must be in [1, 64] (got %d)", tp);
    for (int r = 0; r < tp; r++) out[r] = NULL;
    rt_backend_params bp = *p;
    if (dev == RT_DEV_CPU && tp > 1) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int total = p->n_threads > 0 ? p->n_threads : (int)(cores > 0 ? cores : 1);
        bp.n_threads = total / tp > 0 ? total / tp : 1;
    }
    for (int r = 0; r < tp; r++) {
        if (dev != RT_DEV_CPU) bp.device_id = p->device_id + r;
        out[r] = rt_backend_create(dev, &bp);
        if (!out[r]) {
            rt_backends_free_group(out, r);
            return VC_ERR_RUNTIME;
        }
    }
    return VC_OK;
}

void rt_backends_free_group(rt_backend **bes, int tp) {
    for (int r = 0; r < tp; r++) {
        rt_backend_free(bes[r]);
        bes[r] = NULL;
    }
}
