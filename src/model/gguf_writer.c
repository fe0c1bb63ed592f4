/* gguf_writer.c — serialize metadata and tensor infos into one header
 * buffer, then stream header | padding | tensor data (each padded to the
 * alignment) to a file or memory. Layout as read by gguf.c. */
#include "model/gguf_writer.h"

#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} wbuf;

typedef struct {
    char *key;
    gguf_type type;
    wbuf val; /* serialized value */
} w_kv;

typedef struct {
    char *name;
    uint32_t ggml_type;
    int ndim;
    uint64_t ne[4]; /* ggml order */
    const void *data;
    size_t nbytes;
    uint64_t offset;
} w_tensor;

struct gguf_writer {
    size_t alignment;
    w_kv *kv;
    size_t n_kv, cap_kv;
    w_tensor *t;
    size_t n_t, cap_t;
};

static void wb_put(wbuf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) { b->oom = true; return; }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void wb_le(wbuf *b, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    wb_put(b, t, (size_t)bytes);
}

static void wb_str(wbuf *b, const char *s, size_t n) {
    wb_le(b, n, 8);
    wb_put(b, s, n);
}

gguf_writer *gguf_w_create(size_t alignment) {
    if (alignment == 0) alignment = 32;
    if (alignment & (alignment - 1) || alignment > (1u << 30)) {
        vc_err_set(VC_ERR_INVALID, "gguf writer: alignment %zu is not a power of two", alignment);
        return NULL;
    }
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) { vc_err_set(VC_ERR_OOM, "gguf writer: out of memory"); return NULL; }
    w->alignment = alignment;
    if (alignment != 32 && gguf_w_set_u32(w, "general.alignment", (uint32_t)alignment) < 0) {
        gguf_w_free(w);
        return NULL;
    }
    return w;
}

void gguf_w_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Slot for `key`: the existing one (value cleared) or a new one. */
static w_kv *kv_slot(gguf_writer *w, const char *key, gguf_type type) {
    if (!key) { vc_err_set(VC_ERR_INVALID, "gguf writer: NULL key"); return NULL; }
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            w->kv[i].val.n = 0;
            w->kv[i].val.oom = false;
            w->kv[i].type = type;
            return &w->kv[i];
        }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        w_kv *nk = realloc(w->kv, cap * sizeof *nk);
        if (!nk) { vc_err_set(VC_ERR_OOM, "gguf writer: out of memory"); return NULL; }
        w->kv = nk;
        w->cap_kv = cap;
    }
    w_kv *kv = &w->kv[w->n_kv];
    memset(kv, 0, sizeof *kv);
    if (!(kv->key = strdup(key))) { vc_err_set(VC_ERR_OOM, "gguf writer: out of memory"); return NULL; }
    kv->type = type;
    w->n_kv++;
    return kv;
}

static int kv_done(w_kv *kv) {
    if (kv->val.oom) return vc_err_set(VC_ERR_OOM, "gguf writer: out of memory for key '%s'", kv->key);
    return VC_OK;
}

static int set_scalar(gguf_writer *w, const char *key, gguf_type t, uint64_t bits) {
    w_kv *kv = kv_slot(w, key, t);
    if (!kv) return vc_err_status();
    wb_le(&kv->val, bits, (int)gguf_type_size(t));
    return kv_done(kv);
}

int gguf_w_set_u8(gguf_writer *w, const char *k, uint8_t v) { return set_scalar(w, k, GGUF_TYPE_UINT8, v); }
int gguf_w_set_i8(gguf_writer *w, const char *k, int8_t v) { return set_scalar(w, k, GGUF_TYPE_INT8, (uint8_t)v); }
int gguf_w_set_u16(gguf_writer *w, const char *k, uint16_t v) { return set_scalar(w, k, GGUF_TYPE_UINT16, v); }
int gguf_w_set_i16(gguf_writer *w, const char *k, int16_t v) { return set_scalar(w, k, GGUF_TYPE_INT16, (uint16_t)v); }
int gguf_w_set_u32(gguf_writer *w, const char *k, uint32_t v) { return set_scalar(w, k, GGUF_TYPE_UINT32, v); }
int gguf_w_set_i32(gguf_writer *w, const char *k, int32_t v) { return set_scalar(w, k, GGUF_TYPE_INT32, (uint32_t)v); }
int gguf_w_set_u64(gguf_writer *w, const char *k, uint64_t v) { return set_scalar(w, k, GGUF_TYPE_UINT64, v); }
int gguf_w_set_i64(gguf_writer *w, const char *k, int64_t v) { return set_scalar(w, k, GGUF_TYPE_INT64, (uint64_t)v); }
int gguf_w_set_bool(gguf_writer *w, const char *k, bool v) { return set_scalar(w, k, GGUF_TYPE_BOOL, v ? 1 : 0); }

int gguf_w_set_f32(gguf_writer *w, const char *k, float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return set_scalar(w, k, GGUF_TYPE_FLOAT32, b);
}

