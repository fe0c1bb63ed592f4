/* llama2c_convert — convert a llama2.c checkpoint + tokenizer to GGUF.
 *
 *   llama2c_convert MODEL.bin TOKENIZER.bin OUT.gguf
 *
 * MODEL.bin (llama2.c "legacy" export): 7 int32 — dim, hidden_dim,
 * n_layers, n_heads, n_kv_heads, vocab_size (negative: an untied classifier
 * follows at the end), seq_len — then f32 weights in this order:
 *   token_embedding[V,dim] rms_att[L,dim] wq[L,dim,dim] wk[L,kv,dim]
 *   wv[L,kv,dim] wo[L,dim,dim] rms_ffn[L,dim] w1[L,hid,dim] w2[L,dim,hid]
 *   w3[L,hid,dim] rms_final[dim] freq_cis_real[seq,hd/2]
 *   freq_cis_imag[seq,hd/2] (unused) [wcls[V,dim] if untied]
 * TOKENIZER.bin: int32 max_token_length, then V x {f32 score, int32 len, bytes}.
 *
 * Output: llama.cpp "llama" architecture names and metadata, all F32.
 * llama2.c rotates adjacent (even, odd) pairs in RoPE, which is exactly
 * ggml's "normal" rope used for the llama arch in GGUF, so wq/wk rows are
 * copied as they are (only HF-format conversions need a permutation).
 * The tokenizer export wrote BOS/EOS as "\n<s>\n"/"\n</s>\n" and
 * SentencePiece's U+2581 as ' '; both are undone to get SentencePiece pieces.
 */
#include "base/err.h"
#include "base/mapfile.h"
#include "model/gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 };

typedef struct {
    int32_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    bool untied;
} l2c_config;

typedef struct {
    gguf_str *toks; /* [vocab] malloc'd strings */
    float *scores;
    int32_t *types;
    int32_t n;
} l2c_vocab;

static int32_t rd_i32(const uint8_t *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t r;
    memcpy(&r, &v, 4);
    return r;
}

