/* config — the model hyper-parameters every architecture file reads,
 * filled from a Hugging Face config.json or from GGUF metadata so the two
 * formats meet in one struct.
 */
#ifndef MDL_CONFIG_H
#define MDL_CONFIG_H

#include "model/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MDL_MAX_EOS 8

typedef enum { MDL_ROPE_NONE = 0, MDL_ROPE_LINEAR, MDL_ROPE_LLAMA3 } mdl_rope_scaling;

typedef struct {
    char arch[64];          /* family key: "llama", "mistral", "qwen2", "qwen3", "gemma3" */
    int64_t hidden;         /* d_model */
    int64_t n_layers;
    int64_t n_heads;
    int64_t n_kv_heads;
    int64_t head_dim;
    int64_t intermediate;   /* FFN width */
    int64_t vocab;
    int64_t max_pos;        /* max_position_embeddings / context_length */
    float rms_eps;
    float rope_theta;
    int64_t rot_dim;        /* rotary dims per head (== head_dim unless partial) */
    bool rope_neox;         /* HF rotate_half layout; false = adjacent pairs (GGUF llama) */
    mdl_rope_scaling rope_scaling;
    float rope_factor;      /* linear / llama3 factor */
    float rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_orig_max_pos;
    bool tie_embeddings;    /* lm_head shares token embeddings */
    int64_t sliding_window; /* 0 = none; keys visible iff pos - key_pos < sliding_window */
    int32_t swa_pattern;    /* 0: the window (if any) applies to every layer (Mistral);
                               N > 0: layer l is global (full attention) iff (l + 1) % N == 0,
                               the others slide (Gemma 3: 6 -> 5 local : 1 global) */
    float rope_theta_swa;   /* RoPE base of sliding layers, unscaled; 0 = same table as global */
    float attn_scale;       /* softmax scale of q·k; 0 = 1/sqrt(head_dim) */
    float norm_w_offset;    /* RMSNorm multiplies by (offset + w): 1 for HF Gemma, whose
                               checkpoints store w - 1; GGUF converters bake the +1 in */
    int32_t bos_id;         /* -1 if unknown */
    int32_t eos_ids[MDL_MAX_EOS];
    int n_eos;
} mdl_config;

void mdl_config_init(mdl_config *c);
/* Parse <dir>/config.json. Errors name the file and key. */
int mdl_config_from_hf(mdl_config *c, const char *config_json_path);
/* The same from a config.json document in memory (n bytes; origin names
 * it in messages): fuzz/fuzz_config.c. */
int mdl_config_from_hf_text(mdl_config *c, const char *text, size_t n, const char *origin);
int mdl_config_from_gguf(mdl_config *c, const gguf_ctx *g);
/* Shared sanity checks (positive sizes, divisibility, limits). */
int mdl_config_validate(const mdl_config *c, const char *origin);
bool mdl_config_is_eos(const mdl_config *c, int32_t id);
/* Attention window of layer l (0 = full attention) from sliding_window + swa_pattern. */
int32_t mdl_config_layer_window(const mdl_config *c, int64_t layer);

#endif
