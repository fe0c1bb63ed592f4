/* safetensors.c — parse and validate .safetensors files; merge shards.
 * See safetensors.h for the format. The JSON header is parsed with jansson
 * (duplicate keys rejected) and dropped after validation: the st_tensor
 * table keeps copies of what later code needs. */
#include "model/safetensors.h"

#include "base/err.h"
#include "base/mapfile.h"

#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ST_MAX_HEADER (100u << 20) /* real headers are < 10 MB */

typedef struct {
    char *path;
    vc_mapfile map; /* unmapped for st_open_memory */
} st_file;

typedef struct {
    char *key, *val;
} st_meta;

struct st_model {
    st_file *files;
    int n_files;
    st_tensor *t; /* sorted by name once all shards are in */
    int64_t n_t, cap_t;
    st_meta *meta;
    int64_t n_meta, cap_meta;
};

/* ---- dtypes -------------------------------------------------------------- */

static const struct {
    const char *name;
    int bits, rt;
} g_dtypes[] = {
    {"F64", 64, -1},     {"F32", 32, RT_F32},     {"F16", 16, RT_F16},   {"BF16", 16, RT_BF16},
    {"I64", 64, -1},     {"I32", 32, RT_I32},     {"I16", 16, -1},       {"I8", 8, -1},
    {"U64", 64, -1},     {"U32", 32, -1},         {"U16", 16, -1},       {"U8", 8, -1},
    {"BOOL", 8, -1},     {"F8_E4M3", 8, -1},      {"F8_E5M2", 8, -1},    {"F8_E8M0", 8, -1},
    {"F6_E2M3", 6, -1},  {"F6_E3M2", 6, -1},      {"F4", 4, -1},         {"C64", 64, -1},
};
#define N_DTYPES (int)(sizeof g_dtypes / sizeof g_dtypes[0])

static int dtype_index(const char *s) {
    for (int i = 0; i < N_DTYPES; i++)
        if (!strcmp(g_dtypes[i].name, s)) return i;
    return -1;
}

int st_dtype_bits(const char *dtype_str) {
    int i = dtype_str ? dtype_index(dtype_str) : -1;
    return i < 0 ? 0 : g_dtypes[i].bits;
}

/* ---- helpers ------------------------------------------------------------- */

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int oom(void) { return vc_err_set(VC_ERR_OOM, "safetensors: out of memory"); }

