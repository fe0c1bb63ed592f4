/* quant_blocks — C structs of the GGUF block-quantized formats.
 *
 * Byte-exact images of one block (little-endian, no padding; the static
 * asserts pin the sizes to rt_dtype_info()->block_bytes). f16 fields are
 * raw IEEE half bits (convert with rt_f16_to_f32). Shared by the reference
 * (runtime/quant.c) and every backend's kernels. Element order inside a
 * block is documented per struct; runtime/quant.c is the executable spec.
 */
#ifndef RT_QUANT_BLOCKS_H
#define RT_QUANT_BLOCKS_H

#include <stdint.h>

#define RT_QK 32    /* elements per Q4_0/Q4_1/Q8_0 block */
#define RT_QK_K 256 /* elements per K-quant super-block */

/* x[i] = d * ((qs[i] & 15) - 8), x[i+16] = d * ((qs[i] >> 4) - 8), i < 16 */
typedef struct {
    uint16_t d;
    uint8_t qs[RT_QK / 2];
} rt_block_q4_0;

/* x[i] = d * (qs[i] & 15) + m, x[i+16] = d * (qs[i] >> 4) + m */
typedef struct {
    uint16_t d, m;
    uint8_t qs[RT_QK / 2];
} rt_block_q4_1;

/* x[i] = d * qs[i] */
typedef struct {
    uint16_t d;
    int8_t qs[RT_QK];
} rt_block_q8_0;

/* 8 sub-blocks of 32; scales[12] packs 8 six-bit scales and 8 six-bit mins
 * (see rt_q4k_scale_min). Chunk c < 4 of 64 elements uses qs[32c..32c+31]:
 * low nibbles -> sub-block 2c, high nibbles -> sub-block 2c+1.
 * x = d*sc*q - dmin*m. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[RT_QK_K / 2];
} rt_block_q4_K;

/* As Q4_K plus a fifth bit: bit s of qh[l] is bit 4 of element 32s+l. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[RT_QK_K / 8];
    uint8_t qs[RT_QK_K / 2];
} rt_block_q5_K;

/* Two halves of 128; in half h, element 128h + 32k + l (k < 4, l < 32) has
 * low 4 bits from ql[64h + l + 32*(k&1)] (k < 2: low nibble, else high) and
 * high 2 bits (qh[32h + l] >> 2k) & 3; x = d * scales[e/16] * (q - 32). */
typedef struct {
    uint8_t ql[RT_QK_K / 2];
    uint8_t qh[RT_QK_K / 4];
    int8_t scales[RT_QK_K / 16];
    uint16_t d;
} rt_block_q6_K;

/* Activation format for K-quant dot products: bsums[g] = sum of qs[16g..16g+15]. */
typedef struct {
    float d;
    int8_t qs[RT_QK_K];
    int16_t bsums[RT_QK_K / 16];
} rt_block_q8_K;

_Static_assert(sizeof(rt_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(rt_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(rt_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(rt_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(rt_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(rt_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(rt_block_q8_K) == 292, "q8_K block");

/* Unpack scale and min j (< 8) of a Q4_K/Q5_K scales[12] array: bytes 0-3
 * hold scales 0-3 (low 6 bits), bytes 4-7 mins 0-3; scales/mins 4-7 keep
 * their low 4 bits in bytes 8-11 and their top 2 bits in the top bits of
 * bytes 0-3 / 4-7. */
static inline void rt_q4k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
