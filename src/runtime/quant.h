/* quant — GGUF block formats: exact (scalar) dequantization and
 * quantization, the reference every SIMD kernel is tested against.
 *
 * Block layouts follow the GGUF spec / ggml (little-endian, packed):
 *   Q4_0  {f16 d; u8 qs[16]}            x = d * (q - 8), q in low nibbles
 *         for elements 0..15 and high nibbles for 16..31
 *   Q4_1  {f16 d, m; u8 qs[16]}         x = d * q + m
 *   Q8_0  {f16 d; i8 qs[32]}            x = d * q
 *   Q4_K  {f16 d, dmin; u8 scales[12]; u8 qs[128]}   8 sub-blocks of 32 with
 *         6-bit scales/mins: x = d*sc*q - dmin*m
 *   Q5_K  {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
 *   Q6_K  {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}  x = d*sc*(q-32)
 *   Q8_K  {f32 d; i8 qs[256]; i16 bsums[16]}
 */
#ifndef RT_QUANT_H
#define RT_QUANT_H

#include "runtime/dtype.h"

#include <stdint.h>

/* Dequantize one row of n elements (n a multiple of the block size) of
 * type t (any rt_dtype incl. f32/f16/bf16) into f32. */
void rt_dequant_row(rt_dtype t, const void *src, float *dst, int64_t n);
/* Quantize n f32 values into blocks of type t (reference quantizer,
 * matching ggml's reference rounding). Supported: Q4_0, Q4_1, Q8_0, Q4_K,
 * Q5_K, Q6_K, Q8_K, F16, BF16, F32. Returns 0 or VC_ERR_UNSUPPORTED. */
int rt_quant_row(rt_dtype t, const float *src, void *dst, int64_t n);

#endif