static float rd_f32(const uint8_t *p) {
    uint32_t v = (uint32_t)rd_i32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

/* Multiply with overflow check into *acc (element counts stay < 2^62). */
static bool mul_ok(uint64_t *acc, uint64_t a, uint64_t b) {
    if (a && b > (UINT64_MAX >> 2) / a) return false;
    *acc = a * b;
    return true;
}

static int check_config(const char *path, l2c_config *c, size_t size, uint64_t *n_floats) {
    if (c->dim <= 0 || c->hidden <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 ||
        c->vocab == 0 || c->vocab == INT32_MIN || c->seq_len <= 0)
        return vc_err_set(VC_ERR_FORMAT,
                          "%s: bad header (dim=%d hidden_dim=%d n_layers=%d n_heads=%d n_kv_heads=%d "
                          "vocab_size=%d seq_len=%d): not a llama2.c checkpoint?",
                          path, c->dim, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab, c->seq_len);
    c->untied = c->vocab < 0;
    if (c->untied) c->vocab = -c->vocab;
    if (c->dim % c->n_heads || c->n_heads % c->n_kv_heads || (c->dim / c->n_heads) % 2)
        return vc_err_set(VC_ERR_FORMAT, "%s: dim %d, n_heads %d, n_kv_heads %d are inconsistent", path, c->dim,
                          c->n_heads, c->n_kv_heads);
    uint64_t d = (uint64_t)c->dim, h = (uint64_t)c->hidden, L = (uint64_t)c->n_layers, V = (uint64_t)c->vocab;
    uint64_t kv = d / (uint64_t)c->n_heads * (uint64_t)c->n_kv_heads, hd = d / (uint64_t)c->n_heads;
    uint64_t parts[12], t;
    bool ok = mul_ok(&parts[0], V, d) && mul_ok(&t, L, d) && mul_ok(&parts[1], t, 2) /* rms_att, rms_ffn */
              && mul_ok(&t, L, d) && mul_ok(&parts[2], t, d * 2)                      /* wq, wo */
              && mul_ok(&t, L, kv) && mul_ok(&parts[3], t, d * 2)                     /* wk, wv */
              && mul_ok(&t, L, h) && mul_ok(&parts[4], t, d * 3)                      /* w1, w2, w3 */
              && mul_ok(&parts[5], (uint64_t)c->seq_len, hd)                           /* freq real+imag */
              && mul_ok(&parts[6], c->untied ? V : 0, d);
    if (!ok) return vc_err_set(VC_ERR_FORMAT, "%s: header sizes overflow", path);
    uint64_t total = d; /* rms_final */
    for (int i = 0; i < 7; i++) {
        if (parts[i] > (UINT64_MAX >> 3) - total) return vc_err_set(VC_ERR_FORMAT, "%s: header sizes overflow", path);
        total += parts[i];
    }
    uint64_t want = 28 + total * 4;
    if (size != want)
        return vc_err_set(VC_ERR_FORMAT,
                          "%s: file is %zu bytes but the header (dim=%d hidden_dim=%d n_layers=%d n_heads=%d "
                          "n_kv_heads=%d vocab_size=%d%s seq_len=%d) needs exactly %llu",
                          path, size, c->dim, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab,
                          c->untied ? " untied" : "", c->seq_len, (unsigned long long)want);
    *n_floats = total;
    return VC_OK;
}

static bool is_byte_token(const uint8_t *p, int32_t n) {
    static const char hex[] = "0123456789ABCDEF";
    return n == 6 && !memcmp(p, "<0x", 3) && p[5] == '>' && strchr(hex, p[3]) && strchr(hex, p[4]) && p[3] &&
           p[4];
}

static void vocab_free(l2c_vocab *v) {
    if (v->toks)
        for (int32_t i = 0; i < v->n; i++) free((char *)v->toks[i].p);
    free(v->toks);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof *v);
}

/* Parse tokenizer.bin for `n` tokens; the file must end right after them. */
static int load_vocab(const char *path, int32_t n, l2c_vocab *v) {
    vc_mapfile m;
    if (vc_mapfile_open(&m, path) < 0) return vc_err_status();
    int st = VC_OK;
    memset(v, 0, sizeof *v);
    v->toks = calloc((size_t)n, sizeof *v->toks);
    v->scores = malloc((size_t)n * sizeof *v->scores);
    v->types = malloc((size_t)n * sizeof *v->types);
    if (!v->toks || !v->scores || !v->types) { st = vc_err_set(VC_ERR_OOM, "out of memory"); goto done; }
    v->n = n;
    size_t pos = 4;
    if (m.size < 4) { st = vc_err_set(VC_ERR_FORMAT, "%s: too small for a llama2.c tokenizer", path); goto done; }
    int32_t max_len = rd_i32(m.data);
    if (max_len <= 0) { st = vc_err_set(VC_ERR_FORMAT, "%s: bad max_token_length %d", path, max_len); goto done; }
    for (int32_t i = 0; i < n; i++) {
        if (m.size - pos < 8) {
            st = vc_err_set(VC_ERR_FORMAT, "%s: truncated at token %d of %d (offset %zu)", path, i, n, pos);
            goto done;
        }
        float score = rd_f32(m.data + pos);
        int32_t len = rd_i32(m.data + pos + 4);
        pos += 8;
        if (len < 0 || len > max_len || (size_t)len > m.size - pos) {
            st = vc_err_set(VC_ERR_FORMAT, "%s: token %d: bad length %d (max_token_length %d, %zu bytes left)",
                            path, i, len, max_len, m.size - pos);
            goto done;
        }
        const uint8_t *p = m.data + pos;
        pos += (size_t)len;
        /* Back to SentencePiece pieces: "<s>"/"</s>" for BOS/EOS, ' ' -> U+2581. */
        const char *fixed = i == 1 ? "<s>" : i == 2 ? "</s>" : NULL;
        size_t cap = fixed ? strlen(fixed) : (size_t)len * 3;
        char *s = malloc(cap + 1);
        if (!s) { st = vc_err_set(VC_ERR_OOM, "out of memory"); goto done; }
        size_t k = 0;
        if (fixed) {
            memcpy(s, fixed, cap);
            k = cap;
        } else {
            for (int32_t j = 0; j < len; j++) {
                if (p[j] == ' ') { s[k++] = (char)0xE2; s[k++] = (char)0x96; s[k++] = (char)0x81; }
                else s[k++] = (char)p[j];
            }
        }
        s[k] = 0;
        v->toks[i].p = s;
        v->toks[i].n = k;
        v->scores[i] = score;
        v->types[i] = i == 0 ? TT_UNKNOWN : fixed ? TT_CONTROL : is_byte_token(p, len) ? TT_BYTE : TT_NORMAL;
    }
    if (pos != m.size)
        st = vc_err_set(VC_ERR_FORMAT, "%s: %zu trailing bytes after %d tokens (vocab size mismatch?)", path,
                        m.size - pos, n);
done:
    if (st < 0) vocab_free(v);
    vc_mapfile_close(&m);
    return st;
}

