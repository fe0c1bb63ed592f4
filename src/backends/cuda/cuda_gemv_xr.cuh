/* cuda_gemv_xr.cuh — the batch-1 GGUF decode GEMV with x in registers
 * (cuda_gemv_xr.cu), called from cuda_gemv_d4.cu's entry for one row. */
#ifndef CUDA_GEMV_XR_CUH
#define CUDA_GEMV_XR_CUH

#include "backends/cuda/cuda_internal.h"

/* Whether the kernel takes n rows over w: one or two rows (two: in <=
 * 16384; not with VLLM_CUDA_GEMV_XR=o) of Q4_K / Q5_K / Q6_K (in % 256 == 0)
 * or Q4_0 / Q4_1 (in % 128 == 0; Q8_0 with VLLM_CUDA_GEMV_XR=a), in <=
 * 32768, the tensor aligned for its format. */
bool cuda_gemv_xr_fits(cuda_ctx *c, const rt_tensor *w, int64_t n);
/* y[n][out (MATMUL_GLU: out / 2)] = x W^T (+ bias), f32 x and y rows
 * x_ld / y_ld floats apart (n = 1 or 2). */
int cuda_gemv_xr(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                 const float *bias, int64_t out, int64_t in, int n, bool glu, int act);

/* MATMUL3 over one x row in launches of one GGUF type each (off with VLLM_CUDA_GEMV_XR=t). */
bool cuda_matmul3_fits(cuda_ctx *c, const rt_op_args *a);
int cuda_op_matmul3(rt_backend *be, const rt_op_args *a);

#endif
