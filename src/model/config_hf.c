/* config_hf — mdl_config from a Hugging Face config.json.
 * Handles transformers 4.x (rope_theta + rope_scaling) and 5.x
 * (rope_parameters) spellings, and Gemma 3's per-layer-type variants of
 * both (parse_gemma3). */
#include "model/config.h"

#include "base/err.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static const struct {
    const char *hf_arch;
    const char *model_type;
    const char *family;
} g_archs[] = {
    {"LlamaForCausalLM", "llama", "llama"},
    {"MistralForCausalLM", "mistral", "mistral"},
    {"Qwen2ForCausalLM", "qwen2", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3", "qwen3"},
    {"Gemma3ForCausalLM", "gemma3_text", "gemma3"},
};

/* Gemma 3 text keys (layer pattern, two RoPE tables, scale, (1 + w) norms). */
static int parse_gemma3(mdl_config *c, const json_t *root, const char *path);

static int get_int(const json_t *o, const char *key, int64_t *out, bool required, const char *path) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return vc_err_set(VC_ERR_FORMAT, "%s: missing key '%s'", path, key);
        return 0;
    }
    if (!json_is_integer(v)) return vc_err_set(VC_ERR_FORMAT, "%s: '%s' must be an integer", path, key);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int get_num(const json_t *o, const char *key, float *out, const char *path) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return vc_err_set(VC_ERR_FORMAT, "%s: '%s' must be a number", path, key);
    *out = (float)json_number_value(v);
    return 0;
}

/* One RoPE parameter object {rope_theta?, rope_type|type, factor, ...}. */
static int parse_rope_obj(mdl_config *c, const json_t *rs, const char *path) {
    if (!rs || json_is_null(rs)) return 0;
    if (!json_is_object(rs)) return vc_err_set(VC_ERR_FORMAT, "%s: rope_scaling must be an object", path);
    if (get_num(rs, "rope_theta", &c->rope_theta, path) < 0) return -1;
    const json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : "default";
    if (!strcmp(type, "default")) return 0;
    if (get_num(rs, "factor", &c->rope_factor, path) < 0) return -1;
    if (!strcmp(type, "linear")) {
        c->rope_scaling = MDL_ROPE_LINEAR;
    } else if (!strcmp(type, "llama3")) {
        c->rope_scaling = MDL_ROPE_LLAMA3;
        if (get_num(rs, "low_freq_factor", &c->rope_low_freq_factor, path) < 0 ||
            get_num(rs, "high_freq_factor", &c->rope_high_freq_factor, path) < 0 ||
            get_int(rs, "original_max_position_embeddings", &c->rope_orig_max_pos, true, path) < 0)
            return -1;
    } else {
        return vc_err_set(VC_ERR_UNSUPPORTED, "%s: rope scaling type '%s' is not supported yet", path, type);
    }
    return 0;
}

static int parse_rope(mdl_config *c, const json_t *root, const char *path) {
    /* transformers 5: rope_parameters {rope_theta, rope_type, ...};
     * 4.x: rope_theta at top level, rope_scaling {type|rope_type, ...}. */
    if (get_num(root, "rope_theta", &c->rope_theta, path) < 0) return -1;
    const json_t *rs = json_object_get(root, "rope_parameters");
    if (!json_is_object(rs)) rs = json_object_get(root, "rope_scaling");
    return parse_rope_obj(c, rs, path);
}

