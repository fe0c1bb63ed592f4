/* tok_core — loading entry points, shared finishing step, getters. */
#include "base/err.h"
#include "base/mapfile.h"
#include "model/gguf.h"
#include "tokenizer/tok_int.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

tok_tokenizer *tok_alloc(const char *name) {
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(name ? name : "tokenizer"))) {
        free(t);
        vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
        return NULL;
    }
    t->bos_id = t->unk_id = t->pad_id = -1;
    t->model.unk_id = -1;
    return t;
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    tok_model_free(&t->model);
    free(t->tokens);
    free(t->special);
    tok_strmap_free(&t->addmap);
    free(t->arena);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        if (t->norm_added) free(t->norm_added[i]);
    }
    free(t->added);
    free(t->norm_added);
    tok_trie_free(&t->trie_raw);
    tok_trie_free(&t->trie_norm);
    tok_norm_free(t->norm);
    free(t->norm);
    tok_pretok_free(t->pretok);
    free(t->pretok);
    tok_dec_free(t->dec);
    free(t->dec);
    free(t->post_prefix);
    free(t->post_suffix);
    free(t->eos_ids);
    free(t->bos_str);
    free(t->eos_str);
    free(t->chat_template);
    free(t->name);
    free(t);
}

int tok_finish(tok_tokenizer *t) {
    size_t n = t->model.n_vocab;
    for (size_t i = 0; i < t->n_added; i++)
        if ((size_t)t->added[i].id + 1 > n) n = (size_t)t->added[i].id + 1;
    t->n_tokens = n;
    t->tokens = calloc(n ? n : 1, sizeof *t->tokens);
    t->special = calloc(n ? n : 1, 1);
    t->norm_added = calloc(t->n_added + 1, sizeof *t->norm_added);
    if (!t->tokens || !t->special || !t->norm_added) return vc_err_set(VC_ERR_OOM, "%s: out of memory", t->name);
    if (t->model.n_vocab) memcpy(t->tokens, t->model.vocab, t->model.n_vocab * sizeof *t->tokens);
    for (size_t i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        t->tokens[a->id] = (tok_str){a->content, (uint32_t)a->n};
        t->special[a->id] = a->special;
        if (a->normalized) {
            vc_strbuf sb = {0};
            if (tok_norm_apply(t->norm, a->content, a->n, &sb) < 0) {
                vc_sb_free(&sb);
                return vc_err_prefix("%s: added token", t->name);
            }
            t->norm_added[i] = vc_sb_steal(&sb);
        }
    }
    if (tok_strmap_init(&t->addmap, t->n_added) < 0) return -1;
    for (size_t i = 0; i < t->n_added; i++) tok_strmap_put(&t->addmap, t->tokens, t->added[i].id);
    if (tok_trie_build(&t->trie_raw, t, false) < 0 || tok_trie_build(&t->trie_norm, t, true) < 0) return -1;
    if (tok_model_finish(&t->model) < 0) return -1;
    t->unk_id = t->model.unk_id;
    return 0;
}

int tok_add_eos(tok_tokenizer *t, int32_t id) {
    if (id < 0) return 0;
    for (size_t i = 0; i < t->n_eos; i++)
        if (t->eos_ids[i] == id) return 0;
    int32_t *v = realloc(t->eos_ids, (t->n_eos + 1) * sizeof *v);
    if (!v) return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    t->eos_ids = v;
    t->eos_ids[t->n_eos++] = id;
    return 0;
}

