/* gguf.c — parse and validate a GGUF v2/v3 file (layout per the GGUF spec):
 *
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
 *   padding to `alignment` | data section (tensor offsets are relative to it)
 *
 * string = u64 length + bytes (no NUL); array = u32 elem type + u64 count + elements.
 * All integers are little-endian. Every count and length is bounded by the
 * bytes left in the file before anything is allocated, and all size
 * arithmetic is overflow-checked, so a hostile file can only produce an error.
 */
#include "model/gguf_internal.h"

#include "base/err.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_ARRAY_DEPTH 8 /* arrays of arrays nest at most this deep */

/* ---- ggml type table (block sizes per the GGUF spec / ggml) ------------ */

typedef struct {
    const char *name;
    int block_elems, block_bytes; /* 0 bytes: id exists but was removed from ggml */
} ggml_type_desc;

static const ggml_type_desc g_ggml_types[] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},        [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},     [4] = {"Q4_2", 0, 0},       [5] = {"Q4_3", 0, 0},
    [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},     [8] = {"Q8_0", 32, 34},
    [9] = {"Q8_1", 32, 40},     [10] = {"Q2_K", 256, 84},   [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},  [14] = {"Q6_K", 256, 210},
    [15] = {"Q8_K", 256, 292},  [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50}, [20] = {"IQ4_NL", 32, 18},
    [21] = {"IQ3_S", 256, 110}, [22] = {"IQ2_S", 256, 82},  [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},        [25] = {"I16", 1, 2},       [26] = {"I32", 1, 4},
    [27] = {"I64", 1, 8},       [28] = {"F64", 1, 8},       [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},      [31] = {"Q4_0_4_4", 0, 0},  [32] = {"Q4_0_4_8", 0, 0},
    [33] = {"Q4_0_8_8", 0, 0},  [34] = {"TQ1_0", 256, 54},  [35] = {"TQ2_0", 256, 66},
    [36] = {"IQ4_NL_4_4", 0, 0}, [37] = {"IQ4_NL_4_8", 0, 0}, [38] = {"IQ4_NL_8_8", 0, 0},
    [39] = {"MXFP4", 32, 17},
};
#define N_GGML_TYPES (sizeof g_ggml_types / sizeof g_ggml_types[0])

const char *gguf_ggml_type_name(uint32_t t) {
    return t < N_GGML_TYPES && g_ggml_types[t].name ? g_ggml_types[t].name : "?";
}

bool gguf_ggml_type_size(uint32_t t, int *block_elems, int *block_bytes) {
    if (t >= N_GGML_TYPES || g_ggml_types[t].block_bytes == 0) return false;
    if (block_elems) *block_elems = g_ggml_types[t].block_elems;
    if (block_bytes) *block_bytes = g_ggml_types[t].block_bytes;
    return true;
}