static int ferr(const char *file, const char *tensor, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int ferr(const char *file, const char *tensor, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (tensor) return vc_err_set(VC_ERR_FORMAT, "%s: tensor '%.200s': %s", file, tensor, msg);
    return vc_err_set(VC_ERR_FORMAT, "%s: %s", file, msg);
}

static st_tensor *push_tensor(st_model *m) {
    if (m->n_t == m->cap_t) {
        int64_t cap = m->cap_t ? m->cap_t * 2 : 64;
        st_tensor *nt = realloc(m->t, (size_t)cap * sizeof *nt);
        if (!nt) return NULL;
        m->t = nt;
        m->cap_t = cap;
    }
    st_tensor *t = &m->t[m->n_t++];
    memset(t, 0, sizeof *t);
    return t;
}

static int add_meta(st_model *m, const char *k, const char *v) {
    for (int64_t i = 0; i < m->n_meta; i++)
        if (!strcmp(m->meta[i].key, k)) return VC_OK; /* first shard wins */
    if (m->n_meta == m->cap_meta) {
        int64_t cap = m->cap_meta ? m->cap_meta * 2 : 8;
        st_meta *nm = realloc(m->meta, (size_t)cap * sizeof *nm);
        if (!nm) return oom();
        m->meta = nm;
        m->cap_meta = cap;
    }
    char *kk = strdup(k), *vv = strdup(v);
    if (!kk || !vv) { free(kk); free(vv); return oom(); }
    m->meta[m->n_meta].key = kk;
    m->meta[m->n_meta].val = vv;
    m->n_meta++;
    return VC_OK;
}

static bool json_uint(const json_t *j, uint64_t *out) {
    if (!json_is_integer(j) || json_integer_value(j) < 0) return false;
    *out = (uint64_t)json_integer_value(j);
    return true;
}

/* One tensor entry of a header; appends to m->t. */
static int parse_entry(st_model *m, int shard, const char *file, const char *name, json_t *e,
                       const uint8_t *data, uint64_t data_len, uint64_t *begin_out) {
    if (!json_is_object(e)) return ferr(file, name, "entry is not a JSON object");
    json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
           *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd)) return ferr(file, name, "missing or non-string \"dtype\"");
    int di = dtype_index(json_string_value(jd));
    if (di < 0) return ferr(file, name, "unknown dtype \"%.40s\"", json_string_value(jd));
    if (!json_is_array(js)) return ferr(file, name, "missing or non-array \"shape\"");
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS) return ferr(file, name, "%zu dimensions (at most %d supported)", nd, ST_MAX_DIMS);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return ferr(file, name, "\"data_offsets\" must be an array [begin, end]");
    uint64_t begin, end, numel = 1, dims[ST_MAX_DIMS];
    for (size_t d = 0; d < nd; d++) {
        if (!json_uint(json_array_get(js, d), &dims[d]))
            return ferr(file, name, "shape[%zu] is not a non-negative integer", d);
        if (dims[d] && numel > (uint64_t)INT64_MAX / dims[d])
            return ferr(file, name, "element count overflows");
        numel *= dims[d];
    }
    if (!json_uint(json_array_get(jo, 0), &begin) || !json_uint(json_array_get(jo, 1), &end))
        return ferr(file, name, "data_offsets are not non-negative integers");
    if (begin > end) return ferr(file, name, "data_offsets [%llu, %llu) are reversed",
                                 (unsigned long long)begin, (unsigned long long)end);
    if (end > data_len)
        return ferr(file, name, "data_offsets [%llu, %llu) past end of data section (%llu bytes)",
                    (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_len);
    int bits = g_dtypes[di].bits;
    if (numel > UINT64_MAX / 64) return ferr(file, name, "byte size overflows");
    uint64_t total_bits = numel * (uint64_t)bits;
    if (total_bits % 8) return ferr(file, name, "%llu %s elements do not fill whole bytes",
                                    (unsigned long long)numel, g_dtypes[di].name);
    if (end - begin != total_bits / 8)
        return ferr(file, name, "data_offsets [%llu, %llu) hold %llu bytes but shape x %s needs %llu",
                    (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
                    g_dtypes[di].name, (unsigned long long)(total_bits / 8));
    st_tensor *t = push_tensor(m);
    if (!t) return oom();
    if (!(t->name = strdup(name))) { m->n_t--; return oom(); }
    t->dtype = g_dtypes[di].rt;
    t->dtype_str = g_dtypes[di].name;
    t->elem_bits = bits;
    t->ndim = (int)nd;
    for (int d = 0; d < ST_MAX_DIMS; d++) t->shape[d] = d < (int)nd ? (int64_t)dims[d] : 1;
    t->numel = (int64_t)numel;
    t->data = data + begin;
    t->nbytes = (size_t)(end - begin);
    t->shard = shard;
    *begin_out = begin;
    return VC_OK;
}

typedef struct {
    uint64_t begin, end;
    const char *name;
} range;

static int cmp_range(const void *a, const void *b) {
    const range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Parse one file image and append its tensors (shard index `shard`). */
static int parse_file(st_model *m, int shard, const uint8_t *base, size_t size, const char *file) {
    if (size < 8) return ferr(file, NULL, "file too small (%zu bytes) to be safetensors", size);
    uint64_t hlen = le64(base);
    if (hlen > size - 8)
        return ferr(file, NULL, "header length %llu exceeds the file size %zu (not a safetensors file?)",
                    (unsigned long long)hlen, size);
    if (hlen > ST_MAX_HEADER)
        return ferr(file, NULL, "header length %llu is larger than %u bytes", (unsigned long long)hlen,
                    ST_MAX_HEADER);
    if (hlen < 2 || base[8] != '{') return ferr(file, NULL, "header is not a JSON object");
    json_error_t jerr;
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return ferr(file, NULL, "invalid JSON header: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    int st = VC_OK;
    range *rs = NULL;
    if (!json_is_object(root)) { st = ferr(file, NULL, "header is not a JSON object"); goto done; }
    const uint8_t *data = base + 8 + hlen;
    uint64_t data_len = size - 8 - hlen;
    size_t n = json_object_size(root), nr = 0;
    rs = malloc((n ? n : 1) * sizeof *rs);
    if (!rs) { st = oom(); goto done; }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) { st = ferr(file, NULL, "\"__metadata__\" is not an object"); goto done; }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    st = ferr(file, NULL, "\"__metadata__\" value of '%.100s' is not a string", mk);
                    goto done;
                }
                if ((st = add_meta(m, mk, json_string_value(mv))) < 0) goto done;
            }
            continue;
        }
        uint64_t begin = 0;
        if ((st = parse_entry(m, shard, file, key, val, data, data_len, &begin)) < 0) goto done;
        rs[nr].begin = begin;
        rs[nr].end = begin + m->t[m->n_t - 1].nbytes;
        rs[nr].name = m->t[m->n_t - 1].name;
        nr++;
    }
    /* Overlaps (empty tensors occupy nothing). */
    qsort(rs, nr, sizeof *rs, cmp_range);
    const range *prev = NULL;
    for (size_t i = 0; i < nr; i++) {
        if (rs[i].begin == rs[i].end) continue;
        if (prev && prev->end > rs[i].begin) {
            st = ferr(file, rs[i].name, "data [%llu, %llu) overlaps tensor '%.100s' [%llu, %llu)",
                      (unsigned long long)rs[i].begin, (unsigned long long)rs[i].end, prev->name,
                      (unsigned long long)prev->begin, (unsigned long long)prev->end);
            goto done;
        }
        if (!prev || rs[i].end > prev->end) prev = &rs[i];
    }
