/* gguf_writer — build a GGUF v3 file: metadata of every type and tensors.
 *
 *   gguf_writer *w = gguf_w_create(0);                 // 0 -> alignment 32
 *   gguf_w_set_str(w, "general.architecture", "llama");
 *   gguf_w_set_u32(w, "llama.block_count", 2);
 *   gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", toks, n);
 *   int64_t shape[2] = {out, in};                       // row-major
 *   gguf_w_add_tensor(w, "blk.0.attn_q.weight", RT_F32, 2, shape, data, nbytes);
 *   if (gguf_w_write_file(w, "out.gguf") < 0) -> vc_err_msg()
 *   gguf_w_free(w);
 *
 * Keys keep insertion order; setting an existing key replaces its value.
 * Tensor data is NOT copied: it must stay valid until the write call.
 * Shapes are given in our row-major order and stored reversed (ggml ne[]).
 * Used by tests, tools/llama2c_convert and the quantizer.
 */
#ifndef GGUF_WRITER_H
#define GGUF_WRITER_H

#include "model/gguf.h"
#include "runtime/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gguf_writer gguf_writer;

/* alignment: power of two, 0 -> 32 (also written as general.alignment when != 32). */
gguf_writer *gguf_w_create(size_t alignment);
void gguf_w_free(gguf_writer *w);

/* Scalars. All return VC_OK or a negative vc_status (message via vc_err_msg). */
int gguf_w_set_u8(gguf_writer *w, const char *key, uint8_t v);
int gguf_w_set_i8(gguf_writer *w, const char *key, int8_t v);
int gguf_w_set_u16(gguf_writer *w, const char *key, uint16_t v);
int gguf_w_set_i16(gguf_writer *w, const char *key, int16_t v);
int gguf_w_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_w_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_w_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_w_set_i64(gguf_writer *w, const char *key, int64_t v);
int gguf_w_set_f32(gguf_writer *w, const char *key, float v);
int gguf_w_set_f64(gguf_writer *w, const char *key, double v);
int gguf_w_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_w_set_str(gguf_writer *w, const char *key, const char *s);
int gguf_w_set_strn(gguf_writer *w, const char *key, const char *s, size_t n);

/* Arrays. Numeric: `elems` holds n host (little-endian) values of elem_type
 * (bool = 1 byte each). Strings: NUL-terminated, or views with lengths. */
int gguf_w_set_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *elems, uint64_t n);
int gguf_w_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
int gguf_w_set_arr_strn(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n);
/* Any value given as its serialized bytes (the part after the type field),
 * e.g. arrays of arrays. The bytes are not checked. */
int gguf_w_set_raw(gguf_writer *w, const char *key, gguf_type type, const void *payload, size_t n);

/* Tensors: names unique; shape row-major (outermost first), 1..4 dims;
 * nbytes must equal the size implied by shape and type. */
int gguf_w_add_tensor(gguf_writer *w, const char *name, rt_dtype dtype, int ndim, const int64_t *shape,
                      const void *data, size_t nbytes);
/* Same with a raw ggml type id (types we cannot compute with, e.g. Q5_0). */
int gguf_w_add_tensor_ggml(gguf_writer *w, const char *name, uint32_t ggml_type, int ndim,
                           const int64_t *shape, const void *data, size_t nbytes);

/* Write the file (via a temporary file renamed into place). */
int gguf_w_write_file(gguf_writer *w, const char *path);
/* Or into a malloc'd buffer (caller frees). */
int gguf_w_write_memory(gguf_writer *w, void **out, size_t *size);

#endif