const char *gguf_type_name(gguf_type t) {
    static const char *names[GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "?";
}

size_t gguf_type_size(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- cursor ------------------------------------------------------------ */

typedef struct {
    const uint8_t *base;
    size_t size, pos;
    const char *name; /* file name for messages */
    char what[192];   /* current item: "key 'x'" / "tensor 'y'" / "header" */
} parser;

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int fail(const parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const parser *ps, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vc_err_set(VC_ERR_FORMAT, "%s: %s: %s", ps->name, ps->what, msg);
}

static void set_what(parser *ps, const char *kind, const char *p, size_t n) {
    /* Names go into messages; keep them short and printable. */
    char tmp[96];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof tmp - 4; i++)
        tmp[k++] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '?';
    if (k < n) { tmp[k++] = '.'; tmp[k++] = '.'; tmp[k++] = '.'; }
    tmp[k] = 0;
    snprintf(ps->what, sizeof ps->what, "%s '%s'", kind, tmp);
}

static size_t left(const parser *ps) { return ps->size - ps->pos; }

static int need(parser *ps, uint64_t n, const char *item) {
    if (n > left(ps))
        return fail(ps, "file truncated reading %s at offset %zu (need %llu bytes, %zu left)",
                    item, ps->pos, (unsigned long long)n, left(ps));
    return VC_OK;
}

static int rd_u32(parser *ps, uint32_t *v, const char *item) {
    if (need(ps, 4, item) < 0) return VC_ERR_FORMAT;
    *v = le32(ps->base + ps->pos);
    ps->pos += 4;
    return VC_OK;
}

static int rd_u64(parser *ps, uint64_t *v, const char *item) {
    if (need(ps, 8, item) < 0) return VC_ERR_FORMAT;
    *v = le64(ps->base + ps->pos);
    ps->pos += 8;
    return VC_OK;
}

/* String view into the file (length-checked). */
static int rd_str(parser *ps, gguf_str *s, const char *item) {
    uint64_t n;
    if (rd_u64(ps, &n, item) < 0) return VC_ERR_FORMAT;
    if (n > left(ps))
        return fail(ps, "%s length %llu at offset %zu exceeds the %zu bytes left in the file",
                    item, (unsigned long long)n, ps->pos - 8, left(ps));
    s->p = (const char *)ps->base + ps->pos;
    s->n = n;
    ps->pos += n;
    return VC_OK;
}

static char *dup_str(gguf_str s) {
    char *r = malloc(s.n + 1);
    if (!r) return NULL;
    memcpy(r, s.p, s.n);
    r[s.n] = 0;
    return r;
}

/* Skip (and validate) one value of type `t`, recursing into nested arrays. */
static int skip_value(parser *ps, uint32_t t, int depth);

static int skip_array(parser *ps, int depth, uint32_t *elem_out, uint64_t *n_out) {
    uint32_t et;
    uint64_t n;
    if (depth > GGUF_MAX_ARRAY_DEPTH) return fail(ps, "arrays nested deeper than %d", GGUF_MAX_ARRAY_DEPTH);
    if (rd_u32(ps, &et, "array element type") < 0 || rd_u64(ps, &n, "array length") < 0)
        return VC_ERR_FORMAT;
    if (et >= GGUF_TYPE_COUNT) return fail(ps, "array has invalid element type %u", et);
    /* Every element occupies at least `min` bytes: bounds n before any loop. */
    size_t min = et == GGUF_TYPE_STRING ? 8 : et == GGUF_TYPE_ARRAY ? 12 : gguf_type_size((gguf_type)et);
    if (n > left(ps) / min)
        return fail(ps, "array length %llu of %s at offset %zu exceeds the remaining file size %zu",
                    (unsigned long long)n, gguf_type_name((gguf_type)et), ps->pos - 8, left(ps));
    if (elem_out) *elem_out = et;
    if (n_out) *n_out = n;
    if (et != GGUF_TYPE_STRING && et != GGUF_TYPE_ARRAY) {
        ps->pos += n * min;
        return VC_OK;
    }
    for (uint64_t i = 0; i < n; i++)
        if (skip_value(ps, et, depth + 1) < 0) return VC_ERR_FORMAT;
    return VC_OK;
}

static int skip_value(parser *ps, uint32_t t, int depth) {
    if (t == GGUF_TYPE_STRING) {
        gguf_str s;
        return rd_str(ps, &s, "string");
    }
    if (t == GGUF_TYPE_ARRAY) return skip_array(ps, depth, NULL, NULL);
    size_t sz = gguf_type_size((gguf_type)t);
    if (sz == 0) return fail(ps, "invalid value type %u", t);
    if (need(ps, sz, gguf_type_name((gguf_type)t)) < 0) return VC_ERR_FORMAT;
    ps->pos += sz;
    return VC_OK;
}

/* ---- key/values --------------------------------------------------------- */

static int parse_kv(parser *ps, gguf_kv *kv) {
    gguf_str key;
    uint32_t t;
    if (rd_str(ps, &key, "key") < 0) return VC_ERR_FORMAT;
    set_what(ps, "key", key.p, key.n);
    if (memchr(key.p, 0, key.n)) return fail(ps, "key contains a NUL byte");
    if (!(kv->key = dup_str(key))) return vc_err_set(VC_ERR_OOM, "%s: out of memory", ps->name);
    if (rd_u32(ps, &t, "value type") < 0) return VC_ERR_FORMAT;
    if (t >= GGUF_TYPE_COUNT) return fail(ps, "invalid value type %u", t);
    kv->type = (gguf_type)t;
    if (t == GGUF_TYPE_STRING) {
        gguf_str s;
        if (rd_str(ps, &s, "string value") < 0) return VC_ERR_FORMAT;
        kv->val = (const uint8_t *)s.p;
        kv->n = s.n;
        if (!(kv->str = dup_str(s))) return vc_err_set(VC_ERR_OOM, "%s: out of memory", ps->name);
        return VC_OK;
    }
    if (t != GGUF_TYPE_ARRAY) {
        kv->val = ps->base + ps->pos;
        return skip_value(ps, t, 0);
    }
    size_t start = ps->pos + 12; /* after elem type + count */
    uint32_t et;
    if (skip_array(ps, 1, &et, &kv->n) < 0) return VC_ERR_FORMAT;
    kv->elem = (gguf_type)et;
    kv->val = ps->base + start;
    if (et == GGUF_TYPE_STRING) {
        /* Index the strings for O(1) access; n <= file size / 8 (checked). */
        kv->strs = malloc((kv->n ? kv->n : 1) * sizeof *kv->strs);
        if (!kv->strs) return vc_err_set(VC_ERR_OOM, "%s: out of memory", ps->name);
        parser sub = *ps;
        sub.pos = start;
        for (uint64_t i = 0; i < kv->n; i++)
            if (rd_str(&sub, &kv->strs[i], "string") < 0) return VC_ERR_FORMAT; /* validated above */
    }
    return VC_OK;
}

static int cmp_kv(const void *a, const void *b) {
    return strcmp((*(gguf_kv *const *)a)->key, (*(gguf_kv *const *)b)->key);
}
static int cmp_ti(const void *a, const void *b) {
    return strcmp((*(gguf_tensor_info *const *)a)->name, (*(gguf_tensor_info *const *)b)->name);
}
static int cmp_ti_offset(const void *a, const void *b) {
    uint64_t x = (*(gguf_tensor_info *const *)a)->offset, y = (*(gguf_tensor_info *const *)b)->offset;
    return x < y ? -1 : x > y;
}

/* ---- tensor infos ------------------------------------------------------- */

static int parse_tensor_info(parser *ps, gguf_tensor_info *ti) {
    gguf_str name;
    uint32_t nd, type;
    uint64_t ne[GGUF_MAX_DIMS];
    if (rd_str(ps, &name, "tensor name") < 0) return VC_ERR_FORMAT;
    set_what(ps, "tensor", name.p, name.n);
    if (memchr(name.p, 0, name.n)) return fail(ps, "name contains a NUL byte");
    if (!(ti->name = dup_str(name))) return vc_err_set(VC_ERR_OOM, "%s: out of memory", ps->name);
    if (rd_u32(ps, &nd, "n_dims") < 0) return VC_ERR_FORMAT;
    if (nd < 1 || nd > GGUF_MAX_DIMS) return fail(ps, "n_dims %u not in 1..%d", nd, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < nd; d++)
        if (rd_u64(ps, &ne[d], "dimension") < 0) return VC_ERR_FORMAT;
    if (rd_u32(ps, &type, "ggml type") < 0 || rd_u64(ps, &ti->offset, "data offset") < 0)
        return VC_ERR_FORMAT;
    int be, bb;
    if (!gguf_ggml_type_size(type, &be, &bb)) {
        if (type < N_GGML_TYPES)
            return fail(ps, "ggml type %u (%s) was removed from ggml and is not supported", type,
                        gguf_ggml_type_name(type));
        return fail(ps, "unknown ggml type id %u", type);
    }
    ti->ggml_type = type;
    ti->dtype = rt_dtype_from_ggml(type);
    ti->ndim = (int)nd;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        if (ne[d] > (uint64_t)INT64_MAX) return fail(ps, "dimension %u is negative", d);
        if (ne[d] && numel > (uint64_t)INT64_MAX / ne[d])
            return fail(ps, "element count overflows (dimension %u = %llu)", d, (unsigned long long)ne[d]);
        numel *= ne[d];
        ti->shape[nd - 1 - d] = (int64_t)ne[d]; /* row-major: outermost first */
    }
    for (int d = (int)nd; d < GGUF_MAX_DIMS; d++) ti->shape[d] = 1;
    if (ne[0] % (uint64_t)be)
        return fail(ps, "row length %llu is not a multiple of the %s block size %d",
                    (unsigned long long)ne[0], gguf_ggml_type_name(type), be);
    uint64_t blocks = numel / (uint64_t)be;
    if (blocks > SIZE_MAX / 2 / (uint64_t)bb) return fail(ps, "byte size overflows");
    ti->nbytes = (size_t)(blocks * (uint64_t)bb);
    if (ti->dtype >= 0 && ne[0]) {
        /* Cross-check with the runtime's own dtype table. */
        size_t rb = rt_dtype_row_bytes((rt_dtype)ti->dtype, (int64_t)ne[0]);
        if (rb == 0 || rb * (numel / ne[0]) != ti->nbytes)
            return fail(ps, "size of %s row disagrees with the runtime dtype table", gguf_ggml_type_name(type));
    }
    return VC_OK;
}

