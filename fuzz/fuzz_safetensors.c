/* fuzz_safetensors — libFuzzer target for the safetensors reader.
 *
 * Parses the input with st_open_memory and, when it is accepted, touches
 * every tensor (lookup by name, first and last data byte) and metadata.
 *
 * Seeds: VLLM_FUZZ_EMIT_SEEDS=DIR ./fuzz_safetensors writes a few small
 * valid files into DIR and exits (scripts/fuzz_smoke.sh).
 */
#include "model/safetensors.h"
#include "fuzz_seeds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_model *m = st_open_memory(data, size, "fuzz.safetensors");
    if (!m) return 0;
    for (int64_t i = 0; i <= st_n_tensors(m); i++) {
        const st_tensor *t = st_tensor_at(m, i);
        if (!t) continue;
        if (st_find(m, t->name) != t) abort();
        if (t->nbytes) g_sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        g_sink += (uint64_t)t->numel + (uint64_t)t->dtype + (uint64_t)st_dtype_bits(t->dtype_str);
        for (int d = 0; d < t->ndim; d++) g_sink += (uint64_t)t->shape[d];
    }
    const char *fmt = st_metadata(m, "format");
    if (fmt) g_sink += strlen(fmt);
    g_sink += (uint64_t)st_n_shards(m) + strlen(st_shard_path(m, 0));
    st_close(m);
    return 0;
}

static void emit(const char *dir, const char *name, const char *json, size_t ndata) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    uint64_t h = strlen(json);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(h >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(json, 1, h, f);
    for (size_t i = 0; i < ndata; i++) fputc((int)(i * 37 & 0xff), f);
    fclose(f);
}

static void emit_seeds(const char *dir) {
    emit(dir, "empty.safetensors", "{}", 0);
    emit(dir, "basic.safetensors",
         "{\"__metadata__\":{\"format\":\"pt\"},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
         "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
         "\"s\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[32,33]},"
         "\"f4\":{\"dtype\":\"F4\",\"shape\":[1,4],\"data_offsets\":[33,35]},"
         "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[35,35]}}   ",
         35);
    emit(dir, "fp8.safetensors",
         "{\"model.layers.0.mlp.down_proj.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[4,8],\"data_offsets\":[0,32]},"
         "\"model.layers.0.mlp.down_proj.weight_scale_inv\":{\"dtype\":\"F32\",\"shape\":[1,1],"
         "\"data_offsets\":[32,36]}}",
         36);
}

FUZZ_SEEDS_INIT(emit_seeds)
