/* quantize — re-encode the weights of a GGUF file in a block-quantized type.
 *
 *   quantize IN.gguf OUT.gguf TYPE [--threads N] [--pure]
 *
 * TYPE: q4_0 q4_1 q8_0 q4_K q5_K q6_K (every weight matrix in that type), or
 * the mixes q4_K_M / q5_K_M (llama.cpp's "mostly Q4_K/Q5_K, medium").
 *
 * What is quantized: tensors named "*.weight" with 2+ dimensions whose row
 * length is a multiple of the type's block (1-D norms and biases stay as
 * they are). Sources may be F32, F16, BF16 or any quantized type we can
 * dequantize (rt_dequant_row); a source already in the target type is
 * copied bit for bit. Rows are quantized with the reference quantizers of
 * runtime/quant.h (ggml's algorithms, no importance matrix), so the bytes
 * for Q4_0/Q4_1/Q8_0 match the `gguf` Python package's quantizer.
 *
 * The *_K_M mixes, a simplified form of llama.cpp's llama-quant.cpp rules
 * for dense (non-MoE, non-Falcon) models:
 *   - output.weight (or token_embd.weight when the model has no
 *     output.weight, i.e. tied embeddings): Q6_K;
 *   - attn_v.weight and ffn_down.weight of layer i of n: Q6_K when
 *     i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 ("use_more_bits"), else
 *     the base type; a fused attn_qkv.weight: Q5_K (q4_K_M) / Q6_K (q5_K_M);
 *   - everything else: the base type (Q4_K / Q5_K).
 * --pure turns the mix off (every matrix in the base type).
 * Row lengths that are not a multiple of 256 cannot hold K-quants; llama.cpp
 * then falls back to Q5_0/Q5_1/Q8_0, and since we do not compute with
 * Q5_0/Q5_1 this tool falls back to Q8_0 for all of them (a row that is not
 * a multiple of 32 either stays in its source type).
 *
 * Metadata is copied key by key (arrays of arrays are not supported);
 * general.file_type is set to llama.cpp's ftype id and
 * general.quantization_version to 2.
 */
#include "base/err.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "runtime/dtype.h"
#include "runtime/quant.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* llama.cpp's llama_ftype ids for general.file_type. */
enum { FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16,
       FT_Q5_K_M = 17, FT_Q6_K = 18 };

typedef struct {
    const char *name;
    rt_dtype base;
    bool mix;       /* apply the *_K_M rules */
    uint32_t ftype; /* general.file_type */
} qt_spec;

static const qt_spec SPECS[] = {
    {"q4_0", RT_Q4_0, false, FT_Q4_0},      {"q4_1", RT_Q4_1, false, FT_Q4_1},
    {"q8_0", RT_Q8_0, false, FT_Q8_0},      {"q4_K", RT_Q4_K, false, FT_Q4_K_S},
    {"q5_K", RT_Q5_K, false, FT_Q5_K_S},    {"q6_K", RT_Q6_K, false, FT_Q6_K},
    {"q4_K_M", RT_Q4_K, true, FT_Q4_K_M},   {"q5_K_M", RT_Q5_K, true, FT_Q5_K_M},
};

