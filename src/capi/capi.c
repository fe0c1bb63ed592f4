/* The public C library: errors, defaults, engine load/free, the completion
 * calls and the vllm_ex_ extras. See include/vllm.h. */
#include "capi/capi_internal.h"

#include "base/err.h"
#include "base/log.h"
#include "model/model.h"
#include "runtime/backend.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CAPI_VERSION "0.1.0"

/* ---- errors */

static _Thread_local char g_err[1024];

vllm_status capi_fail(vllm_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return st;
}

void capi_clear_error(void) { g_err[0] = 0; }

vllm_status capi_from_vc(int rc, const char *ctx) {
    vllm_status st = rc == VC_ERR_INVALID ? VLLM_ERR_INVALID_ARGUMENT : VLLM_ERR_RUNTIME;
    return capi_fail(st, "%s: %s", ctx, vc_err_msg());
}

const char *vllm_last_error(void) { return g_err; }
const char *vllm_version(void) { return CAPI_VERSION; }
int32_t vllm_abi_version(void) { return VLLM_ABI_VERSION; }
void vllm_string_free(char *s) { free(s); }

void vllm_completion_free(vllm_completion *out) {
    if (!out) return;
    free(out->text);
    memset(out, 0, sizeof *out);
}

/* ---- defaults (vllm.cpp v5's values) */

vllm_model_params vllm_model_params_default(void) {
    vllm_model_params p;
    memset(&p, 0, sizeof p);
    p.block_size = 32;
    p.num_blocks = 256;
    p.max_model_len = 0;
    p.max_num_seqs = 8;
    return p;
}

vllm_sampling_params vllm_sampling_params_default(void) {
    vllm_sampling_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.top_k = 0;
    p.min_p = 0.0f;
    p.max_tokens = 16;
    p.repetition_penalty = 1.0f;
    return p;
}

vllm_ex_engine_params vllm_ex_engine_params_default(void) {
    vllm_ex_engine_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.base = vllm_model_params_default();
    p.max_num_batched_tokens = 2048;
    p.enable_prefix_caching = 1;
    p.enable_chunked_prefill = 1;
    return p;
}

/* ---- load / free */

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