static int check_tensors(gguf_ctx *g, parser *ps) {
    uint64_t avail = g->data_start <= g->size ? g->size - g->data_start : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor_info *ti = &g->ti[i];
        set_what(ps, "tensor", ti->name, strlen(ti->name));
        if (ti->offset % g->alignment)
            return fail(ps, "data offset %llu is not a multiple of the alignment %zu",
                        (unsigned long long)ti->offset, g->alignment);
        if (g->data_start > g->size)
            return fail(ps, "data section starts at %llu, past end of file (size %zu)",
                        (unsigned long long)g->data_start, g->size);
        if (ti->offset > avail)
            return fail(ps, "data offset %llu past end of file (size %zu, data section at %llu)",
                        (unsigned long long)ti->offset, g->size, (unsigned long long)g->data_start);
        if (ti->nbytes > avail - ti->offset)
            return fail(ps, "data [%llu, +%zu) extends past end of file (size %zu, data section at %llu)",
                        (unsigned long long)ti->offset, ti->nbytes, g->size,
                        (unsigned long long)g->data_start);
        ti->data = g->base + g->data_start + ti->offset;
    }
    /* Overlap: sort by offset and compare neighbours. */
    gguf_tensor_info **by_off = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *by_off);
    if (!by_off) return vc_err_set(VC_ERR_OOM, "%s: out of memory", g->name);
    for (int64_t i = 0; i < g->n_tensors; i++) by_off[i] = &g->ti[i];
    qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, cmp_ti_offset);
    const gguf_tensor_info *prev = NULL; /* non-empty tensor ending last so far */
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor_info *b = by_off[i];
        if (!b->nbytes) continue;
        if (prev && prev->offset + prev->nbytes > b->offset) {
            set_what(ps, "tensor", b->name, strlen(b->name));
            int st = fail(ps, "data [%llu, +%zu) overlaps tensor '%.64s' [%llu, +%zu)",
                          (unsigned long long)b->offset, b->nbytes, prev->name,
                          (unsigned long long)prev->offset, prev->nbytes);
            free(by_off);
            return st;
        }
        if (!prev || b->offset + b->nbytes > prev->offset + prev->nbytes) prev = b;
    }
    free(by_off);
    return VC_OK;
}