done:
    free(rs);
    json_decref(root);
    return st;
}

/* ---- model assembly ------------------------------------------------------ */

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int add_file(st_model *m, const char *path) {
    st_file *nf = realloc(m->files, (size_t)(m->n_files + 1) * sizeof *nf);
    if (!nf) return oom();
    m->files = nf;
    st_file *f = &m->files[m->n_files];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path))) return oom();
    m->n_files++;
    return VC_OK;
}

/* Sort all tensors by name and reject names present in two shards. */
static int finish(st_model *m) {
    if (m->n_t) qsort(m->t, (size_t)m->n_t, sizeof *m->t, cmp_tensor);
    for (int64_t i = 1; i < m->n_t; i++)
        if (!strcmp(m->t[i - 1].name, m->t[i].name))
            return vc_err_set(VC_ERR_FORMAT, "tensor '%.200s' appears in both %s and %s", m->t[i].name,
                              m->files[m->t[i - 1].shard].path, m->files[m->t[i].shard].path);
    return VC_OK;
}

static st_model *model_new(void) {
    st_model *m = calloc(1, sizeof *m);
    if (!m) oom();
    return m;
}

/* Map `path` as shard n_files and parse it. */
static int open_shard(st_model *m, const char *path) {
    if (add_file(m, path) < 0) return VC_ERR_OOM;
    st_file *f = &m->files[m->n_files - 1];
    if (vc_mapfile_open(&f->map, path) < 0) return vc_err_status();
    return parse_file(m, m->n_files - 1, f->map.data, f->map.size, path);
}

st_model *st_open_memory(const void *data, size_t size, const char *name_for_errors) {
    st_model *m = model_new();
    if (!m) return NULL;
    const char *name = name_for_errors ? name_for_errors : "<memory>";
    if (add_file(m, name) < 0 || parse_file(m, 0, data, data ? size : 0, name) < 0 || finish(m) < 0) {
        st_close(m);
        return NULL;
    }
    return m;
}

st_model *st_open(const char *path) {
    st_model *m = model_new();
    if (!m) return NULL;
    if (open_shard(m, path) < 0 || finish(m) < 0) {
        st_close(m);
        return NULL;
    }
    return m;
}

void st_close(st_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_files; i++) {
        vc_mapfile_close(&m->files[i].map);
        free(m->files[i].path);
    }
    for (int64_t i = 0; i < m->n_t; i++) free((char *)m->t[i].name);
    for (int64_t i = 0; i < m->n_meta; i++) {
        free(m->meta[i].key);
        free(m->meta[i].val);
    }
    free(m->files);
    free(m->t);
    free(m->meta);
    free(m);
}

/* ---- getters ------------------------------------------------------------- */

int64_t st_n_tensors(const st_model *m) { return m->n_t; }

const st_tensor *st_tensor_at(const st_model *m, int64_t i) {
    return i >= 0 && i < m->n_t ? &m->t[i] : NULL;
}

static int cmp_name(const void *key, const void *elt) {
    return strcmp((const char *)key, ((const st_tensor *)elt)->name);
}

const st_tensor *st_find(const st_model *m, const char *name) {
    if (!name || !m->n_t) return NULL;
    return bsearch(name, m->t, (size_t)m->n_t, sizeof *m->t, cmp_name);
}

