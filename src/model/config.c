#include "model/config.h"

#include "base/err.h"

#include <stdint.h>
#include <string.h>

void mdl_config_init(mdl_config *c) {
    memset(c, 0, sizeof *c);
    c->rms_eps = 1e-6f;
    c->rope_theta = 10000.0f;
    c->rope_factor = 1.0f;
    c->bos_id = -1;
}

bool mdl_config_is_eos(const mdl_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return true;
    return false;
}

int32_t mdl_config_layer_window(const mdl_config *c, int64_t layer) {
    if (c->sliding_window <= 0) return 0;
    if (c->swa_pattern > 0 && (layer + 1) % c->swa_pattern == 0) return 0;
    return (int32_t)c->sliding_window;
}

int mdl_config_validate(const mdl_config *c, const char *origin) {
    const int64_t lim = (int64_t)1 << 24;
#define POS(f)                                                                                    \
    if (c->f <= 0 || c->f > lim)                                                                  \
        return vc_err_set(VC_ERR_FORMAT, "%s: %s = %lld is out of range", origin, #f, (long long)c->f);
    POS(hidden) POS(n_layers) POS(n_heads) POS(n_kv_heads) POS(head_dim) POS(intermediate)
    POS(vocab) POS(max_pos)
#undef POS
    if (c->n_layers > 4096) return vc_err_set(VC_ERR_FORMAT, "%s: too many layers (%lld)", origin, (long long)c->n_layers);
    if (c->n_heads % c->n_kv_heads)
        return vc_err_set(VC_ERR_FORMAT, "%s: num heads %lld not a multiple of kv heads %lld", origin,
                          (long long)c->n_heads, (long long)c->n_kv_heads);
    if (c->rot_dim <= 0 || c->rot_dim > c->head_dim || c->rot_dim % 2)
        return vc_err_set(VC_ERR_FORMAT, "%s: bad rotary dimension %lld (head_dim %lld)", origin,
                          (long long)c->rot_dim, (long long)c->head_dim);
    if (!(c->rms_eps > 0) || !(c->rope_theta > 0) || !(c->rope_factor > 0))
        return vc_err_set(VC_ERR_FORMAT, "%s: rms eps, rope theta and rope factor must be > 0", origin);
    if (c->sliding_window < 0 || c->sliding_window > INT32_MAX || c->swa_pattern < 0 || c->rope_theta_swa < 0 ||
        !(c->attn_scale >= 0) || !(c->norm_w_offset >= 0))
        return vc_err_set(VC_ERR_FORMAT, "%s: bad sliding window / attention scale / norm settings", origin);
    if (c->rope_scaling == MDL_ROPE_LLAMA3 &&
        (c->rope_orig_max_pos <= 0 || !(c->rope_low_freq_factor > 0) ||
         !(c->rope_high_freq_factor > c->rope_low_freq_factor)))
        return vc_err_set(VC_ERR_FORMAT, "%s: incomplete llama3 rope_scaling", origin);
    return VC_OK;
}