static vllm_status load(const vllm_ex_engine_params *xp, vllm_engine **out) {
    const vllm_model_params *p = &xp->base;
    if (!p->model_path || !*p->model_path)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_engine_load: no model_path");
    if (p->max_model_len < 0) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_engine_load: max_model_len < 0");
    if (xp->device < 0 || xp->device > 2)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_engine_load: device must be 0 (auto), 1 (CPU) or "
                                                    "2 (CUDA), got %d", xp->device);
    if (xp->n_threads < 0 || xp->max_num_batched_tokens < 0 || xp->kv_cache_memory_bytes < 0)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_engine_load: negative n_threads, "
                                                    "max_num_batched_tokens or kv_cache_memory_bytes");
    if (xp->tensor_parallel_size < 0 || xp->tensor_parallel_size > 64)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_engine_load: tensor_parallel_size must be in 0..64, got %d",
                         xp->tensor_parallel_size);
    if (xp->gpu_memory_utilization != 0.0 && !(xp->gpu_memory_utilization > 0.0 && xp->gpu_memory_utilization <= 1.0))
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_engine_load: gpu_memory_utilization must be 0 (default) or "
                                                    "in (0, 1], got %g", xp->gpu_memory_utilization);
    int kvd;
    if (xp->kv_cache_dtype && *xp->kv_cache_dtype && mdl_parse_kv_dtype(xp->kv_cache_dtype, &kvd) < 0)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_engine_load: %s", vc_err_msg());
    struct stat st;
    if (stat(p->model_path, &st) != 0)
        return capi_fail(VLLM_ERR_MODEL_LOAD, "vllm_engine_load: cannot open %s: %s", p->model_path,
                         strerror(errno));
    eng_params ep = eng_params_default();
    ep.model = p->model_path;
    ep.n_threads = xp->n_threads;
    ep.block_size = p->block_size > 0 ? p->block_size : 32;
    ep.max_num_seqs = p->max_num_seqs > 0 ? p->max_num_seqs : 8;
    ep.max_model_len = p->max_model_len;
    if (xp->max_num_batched_tokens > 0) ep.max_num_batched_tokens = xp->max_num_batched_tokens;
    if (ep.max_num_batched_tokens < ep.max_num_seqs) ep.max_num_batched_tokens = ep.max_num_seqs;
    if (p->num_blocks > 0)
        ep.num_blocks = p->num_blocks;
    else
        ep.kv_cache_memory = (size_t)xp->kv_cache_memory_bytes; /* 0: a fraction of free memory */
    ep.enable_prefix_caching = xp->enable_prefix_caching != 0;
    ep.enable_chunked_prefill = xp->enable_chunked_prefill != 0;
    ep.tensor_parallel_size = xp->tensor_parallel_size > 1 ? xp->tensor_parallel_size : 1;
    if (xp->gpu_memory_utilization > 0.0) ep.gpu_memory_utilization = xp->gpu_memory_utilization;
    if (xp->kv_cache_dtype && *xp->kv_cache_dtype) ep.kv_cache_dtype = xp->kv_cache_dtype;
    if (xp->device == 1) {
        ep.device = RT_DEV_CPU;
    } else if (xp->device == 2) {
        if (!rt_backend_available(RT_DEV_CUDA))
            return capi_fail(VLLM_ERR_MODEL_LOAD, "vllm_engine_load: device CUDA is not available (this build "
                                                  "has no CUDA backend)");
        if (rt_backend_device_count(RT_DEV_CUDA, NULL) < 1)
            return capi_fail(VLLM_ERR_MODEL_LOAD, "vllm_engine_load: device CUDA: the driver finds no GPU");
        ep.device = RT_DEV_CUDA;
    } else { /* 0 (v5's load too): the CLI's --device auto */
        ep.device = rt_backend_device_count(RT_DEV_CUDA, NULL) > 0 ? RT_DEV_CUDA : RT_DEV_CPU;
    }

    vllm_engine *e = calloc(1, sizeof *e);
    if (!e) return capi_fail(VLLM_ERR_RUNTIME, "out of memory");
    e->block_size = ep.block_size;
    e->tool_parser = dup_or_null(p->tool_parser);
    e->reasoning_parser = dup_or_null(p->reasoning_parser);
    e->model_name = strdup(p->model_path);
    if (e->model_name) { /* basename, without trailing slashes */
        size_t len = strlen(e->model_name);
        while (len > 1 && e->model_name[len - 1] == '/') e->model_name[--len] = 0;
        char *slash = strrchr(e->model_name, '/');
        if (slash && slash[1]) memmove(e->model_name, slash + 1, strlen(slash + 1) + 1);
    }
    if (!e->model_name) {
        free(e->tool_parser);
        free(e->reasoning_parser);
        free(e);
        return capi_fail(VLLM_ERR_RUNTIME, "out of memory");
    }
    vc_err_clear();
    e->a = aeng_create(&ep);
    if (!e->a) {
        vllm_status s = capi_fail(VLLM_ERR_MODEL_LOAD, "vllm_engine_load: %s: %s", p->model_path, vc_err_msg());
        vllm_engine_free(e);
        return s;
    }
    e->tok = aeng_tokenizer(e->a);
    const char *src = e->tok ? tok_chat_template(e->tok) : NULL;
    if (src) {
        e->tmpl = chat_template_create(src);
        if (!e->tmpl) {
            VC_WARN("the chat template of %s does not parse: %s", p->model_path, vc_err_msg());
            e->tmpl_err = strdup(vc_err_msg());
        }
    }
    *out = e;
    return VLLM_OK;
}

vllm_status vllm_ex_engine_load(const vllm_ex_engine_params *params, vllm_engine **out) {
    capi_clear_error();
    if (!out) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_ex_engine_load: out is NULL");
    *out = NULL;
    if (!params) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_ex_engine_load: params is NULL");
    if (params->struct_size != sizeof *params)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_ex_engine_load: struct_size %u, this library has %zu",
                         params->struct_size, sizeof *params);
    return load(params, out);
}

vllm_status vllm_engine_load(const vllm_model_params *params, vllm_engine **out) {
    capi_clear_error();
    if (!out) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_engine_load: out is NULL");
    *out = NULL;
    if (!params) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_engine_load: params is NULL");
    vllm_ex_engine_params xp = vllm_ex_engine_params_default();
    xp.base = *params;
    return load(&xp, out);
}

void vllm_engine_free(vllm_engine *e) {
    if (!e) return;
    aeng_free(e->a);
    chat_template_free(e->tmpl);
    free(e->tmpl_err);
    free(e->model_name);
    free(e->tool_parser);
    free(e->reasoning_parser);
    free(e);
}

/* ---- sampling */

