/* fuzz_config — libFuzzer target for the Hugging Face config.json reader.
 *
 * The input is a config.json document: mdl_config_from_hf_text parses and
 * validates it (every outcome is 0 or an error status, never a crash, a
 * hang or a leak); when accepted, the per-layer window rule and the EOS
 * lookup run over it too.
 *
 * Seeds: VLLM_FUZZ_EMIT_SEEDS=DIR ./fuzz_config writes the configs of the
 * supported families (Llama with llama3 RoPE scaling, Qwen3, Mistral with
 * a sliding window, Gemma 3 with its layer pattern) into DIR and exits
 * (scripts/fuzz_smoke.sh).
 */
#include "base/err.h"
#include "model/config.h"
#include "fuzz_seeds.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int64_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mdl_config c;
    if (mdl_config_from_hf_text(&c, (const char *)data, size, "fuzz/config.json") < 0) {
        vc_err_clear();
        return 0;
    }
    int64_t layers = c.n_layers < 4096 ? c.n_layers : 4096;
    for (int64_t l = 0; l < layers; l++) g_sink += mdl_config_layer_window(&c, l);
    for (int32_t id = -1; id < 4; id++) g_sink += mdl_config_is_eos(&c, id);
    g_sink += c.head_dim + c.rot_dim + c.n_kv_heads + c.vocab;
    return 0;
}

static void emit(const char *dir, const char *name, const char *json) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(json, f);
    fclose(f);
}

static void emit_seeds(const char *dir) {
    emit(dir, "llama3.json",
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":256,"
         "\"max_position_embeddings\":4096,\"rms_norm_eps\":1e-5,\"rope_theta\":500000.0,"
         "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
         "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192},"
         "\"bos_token_id\":1,\"eos_token_id\":[2,3],\"tie_word_embeddings\":false}");
    emit(dir, "qwen3.json",
         "{\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"intermediate_size\":96,"
         "\"vocab_size\":300,\"max_position_embeddings\":40960,\"rms_norm_eps\":1e-6,\"rope_theta\":1000000,"
         "\"tie_word_embeddings\":true,\"eos_token_id\":2}");
    emit(dir, "mistral.json",
         "{\"model_type\":\"mistral\",\"hidden_size\":64,\"num_hidden_layers\":3,\"num_attention_heads\":8,"
         "\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":512,\"sliding_window\":128,"
         "\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}}");
    emit(dir, "gemma3.json",
         "{\"architectures\":[\"Gemma3ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":6,"
         "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":16,\"intermediate_size\":128,"
         "\"vocab_size\":256,\"max_position_embeddings\":32768,\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0,"
         "\"rope_local_base_freq\":10000.0,\"sliding_window\":512,\"query_pre_attn_scalar\":16,"
         "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"sliding_attention\","
         "\"sliding_attention\",\"sliding_attention\",\"full_attention\"],"
         "\"final_logit_softcapping\":null,\"attn_logit_softcapping\":null}");
}

FUZZ_SEEDS_INIT(emit_seeds)