/* ---- open --------------------------------------------------------------- */

static int parse(gguf_ctx *g) {
    parser ps = {.base = g->base, .size = g->size, .pos = 0, .name = g->name};
    snprintf(ps.what, sizeof ps.what, "header");
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (g->size < 4 || le32(g->base) != GGUF_MAGIC) {
        if (g->size < 4) return fail(&ps, "file too small (%zu bytes) to be GGUF", g->size);
        return fail(&ps, "bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file",
                    g->base[0], g->base[1], g->base[2], g->base[3]);
    }
    ps.pos = 4;
    if (rd_u32(&ps, &version, "version") < 0) return VC_ERR_FORMAT;
    if (version == 1) return fail(&ps, "GGUF v1 is not supported (re-convert the model with a current llama.cpp)");
    if (version != 2 && version != 3) {
        if ((version & 0xffff) == 0 && (version >> 24 == 2 || version >> 24 == 3))
            return fail(&ps, "big-endian GGUF is not supported");
        return fail(&ps, "unsupported GGUF version %u (expected 2 or 3)", version);
    }
    g->version = version;
    if (rd_u64(&ps, &n_tensors, "tensor count") < 0 || rd_u64(&ps, &n_kv, "metadata count") < 0)
        return VC_ERR_FORMAT;
    /* Smallest key/value: 8 (key length) + 4 (type) + 1 (u8) bytes; smallest
     * tensor info: 8 (name length) + 4 + 8 (one dim) + 4 + 8 bytes. */
    if (n_kv > left(&ps) / 13)
        return fail(&ps, "metadata count %llu is impossible for a file of %zu bytes",
                    (unsigned long long)n_kv, g->size);
    if (n_tensors > left(&ps) / 32)
        return fail(&ps, "tensor count %llu is impossible for a file of %zu bytes",
                    (unsigned long long)n_tensors, g->size);
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->kv_sorted = malloc((n_kv ? n_kv : 1) * sizeof *g->kv_sorted);
    g->ti = calloc(n_tensors ? n_tensors : 1, sizeof *g->ti);
    g->ti_sorted = malloc((n_tensors ? n_tensors : 1) * sizeof *g->ti_sorted);
    if (!g->kv || !g->kv_sorted || !g->ti || !g->ti_sorted)
        return vc_err_set(VC_ERR_OOM, "%s: out of memory", g->name);

    for (uint64_t i = 0; i < n_kv; i++) {
        snprintf(ps.what, sizeof ps.what, "metadata entry %llu", (unsigned long long)i);
        if (parse_kv(&ps, &g->kv[i]) < 0) return vc_err_status();
        g->kv_sorted[i] = &g->kv[i];
    }
    qsort(g->kv_sorted, n_kv, sizeof *g->kv_sorted, cmp_kv);
    for (uint64_t i = 1; i < n_kv; i++)
        if (!strcmp(g->kv_sorted[i - 1]->key, g->kv_sorted[i]->key)) {
            set_what(&ps, "key", g->kv_sorted[i]->key, strlen(g->kv_sorted[i]->key));
            return fail(&ps, "duplicate key");
        }

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (gguf_find_key(g, "general.alignment") >= 0) {
        uint32_t a;
        snprintf(ps.what, sizeof ps.what, "key 'general.alignment'");
        if (!gguf_get_u32(g, "general.alignment", &a)) return fail(&ps, "must be an unsigned 32-bit integer");
        if (a == 0 || (a & (a - 1))) return fail(&ps, "alignment %u is not a power of two", a);
        g->alignment = a;
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        snprintf(ps.what, sizeof ps.what, "tensor info %llu", (unsigned long long)i);
        if (parse_tensor_info(&ps, &g->ti[i]) < 0) return vc_err_status();
        g->ti_sorted[i] = &g->ti[i];
    }
    qsort(g->ti_sorted, n_tensors, sizeof *g->ti_sorted, cmp_ti);
    for (uint64_t i = 1; i < n_tensors; i++)
        if (!strcmp(g->ti_sorted[i - 1]->name, g->ti_sorted[i]->name)) {
            set_what(&ps, "tensor", g->ti_sorted[i]->name, strlen(g->ti_sorted[i]->name));
            return fail(&ps, "duplicate tensor name");
        }

    /* Data section: header end rounded up to the alignment. A file with no
     * tensors may end right after the header (vocab-only GGUFs do). */
    uint64_t pad = (g->alignment - ps.pos % g->alignment) % g->alignment;
    g->data_start = (uint64_t)ps.pos + pad; /* pos <= size, alignment <= 2^31: no overflow */
    return check_tensors(g, &ps);
}