vllm_status capi_sampling(const vllm_engine *e, const vllm_sampling_params *p, ereq_sampling *out) {
    if (p->structured_json || p->structured_regex || p->structured_choice || p->n_structured_choice ||
        p->structured_grammar || p->structured_json_object) {
        const char *which = p->structured_json    ? "structured_json"
                            : p->structured_regex ? "structured_regex"
                            : p->structured_grammar ? "structured_grammar"
                            : p->structured_json_object ? "structured_json_object"
                                                        : "structured_choice";
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT,
                         "structured output (%s) is not supported by vllm.c yet: the request was not run", which);
    }
    if (isnan(p->temperature) || isnan(p->top_p) || isnan(p->min_p) || isnan(p->presence_penalty) ||
        isnan(p->frequency_penalty) || isnan(p->repetition_penalty) || isinf(p->temperature))
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "sampling: a parameter is NaN or infinite");
    if (!(p->repetition_penalty > 0.0f))
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "sampling: repetition_penalty must be > 0, got %g "
                                                    "(start from vllm_sampling_params_default())",
                         (double)p->repetition_penalty);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "sampling: top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "sampling: min_p must be in [0, 1], got %g", (double)p->min_p);
    if (p->top_k < -1) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "sampling: top_k must be >= -1");
    if (p->min_tokens < 0) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "sampling: min_tokens must be >= 0");
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "sampling: n_stop is %d but stop is %s", p->n_stop,
                         p->stop ? "set" : "NULL");
    for (int32_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !*p->stop[i])
            return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "sampling: stop[%d] is NULL or empty", i);
    int32_t mml = aeng_max_model_len(e->a);
    ereq_sampling s = ereq_sampling_default();
    s.temperature = p->temperature > 0.0f ? p->temperature : 0.0f;
    s.top_p = p->top_p;
    s.top_k = p->top_k > 0 ? p->top_k : 0;
    s.min_p = p->min_p;
    s.presence_penalty = p->presence_penalty;
    s.frequency_penalty = p->frequency_penalty;
    s.repetition_penalty = p->repetition_penalty;
    s.seed = p->seed;
    s.has_seed = p->has_seed != 0;
    s.max_tokens = p->max_tokens > 0 && p->max_tokens < mml ? p->max_tokens : mml;
    s.min_tokens = p->min_tokens < s.max_tokens ? p->min_tokens : s.max_tokens;
    if (p->min_tokens > s.max_tokens && p->max_tokens > 0)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "sampling: min_tokens (%d) > max_tokens (%d)", p->min_tokens,
                         p->max_tokens);
    s.ignore_eos = p->ignore_eos != 0;
    s.stop = (char **)p->stop; /* copied by the engine at submit */
    s.n_stop = p->n_stop;
    *out = s;
    return VLLM_OK;
}

/* ---- completions */

static vllm_status run_blocking(vllm_engine *e, const char *prompt, const int32_t *ids, int32_t n,
                                const vllm_sampling_params *params, vllm_token_callback cb, void *user,
                                capi_call *c) {
    ereq_sampling sp;
    vllm_status st = capi_sampling(e, params, &sp);
    if (st != VLLM_OK) return st;
    if (capi_call_init(c, e) < 0) return capi_fail(VLLM_ERR_RUNTIME, "cannot create a mutex");
    c->cb = cb;
    c->user = user;
    c->deliver = cb ? capi_deliver_text : NULL;
    c->keep_text = !cb;
    c->keep_ids = !cb && ids;
    st = capi_call_submit(c, prompt, ids, n, &sp);
    if (st != VLLM_OK) {
        capi_call_destroy(c);
        return st;
    }
    capi_call_wait(c);
    if (c->failed) {
        capi_call_destroy(c);
        return capi_fail(VLLM_ERR_RUNTIME, "generation failed: the engine stopped on an error (see the log)");
    }
    if (c->oom) {
        capi_call_destroy(c);
        return capi_fail(VLLM_ERR_RUNTIME, "out of memory");
    }
    return VLLM_OK; /* the caller destroys c */
}

static void fill_completion(capi_call *c, vllm_completion *out) {
    out->text = vc_sb_steal(&c->text);
    if (!out->text) out->text = strdup("");
    out->finish_reason = c->finish_reason;
    out->prompt_tokens = c->usage.prompt_tokens;
    out->completion_tokens = c->usage.completion_tokens;
}

vllm_status vllm_complete(vllm_engine *e, const char *prompt, const vllm_sampling_params *params,
                          vllm_completion *out) {
    capi_clear_error();
    if (out) memset(out, 0, sizeof *out);
    if (!e || !prompt || !params || !out)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_complete: engine, prompt, params and out must not be NULL");
    capi_call c;
    vllm_status st = run_blocking(e, prompt, NULL, 0, params, NULL, NULL, &c);
    if (st != VLLM_OK) return st;
    fill_completion(&c, out);
    capi_call_destroy(&c);
    if (!out->text) return capi_fail(VLLM_ERR_RUNTIME, "out of memory");
    return VLLM_OK;
}