static int parse_gemma3(mdl_config *c, const json_t *root, const char *path) {
    /* transformers reads only hidden_activation (default gelu_pytorch_tanh) for Gemma 3. */
    const json_t *act = json_object_get(root, "hidden_activation");
    if (json_is_string(act) && strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0)
        return vc_err_set(VC_ERR_UNSUPPORTED, "%s: Gemma 3 activation '%s' is not supported (gelu_pytorch_tanh only)",
                          path, json_string_value(act));
    const char *unsup[] = {"final_logit_softcapping", "attn_logit_softcapping"};
    for (size_t i = 0; i < sizeof unsup / sizeof unsup[0]; i++) {
        const json_t *v = json_object_get(root, unsup[i]);
        if (v && !json_is_null(v)) return vc_err_set(VC_ERR_UNSUPPORTED, "%s: '%s' is not supported", path, unsup[i]);
    }
    if (json_is_true(json_object_get(root, "use_bidirectional_attention")))
        return vc_err_set(VC_ERR_UNSUPPORTED, "%s: bidirectional attention (EmbeddingGemma) is not supported", path);
    c->norm_w_offset = 1.0f; /* Gemma3RMSNorm: x_hat * (1 + w) */
    float qpas = 256.0f;
    if (get_num(root, "query_pre_attn_scalar", &qpas, path) < 0) return -1;
    if (!(qpas > 0)) return vc_err_set(VC_ERR_FORMAT, "%s: query_pre_attn_scalar must be > 0", path);
    c->attn_scale = 1.0f / sqrtf(qpas);
    /* RoPE: global layers use rope_theta (default 1e6) with the scaling, local
     * layers an unscaled table at the local base (default 1e4). transformers 5
     * nests both under rope_parameters.{full_attention,sliding_attention}. */
    c->rope_theta = 1000000.0f;
    c->rope_theta_swa = 10000.0f;
    const json_t *rp = json_object_get(root, "rope_parameters");
    const json_t *full = json_is_object(rp) ? json_object_get(rp, "full_attention") : NULL;
    if (json_is_object(full)) {
        if (parse_rope_obj(c, full, path) < 0) return -1;
        const json_t *loc = json_object_get(rp, "sliding_attention");
        if (json_is_object(loc)) {
            const json_t *t = json_object_get(loc, "rope_type");
            if (json_is_string(t) && strcmp(json_string_value(t), "default") != 0)
                return vc_err_set(VC_ERR_UNSUPPORTED, "%s: scaled RoPE on sliding layers is not supported", path);
            if (get_num(loc, "rope_theta", &c->rope_theta_swa, path) < 0) return -1;
        }
    } else {
        if (parse_rope(c, root, path) < 0) return -1;
        if (get_num(root, "rope_local_base_freq", &c->rope_theta_swa, path) < 0) return -1;
    }
    /* Layer pattern: layer_types (a list) or the legacy sliding_window_pattern
     * (default 6). We hold it as a period, so the list must be periodic. */
    c->swa_pattern = 6;
    int64_t pat = 6;
    if (get_int(root, "sliding_window_pattern", &pat, false, path) < 0) return -1;
    const json_t *lt = json_object_get(root, "layer_types");
    if (json_is_array(lt)) {
        if ((int64_t)json_array_size(lt) != c->n_layers)
            return vc_err_set(VC_ERR_FORMAT, "%s: layer_types has %zu entries for %lld layers", path,
                              json_array_size(lt), (long long)c->n_layers);
        pat = c->n_layers + 1; /* no global layer */
        for (size_t i = 0; i < json_array_size(lt); i++) {
            const char *t = json_string_value(json_array_get(lt, i));
            if (!t || (strcmp(t, "full_attention") != 0 && strcmp(t, "sliding_attention") != 0))
                return vc_err_set(VC_ERR_FORMAT, "%s: layer_types[%zu] is not full_attention/sliding_attention",
                                  path, i);
            if (!strcmp(t, "full_attention") && pat == c->n_layers + 1) pat = (int64_t)i + 1;
        }
        for (size_t i = 0; i < json_array_size(lt); i++) {
            bool full = !strcmp(json_string_value(json_array_get(lt, i)), "full_attention");
            if (full != (((int64_t)i + 1) % pat == 0))
                return vc_err_set(VC_ERR_UNSUPPORTED, "%s: layer_types is not a periodic local/global pattern", path);
        }
    }
    if (pat <= 0 || pat > INT32_MAX) return vc_err_set(VC_ERR_FORMAT, "%s: bad sliding_window_pattern", path);
    c->swa_pattern = (int32_t)pat;
    const json_t *sw = json_object_get(root, "sliding_window");
    c->sliding_window = json_is_integer(sw) ? json_integer_value(sw) : 4096;
    if (c->sliding_window <= 0) return vc_err_set(VC_ERR_FORMAT, "%s: sliding_window must be > 0", path);
    return 0;
}

static int parse_ids(mdl_config *c, const json_t *root) {
    json_t *b = json_object_get(root, "bos_token_id");
    if (json_is_integer(b)) c->bos_id = (int32_t)json_integer_value(b);
    json_t *e = json_object_get(root, "eos_token_id");
    if (json_is_integer(e)) {
        c->eos_ids[c->n_eos++] = (int32_t)json_integer_value(e);
    } else if (json_is_array(e)) {
        size_t i;
        json_t *v;
        json_array_foreach(e, i, v) {
            if (json_is_integer(v) && c->n_eos < MDL_MAX_EOS) c->eos_ids[c->n_eos++] = (int32_t)json_integer_value(v);
        }
    }
    return 0;
}

