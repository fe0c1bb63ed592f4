#include "runtime/dtype.h"

#include <string.h>

/* Block sizes per the GGUF spec (QK_K = 256 super-blocks for K-quants). */
static const rt_dtype_traits g_traits[RT_DTYPE_COUNT] = {
    [RT_F32] = {"f32", 1, 4, false},
    [RT_F16] = {"f16", 1, 2, false},
    [RT_BF16] = {"bf16", 1, 2, false},
    [RT_I32] = {"i32", 1, 4, false},
    [RT_Q4_0] = {"q4_0", 32, 18, true},  /* f16 d + 16 B nibbles */
    [RT_Q4_1] = {"q4_1", 32, 20, true},  /* f16 d, f16 m + 16 B */
    [RT_Q8_0] = {"q8_0", 32, 34, true},  /* f16 d + 32 int8 */
    [RT_Q4_K] = {"q4_K", 256, 144, true}, /* f16 d, dmin, 12 B scales, 128 B qs */
    [RT_Q5_K] = {"q5_K", 256, 176, true}, /* + 32 B high bits */
    [RT_Q6_K] = {"q6_K", 256, 210, true}, /* 128 ql + 64 qh + 16 scales + f16 d */
    [RT_Q8_K] = {"q8_K", 256, 292, true}, /* f32 d + 256 int8 + 16 int16 bsums */
};

const rt_dtype_traits *rt_dtype_info(rt_dtype t) {
    if ((unsigned)t >= RT_DTYPE_COUNT) return NULL;
    return &g_traits[t];
}

const char *rt_dtype_name(rt_dtype t) {
    const rt_dtype_traits *tr = rt_dtype_info(t);
    return tr ? tr->name : "?";
}

size_t rt_dtype_row_bytes(rt_dtype t, int64_t n) {
    const rt_dtype_traits *tr = rt_dtype_info(t);
    if (!tr || n < 0 || n % tr->block_elems) return 0;
    uint64_t blocks = (uint64_t)n / (uint64_t)tr->block_elems;
    if (blocks > (UINT64_MAX / 2) / (uint64_t)tr->block_bytes) return 0;
    return (size_t)(blocks * (uint64_t)tr->block_bytes);
}

/* ggml_type values from the GGUF spec. */
enum { GG_F32 = 0, GG_F16 = 1, GG_Q4_0 = 2, GG_Q4_1 = 3, GG_Q8_0 = 8, GG_Q4_K = 12,
       GG_Q5_K = 13, GG_Q6_K = 14, GG_Q8_K = 15, GG_I32 = 26, GG_BF16 = 30 };

int rt_dtype_from_ggml(uint32_t g) {
    switch (g) {
    case GG_F32: return RT_F32;
    case GG_F16: return RT_F16;
    case GG_BF16: return RT_BF16;
    case GG_I32: return RT_I32;
    case GG_Q4_0: return RT_Q4_0;
    case GG_Q4_1: return RT_Q4_1;
    case GG_Q8_0: return RT_Q8_0;
    case GG_Q4_K: return RT_Q4_K;
    case GG_Q5_K: return RT_Q5_K;
    case GG_Q6_K: return RT_Q6_K;
    case GG_Q8_K: return RT_Q8_K;
    default: return -1;
    }
}

int rt_dtype_to_ggml(rt_dtype t) {
    switch (t) {
    case RT_F32: return GG_F32;
    case RT_F16: return GG_F16;
    case RT_BF16: return GG_BF16;
    case RT_I32: return GG_I32;
    case RT_Q4_0: return GG_Q4_0;
    case RT_Q4_1: return GG_Q4_1;
    case RT_Q8_0: return GG_Q8_0;
    case RT_Q4_K: return GG_Q4_K;
    case RT_Q5_K: return GG_Q5_K;
    case RT_Q6_K: return GG_Q6_K;
    case RT_Q8_K: return GG_Q8_K;
    default: return -1;
    }
}

float rt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            mant &= 0x3ff;
            bits = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t rt_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff);
    uint32_t mant = x & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    int32_t e = exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into exp: correct */
    return (uint16_t)half;
}

float rt_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t rt_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