int st_n_shards(const st_model *m) { return m->n_files; }

const char *st_shard_path(const st_model *m, int shard) {
    return shard >= 0 && shard < m->n_files ? m->files[shard].path : NULL;
}

const char *st_metadata(const st_model *m, const char *key) {
    for (int64_t i = 0; i < m->n_meta; i++)
        if (!strcmp(m->meta[i].key, key)) return m->meta[i].val;
    return NULL;
}

/* ---- directories --------------------------------------------------------- */

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static bool is_file(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* Open the sorted, de-duplicated list of shard file names under dir. */
static int open_shards(st_model *m, const char *dir, char **names, size_t n) {
    qsort(names, n, sizeof *names, cmp_cstr);
    for (size_t i = 0; i < n; i++) {
        if (i && !strcmp(names[i - 1], names[i])) continue;
        char *p = join(dir, names[i]);
        if (!p) return oom();
        int st = open_shard(m, p);
        free(p);
        if (st < 0) return st;
    }
    return VC_OK;
}

static int open_index(st_model *m, const char *dir, const char *index_path) {
    json_error_t jerr;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return vc_err_set(VC_ERR_FORMAT, "%s: invalid JSON: %s (line %d)", index_path, jerr.text, jerr.line);
    int st = VC_OK;
    char **names = NULL;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        st = vc_err_set(VC_ERR_FORMAT, "%s: missing \"weight_map\" object", index_path);
        goto done;
    }
    size_t n = 0, cap = json_object_size(wm);
    names = calloc(cap ? cap : 1, sizeof *names);
    if (!names) { st = oom(); goto done; }
    const char *tn;
    json_t *fv;
    json_object_foreach(wm, tn, fv) {
        const char *fn = json_string_value(fv);
        /* Shard names are plain file names inside dir: no paths. */
        if (!fn || !*fn || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, "..")) {
            st = vc_err_set(VC_ERR_FORMAT, "%s: weight_map entry for '%.200s' is not a plain file name",
                            index_path, tn);
            goto done;
        }
        if (!(names[n++] = strdup(fn))) { st = oom(); goto done; }
    }
    for (size_t i = 0; i < n; i++) {
        char *p = join(dir, names[i]);
        if (!p) { st = oom(); goto done; }
        bool ok = is_file(p);
        free(p);
        if (!ok) {
            st = vc_err_set(VC_ERR_IO, "%s: shard '%.200s' named in weight_map does not exist", index_path, names[i]);
            goto done;
        }
    }
    if ((st = open_shards(m, dir, names, n)) < 0 || (st = finish(m)) < 0) goto done;
    json_object_foreach(wm, tn, fv) {
        const st_tensor *t = st_find(m, tn);
        const char *want = json_string_value(fv);
        const char *have = t ? strrchr(m->files[t->shard].path, '/') + 1 : NULL;
        if (!t || strcmp(have, want)) {
            st = vc_err_set(VC_ERR_FORMAT, "%s: tensor '%.200s' is mapped to %s but %s", index_path, tn, want,
                            t ? "lives in another shard" : "that shard does not contain it");
            goto done;
        }
    }
done:
    if (names) free_names(names, cap);
    json_decref(root);
    return st;
}

static int open_glob(st_model *m, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return vc_err_set(VC_ERR_IO, "%s: cannot open directory", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    int st = VC_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) { st = oom(); goto done; }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) { st = oom(); goto done; }
        n++;
    }
    if (n == 0) {
        st = vc_err_set(VC_ERR_IO, "%s: no model.safetensors.index.json and no *.safetensors files", dir);
        goto done;
    }
    if ((st = open_shards(m, dir, names, n)) < 0) goto done;
    st = finish(m);
done:
    closedir(d);
    free_names(names, n);
    return st;
}

st_model *st_open_dir(const char *dir) {
    st_model *m = model_new();
    if (!m) return NULL;
    char *index = join(dir, "model.safetensors.index.json");
    char *single = join(dir, "model.safetensors");
    int st;
    if (!index || !single) st = oom();
    else if (is_file(index)) st = open_index(m, dir, index);
    else if (is_file(single)) st = open_shard(m, single) < 0 ? vc_err_status() : finish(m);
    else st = open_glob(m, dir);
    free(index);
    free(single);
    if (st < 0) {
        st_close(m);
        return NULL;
    }
    return m;
}
