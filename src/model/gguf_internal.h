/* gguf_internal — private state of the GGUF reader shared by gguf.c (parse
 * and validation) and gguf_meta.c (metadata getters). Not for other modules.
 */
#ifndef GGUF_INTERNAL_H
#define GGUF_INTERNAL_H

#include "base/mapfile.h"
#include "model/gguf.h"

/* One metadata key/value. Value bytes stay in the mapping; only scalar
 * strings are copied (NUL-terminated) and string arrays get an index. */
typedef struct {
    char *key;           /* NUL-terminated copy */
    gguf_type type;
    gguf_type elem;      /* element type when type == ARRAY */
    uint64_t n;          /* element count when type == ARRAY */
    const uint8_t *val;  /* scalar value / first array element, in the file */
    char *str;           /* scalar STRING: NUL-terminated copy */
    gguf_str *strs;      /* ARRAY of STRING: [n] views into the file */
} gguf_kv;

struct gguf_ctx {
    char *name;                  /* path or name_for_errors */
    vc_mapfile map;              /* only for gguf_open */
    const uint8_t *base;
    size_t size;
    uint32_t version;
    size_t alignment;
    uint64_t data_start;         /* file offset of the (aligned) data section */
    int64_t n_kv;
    gguf_kv *kv;                 /* [n_kv] in file order */
    gguf_kv **kv_sorted;         /* [n_kv] by key, for bsearch */
    int64_t n_tensors;
    gguf_tensor_info *ti;        /* [n_tensors] in file order */
    gguf_tensor_info **ti_sorted; /* [n_tensors] by name */
};

const gguf_kv *gguf_kv_lookup(const gguf_ctx *g, const char *key);

#endif