/* tokenizer_config fields are strings or {"content": ...} objects. */
static const char *cfg_token(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int tok_apply_config(tok_tokenizer *t, const char *text, size_t len, const char *what) {
    json_error_t e;
    json_t *cfg = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &e); /* model_max_length can exceed int64 */
    if (!cfg || !json_is_object(cfg)) {
        json_decref(cfg);
        return vc_err_set(VC_ERR_FORMAT, "%s: invalid JSON (line %d: %s)", what, e.line, e.text);
    }
    int rc = 0;
    const char *bos = cfg_token(cfg, "bos_token"), *eos = cfg_token(cfg, "eos_token");
    const char *pad = cfg_token(cfg, "pad_token"), *unk = cfg_token(cfg, "unk_token");
    if (bos) {
        free(t->bos_str);
        t->bos_str = strdup(bos);
        t->bos_id = tok_token_id(t, bos, strlen(bos));
    }
    if (eos) {
        free(t->eos_str);
        t->eos_str = strdup(eos);
        int32_t id = tok_token_id(t, eos, strlen(eos));
        if (id >= 0) { /* the tokenizer's own eos goes first */
            rc = tok_add_eos(t, id);
            for (size_t i = t->n_eos - 1; rc == 0 && i > 0; i--) {
                int32_t x = t->eos_ids[i];
                t->eos_ids[i] = t->eos_ids[i - 1];
                t->eos_ids[i - 1] = x;
                if (x == id) break;
            }
        }
    }
    if (pad) t->pad_id = tok_token_id(t, pad, strlen(pad));
    if (unk && t->unk_id < 0) t->unk_id = tok_token_id(t, unk, strlen(unk));
    json_t *ct = json_object_get(cfg, "chat_template");
    const char *tmpl = NULL;
    if (json_is_string(ct)) {
        tmpl = json_string_value(ct);
    } else if (json_is_array(ct)) {
        size_t i;
        json_t *it;
        json_array_foreach(ct, i, it) {
            const char *name = json_string_value(json_object_get(it, "name"));
            const char *src = json_string_value(json_object_get(it, "template"));
            if (src && (!tmpl || (name && !strcmp(name, "default")))) tmpl = src;
            if (name && !strcmp(name, "default")) break;
        }
    }
    if (tmpl) {
        free(t->chat_template);
        t->chat_template = strdup(tmpl);
    }
    if ((bos && !t->bos_str) || (eos && !t->eos_str) || (tmpl && !t->chat_template))
        rc = vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    json_decref(cfg);
    return rc;
}

static int apply_genconfig(tok_tokenizer *t, const char *path) {
    char *text = NULL;
    size_t len = 0;
    if (vc_read_file(path, &text, &len) < 0) {
        vc_err_clear();
        return 0; /* optional */
    }
    json_error_t e;
    json_t *g = json_loadb(text, len, 0, &e);
    free(text);
    if (!g) return vc_err_set(VC_ERR_FORMAT, "%s: invalid JSON (line %d: %s)", path, e.line, e.text);
    json_t *v = json_object_get(g, "eos_token_id");
    int rc = 0;
    if (json_is_integer(v)) {
        rc = tok_add_eos(t, (int32_t)json_integer_value(v));
    } else if (json_is_array(v)) {
        size_t i;
        json_t *it;
        json_array_foreach(v, i, it) if (json_is_integer(it) && rc == 0) rc = tok_add_eos(t, (int32_t)json_integer_value(it));
    }
    json_decref(g);
    return rc;
}

/* Without a configured BOS, the token the post-processor puts first. */
static int infer_bos(tok_tokenizer *t) {
    if (t->bos_id >= 0 || !t->n_post_prefix) return 0;
    int32_t id = t->post_prefix[0];
    if (id < 0 || (size_t)id >= t->n_tokens || !t->tokens[id].s) return 0;
    t->bos_id = id;
    if (!t->bos_str && !(t->bos_str = strndup(t->tokens[id].s, t->tokens[id].n)))
        return vc_err_set(VC_ERR_OOM, "tokenizer: out of memory");
    return 0;
}

