/* gguf_meta.c — metadata getters of the GGUF reader. Values were bounds-
 * checked by gguf.c at open time; here they are only decoded (little-endian,
 * possibly unaligned) and converted with range checks. */
#include "model/gguf_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rd_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

/* Integer value of a scalar of type t at p. Returns false for non-integers.
 * The value is (neg ? -(mag) : mag) with mag as uint64 to cover u64 and i64. */
static bool int_value(gguf_type t, const uint8_t *p, bool *neg, uint64_t *mag) {
    uint64_t raw;
    switch (t) {
    case GGUF_TYPE_BOOL:
        *neg = false;
        *mag = p[0] != 0;
        return true;
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        *neg = false;
        *mag = rd_le(p, gguf_type_size(t));
        return true;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64: {
        size_t n = gguf_type_size(t);
        raw = rd_le(p, n);
        if (n < 8 && (raw >> (8 * n - 1)) & 1) raw |= ~(uint64_t)0 << (8 * n); /* sign-extend */
        int64_t s;
        memcpy(&s, &raw, 8);
        *neg = s < 0;
        *mag = s < 0 ? (uint64_t)0 - raw : raw;
        return true;
    }
    default:
        return false;
    }
}

static bool to_i64(gguf_type t, const uint8_t *p, int64_t *out) {
    bool neg;
    uint64_t mag;
    if (!int_value(t, p, &neg, &mag)) return false;
    if (!neg) {
        if (mag > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX + 1) return false;
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    }
    return true;
}

static bool to_f32(gguf_type t, const uint8_t *p, float *out) {
    if (t == GGUF_TYPE_FLOAT32) {
        uint32_t b = (uint32_t)rd_le(p, 4);
        memcpy(out, &b, 4);
        return true;
    }
    if (t == GGUF_TYPE_FLOAT64) {
        uint64_t b = rd_le(p, 8);
        double d;
        memcpy(&d, &b, 8);
        *out = (float)d;
        return true;
    }
    bool neg;
    uint64_t mag;
    if (!int_value(t, p, &neg, &mag)) return false;
    *out = neg ? -(float)mag : (float)mag;
    return true;
}

static int cmp_key(const void *key, const void *elt) {
    return strcmp((const char *)key, (*(gguf_kv *const *)elt)->key);
}

const gguf_kv *gguf_kv_lookup(const gguf_ctx *g, const char *key) {
    if (!key || g->n_kv == 0) return NULL;
    gguf_kv **r = bsearch(key, g->kv_sorted, (size_t)g->n_kv, sizeof *g->kv_sorted, cmp_key);
    return r ? *r : NULL;
}

int64_t gguf_n_kv(const gguf_ctx *g) { return g->n_kv; }

const char *gguf_kv_key(const gguf_ctx *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

gguf_type gguf_kv_type(const gguf_ctx *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].type : GGUF_TYPE_COUNT;
}

int64_t gguf_find_key(const gguf_ctx *g, const char *key) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    return kv ? (int64_t)(kv - g->kv) : -1;
}

bool gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    bool neg;
    uint64_t mag;
    if (!kv || !int_value(kv->type, kv->val, &neg, &mag)) return false;
    if (neg && mag) return false;
    if (mag > UINT32_MAX) return false;
    *out = (uint32_t)mag;
    return true;
}

bool gguf_get_i64(const gguf_ctx *g, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    return kv && to_i64(kv->type, kv->val, out);
}

bool gguf_get_f32(const gguf_ctx *g, const char *key, float *out) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    return kv && kv->type != GGUF_TYPE_BOOL && to_f32(kv->type, kv->val, out);
}

bool gguf_get_bool(const gguf_ctx *g, const char *key, bool *out) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL) return false;
    *out = kv->val[0] != 0;
    return true;
}

const char *gguf_get_string(const gguf_ctx *g, const char *key) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    return kv && kv->type == GGUF_TYPE_STRING ? kv->str : NULL;
}

gguf_str gguf_get_str(const gguf_ctx *g, const char *key) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    gguf_str s = {NULL, 0};
    if (kv && kv->type == GGUF_TYPE_STRING) {
        s.p = (const char *)kv->val;
        s.n = kv->n;
    }
    return s;
}

bool gguf_get_arr_info(const gguf_ctx *g, const char *key, gguf_type *elem_type, uint64_t *n) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY) return false;
    if (elem_type) *elem_type = kv->elem;
    if (n) *n = kv->n;
    return true;
}

gguf_str gguf_get_arr_str(const gguf_ctx *g, const char *key, uint64_t i) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    gguf_str s = {NULL, 0};
    if (kv && kv->type == GGUF_TYPE_ARRAY && kv->elem == GGUF_TYPE_STRING && i < kv->n) s = kv->strs[i];
    return s;
}

/* Element i of a numeric array, or NULL. */
static const uint8_t *arr_elem(const gguf_ctx *g, const char *key, uint64_t i, gguf_type *t) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || i >= kv->n) return NULL;
    size_t sz = gguf_type_size(kv->elem);
    if (!sz) return NULL;
    *t = kv->elem;
    return kv->val + i * sz;
}

bool gguf_get_arr_i64(const gguf_ctx *g, const char *key, uint64_t i, int64_t *out) {
    gguf_type t;
    const uint8_t *p = arr_elem(g, key, i, &t);
    return p && to_i64(t, p, out);
}

bool gguf_get_arr_f32(const gguf_ctx *g, const char *key, uint64_t i, float *out) {
    gguf_type t;
    const uint8_t *p = arr_elem(g, key, i, &t);
    return p && t != GGUF_TYPE_BOOL && to_f32(t, p, out);
}

const void *gguf_get_arr_data(const gguf_ctx *g, const char *key, gguf_type *elem_type, uint64_t *n) {
    const gguf_kv *kv = gguf_kv_lookup(g, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || !gguf_type_size(kv->elem)) return NULL;
    if (elem_type) *elem_type = kv->elem;
    if (n) *n = kv->n;
    return kv->val;
}
