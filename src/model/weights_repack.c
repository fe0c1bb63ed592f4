/* weights_repack — GGUF block types we store but do not compute with,
 * rewritten at load into one we do, without changing a single value.
 *
 * Q5_0 (ggml type 6, 22 B per 32 values): {f16 d; u8 qh[4]; u8 qs[16]},
 *   q[i]    = (qs[i] & 15)  | ((qh32 >> i) & 1) << 4        (i < 16)
 *   q[i+16] = (qs[i] >> 4)  | ((qh32 >> (i + 12)) & 16)
 *   x = d * (q - 16), q in [0, 31], qh32 the little-endian u32 of qh.
 * Q8_0 holds x = d * q8 with q8 in [-128, 127], so q8 = q - 16 with the same
 * d is exact. llama.cpp's Q4_K_M mixes use Q5_0 for tensors whose rows are
 * not a multiple of 256 (Gemma 3 270M: hidden 640). The cost is memory:
 * 34 B instead of 22 B per block for those tensors.
 */
#include "model/weights.h"

#include "runtime/quant_blocks.h"

#include <string.h>

#define Q5_0_BYTES 22

bool mdl_repack_supported(uint32_t ggml_type) { return ggml_type == MDL_GGML_Q5_0; }

void mdl_repack_q5_0_to_q8_0(const void *src, void *dst, int64_t n_blocks) {
    const uint8_t *s = src;
    rt_block_q8_0 *d = dst;
    for (int64_t b = 0; b < n_blocks; b++, s += Q5_0_BYTES) {
        uint32_t qh = (uint32_t)s[2] | (uint32_t)s[3] << 8 | (uint32_t)s[4] << 16 | (uint32_t)s[5] << 24;
        const uint8_t *qs = s + 6;
        memcpy(&d[b].d, s, sizeof d[b].d);
        for (int i = 0; i < RT_QK / 2; i++) {
            int lo = (qs[i] & 15) | (int)((qh >> i) & 1) << 4;
            int hi = (qs[i] >> 4) | (int)((qh >> (i + 12)) & 16);
            d[b].qs[i] = (int8_t)(lo - 16);
            d[b].qs[i + RT_QK / 2] = (int8_t)(hi - 16);
        }
    }
}
