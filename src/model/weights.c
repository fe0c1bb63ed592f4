#include "model/weights.h"

#include "base/err.h"
#include "model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct mdl_wsrc {
    char path[1024];
    gguf_ctx *gguf;
    st_model *st;
    bool sandwich; /* Gemma 2/3 naming: HF post_attention_layernorm is not the pre-FFN norm */
};

bool mdl_path_is_gguf(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return false;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char magic[4] = {0};
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    return n == 4 && !memcmp(magic, "GGUF", 4);
}

mdl_wsrc *mdl_wsrc_open(const char *path, mdl_config *cfg) {
    mdl_wsrc *w = calloc(1, sizeof *w);
    if (!w) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    snprintf(w->path, sizeof w->path, "%s", path);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        vc_err_set(VC_ERR_IO, "%s: no such file or directory", path);
        goto fail;
    }
    if (S_ISDIR(sb.st_mode)) {
        char cfg_path[1100];
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", path);
        if (mdl_config_from_hf(cfg, cfg_path) < 0) goto fail;
        w->sandwich = !strcmp(cfg->arch, "gemma3");
        w->st = st_open_dir(path);
        if (!w->st) goto fail;
    } else if (mdl_path_is_gguf(path)) {
        w->gguf = gguf_open(path);
        if (!w->gguf) goto fail;
        if (mdl_config_from_gguf(cfg, w->gguf) < 0) goto fail;
    } else {
        vc_err_set(VC_ERR_FORMAT, "%s: neither a .gguf file nor a folder with config.json", path);
        goto fail;
    }
    return w;
fail:
    mdl_wsrc_close(w);
    return NULL;
}

void mdl_wsrc_close(mdl_wsrc *w) {
    if (!w) return;
    if (w->gguf) gguf_close(w->gguf);
    if (w->st) st_close(w->st);
    free(w);
}

const gguf_ctx *mdl_wsrc_gguf(const mdl_wsrc *w) { return w->gguf; }
const char *mdl_wsrc_path(const mdl_wsrc *w) { return w->path; }

/* Canonical (GGUF) -> Hugging Face names for the Llama family. */
static const struct {
    const char *canon, *hf;
} g_global[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};
static const struct {
    const char *canon, *hf;
} g_layer[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

/* Gemma 2/3 "sandwich" norms, consulted before g_layer (GGUF names per llama.cpp). */
static const struct {
    const char *canon, *hf;
} g_layer_sandwich[] = {
    {"ffn_norm", "pre_feedforward_layernorm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
};

static bool canon_to_hf(const char *canon, bool sandwich, char *out, size_t cap) {
    const char *dot = strrchr(canon, '.'); /* ".weight" / ".bias" */
    if (!dot) return false;
    size_t stem_len = (size_t)(dot - canon);
    char stem[128];
    if (stem_len >= sizeof stem) return false;
    memcpy(stem, canon, stem_len);
    stem[stem_len] = 0;
    int layer;
    int consumed = 0;
    if (sscanf(stem, "blk.%d.%n", &layer, &consumed) == 1 && consumed > 0) {
        for (size_t i = 0; sandwich && i < sizeof g_layer_sandwich / sizeof g_layer_sandwich[0]; i++)
            if (!strcmp(stem + consumed, g_layer_sandwich[i].canon)) {
                snprintf(out, cap, "model.layers.%d.%s%s", layer, g_layer_sandwich[i].hf, dot);
                return true;
            }
        for (size_t i = 0; i < sizeof g_layer / sizeof g_layer[0]; i++)
            if (!strcmp(stem + consumed, g_layer[i].canon)) {
                snprintf(out, cap, "model.layers.%d.%s%s", layer, g_layer[i].hf, dot);
                return true;
            }
        return false;
    }
    for (size_t i = 0; i < sizeof g_global / sizeof g_global[0]; i++)
        if (!strcmp(stem, g_global[i].canon)) {
            snprintf(out, cap, "%s%s", g_global[i].hf, dot);
            return true;
        }
    return false;
}

bool mdl_wsrc_find(const mdl_wsrc *w, const char *canon, mdl_wt *out) {
    memset(out, 0, sizeof *out);
    if (w->gguf) {
        const gguf_tensor_info *t = gguf_find_tensor(w->gguf, canon);
        if (!t) return false;
        snprintf(out->name, sizeof out->name, "%s", t->name);
        out->dtype = t->dtype;
        out->ggml_type = (int)t->ggml_type;
        out->ndim = t->ndim;
        for (int i = 0; i < t->ndim; i++) out->shape[i] = t->shape[i];
        out->data = t->data;
        out->nbytes = t->nbytes;
        return true;
    }
    char hf[150];
    if (!canon_to_hf(canon, w->sandwich, hf, sizeof hf)) return false;
    const st_tensor *t = st_find(w->st, hf);
    if (!t) return false;
    snprintf(out->name, sizeof out->name, "%s", hf);
    out->dtype = t->dtype;
    out->ggml_type = -1;
    out->ndim = t->ndim;
    for (int i = 0; i < t->ndim && i < 4; i++) out->shape[i] = t->shape[i];
    out->data = t->data;
    out->nbytes = t->nbytes;
    return true;
}