/* The config of a parsed config.json document (root; path names it in
 * messages); root stays the caller's. */
static int from_root(mdl_config *c, json_t *root, const char *path) {
    int rc = VC_ERR_FORMAT;
    if (!json_is_object(root)) {
        vc_err_set(VC_ERR_FORMAT, "%s: not a JSON object", path);
        goto done;
    }
    /* Architecture: architectures[0], falling back to model_type. */
    const char *hf_arch = NULL, *model_type = NULL;
    json_t *archs = json_object_get(root, "architectures");
    if (json_is_array(archs) && json_is_string(json_array_get(archs, 0)))
        hf_arch = json_string_value(json_array_get(archs, 0));
    json_t *mt = json_object_get(root, "model_type");
    if (json_is_string(mt)) model_type = json_string_value(mt);
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++) {
        if ((hf_arch && !strcmp(hf_arch, g_archs[i].hf_arch)) ||
            (!hf_arch && model_type && !strcmp(model_type, g_archs[i].model_type))) {
            snprintf(c->arch, sizeof c->arch, "%s", g_archs[i].family);
            break;
        }
    }
    if (!c->arch[0]) {
        rc = vc_err_set(VC_ERR_UNSUPPORTED,
                        "%s: architecture '%s' is not supported (supported: Llama, Mistral, Qwen2, Qwen3, "
                        "Gemma 3 text)",
                        path, hf_arch ? hf_arch : model_type ? model_type : "?");
        goto done;
    }
    if (get_int(root, "hidden_size", &c->hidden, true, path) < 0 ||
        get_int(root, "num_hidden_layers", &c->n_layers, true, path) < 0 ||
        get_int(root, "num_attention_heads", &c->n_heads, true, path) < 0 ||
        get_int(root, "intermediate_size", &c->intermediate, true, path) < 0 ||
        get_int(root, "vocab_size", &c->vocab, true, path) < 0)
        goto done;
    c->n_kv_heads = c->n_heads;
    c->max_pos = 2048;
    if (get_int(root, "num_key_value_heads", &c->n_kv_heads, false, path) < 0 ||
        get_int(root, "max_position_embeddings", &c->max_pos, false, path) < 0)
        goto done;
    c->head_dim = c->n_heads > 0 ? c->hidden / c->n_heads : 0;
    if (get_int(root, "head_dim", &c->head_dim, false, path) < 0) goto done;
    c->rot_dim = c->head_dim;
    c->rope_neox = true; /* HF checkpoints use rotate_half */
    if (get_num(root, "rms_norm_eps", &c->rms_eps, path) < 0) goto done;
    if (parse_rope(c, root, path) < 0) goto done;
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    c->tie_embeddings = json_is_true(tie);
    json_t *sw = json_object_get(root, "sliding_window");
    json_t *use_sw = json_object_get(root, "use_sliding_window");
    if (json_is_integer(sw) && !json_is_false(use_sw)) c->sliding_window = json_integer_value(sw);
    if (!strcmp(c->arch, "gemma3") && parse_gemma3(c, root, path) < 0) {
        rc = vc_err_status(); /* the status parse_gemma3 recorded (format vs unsupported) */
        goto done;
    }
    parse_ids(c, root);
    rc = mdl_config_validate(c, path);
done:
    return rc;
}

int mdl_config_from_hf(mdl_config *c, const char *path) {
    mdl_config_init(c);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) return vc_err_set(VC_ERR_FORMAT, "%s: invalid JSON at line %d: %s", path, jerr.line, jerr.text);
    int rc = from_root(c, root, path);
    json_decref(root);
    return rc;
}

int mdl_config_from_hf_text(mdl_config *c, const char *text, size_t n, const char *origin) {
    mdl_config_init(c);
    json_error_t jerr;
    json_t *root = json_loadb(text, n, 0, &jerr);
    if (!root) return vc_err_set(VC_ERR_FORMAT, "%s: invalid JSON at line %d: %s", origin, jerr.line, jerr.text);
    int rc = from_root(c, root, origin);
    json_decref(root);
    return rc;
}