static gguf_ctx *ctx_new(const char *name) {
    gguf_ctx *g = calloc(1, sizeof *g);
    if (!g) { vc_err_set(VC_ERR_OOM, "out of memory"); return NULL; }
    g->name = strdup(name ? name : "<memory>");
    if (!g->name) { free(g); vc_err_set(VC_ERR_OOM, "out of memory"); return NULL; }
    return g;
}

gguf_ctx *gguf_open_memory(const void *data, size_t size, const char *name_for_errors) {
    gguf_ctx *g = ctx_new(name_for_errors);
    if (!g) return NULL;
    g->base = data;
    g->size = data ? size : 0;
    if (parse(g) < 0) {
        gguf_close(g);
        return NULL;
    }
    return g;
}

gguf_ctx *gguf_open(const char *path) {
    gguf_ctx *g = ctx_new(path);
    if (!g) return NULL;
    if (vc_mapfile_open(&g->map, path) < 0) {
        gguf_close(g);
        return NULL;
    }
    g->base = g->map.data;
    g->size = g->map.size;
    if (parse(g) < 0) {
        gguf_close(g);
        return NULL;
    }
    return g;
}

void gguf_close(gguf_ctx *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].str);
            free(g->kv[i].strs);
        }
    if (g->ti)
        for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->ti[i].name);
    free(g->kv);
    free(g->kv_sorted);
    free(g->ti);
    free(g->ti_sorted);
    vc_mapfile_close(&g->map);
    free(g->name);
    free(g);
}

/* ---- tensors and file-level getters ------------------------------------- */

uint32_t gguf_version(const gguf_ctx *g) { return g->version; }
const char *gguf_path(const gguf_ctx *g) { return g->name; }
size_t gguf_alignment(const gguf_ctx *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf_ctx *g) { return g->data_start; }
int64_t gguf_n_tensors(const gguf_ctx *g) { return g->n_tensors; }

const gguf_tensor_info *gguf_tensor(const gguf_ctx *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->ti[i] : NULL;
}

static int cmp_name_ti(const void *key, const void *elt) {
    return strcmp((const char *)key, (*(gguf_tensor_info *const *)elt)->name);
}

const gguf_tensor_info *gguf_find_tensor(const gguf_ctx *g, const char *name) {
    if (!name || g->n_tensors == 0) return NULL;
    gguf_tensor_info **r = bsearch(name, g->ti_sorted, (size_t)g->n_tensors, sizeof *g->ti_sorted, cmp_name_ti);
    return r ? *r : NULL;
}