int gguf_w_set_f64(gguf_writer *w, const char *k, double v) {
    uint64_t b;
    memcpy(&b, &v, 8);
    return set_scalar(w, k, GGUF_TYPE_FLOAT64, b);
}

int gguf_w_set_strn(gguf_writer *w, const char *key, const char *s, size_t n) {
    w_kv *kv = kv_slot(w, key, GGUF_TYPE_STRING);
    if (!kv) return vc_err_status();
    wb_str(&kv->val, s, n);
    return kv_done(kv);
}

int gguf_w_set_str(gguf_writer *w, const char *key, const char *s) {
    if (!s) return vc_err_set(VC_ERR_INVALID, "gguf writer: NULL string for key '%s'", key ? key : "?");
    return gguf_w_set_strn(w, key, s, strlen(s));
}

int gguf_w_set_arr(gguf_writer *w, const char *key, gguf_type et, const void *elems, uint64_t n) {
    size_t sz = gguf_type_size(et);
    if (!sz) return vc_err_set(VC_ERR_INVALID, "gguf writer: key '%s': %s is not a numeric element type",
                               key ? key : "?", gguf_type_name(et));
    if (n > SIZE_MAX / sz) return vc_err_set(VC_ERR_INVALID, "gguf writer: key '%s': array too long", key ? key : "?");
    w_kv *kv = kv_slot(w, key, GGUF_TYPE_ARRAY);
    if (!kv) return vc_err_status();
    wb_le(&kv->val, (uint64_t)et, 4);
    wb_le(&kv->val, n, 8);
    const uint8_t *p = elems;
    for (uint64_t i = 0; i < n; i++) { /* host is little-endian (as the format); bools -> 0/1 */
        uint64_t v = 0;
        memcpy(&v, p + i * sz, sz);
        if (et == GGUF_TYPE_BOOL) v = (uint8_t)v != 0;
        wb_le(&kv->val, v, (int)sz);
    }
    return kv_done(kv);
}

int gguf_w_set_arr_strn(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n) {
    w_kv *kv = kv_slot(w, key, GGUF_TYPE_ARRAY);
    if (!kv) return vc_err_status();
    wb_le(&kv->val, GGUF_TYPE_STRING, 4);
    wb_le(&kv->val, n, 8);
    for (uint64_t i = 0; i < n; i++) wb_str(&kv->val, strs[i].p, strs[i].n);
    return kv_done(kv);
}

int gguf_w_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    w_kv *kv = kv_slot(w, key, GGUF_TYPE_ARRAY);
    if (!kv) return vc_err_status();
    wb_le(&kv->val, GGUF_TYPE_STRING, 4);
    wb_le(&kv->val, n, 8);
    for (uint64_t i = 0; i < n; i++) wb_str(&kv->val, strs[i], strlen(strs[i]));
    return kv_done(kv);
}

int gguf_w_set_raw(gguf_writer *w, const char *key, gguf_type type, const void *payload, size_t n) {
    if ((unsigned)type >= GGUF_TYPE_COUNT)
        return vc_err_set(VC_ERR_INVALID, "gguf writer: invalid value type %d", (int)type);
    w_kv *kv = kv_slot(w, key, type);
    if (!kv) return vc_err_status();
    wb_put(&kv->val, payload, n);
    return kv_done(kv);
}

int gguf_w_add_tensor_ggml(gguf_writer *w, const char *name, uint32_t ggml_type, int ndim,
                           const int64_t *shape, const void *data, size_t nbytes) {
    int be, bb;
    if (!name) return vc_err_set(VC_ERR_INVALID, "gguf writer: NULL tensor name");
    if (!gguf_ggml_type_size(ggml_type, &be, &bb))
        return vc_err_set(VC_ERR_INVALID, "gguf writer: tensor '%s': unknown ggml type %u", name, ggml_type);
    if (ndim < 1 || ndim > 4)
        return vc_err_set(VC_ERR_INVALID, "gguf writer: tensor '%s': %d dimensions (1..4)", name, ndim);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return vc_err_set(VC_ERR_INVALID, "gguf writer: duplicate tensor '%s'", name);
    w_tensor t = {.ggml_type = ggml_type, .ndim = ndim, .data = data, .nbytes = nbytes};
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        int64_t s = shape[ndim - 1 - d];
        if (s < 0 || (s && numel > (uint64_t)INT64_MAX / (uint64_t)s))
            return vc_err_set(VC_ERR_INVALID, "gguf writer: tensor '%s': bad shape", name);
        t.ne[d] = (uint64_t)s;
        numel *= (uint64_t)s;
    }
    if (t.ne[0] % (uint64_t)be)
        return vc_err_set(VC_ERR_INVALID, "gguf writer: tensor '%s': row length %llu not a multiple of %d",
                          name, (unsigned long long)t.ne[0], be);
    if (numel / (uint64_t)be * (uint64_t)bb != nbytes)
        return vc_err_set(VC_ERR_INVALID, "gguf writer: tensor '%s': %zu bytes given, shape needs %llu", name,
                          nbytes, (unsigned long long)(numel / (uint64_t)be * (uint64_t)bb));
    if (nbytes && !data) return vc_err_set(VC_ERR_INVALID, "gguf writer: tensor '%s': NULL data", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 32;
        w_tensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return vc_err_set(VC_ERR_OOM, "gguf writer: out of memory");
        w->t = nt;
        w->cap_t = cap;
    }
    if (!(t.name = strdup(name))) return vc_err_set(VC_ERR_OOM, "gguf writer: out of memory");
    w->t[w->n_t++] = t;
    return VC_OK;
}

