/* dtype — element types of tensors, incl. GGUF block-quantized types.
 *
 * Quantized types store a row as consecutive blocks of `block_elems` values
 * packed into `block_bytes` bytes (layouts per the GGUF spec; see
 * runtime/quant.h for the block structs and dequantization). A row length
 * must be a multiple of block_elems.
 */
#ifndef RT_DTYPE_H
#define RT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    RT_F32 = 0,
    RT_F16,
    RT_BF16,
    RT_I32,
    RT_Q4_0,
    RT_Q4_1,
    RT_Q8_0,
    RT_Q4_K,
    RT_Q5_K,
    RT_Q6_K,
    RT_Q8_K, /* activation quantization for K-quant dot products (not stored in files we load) */
    RT_DTYPE_COUNT
} rt_dtype;

typedef struct {
    const char *name;   /* "f32", "q4_K", ... */
    int block_elems;    /* 1 for plain types */
    int block_bytes;    /* bytes per block (element size for plain types) */
    bool quantized;
} rt_dtype_traits;

const rt_dtype_traits *rt_dtype_info(rt_dtype t);
const char *rt_dtype_name(rt_dtype t);
/* Bytes of `n` consecutive elements; n must be a multiple of block_elems
 * (returns 0 otherwise, or on overflow). */
size_t rt_dtype_row_bytes(rt_dtype t, int64_t n);

/* GGUF/ggml type id <-> rt_dtype. Returns -1 for types we do not support. */
int rt_dtype_from_ggml(uint32_t ggml_type);
int rt_dtype_to_ggml(rt_dtype t);

/* Scalar conversions (IEEE half with round-to-nearest-even; bf16 likewise). */
float rt_f16_to_f32(uint16_t h);
uint16_t rt_f32_to_f16(float f);
float rt_bf16_to_f32(uint16_t h);
uint16_t rt_f32_to_bf16(float f);

#endif
