/* weights — one view over a model's tensors whatever the file format.
 *
 * Opens a .gguf file or a Hugging Face folder (config.json + safetensors,
 * sharded or not), fills the mdl_config, and looks tensors up by their
 * GGUF-style canonical name ("blk.3.attn_q.weight"); for safetensors the
 * canonical name is translated to the HF name
 * ("model.layers.3.self_attn.q_proj.weight"). Data stays in the mmap.
 */
#ifndef MDL_WEIGHTS_H
#define MDL_WEIGHTS_H

#include "model/config.h"
#include "model/gguf.h"

#include <stdbool.h>

typedef struct {
    char name[160];     /* name as found in the file */
    int dtype;          /* rt_dtype, -1 if unsupported */
    int ggml_type;      /* GGUF type id (-1 for safetensors): lets the loader repack
                           a type it cannot compute with (mdl_repack_*) */
    int ndim;
    int64_t shape[4];   /* row-major, outermost first */
    const void *data;
    size_t nbytes;
} mdl_wt;

typedef struct mdl_wsrc mdl_wsrc;

/* path: a .gguf file or a folder with config.json. NULL -> vc_err_msg(). */
mdl_wsrc *mdl_wsrc_open(const char *path, mdl_config *cfg);
void mdl_wsrc_close(mdl_wsrc *w);
/* Look up by canonical (GGUF) name; false if absent. */
bool mdl_wsrc_find(const mdl_wsrc *w, const char *canon, mdl_wt *out);
/* The GGUF context (for the tokenizer), or NULL for safetensors. */
const gguf_ctx *mdl_wsrc_gguf(const mdl_wsrc *w);
const char *mdl_wsrc_path(const mdl_wsrc *w);
bool mdl_path_is_gguf(const char *path);

/* Lossless load-time repacking (weights_repack.c). */
#define MDL_GGML_Q5_0 6
bool mdl_repack_supported(uint32_t ggml_type);
/* n_blocks Q5_0 blocks (22 B each) -> as many Q8_0 blocks (rt_block_q8_0), same values. */
void mdl_repack_q5_0_to_q8_0(const void *src, void *dst, int64_t n_blocks);

#endif
