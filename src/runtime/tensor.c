#include "runtime/tensor.h"

#include "base/err.h"

static void set_strides(rt_tensor *t) {
    int last = t->ndim - 1;
    int64_t s = (int64_t)rt_dtype_row_bytes(t->dtype, t->shape[last]);
    const rt_dtype_traits *tr = rt_dtype_info(t->dtype);
    t->stride[last] = tr->quantized ? 0 : tr->block_bytes;
    for (int i = last - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
    }
}

rt_tensor rt_tensor_make(void *data, rt_dtype dt, rt_device dev, int ndim, const int64_t *shape) {
    VC_ASSERT(ndim >= 1 && ndim <= RT_MAX_DIMS);
    rt_tensor t = {.dtype = dt, .device = dev, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    set_strides(&t);
    return t;
}

rt_tensor rt_tensor_1d(void *data, rt_dtype dt, rt_device dev, int64_t n0) {
    int64_t s[1] = {n0};
    return rt_tensor_make(data, dt, dev, 1, s);
}

rt_tensor rt_tensor_2d(void *data, rt_dtype dt, rt_device dev, int64_t n0, int64_t n1) {
    int64_t s[2] = {n0, n1};
    return rt_tensor_make(data, dt, dev, 2, s);
}

rt_tensor rt_tensor_3d(void *data, rt_dtype dt, rt_device dev, int64_t n0, int64_t n1, int64_t n2) {
    int64_t s[3] = {n0, n1, n2};
    return rt_tensor_make(data, dt, dev, 3, s);
}

int64_t rt_tensor_nelem(const rt_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int64_t rt_tensor_nrows(const rt_tensor *t) {
    int64_t last = t->shape[t->ndim - 1];
    return last ? rt_tensor_nelem(t) / last : 0;
}

size_t rt_tensor_nbytes(const rt_tensor *t) {
    return rt_dtype_row_bytes(t->dtype, t->shape[t->ndim - 1]) * (size_t)rt_tensor_nrows(t);
}

bool rt_tensor_is_contiguous(const rt_tensor *t) {
    rt_tensor c = rt_tensor_make(t->data, t->dtype, t->device, t->ndim, t->shape);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 1 && c.stride[i] != t->stride[i]) return false;
    return true;
}

bool rt_tensor_same_shape(const rt_tensor *a, const rt_tensor *b) {
    if (rt_tensor_nelem(a) != rt_tensor_nelem(b)) return false;
    return a->shape[a->ndim - 1] == b->shape[b->ndim - 1];
}

void *rt_tensor_row(const rt_tensor *t, int64_t r) {
    /* Decompose r over the outer dims (all but the last). */
    int64_t off = 0;
    for (int i = t->ndim - 2; i >= 0; i--) {
        int64_t idx = r % t->shape[i];
        r /= t->shape[i];
        off += idx * t->stride[i];
    }
    return (char *)t->data + off;
}

rt_tensor rt_tensor_slice0(const rt_tensor *t, int64_t r0, int64_t n) {
    VC_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= t->shape[0]);
    rt_tensor v = *t;
    v.shape[0] = n;
    if (t->ndim == 1) {
        v.data = (char *)t->data + rt_dtype_row_bytes(t->dtype, r0);
    } else {
        v.data = (char *)t->data + r0 * t->stride[0];
    }
    return v;
}

rt_tensor rt_tensor_reshape(const rt_tensor *t, int ndim, const int64_t *shape) {
    rt_tensor v = rt_tensor_make(t->data, t->dtype, t->device, ndim, shape);
    VC_ASSERT(rt_tensor_nelem(&v) == rt_tensor_nelem(t));
    return v;
}
