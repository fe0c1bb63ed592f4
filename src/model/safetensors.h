/* safetensors — reader for Hugging Face .safetensors checkpoints.
 *
 * A file is: u64 (LE) header length N | N bytes of JSON | data section.
 * The JSON object maps tensor name -> {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets relative to the data section), plus an optional
 * "__metadata__" object of string -> string. Files are mmapped; every
 * entry is validated at open time (known dtype, offsets inside the data
 * section, size == product(shape) * element size, no overlaps), so the
 * returned pointers can be used without further checks.
 *
 *   st_model *m = st_open_dir("/models/Qwen3-0.6B");   // NULL -> vc_err_msg()
 *   const st_tensor *t = st_find(m, "model.embed_tokens.weight");
 *   ... t->data, t->shape, t->dtype ...
 *   st_close(m);
 *
 * A model can span several shard files (model-00001-of-00004.safetensors
 * ...); st_open_dir merges them into one name -> tensor table.
 * Data pointers are NOT necessarily aligned (the header length is
 * arbitrary): read with memcpy or copy into aligned buffers.
 */
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include "runtime/dtype.h"

#include <stddef.h>
#include <stdint.h>

/* 5-D tensors occur in real checkpoints (vision conv3d patch embeddings). */
#define ST_MAX_DIMS 8

typedef struct {
    const char *name;           /* NUL-terminated */
    int dtype;                  /* rt_dtype, or -1 if we cannot compute with it */
    const char *dtype_str;      /* as in the file: "BF16", "F8_E4M3", ... */
    int elem_bits;              /* bits per element (4 for F4, 8 for I8, ...) */
    int ndim;                   /* 0 (scalar) .. ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS]; /* row-major, outermost first; unused dims = 1 */
    int64_t numel;
    const void *data;           /* inside the mapping; possibly unaligned */
    size_t nbytes;
    int shard;                  /* index of the file it lives in */
} st_tensor;

typedef struct st_model st_model;

/* One .safetensors file. */
st_model *st_open(const char *path);
/* A checkpoint directory: model.safetensors.index.json ("weight_map":
 * tensor -> shard file) when present, else model.safetensors, else every
 * *.safetensors file in the directory (sorted by name). */
st_model *st_open_dir(const char *dir);
/* One file image held by the caller (fuzzer, tests). */
st_model *st_open_memory(const void *data, size_t size, const char *name_for_errors);
void st_close(st_model *m);

int64_t st_n_tensors(const st_model *m);
/* Tensors sorted by name. */
const st_tensor *st_tensor_at(const st_model *m, int64_t i);
const st_tensor *st_find(const st_model *m, const char *name);

int st_n_shards(const st_model *m);
const char *st_shard_path(const st_model *m, int shard);
/* "__metadata__" string values (of the first shard that has the key); NULL if absent. */
const char *st_metadata(const st_model *m, const char *key);

/* Bits per element of a safetensors dtype string ("BF16" -> 16); 0 if unknown. */
int st_dtype_bits(const char *dtype_str);

#endif