vllm_status vllm_complete_stream(vllm_engine *e, const char *prompt, const vllm_sampling_params *params,
                                 vllm_token_callback cb, void *user_data) {
    capi_clear_error();
    if (!e || !prompt || !params || !cb)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT,
                         "vllm_complete_stream: engine, prompt, params and cb must not be NULL");
    capi_call c;
    vllm_status st = run_blocking(e, prompt, NULL, 0, params, cb, user_data, &c);
    if (st != VLLM_OK) return st;
    capi_call_destroy(&c);
    return VLLM_OK;
}

vllm_status vllm_complete_tokens(vllm_engine *e, const int32_t *prompt_tokens, int32_t n_prompt_tokens,
                                 const vllm_sampling_params *params, int32_t *out_tokens, int32_t max_out_tokens,
                                 int32_t *n_out_tokens, vllm_completion *out) {
    capi_clear_error();
    if (out) memset(out, 0, sizeof *out);
    if (n_out_tokens) *n_out_tokens = 0;
    if (!e || !prompt_tokens || !params || !n_out_tokens)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT,
                         "vllm_complete_tokens: engine, prompt_tokens, params and n_out_tokens must not be NULL");
    if (n_prompt_tokens <= 0) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_complete_tokens: empty prompt");
    if (max_out_tokens < 0 || (max_out_tokens > 0 && !out_tokens))
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_complete_tokens: out_tokens is NULL or max_out_tokens < 0");
    capi_call c;
    vllm_status st = run_blocking(e, NULL, prompt_tokens, n_prompt_tokens, params, NULL, NULL, &c);
    if (st != VLLM_OK) return st;
    int32_t k = c.n_ids < max_out_tokens ? c.n_ids : max_out_tokens;
    if (k > 0) memcpy(out_tokens, c.ids, (size_t)k * sizeof *out_tokens);
    *n_out_tokens = k;
    if (out) {
        fill_completion(&c, out);
        if (!out->text) st = capi_fail(VLLM_ERR_RUNTIME, "out of memory");
    }
    capi_call_destroy(&c);
    return st;
}

/* ---- extras */

vllm_status vllm_ex_engine_stats(vllm_engine *e, vllm_ex_stats *out) {
    capi_clear_error();
    if (!e || !out)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_ex_engine_stats: engine and out must not be NULL");
    esched_stats s;
    aeng_stats(e->a, &s);
    memset(out, 0, sizeof *out);
    out->num_running = s.num_running;
    out->num_waiting = s.num_waiting;
    out->num_blocks = aeng_num_blocks(e->a);
    out->block_size = e->block_size;
    out->max_model_len = aeng_max_model_len(e->a);
    out->kv_usage = s.kv_usage;
    out->num_preemptions = s.num_preemptions_total;
    out->prefix_cache_queries = s.prefix_queries_total + s.preempted_prefix_queries_total;
    out->prefix_cache_hits = s.prefix_hits_total + s.preempted_prefix_hits_total;
    out->num_steps = s.num_steps;
    return VLLM_OK;
}

vllm_status vllm_ex_tokenize(vllm_engine *e, const char *text, bool add_special, int32_t **ids, int32_t *n_ids) {
    capi_clear_error();
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!e || !text || !ids || !n_ids)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_ex_tokenize: engine, text, ids and n_ids must not be NULL");
    if (!e->tok) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_ex_tokenize: this model has no tokenizer");
    size_t n = 0;
    int rc = tok_encode(e->tok, text, strlen(text), add_special, ids, &n);
    if (rc < 0) return capi_from_vc(rc, "vllm_ex_tokenize");
    if (n > INT32_MAX) {
        free(*ids);
        *ids = NULL;
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_ex_tokenize: text too long");
    }
    *n_ids = (int32_t)n;
    return VLLM_OK;
}

void vllm_ex_tokens_free(int32_t *ids) { free(ids); }

vllm_status vllm_ex_detokenize(vllm_engine *e, const int32_t *ids, int32_t n_ids, bool skip_special, char **text) {
    capi_clear_error();
    if (text) *text = NULL;
    if (!e || (!ids && n_ids) || !text || n_ids < 0)
        return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_ex_detokenize: bad arguments");
    if (!e->tok) return capi_fail(VLLM_ERR_INVALID_ARGUMENT, "vllm_ex_detokenize: this model has no tokenizer");
    int rc = tok_decode(e->tok, ids, (size_t)n_ids, skip_special, text, NULL);
    if (rc < 0) return capi_from_vc(rc, "vllm_ex_detokenize");
    return VLLM_OK;
}