static void usage(FILE *f) {
    fprintf(f, "usage: quantize IN.gguf OUT.gguf TYPE [--threads N] [--pure]\n"
               "  TYPE: q4_0 q4_1 q8_0 q4_K q5_K q6_K q4_K_M q5_K_M\n");
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Layer index of "blk.N.*", or -1. */
static int layer_of(const char *name) {
    int i;
    if (sscanf(name, "blk.%d.", &i) != 1 || i < 0) return -1;
    return i;
}

static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The type a weight matrix gets under spec `s` before the row-length
 * fallback. n_layers: number of "blk.N." layers (for use_more_bits). */
static rt_dtype pick_type(const qt_spec *s, const char *name, bool tied, int n_layers) {
    if (!s->mix) return s->base;
    if (!strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"))) return RT_Q6_K;
    int l = layer_of(name);
    if (l >= 0 && (ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight")))
        return use_more_bits(l, n_layers) ? RT_Q6_K : s->base;
    if (ends_with(name, ".attn_qkv.weight")) return s->base == RT_Q4_K ? RT_Q5_K : RT_Q6_K;
    return s->base;
}

/* ---- metadata copy ---------------------------------------------------- */

static int copy_kv(const gguf_ctx *g, int64_t i, gguf_writer *w) {
    const char *key = gguf_kv_key(g, i);
    gguf_type t = gguf_kv_type(g, i);
    if (!strcmp(key, "general.alignment")) return VC_OK; /* the writer sets it */
    int64_t v = 0;
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64: case GGUF_TYPE_UINT64:
        if (!gguf_get_i64(g, key, &v))
            return vc_err_set(VC_ERR_UNSUPPORTED, "metadata %s: value does not fit in int64", key);
        switch (t) {
        case GGUF_TYPE_UINT8: return gguf_w_set_u8(w, key, (uint8_t)v);
        case GGUF_TYPE_INT8: return gguf_w_set_i8(w, key, (int8_t)v);
        case GGUF_TYPE_UINT16: return gguf_w_set_u16(w, key, (uint16_t)v);
        case GGUF_TYPE_INT16: return gguf_w_set_i16(w, key, (int16_t)v);
        case GGUF_TYPE_UINT32: return gguf_w_set_u32(w, key, (uint32_t)v);
        case GGUF_TYPE_INT32: return gguf_w_set_i32(w, key, (int32_t)v);
        case GGUF_TYPE_UINT64: return gguf_w_set_u64(w, key, (uint64_t)v);
        default: return gguf_w_set_i64(w, key, v);
        }
    case GGUF_TYPE_BOOL: {
        bool b = false;
        gguf_get_bool(g, key, &b);
        return gguf_w_set_bool(w, key, b);
    }
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: {
        /* The reader exposes floats as f32 only: an f64 value keeps f32
         * precision (no GGUF key we know of needs more). */
        float f = 0;
        gguf_get_f32(g, key, &f);
        return t == GGUF_TYPE_FLOAT32 ? gguf_w_set_f32(w, key, f) : gguf_w_set_f64(w, key, f);
    }
    case GGUF_TYPE_STRING: {
        gguf_str s = gguf_get_str(g, key);
        return gguf_w_set_strn(w, key, s.p ? s.p : "", s.n);
    }
    case GGUF_TYPE_ARRAY: {
        gguf_type et;
        uint64_t n;
        if (!gguf_get_arr_info(g, key, &et, &n)) return vc_err_set(VC_ERR_FORMAT, "metadata %s: bad array", key);
        if (et == GGUF_TYPE_STRING) {
            gguf_str *v2 = malloc((n ? n : 1) * sizeof *v2);
            if (!v2) return vc_err_set(VC_ERR_OOM, "out of memory");
            for (uint64_t k = 0; k < n; k++) v2[k] = gguf_get_arr_str(g, key, k);
            int rc = gguf_w_set_arr_strn(w, key, v2, n);
            free(v2);
            return rc;
        }
        if (et == GGUF_TYPE_ARRAY)
            return vc_err_set(VC_ERR_UNSUPPORTED, "metadata %s: arrays of arrays are not supported", key);
        uint64_t n2;
        const void *data = gguf_get_arr_data(g, key, &et, &n2);
        if (!data) return vc_err_set(VC_ERR_FORMAT, "metadata %s: bad array", key);
        /* The array bytes inside the mapping may be unaligned: copy them. */
        size_t nb = (size_t)n2 * gguf_type_size(et);
        void *buf = malloc(nb ? nb : 1);
        if (!buf) return vc_err_set(VC_ERR_OOM, "out of memory");
        memcpy(buf, data, nb);
        int rc = gguf_w_set_arr(w, key, et, buf, n2);
        free(buf);
        return rc;
    }
    default:
        return vc_err_set(VC_ERR_FORMAT, "metadata %s: unknown type %d", key, (int)t);
    }
}

/* ---- quantizing one tensor on N threads ------------------------------ */

typedef struct {
    const gguf_tensor_info *ti;
    rt_dtype dst_type;
    int64_t rows, cols;
    size_t src_row_bytes, dst_row_bytes;
    uint8_t *dst;
    int64_t r0, r1; /* this worker's rows */
    int status;
    char err[256];
} qt_job;

static void *quant_rows(void *arg) {
    qt_job *j = arg;
    float *tmp = malloc((size_t)j->cols * sizeof *tmp);
    if (!tmp) {
        j->status = VC_ERR_OOM;
        snprintf(j->err, sizeof j->err, "out of memory");
        return NULL;
    }
    const uint8_t *src = j->ti->data;
    for (int64_t r = j->r0; r < j->r1; r++) {
        rt_dequant_row((rt_dtype)j->ti->dtype, src + (size_t)r * j->src_row_bytes, tmp, j->cols);
        int rc = rt_quant_row(j->dst_type, tmp, j->dst + (size_t)r * j->dst_row_bytes, j->cols);
        if (rc < 0) {
            j->status = rc;
            snprintf(j->err, sizeof j->err, "%s", vc_err_msg());
            break;
        }
    }
    free(tmp);
    return NULL;
}

static int quantize_tensor(const gguf_tensor_info *ti, rt_dtype dt, int n_threads, uint8_t **out, size_t *out_bytes) {
    int64_t cols = ti->shape[ti->ndim - 1], rows = 1;
    for (int d = 0; d < ti->ndim - 1; d++) rows *= ti->shape[d];
    size_t src_rb = rt_dtype_row_bytes((rt_dtype)ti->dtype, cols);
    size_t dst_rb = rt_dtype_row_bytes(dt, cols);
    if (!src_rb || !dst_rb || src_rb * (size_t)rows != ti->nbytes)
        return vc_err_set(VC_ERR_FORMAT, "tensor %s: size does not match its shape", ti->name);
    size_t nb = dst_rb * (size_t)rows;
    uint8_t *dst = malloc(nb ? nb : 1);
    if (!dst) return vc_err_set(VC_ERR_OOM, "tensor %s: out of memory (%zu bytes)", ti->name, nb);
    if (n_threads > rows) n_threads = (int)(rows ? rows : 1);
    qt_job jobs[64];
    pthread_t tids[64];
    int started = 0;
    for (int k = 0; k < n_threads; k++) {
        jobs[k] = (qt_job){.ti = ti, .dst_type = dt, .rows = rows, .cols = cols, .src_row_bytes = src_rb,
                           .dst_row_bytes = dst_rb, .dst = dst, .r0 = rows * k / n_threads,
                           .r1 = rows * (k + 1) / n_threads};
    }
    for (int k = 1; k < n_threads; k++) {
        if (pthread_create(&tids[k], NULL, quant_rows, &jobs[k]) != 0) {
            jobs[k].status = VC_ERR_RUNTIME;
            snprintf(jobs[k].err, sizeof jobs[k].err, "pthread_create failed");
            break;
        }
        started = k;
    }
    quant_rows(&jobs[0]);
    for (int k = 1; k <= started; k++) pthread_join(tids[k], NULL);
    for (int k = 0; k < n_threads; k++) {
        if (jobs[k].status < 0) {
            free(dst);
            return vc_err_set(jobs[k].status, "tensor %s: %s", ti->name, jobs[k].err);
        }
    }
    *out = dst;
    *out_bytes = nb;
    return VC_OK;
}

/* ---- main --------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *pos[3];
    int npos = 0, n_threads = 1;
    bool pure = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--pure")) { pure = true; continue; }
        if (!strcmp(argv[i], "--threads")) {
            char *end;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || v < 1 || v > 64) {
                fprintf(stderr, "quantize: --threads needs a number 1..64\n");
                return 2;
            }
            n_threads = (int)v;
            i++;
            continue;
        }
        if (npos == 3) { usage(stderr); return 2; }
        pos[npos++] = argv[i];
    }
    if (npos != 3) { usage(stderr); return 2; }
    const qt_spec *spec = NULL;
    for (size_t k = 0; k < sizeof SPECS / sizeof SPECS[0]; k++)
        if (!strcmp(pos[2], SPECS[k].name)) spec = &SPECS[k];
    if (!spec) {
        fprintf(stderr, "quantize: unknown type '%s'\n", pos[2]);
        usage(stderr);
        return 2;
    }
    qt_spec sp = *spec;
    if (pure) sp.mix = false;

    int status = 1;
    gguf_writer *w = NULL;
    uint8_t **bufs = NULL;
    int64_t nt = 0;
    gguf_ctx *g = gguf_open(pos[0]);
    if (!g) goto fail;
    nt = gguf_n_tensors(g);
    bufs = calloc((size_t)(nt ? nt : 1), sizeof *bufs);
    w = gguf_w_create(gguf_alignment(g));
    if (!bufs || !w) { if (bufs) vc_err_set(VC_ERR_OOM, "out of memory"); goto fail; }

    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        if (copy_kv(g, i, w) < 0) goto fail;
    if (gguf_w_set_u32(w, "general.quantization_version", 2) < 0) goto fail;
    if (gguf_w_set_u32(w, "general.file_type", sp.ftype) < 0) goto fail;

    bool tied = !gguf_find_tensor(g, "output.weight");
    int n_layers = 0;
    for (int64_t i = 0; i < nt; i++) {
        int l = layer_of(gguf_tensor(g, i)->name);
        if (l + 1 > n_layers) n_layers = l + 1;
    }

    size_t in_total = 0, out_total = 0;
    int counts[RT_DTYPE_COUNT] = {0};
    double t0 = now_s();
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor_info *ti = gguf_tensor(g, i);
        int64_t cols = ti->shape[ti->ndim - 1];
        in_total += ti->nbytes;
        bool quantizable = ti->ndim >= 2 && ends_with(ti->name, "weight");
        int dt = -1;
        if (quantizable) {
            dt = pick_type(&sp, ti->name, tied, n_layers);
            if (cols % rt_dtype_info((rt_dtype)dt)->block_elems) dt = RT_Q8_0; /* K-quant fallback */
            if (cols % rt_dtype_info((rt_dtype)dt)->block_elems) dt = -1;      /* keep as is */
        }
        if (dt < 0 || dt == ti->dtype) {
            /* copied as it is (also types we cannot compute with) */
            if (gguf_w_add_tensor_ggml(w, ti->name, ti->ggml_type, ti->ndim, ti->shape, ti->data, ti->nbytes) < 0)
                goto fail;
            out_total += ti->nbytes;
            if (ti->dtype >= 0) counts[ti->dtype]++;
            continue;
        }
        if (ti->dtype < 0) {
            vc_err_set(VC_ERR_UNSUPPORTED, "tensor %s: cannot read type %s", ti->name,
                       gguf_ggml_type_name(ti->ggml_type));
            goto fail;
        }
        size_t nb;
        if (quantize_tensor(ti, (rt_dtype)dt, n_threads, &bufs[i], &nb) < 0) goto fail;
        if (gguf_w_add_tensor(w, ti->name, (rt_dtype)dt, ti->ndim, ti->shape, bufs[i], nb) < 0) goto fail;
        out_total += nb;
        counts[dt]++;
    }
    if (gguf_w_write_file(w, pos[1]) < 0) goto fail;
    fprintf(stderr, "quantize: %s -> %s (%s): %.1f MiB -> %.1f MiB in %.1f s; tensors:", pos[0], pos[1],
            sp.name, in_total / 1048576.0, out_total / 1048576.0, now_s() - t0);
    for (int k = 0; k < RT_DTYPE_COUNT; k++)
        if (counts[k]) fprintf(stderr, " %s %d", rt_dtype_name((rt_dtype)k), counts[k]);
    fputc('\n', stderr);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "quantize: %s\n", vc_err_msg());
done:
    if (bufs)
        for (int64_t i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    gguf_w_free(w);
    gguf_close(g);
    return status;
}