int gguf_w_add_tensor(gguf_writer *w, const char *name, rt_dtype dtype, int ndim, const int64_t *shape,
                      const void *data, size_t nbytes) {
    int gt = rt_dtype_to_ggml(dtype);
    if (gt < 0) return vc_err_set(VC_ERR_INVALID, "gguf writer: tensor '%s': dtype has no ggml type", name ? name : "?");
    return gguf_w_add_tensor_ggml(w, name, (uint32_t)gt, ndim, shape, data, nbytes);
}

/* Header: everything before the data section, unpadded. Assigns offsets. */
static int build_header(gguf_writer *w, wbuf *h, uint64_t *data_size) {
    wb_le(h, 0x46554747u, 4); /* "GGUF" */
    wb_le(h, 3, 4);
    wb_le(h, w->n_t, 8);
    wb_le(h, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        wb_str(h, w->kv[i].key, strlen(w->kv[i].key));
        wb_le(h, (uint64_t)w->kv[i].type, 4);
        wb_put(h, w->kv[i].val.p, w->kv[i].val.n);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w_tensor *t = &w->t[i];
        wb_str(h, t->name, strlen(t->name));
        wb_le(h, (uint64_t)t->ndim, 4);
        for (int d = 0; d < t->ndim; d++) wb_le(h, t->ne[d], 8);
        wb_le(h, t->ggml_type, 4);
        wb_le(h, off, 8);
        t->offset = off;
        off += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    *data_size = off;
    if (h->oom) return vc_err_set(VC_ERR_OOM, "gguf writer: out of memory");
    return VC_OK;
}

static size_t pad_to(uint64_t n, size_t a) { return (size_t)((a - n % a) % a); }

int gguf_w_write_memory(gguf_writer *w, void **out, size_t *size) {
    wbuf h = {0};
    uint64_t dsize;
    *out = NULL;
    if (build_header(w, &h, &dsize) < 0) { free(h.p); return VC_ERR_OOM; }
    size_t hsize = h.n + pad_to(h.n, w->alignment);
    if (dsize > SIZE_MAX - hsize) { free(h.p); return vc_err_set(VC_ERR_OOM, "gguf writer: file too large"); }
    uint8_t *p = calloc(1, hsize + dsize ? hsize + dsize : 1);
    if (!p) { free(h.p); return vc_err_set(VC_ERR_OOM, "gguf writer: out of memory"); }
    memcpy(p, h.p, h.n);
    for (size_t i = 0; i < w->n_t; i++)
        if (w->t[i].nbytes) memcpy(p + hsize + w->t[i].offset, w->t[i].data, w->t[i].nbytes);
    free(h.p);
    *out = p;
    *size = hsize + dsize;
    return VC_OK;
}

int gguf_w_write_file(gguf_writer *w, const char *path) {
    wbuf h = {0};
    uint64_t dsize;
    if (build_header(w, &h, &dsize) < 0) { free(h.p); return VC_ERR_OOM; }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 8);
    if (!tmp) { free(h.p); return vc_err_set(VC_ERR_OOM, "gguf writer: out of memory"); }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int st = vc_err_set(VC_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(h.p);
        free(tmp);
        return st;
    }
    static const uint8_t zeros[64] = {0};
    bool ok = fwrite(h.p, 1, h.n, f) == h.n;
    size_t pad = pad_to(h.n, w->alignment);
    /* Padding can exceed the zero block for large alignments: loop. */
    for (size_t left = pad; ok && left;) {
        size_t k = left < sizeof zeros ? left : sizeof zeros;
        ok = fwrite(zeros, 1, k, f) == k;
        left -= k;
    }
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const w_tensor *t = &w->t[i];
        if (t->nbytes) ok = fwrite(t->data, 1, t->nbytes, f) == t->nbytes;
        for (size_t left = pad_to(t->nbytes, w->alignment); ok && left;) {
            size_t k = left < sizeof zeros ? left : sizeof zeros;
            ok = fwrite(zeros, 1, k, f) == k;
            left -= k;
        }
    }
    if (fclose(f) != 0) ok = false;
    int st = VC_OK;
    if (!ok) st = vc_err_set(VC_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    else if (rename(tmp, path) != 0) st = vc_err_set(VC_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (st < 0) unlink(tmp);
    free(h.p);
    free(tmp);
    return st;
}
