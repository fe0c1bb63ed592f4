/* fuzz_gguf — libFuzzer target for the GGUF reader.
 *
 * Parses the input with gguf_open_memory and, when it is accepted, calls
 * every getter on every key and tensor and touches the first and last byte
 * of each tensor's data (ASan checks they lie inside the input).
 *
 * Seeds: VLLM_FUZZ_EMIT_SEEDS=DIR ./fuzz_gguf writes a few small valid
 * GGUF files built with gguf_writer into DIR and exits (scripts/fuzz_smoke.sh).
 */
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "fuzz_seeds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t g_sink;

static void touch_kv(const gguf_ctx *g, int64_t i) {
    const char *k = gguf_kv_key(g, i);
    uint32_t u;
    int64_t v;
    float f;
    bool b;
    g_sink += gguf_kv_type(g, i) + (uint64_t)gguf_find_key(g, k);
    if (gguf_get_u32(g, k, &u)) g_sink += u;
    if (gguf_get_i64(g, k, &v)) g_sink += (uint64_t)v;
    if (gguf_get_f32(g, k, &f)) g_sink += f == f;
    if (gguf_get_bool(g, k, &b)) g_sink += b;
    const char *s = gguf_get_string(g, k);
    if (s) g_sink += strlen(s);
    gguf_str sv = gguf_get_str(g, k);
    if (sv.n) g_sink += (uint8_t)sv.p[sv.n - 1];
    gguf_type et;
    uint64_t n;
    if (!gguf_get_arr_info(g, k, &et, &n)) return;
    /* Every element of small arrays; first/last/middle of big ones. */
    uint64_t idx[3] = {0, n / 2, n ? n - 1 : 0};
    for (uint64_t j = 0; j < (n <= 64 ? n : 3) + 1; j++) {
        uint64_t e = n <= 64 ? j : j < 3 ? idx[j] : n; /* last round: out of range */
        gguf_str es = gguf_get_arr_str(g, k, e);
        if (es.n) g_sink += (uint8_t)es.p[0] + (uint8_t)es.p[es.n - 1];
        if (gguf_get_arr_i64(g, k, e, &v)) g_sink += (uint64_t)v;
        if (gguf_get_arr_f32(g, k, e, &f)) g_sink += f == f;
    }
    const uint8_t *raw = gguf_get_arr_data(g, k, &et, &n);
    if (raw && n) g_sink += raw[n * gguf_type_size(et) - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_ctx *g = gguf_open_memory(data, size, "fuzz.gguf");
    if (!g) return 0;
    g_sink += gguf_version(g) + gguf_alignment(g) + gguf_data_offset(g) + strlen(gguf_path(g));
    for (int64_t i = 0; i < gguf_n_kv(g); i++) touch_kv(g, i);
    for (int64_t i = 0; i <= gguf_n_tensors(g); i++) {
        const gguf_tensor_info *t = gguf_tensor(g, i);
        if (!t) continue;
        if (gguf_find_tensor(g, t->name) != t) abort();
        if (t->nbytes) g_sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        g_sink += (uint64_t)t->shape[0] + (uint64_t)t->dtype + strlen(gguf_ggml_type_name(t->ggml_type));
    }
    gguf_close(g);
    return 0;
}

static void emit(const char *dir, const char *name, gguf_writer *w) {
    void *buf;
    size_t n;
    char path[4096];
    if (gguf_w_write_memory(w, &buf, &n) < 0) return;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(buf, 1, n, f);
        fclose(f);
    }
    free(buf);
    gguf_w_free(w);
}

static void emit_seeds(const char *dir) {
    static float f32[64];
    static uint16_t f16[64];
    static uint8_t q8[2 * 34], q4k[144];
    for (int i = 0; i < 64; i++) { f32[i] = (float)i * 0.5f; f16[i] = rt_f32_to_f16((float)i); }

    gguf_writer *w = gguf_w_create(0); /* metadata of every type, no tensors */
    gguf_w_set_str(w, "general.architecture", "llama");
    gguf_w_set_u8(w, "a", 1); gguf_w_set_i8(w, "b", -1); gguf_w_set_u16(w, "c", 2);
    gguf_w_set_i16(w, "d", -2); gguf_w_set_u32(w, "e", 3); gguf_w_set_i32(w, "f", -3);
    gguf_w_set_u64(w, "g", 4); gguf_w_set_i64(w, "h", -4); gguf_w_set_f32(w, "i", 0.5f);
    gguf_w_set_f64(w, "j", 0.25); gguf_w_set_bool(w, "k", true);
    const char *toks[4] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81hi"};
    gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    gguf_w_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, f32, 4);
    int32_t types[4] = {2, 3, 3, 1};
    gguf_w_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 4);
    uint8_t nested[] = {GGUF_TYPE_ARRAY, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, GGUF_TYPE_UINT8, 0, 0, 0,
                        1, 0, 0, 0, 0, 0, 0, 0, 7};
    gguf_w_set_raw(w, "nested", GGUF_TYPE_ARRAY, nested, sizeof nested);
    emit(dir, "meta.gguf", w);

    w = gguf_w_create(0); /* tensors of several types */
    gguf_w_set_str(w, "general.architecture", "llama");
    gguf_w_set_u32(w, "llama.block_count", 1);
    gguf_w_add_tensor(w, "token_embd.weight", RT_F32, 2, (int64_t[]){4, 16}, f32, sizeof f32);
    gguf_w_add_tensor(w, "blk.0.attn_q.weight", RT_F16, 2, (int64_t[]){2, 32}, f16, sizeof f16);
    gguf_w_add_tensor(w, "blk.0.attn_k.weight", RT_Q8_0, 2, (int64_t[]){2, 32}, q8, sizeof q8);
    gguf_w_add_tensor(w, "blk.0.ffn_up.weight", RT_Q4_K, 1, (int64_t[]){256}, q4k, sizeof q4k);
    gguf_w_add_tensor(w, "output_norm.weight", RT_F32, 1, (int64_t[]){8}, f32, 32);
    emit(dir, "tensors.gguf", w);

    w = gguf_w_create(64); /* non-default alignment */
    gguf_w_add_tensor(w, "x", RT_F32, 3, (int64_t[]){2, 2, 2}, f32, 32);
    gguf_w_add_tensor(w, "y", RT_BF16, 1, (int64_t[]){4}, f16, 8);
    emit(dir, "align64.gguf", w);
}

FUZZ_SEEDS_INIT(emit_seeds)
