/* tensor — a typed, strided view of memory on one device.
 *
 * Tensors are small value structs (views); they never own memory. Memory
 * comes from a backend allocation or an mmapped weight file.
 *
 * Layout convention (row-major, like PyTorch and HF weights):
 *   shape[0] is the outermost dimension, shape[ndim-1] the innermost
 *   (contiguous) one, called a "row". stride[i] is in BYTES between
 *   consecutive indices of dim i. For quantized dtypes the innermost
 *   dimension is packed in blocks: stride[ndim-1] is meaningless and a row
 *   occupies rt_dtype_row_bytes(dtype, shape[ndim-1]) bytes.
 *
 * A weight matrix W of nn.Linear(in, out) has shape [out, in]; matmul
 * computes y[n, out] = x[n, in] · W^T.
 */
#ifndef RT_TENSOR_H
#define RT_TENSOR_H

#include "runtime/dtype.h"

#include <stdbool.h>
#include <stdint.h>

#define RT_MAX_DIMS 4

typedef enum { RT_DEV_CPU = 0, RT_DEV_CUDA = 1, RT_DEV_COUNT } rt_device;

typedef struct {
    rt_dtype dtype;
    rt_device device;
    int ndim;
    int64_t shape[RT_MAX_DIMS];
    int64_t stride[RT_MAX_DIMS]; /* bytes */
    void *data;
} rt_tensor;

/* A contiguous view of `data` with the given shape. */
rt_tensor rt_tensor_make(void *data, rt_dtype dt, rt_device dev, int ndim, const int64_t *shape);
/* Shorthands for contiguous 1-D/2-D/3-D views. */
rt_tensor rt_tensor_1d(void *data, rt_dtype dt, rt_device dev, int64_t n0);
rt_tensor rt_tensor_2d(void *data, rt_dtype dt, rt_device dev, int64_t n0, int64_t n1);
rt_tensor rt_tensor_3d(void *data, rt_dtype dt, rt_device dev, int64_t n0, int64_t n1, int64_t n2);

int64_t rt_tensor_nelem(const rt_tensor *t);
/* Number of rows = nelem / shape[ndim-1]. */
int64_t rt_tensor_nrows(const rt_tensor *t);
/* Bytes spanned by a contiguous tensor. */
size_t rt_tensor_nbytes(const rt_tensor *t);
bool rt_tensor_is_contiguous(const rt_tensor *t);
bool rt_tensor_same_shape(const rt_tensor *a, const rt_tensor *b);
/* Pointer to row r when the tensor is viewed as [nrows, shape[ndim-1]]
 * (valid for tensors contiguous in all but possibly the outer dims). */
void *rt_tensor_row(const rt_tensor *t, int64_t r);
/* View of rows [r0, r0+n) of dim 0. */
rt_tensor rt_tensor_slice0(const rt_tensor *t, int64_t r0, int64_t n);
/* Reshape a contiguous tensor (same nelem); VC_ASSERTs on misuse. */
rt_tensor rt_tensor_reshape(const rt_tensor *t, int ndim, const int64_t *shape);

#endif
