/* gguf — reader for GGUF v2/v3 files (llama.cpp's model format).
 *
 * The file is mmapped; the header, every metadata key/value and every
 * tensor info are parsed and validated up front (bounds, alignment, type
 * ids, sizes, overflow), so later getters never touch unchecked bytes.
 *
 *   gguf_ctx *g = gguf_open("model.gguf");       // NULL -> vc_err_msg()
 *   uint32_t n; if (gguf_get_u32(g, "llama.block_count", &n)) ...
 *   const gguf_tensor_info *t = gguf_find_tensor(g, "token_embd.weight");
 *   gguf_close(g);
 *
 * Tensor shapes are reported in OUR row-major order (outermost first), i.e.
 * reversed from ggml's ne[] order: ggml ne = {in, out} -> shape {out, in}.
 */
#ifndef GGUF_H
#define GGUF_H

#include "runtime/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

/* A string inside the mapped file: NOT NUL-terminated. */
typedef struct {
    const char *p;
    uint64_t n;
} gguf_str;

typedef struct {
    const char *name;     /* NUL-terminated copy */
    int ndim;             /* 1..4 */
    int64_t shape[4];     /* row-major, outermost first (reversed ggml ne) */
    uint32_t ggml_type;   /* raw type id from the file */
    int dtype;            /* rt_dtype, or -1 if we cannot compute with it */
    uint64_t offset;      /* relative to the data section */
    const void *data;     /* inside the mapping */
    size_t nbytes;
} gguf_tensor_info;

typedef struct gguf_ctx gguf_ctx;

gguf_ctx *gguf_open(const char *path);
/* Parse a buffer the caller keeps alive (used by the fuzzer and tests). */
gguf_ctx *gguf_open_memory(const void *data, size_t size, const char *name_for_errors);
void gguf_close(gguf_ctx *g);

uint32_t gguf_version(const gguf_ctx *g);
const char *gguf_path(const gguf_ctx *g);
size_t gguf_alignment(const gguf_ctx *g);

/* Metadata. Index-based access for walking; key-based for lookups. */
int64_t gguf_n_kv(const gguf_ctx *g);
const char *gguf_kv_key(const gguf_ctx *g, int64_t i);
gguf_type gguf_kv_type(const gguf_ctx *g, int64_t i);
int64_t gguf_find_key(const gguf_ctx *g, const char *key); /* -1 if absent */

/* Typed getters: false when the key is absent or its type does not fit.
 * Integer getters accept any integer (and bool) type whose value fits;
 * gguf_get_f32 accepts FLOAT32 and FLOAT64 (and integers). */
bool gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_ctx *g, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_ctx *g, const char *key, float *out);
bool gguf_get_bool(const gguf_ctx *g, const char *key, bool *out);
/* Scalar STRING value as a NUL-terminated string owned by g (NULL if absent
 * or not a string). Embedded NULs truncate. */
const char *gguf_get_string(const gguf_ctx *g, const char *key);

/* ARRAY values. gguf_get_arr_info: element type and count. */
bool gguf_get_arr_info(const gguf_ctx *g, const char *key, gguf_type *elem_type, uint64_t *n);
/* Element i of an array of STRING. */
gguf_str gguf_get_arr_str(const gguf_ctx *g, const char *key, uint64_t i);
/* Element i of a numeric array converted (false if out of range / wrong type). */
bool gguf_get_arr_i64(const gguf_ctx *g, const char *key, uint64_t i, int64_t *out);
bool gguf_get_arr_f32(const gguf_ctx *g, const char *key, uint64_t i, float *out);
/* Raw little-endian elements of a numeric (non-string, non-array) array,
 * inside the mapping and possibly unaligned (read with memcpy); NULL if
 * absent or not numeric. */
const void *gguf_get_arr_data(const gguf_ctx *g, const char *key, gguf_type *elem_type, uint64_t *n);
/* Scalar STRING value as a view into the file (keeps embedded NULs);
 * {NULL, 0} if absent or not a string. */
gguf_str gguf_get_str(const gguf_ctx *g, const char *key);

/* Tensors. */
int64_t gguf_n_tensors(const gguf_ctx *g);
const gguf_tensor_info *gguf_tensor(const gguf_ctx *g, int64_t i);
const gguf_tensor_info *gguf_find_tensor(const gguf_ctx *g, const char *name);
/* File offset of the data section (tensor offsets are relative to it). */
uint64_t gguf_data_offset(const gguf_ctx *g);

/* Names: "u32", "string", ... and ggml type names "F16", "Q4_K", ... ("?"
 * if unknown). gguf_ggml_type_size: block geometry of any ggml type still
 * in ggml (also those we cannot compute with); false if unknown/removed. */
const char *gguf_type_name(gguf_type t);
/* Byte size of a scalar value type (bool: 1); 0 for STRING/ARRAY/invalid. */
size_t gguf_type_size(gguf_type t);
const char *gguf_ggml_type_name(uint32_t ggml_type);
bool gguf_ggml_type_size(uint32_t ggml_type, int *block_elems, int *block_bytes);

#endif
