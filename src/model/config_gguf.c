/* config_gguf — mdl_config from GGUF metadata ("<arch>.*" keys). */
#include "model/config.h"

#include "base/err.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool key_u(const gguf_ctx *g, const char *arch, const char *suffix, int64_t *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_i64(g, key, out);
}

static bool key_f(const gguf_ctx *g, const char *arch, const char *suffix, float *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32(g, key, out);
}

/* Gemma 3 as llama.cpp reads it: the converter bakes the (1 + w) of every
 * norm into the weights, the 5:1 local/global pattern and the local RoPE
 * base (10000 unless rope.freq_base_swa says otherwise) are implied by the
 * architecture, and there is no query_pre_attn_scalar key: 27B (62 layers)
 * scales by 1/sqrt(hidden/heads), the others by 1/sqrt(head_dim). */
static int gemma3_keys(mdl_config *c, const gguf_ctx *g, const char *path) {
    float softcap = 0.0f;
    if (key_f(g, "gemma3", "final_logit_softcapping", &softcap) && softcap > 0)
        return vc_err_set(VC_ERR_UNSUPPORTED, "%s: final logit softcapping is not supported", path);
    if (key_f(g, "gemma3", "attn_logit_softcapping", &softcap) && softcap > 0)
        return vc_err_set(VC_ERR_UNSUPPORTED, "%s: attention logit softcapping is not supported", path);
    if (!key_u(g, "gemma3", "attention.sliding_window", &c->sliding_window) || c->sliding_window <= 0)
        return vc_err_set(VC_ERR_FORMAT, "%s: missing or bad gemma3.attention.sliding_window", path);
    c->swa_pattern = 6;
    c->rope_theta_swa = 10000.0f;
    key_f(g, "gemma3", "rope.freq_base_swa", &c->rope_theta_swa);
    c->rope_neox = true;
    c->norm_w_offset = 0.0f;
    int64_t per_head = c->n_layers == 62 && c->n_heads > 0 ? c->hidden / c->n_heads : c->head_dim;
    if (per_head <= 0) return vc_err_set(VC_ERR_FORMAT, "%s: bad head size", path);
    c->attn_scale = 1.0f / sqrtf((float)per_head);
    return VC_OK;
}

int mdl_config_from_gguf(mdl_config *c, const gguf_ctx *g) {
    mdl_config_init(c);
    const char *path = gguf_path(g);
    const char *arch = gguf_get_string(g, "general.architecture");
    if (!arch) return vc_err_set(VC_ERR_FORMAT, "%s: missing general.architecture", path);
    static const char *known[] = {"llama", "mistral", "qwen2", "qwen3", "gemma3"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(arch, known[i])) snprintf(c->arch, sizeof c->arch, "%s", arch);
    if (!c->arch[0])
        return vc_err_set(VC_ERR_UNSUPPORTED,
                          "%s: GGUF architecture '%s' is not supported (supported: llama, mistral, qwen2, qwen3, gemma3)",
                          path, arch);
    if (!key_u(g, arch, "embedding_length", &c->hidden) || !key_u(g, arch, "block_count", &c->n_layers) ||
        !key_u(g, arch, "attention.head_count", &c->n_heads) ||
        !key_u(g, arch, "feed_forward_length", &c->intermediate))
        return vc_err_set(VC_ERR_FORMAT, "%s: missing %s.{embedding_length,block_count,attention.head_count,feed_forward_length}",
                          path, arch);
    c->n_kv_heads = c->n_heads;
    key_u(g, arch, "attention.head_count_kv", &c->n_kv_heads);
    c->max_pos = 2048;
    key_u(g, arch, "context_length", &c->max_pos);
    c->head_dim = c->n_heads > 0 ? c->hidden / c->n_heads : 0;
    key_u(g, arch, "attention.key_length", &c->head_dim);
    c->rot_dim = c->head_dim;
    key_u(g, arch, "rope.dimension_count", &c->rot_dim);
    key_f(g, arch, "attention.layer_norm_rms_epsilon", &c->rms_eps);
    key_f(g, arch, "rope.freq_base", &c->rope_theta);
    /* llama.cpp permutes q/k rows of llama-arch weights for adjacent-pair
     * ("normal") RoPE; qwen2/qwen3 keep the HF layout (NeoX). */
    c->rope_neox = strcmp(arch, "llama") != 0 && strcmp(arch, "mistral") != 0;
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *st = gguf_get_string(g, key);
    if (st && strcmp(st, "none") != 0) {
        if (!strcmp(st, "linear")) {
            c->rope_scaling = MDL_ROPE_LINEAR;
            key_f(g, arch, "rope.scaling.factor", &c->rope_factor);
        } else {
            return vc_err_set(VC_ERR_UNSUPPORTED, "%s: rope scaling '%s' not supported yet", path, st);
        }
    }
    /* Llama-3 frequency scaling arrives as a rope_freqs.weight tensor (read by the model). */
    key_u(g, arch, "attention.sliding_window", &c->sliding_window);
    uint64_t n_tok = 0;
    gguf_type et;
    if (gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n_tok)) c->vocab = (int64_t)n_tok;
    key_u(g, arch, "vocab_size", &c->vocab);
    const gguf_tensor_info *emb = gguf_find_tensor(g, "token_embd.weight");
    if (emb && emb->ndim == 2) c->vocab = emb->shape[0];
    c->tie_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    if (!strcmp(arch, "gemma3") && gemma3_keys(c, g, path) < 0) return -1;
    int64_t v;
    if (gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &v)) c->bos_id = (int32_t)v;
    if (gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &v)) c->eos_ids[c->n_eos++] = (int32_t)v;
    if (gguf_get_i64(g, "tokenizer.ggml.eot_token_id", &v) && !mdl_config_is_eos(c, (int32_t)v))
        c->eos_ids[c->n_eos++] = (int32_t)v;
    return mdl_config_validate(c, path);
}