tok_tokenizer *tok_load_json_buf(const char *json, size_t len, const char *config_json, size_t config_len,
                                 const char *name) {
    tok_tokenizer *t = tok_alloc(name);
    if (!t) return NULL;
    if (tok_parse_tokenizer_json(t, json, len, t->name) < 0 || tok_finish(t) < 0) goto fail;
    if (config_json && tok_apply_config(t, config_json, config_len, t->name) < 0) goto fail;
    if (infer_bos(t) < 0) goto fail;
    return t;
fail:
    tok_free(t);
    return NULL;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static tok_tokenizer *load_gguf_path(const char *path) {
    gguf_ctx *g = gguf_open(path);
    if (!g) return NULL;
    tok_tokenizer *t = tok_load_gguf(g);
    gguf_close(g);
    return t;
}

/* tokenizer.json at `json_path`, config files from folder `dir`. */
static tok_tokenizer *load_json_path(const char *json_path, const char *dir) {
    vc_mapfile mf;
    if (vc_mapfile_open(&mf, json_path) < 0) return NULL;
    tok_tokenizer *t = tok_alloc(json_path);
    if (!t) {
        vc_mapfile_close(&mf);
        return NULL;
    }
    int rc = tok_parse_tokenizer_json(t, (const char *)mf.data, mf.size, json_path);
    vc_mapfile_close(&mf);
    if (rc < 0 || tok_finish(t) < 0) goto fail;
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    char *cfg = NULL;
    size_t cl = 0;
    if (vc_read_file(p, &cfg, &cl) == 0) {
        rc = tok_apply_config(t, cfg, cl, p);
        free(cfg);
        if (rc < 0) goto fail;
    } else {
        vc_err_clear();
    }
    snprintf(p, sizeof p, "%s/chat_template.jinja", dir); /* newer transformers save it apart */
    if (vc_read_file(p, &cfg, &cl) == 0) {
        free(t->chat_template);
        t->chat_template = cfg;
    } else {
        vc_err_clear();
    }
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    if (apply_genconfig(t, p) < 0 || infer_bos(t) < 0) goto fail;
    return t;
fail:
    tok_free(t);
    return NULL;
}

tok_tokenizer *tok_load(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        vc_err_set(VC_ERR_IO, "cannot open tokenizer '%s'", path ? path : "(null)");
        return NULL;
    }
    char p[4096];
    if (S_ISDIR(st.st_mode)) {
        snprintf(p, sizeof p, "%s/tokenizer.json", path);
        if (stat(p, &st) == 0) return load_json_path(p, path);
        DIR *dir = opendir(path);
        char best[1024] = "";
        struct dirent *de;
        while (dir && (de = readdir(dir))) /* first .gguf by name */
            if (ends_with(de->d_name, ".gguf") && (!best[0] || strcmp(de->d_name, best) < 0))
                snprintf(best, sizeof best, "%s", de->d_name);
        if (dir) closedir(dir);
        if (!best[0]) {
            vc_err_set(VC_ERR_IO, "%s: no tokenizer.json or .gguf file in this folder", path);
            return NULL;
        }
        snprintf(p, sizeof p, "%s/%s", path, best);
        return load_gguf_path(p);
    }
    if (ends_with(path, ".gguf")) return load_gguf_path(path);
    snprintf(p, sizeof p, "%s", path);
    char *slash = strrchr(p, '/');
    if (slash) *slash = 0;
    else snprintf(p, sizeof p, ".");
    return load_json_path(path, p);
}

/* ---- getters ---- */

size_t tok_vocab_size(const tok_tokenizer *t) { return t->n_tokens; }

const char *tok_token_str(const tok_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (size_t)id >= t->n_tokens || !t->tokens[id].s) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->tokens[id].n;
    return t->tokens[id].s;
}

int32_t tok_token_id(const tok_tokenizer *t, const char *s, size_t len) {
    int32_t id = tok_strmap_get(&t->addmap, t->tokens, s, len);
    return id >= 0 ? id : tok_strmap_get(&t->model.vmap, t->model.vocab, s, len);
}

bool tok_is_special(const tok_tokenizer *t, int32_t id) {
    return id >= 0 && (size_t)id < t->n_tokens && t->special[id];
}

int32_t tok_bos_id(const tok_tokenizer *t) { return t->bos_id; }
int32_t tok_eos_id(const tok_tokenizer *t) { return t->n_eos ? t->eos_ids[0] : -1; }
int32_t tok_pad_id(const tok_tokenizer *t) { return t->pad_id; }
int32_t tok_unk_id(const tok_tokenizer *t) { return t->unk_id; }

size_t tok_eos_ids(const tok_tokenizer *t, const int32_t **ids) {
    *ids = t->eos_ids;
    return t->n_eos;
}

bool tok_is_eos(const tok_tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_eos; i++)
        if (t->eos_ids[i] == id) return true;
    return false;
}

const char *tok_bos_token_str(const tok_tokenizer *t) { return t->bos_str; }
const char *tok_eos_token_str(const tok_tokenizer *t) { return t->eos_str; }
const char *tok_chat_template(const tok_tokenizer *t) { return t->chat_template; }