static int add(gguf_writer *w, const char *name, int ndim, int64_t d0, int64_t d1, const float *data) {
    int64_t shape[2] = {d0, d1};
    size_t n = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    return gguf_w_add_tensor(w, name, RT_F32, ndim, shape, data, n * sizeof(float));
}

/* Base name without directory and extension, for general.name. */
static void model_name(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, cap, "%s", b);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

static int l2c_convert(const char *model_path, const char *tok_path, const char *out_path) {
    vc_mapfile m;
    l2c_vocab voc = {0};
    gguf_writer *w = NULL;
    int st;
    if (vc_mapfile_open(&m, model_path) < 0) return vc_err_status();
    if (m.size < 28) {
        st = vc_err_set(VC_ERR_FORMAT, "%s: too small (%zu bytes) for a llama2.c checkpoint", model_path, m.size);
        goto done;
    }
    l2c_config c;
    int32_t *hdr[7] = {&c.dim, &c.hidden, &c.n_layers, &c.n_heads, &c.n_kv_heads, &c.vocab, &c.seq_len};
    for (int i = 0; i < 7; i++) *hdr[i] = rd_i32(m.data + 4 * i);
    uint64_t n_floats;
    if ((st = check_config(model_path, &c, m.size, &n_floats)) < 0) goto done;
    if ((st = load_vocab(tok_path, c.vocab, &voc)) < 0) goto done;

    const int64_t d = c.dim, h = c.hidden, L = c.n_layers, V = c.vocab, hd = d / c.n_heads;
    const int64_t kv = hd * c.n_kv_heads;
    /* The mapping is page-aligned and the header is 28 bytes: floats are aligned. */
    const float *p = (const float *)(const void *)(m.data + 28);
    const float *emb = p; p += V * d;
    const float *rms_att = p; p += L * d;
    const float *wq = p; p += L * d * d;
    const float *wk = p; p += L * kv * d;
    const float *wv = p; p += L * kv * d;
    const float *wo = p; p += L * d * d;
    const float *rms_ffn = p; p += L * d;
    const float *w1 = p; p += L * h * d;
    const float *w2 = p; p += L * d * h;
    const float *w3 = p; p += L * h * d;
    const float *rms_final = p; p += d;
    p += 2 * (int64_t)c.seq_len * (hd / 2); /* freq_cis_real, freq_cis_imag */
    const float *wcls = c.untied ? p : NULL;

    if (!(w = gguf_w_create(32))) { st = vc_err_status(); goto done; }
    char name[256];
    model_name(model_path, name, sizeof name);
    st = gguf_w_set_str(w, "general.architecture", "llama");
    if (st == 0) st = gguf_w_set_str(w, "general.name", name);
    if (st == 0) st = gguf_w_set_u32(w, "general.file_type", 0); /* all F32 */
    if (st == 0) st = gguf_w_set_u32(w, "llama.context_length", (uint32_t)c.seq_len);
    if (st == 0) st = gguf_w_set_u32(w, "llama.embedding_length", (uint32_t)d);
    if (st == 0) st = gguf_w_set_u32(w, "llama.block_count", (uint32_t)L);
    if (st == 0) st = gguf_w_set_u32(w, "llama.feed_forward_length", (uint32_t)h);
    if (st == 0) st = gguf_w_set_u32(w, "llama.attention.head_count", (uint32_t)c.n_heads);
    if (st == 0) st = gguf_w_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c.n_kv_heads);
    if (st == 0) st = gguf_w_set_u32(w, "llama.rope.dimension_count", (uint32_t)hd);
    if (st == 0) st = gguf_w_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (st == 0) st = gguf_w_set_f32(w, "llama.rope.freq_base", 10000.0f);
    if (st == 0) st = gguf_w_set_str(w, "tokenizer.ggml.model", "llama");
    if (st == 0) st = gguf_w_set_arr_strn(w, "tokenizer.ggml.tokens", voc.toks, (uint64_t)V);
    if (st == 0) st = gguf_w_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, voc.scores, (uint64_t)V);
    if (st == 0) st = gguf_w_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, voc.types, (uint64_t)V);
    if (st == 0) st = gguf_w_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (st == 0) st = gguf_w_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (st == 0) st = gguf_w_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (st == 0) st = gguf_w_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (st == 0) st = gguf_w_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    if (st < 0) goto done;

    /* Shapes are row-major {out, in}, as llama2.c stores them. */
    if ((st = add(w, "token_embd.weight", 2, V, d, emb)) < 0) goto done;
    for (int64_t l = 0; l < L; l++) {
        struct { const char *n; int nd; int64_t d0, d1; const float *base; } t[9] = {
            {"attn_norm", 1, d, 1, rms_att + l * d},      {"attn_q", 2, d, d, wq + l * d * d},
            {"attn_k", 2, kv, d, wk + l * kv * d},        {"attn_v", 2, kv, d, wv + l * kv * d},
            {"attn_output", 2, d, d, wo + l * d * d},     {"ffn_norm", 1, d, 1, rms_ffn + l * d},
            {"ffn_gate", 2, h, d, w1 + l * h * d},        {"ffn_down", 2, d, h, w2 + l * d * h},
            {"ffn_up", 2, h, d, w3 + l * h * d},
        };
        for (int i = 0; i < 9; i++) {
            char tn[64];
            snprintf(tn, sizeof tn, "blk.%lld.%s.weight", (long long)l, t[i].n);
            if ((st = add(w, tn, t[i].nd, t[i].d0, t[i].d1, t[i].base)) < 0) goto done;
        }
    }
    if ((st = add(w, "output_norm.weight", 1, d, 1, rms_final)) < 0) goto done;
    if (wcls && (st = add(w, "output.weight", 2, V, d, wcls)) < 0) goto done;
    st = gguf_w_write_file(w, out_path);
done:
    gguf_w_free(w);
    vocab_free(&voc);
    vc_mapfile_close(&m);
    return st;
}

#ifndef LLAMA2C_CONVERT_NO_MAIN
int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.bin TOKENIZER.bin OUT.gguf\n"
                        "Converts a llama2.c checkpoint and its tokenizer to a GGUF (llama arch, F32).\n",
                argv[0]);
        return 2;
    }
    if (l2c_convert(argv[1], argv[2], argv[3]) < 0) {
        fprintf(stderr, "llama2c_convert: %s\n", vc_err_msg());
        return 1;
    }
    fprintf(stderr, "llama2c_convert: wrote %s\n", argv[3]);
    return 0;
}
#endif
