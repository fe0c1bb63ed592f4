/* vllm.h — the public C library of vllm.c (libvllm.so).
 *
 * Binary-compatible with vllm.cpp's C ABI version 5 (mudler/vllm.cpp,
 * include/vllm.h at VLLM_ABI_VERSION 5): the same status codes, the same
 * structs with the same field order, types and defaults, the same functions
 * and ownership rules, so a host that dlopen()s either library (LocalAI)
 * works with both. Our own additions carry the prefix vllm_ex_ (plus
 * vllm_complete_tokens, which has the signature vllm.cpp gave it later) and
 * never change a v5 struct.
 *
 * Tour:
 *   vllm_model_params mp = vllm_model_params_default();
 *   mp.model_path = "model.gguf";                 // .gguf file or HF folder
 *   vllm_engine *e;
 *   if (vllm_engine_load(&mp, &e) != VLLM_OK) puts(vllm_last_error());
 *   vllm_sampling_params sp = vllm_sampling_params_default();
 *   vllm_completion c;
 *   vllm_complete(e, "Once upon a time", &sp, &c);  // c.text, c.finish_reason
 *   vllm_completion_free(&c);
 *   vllm_complete_stream(e, prompt, &sp, on_delta, user);  // on_delta per delta
 *   vllm_chat(e, "{\"messages\":[...]}", &json);   // OpenAI chat.completion
 *   vllm_engine_free(e);
 *
 * Threads: every entry point may be called from any thread; one engine
 * batches all requests in flight (its own engine thread steps the model).
 * Callbacks run on that engine thread: keep them short and never call a
 * blocking function from one (vllm_complete*, vllm_chat*, vllm_request_wait,
 * vllm_request_free, vllm_engine_free: they would wait for themselves);
 * vllm_request_cancel, vllm_request_done and vllm_request_submit are fine.
 *
 * Errors: every fallible call returns a vllm_status; on failure
 * vllm_last_error() (thread-local) says why. Every pointer argument is
 * checked; nothing a caller passes makes the library crash.
 */
#ifndef VLLM_H
#define VLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes; vllm_abi_version() returns the library's. */
#define VLLM_ABI_VERSION 5

#ifndef VLLM_API
#define VLLM_API __attribute__((visibility("default")))
#endif

typedef enum vllm_status {
    VLLM_OK = 0,
    VLLM_ERR_INVALID_ARGUMENT = 1, /* NULL / out-of-range argument, bad request, unsupported feature */
    VLLM_ERR_MODEL_LOAD = 2,       /* model file, tokenizer or weights could not be loaded */
    VLLM_ERR_RUNTIME = 3,          /* generation failed */
    VLLM_ERR_UNKNOWN = 4
} vllm_status;

typedef struct vllm_engine vllm_engine;
typedef struct vllm_request vllm_request;

/* Load parameters. Strings are borrowed for the vllm_engine_load call only.
 * x86-64 layout (checked by tests/capi/test_capi_abi.c): size 48. */
typedef struct vllm_model_params {
    const char *model_path;            /* .gguf file or HF folder; required */
    const char *tokenizer_config_path; /* reserved (v5 ignores it): the template comes from the model */
    int32_t block_size;                /* tokens per KV block; default 32; <= 0 -> 32 */
    int32_t num_blocks;                /* KV blocks; default 256; <= 0 -> sized from free memory
                                        * (vllm.c: 25% of available memory) */
    int32_t max_model_len;             /* <= 0 -> the model's context, capped to what
                                        * num_blocks can hold */
    int32_t max_num_seqs;              /* concurrent sequences; default 8; <= 0 -> 8 */
    const char *tool_parser;           /* NULL/"" = none; other names are refused by the
                                        * chat calls (no tool-call parsers yet) */
    const char *reasoning_parser;      /* NULL/""/"none" = none; other names refused likewise */
} vllm_model_params;

/* Sampling parameters: start from vllm_sampling_params_default() (a zeroed
 * struct is invalid: repetition_penalty must be > 0). Strings are borrowed
 * for the call. x86-64 layout: size 120. */
typedef struct vllm_sampling_params {
    float temperature;        /* 1.0; <= 0 greedy */
    float top_p;              /* 1.0; in (0, 1] */
    int32_t top_k;            /* 0 (or -1): off */
    float min_p;              /* 0; in [0, 1] */
    int32_t max_tokens;       /* 16; <= 0 unbounded (up to max_model_len) */
    uint64_t seed;            /* used when has_seed != 0 */
    int32_t has_seed;         /* 0 */
    float presence_penalty;   /* 0 */
    float frequency_penalty;  /* 0 */
    float repetition_penalty; /* 1.0; must be > 0 */
    int32_t min_tokens;       /* 0 */
    int32_t ignore_eos;       /* 0 */
    const char *const *stop;  /* n_stop stop strings, or NULL */
    int32_t n_stop;
    /* Structured output. vllm.c has no constrained decoding yet: a request
     * that sets any of these fails with VLLM_ERR_INVALID_ARGUMENT. */
    const char *structured_json;          /* JSON schema */
    const char *structured_regex;
    const char *const *structured_choice; /* n_structured_choice strings */
    int32_t n_structured_choice;
    const char *structured_grammar;       /* GBNF */
    int32_t structured_json_object;       /* != 0: any JSON object */
} vllm_sampling_params;

/* A finished completion. text is the caller's (vllm_completion_free or
 * vllm_string_free); finish_reason is static ("stop", "length", "abort",
 * "error"). x86-64 layout: size 24. */
typedef struct vllm_completion {
    char *text;
    const char *finish_reason;
    int32_t prompt_tokens;
    int32_t completion_tokens;
} vllm_completion;

/* Streaming callback: delta_text is new text (borrowed, valid during the call,
 * may be ""); the last call has finished == true. Return false to stop: the
 * request is aborted, the callback is not called again, and the call still
 * returns VLLM_OK. Runs on the engine thread. */
typedef bool (*vllm_token_callback)(const char *delta_text, bool finished, void *user_data);

VLLM_API vllm_model_params vllm_model_params_default(void);
VLLM_API vllm_sampling_params vllm_sampling_params_default(void);

/* Load a model. On success *out is the engine (vllm_engine_free); on failure
 * *out is NULL and the status is VLLM_ERR_MODEL_LOAD (file, format, weights)
 * or VLLM_ERR_INVALID_ARGUMENT (params). */
VLLM_API vllm_status vllm_engine_load(const vllm_model_params *params, vllm_engine **out);
/* Aborts what is still running (their callbacks see finished == true), then
 * frees. Free the request handles first. NULL is a no-op. */
VLLM_API void vllm_engine_free(vllm_engine *engine);

/* Blocking completion of a text prompt (encoded with the model's tokenizer,
 * special tokens added as transformers does). *out is zeroed on error. */
VLLM_API vllm_status vllm_complete(vllm_engine *engine, const char *prompt, const vllm_sampling_params *params,
                                   vllm_completion *out);
/* Blocking streaming completion: cb gets every delta, then a final call with
 * finished == true (unless it returned false earlier). */
VLLM_API vllm_status vllm_complete_stream(vllm_engine *engine, const char *prompt,
                                          const vllm_sampling_params *params, vllm_token_callback cb,
                                          void *user_data);

/* Non-blocking request: returns once the request is validated and queued;
 * cb then runs on the engine thread as for vllm_complete_stream. */
VLLM_API vllm_status vllm_request_submit(vllm_engine *engine, const char *prompt,
                                         const vllm_sampling_params *params, vllm_token_callback cb,
                                         void *user_data, vllm_request **out);
/* Abort (idempotent, any thread, also from the request's callback). */
VLLM_API vllm_status vllm_request_cancel(vllm_request *request);
/* Wait until the last callback returned. VLLM_OK for a request that finished
 * (also by cancel); VLLM_ERR_RUNTIME when generation failed, with the message
 * in vllm_last_error() of the waiting thread. Not from the callback. */
VLLM_API vllm_status vllm_request_wait(vllm_request *request);
VLLM_API bool vllm_request_done(const vllm_request *request); /* false for NULL */
/* "" while running or when it succeeded; never NULL; owned by the request. */
VLLM_API const char *vllm_request_error(const vllm_request *request);
/* Cancel if needed, wait, free. NULL is a no-op. Not from the callback. */
VLLM_API void vllm_request_free(vllm_request *request);

/* OpenAI chat: request_json is a /v1/chat/completions request (messages,
 * temperature, top_p, top_k, min_p, max_tokens / max_completion_tokens, stop,
 * seed, penalties, min_tokens, ignore_eos, chat_template_kwargs, tools are
 * handed to the template); "model" and "stream" are ignored. The model's chat
 * template renders the prompt (or "role: content" lines without one).
 * *out_response_json is a chat.completion object (vllm_string_free).
 * response_format json_object / json_schema, guided_* / structured_outputs,
 * tool_choice "required" or a named function, logprobs and n > 1 are refused
 * with VLLM_ERR_INVALID_ARGUMENT (not supported yet). */
VLLM_API vllm_status vllm_chat(vllm_engine *engine, const char *request_json, char **out_response_json);
/* Streaming chat: cb gets one chat.completion.chunk JSON per call (role
 * chunk, content chunks, finish chunk, a usage chunk when
 * stream_options.include_usage), then ("", finished = true). */
VLLM_API vllm_status vllm_chat_stream(vllm_engine *engine, const char *request_json, vllm_token_callback cb,
                                      void *user_data);

VLLM_API void vllm_string_free(char *s);                  /* NULL is a no-op */
VLLM_API void vllm_completion_free(vllm_completion *out); /* frees text, zeroes; NULL no-op */
/* This thread's last error message; "" when none; never NULL. */
VLLM_API const char *vllm_last_error(void);
VLLM_API const char *vllm_version(void); /* "MAJOR.MINOR.PATCH" */
VLLM_API int32_t vllm_abi_version(void); /* VLLM_ABI_VERSION (5) */

/* ---- vllm.c additions ------------------------------------------------- */

/* Blocking completion of a token-id prompt (vllm.cpp added this exact
 * signature in its ABI v13). The generated ids go to out_tokens (at most
 * max_out_tokens of them; *n_out_tokens how many were written); out, when
 * not NULL, gets the text as vllm_complete gives it. out_tokens may be NULL
 * only with max_out_tokens == 0. */
VLLM_API vllm_status vllm_complete_tokens(vllm_engine *engine, const int32_t *prompt_tokens,
                                          int32_t n_prompt_tokens, const vllm_sampling_params *params,
                                          int32_t *out_tokens, int32_t max_out_tokens, int32_t *n_out_tokens,
                                          vllm_completion *out);

/* Engine knobs beyond v5. Start from vllm_ex_engine_params_default(). */
typedef struct vllm_ex_engine_params {
    uint32_t struct_size;           /* sizeof(vllm_ex_engine_params): lets the struct grow */
    vllm_model_params base;         /* as for vllm_engine_load */
    int32_t n_threads;              /* CPU threads; 0: all cores */
    int32_t max_num_batched_tokens; /* tokens per step; default 2048 */
    int64_t kv_cache_memory_bytes;  /* > 0 with base.num_blocks <= 0: KV budget in bytes */
    int32_t enable_prefix_caching;  /* default 1 */
    int32_t enable_chunked_prefill; /* default 1 */
    int32_t device;                 /* 0: auto (and v5's vllm_engine_load): CUDA where the build
                                     * has it and the driver finds a GPU, else the CPU; 1: CPU;
                                     * 2: CUDA (a build without it, or no GPU, fails with
                                     * VLLM_ERR_MODEL_LOAD) */
    int32_t tensor_parallel_size;   /* ranks the model is split over: GPUs 0..N-1 with device 2,
                                     * N groups of the CPU threads otherwise; 0 or 1: no split
                                     * (docs/DISTRIBUTED.md); at most 64 */
    double gpu_memory_utilization;  /* device backends: the KV cache fills each device up to this
                                     * fraction of its memory; 0: default 0.9; else in (0, 1] */
    const char *kv_cache_dtype;     /* NULL, "" or "auto" (the model's dtype on GPUs, f32 on the
                                     * CPU), "float32", "float16", "bfloat16"; borrowed for the
                                     * load call */
} vllm_ex_engine_params;

VLLM_API vllm_ex_engine_params vllm_ex_engine_params_default(void);
VLLM_API vllm_status vllm_ex_engine_load(const vllm_ex_engine_params *params, vllm_engine **out);

/* A snapshot of the engine: sizes and scheduler counters. */
typedef struct vllm_ex_stats {
    int32_t num_running, num_waiting;
    int32_t num_blocks, block_size, max_model_len;
    double kv_usage;                 /* fraction of KV blocks in use */
    int64_t num_preemptions;
    int64_t prefix_cache_queries;    /* prompt tokens looked up */
    int64_t prefix_cache_hits;       /* of those, found in the cache */
    int64_t num_steps;
} vllm_ex_stats;

VLLM_API vllm_status vllm_ex_engine_stats(vllm_engine *engine, vllm_ex_stats *out);

/* Encode text with the model's tokenizer (add_special: BOS etc. as
 * transformers adds them). *ids is the caller's (vllm_ex_tokens_free). */
VLLM_API vllm_status vllm_ex_tokenize(vllm_engine *engine, const char *text, bool add_special, int32_t **ids,
                                      int32_t *n_ids);
VLLM_API void vllm_ex_tokens_free(int32_t *ids);
/* Decode ids to text (vllm_string_free). */
VLLM_API vllm_status vllm_ex_detokenize(vllm_engine *engine, const int32_t *ids, int32_t n_ids,
                                        bool skip_special, char **text);

#ifdef __cplusplus
}
#endif

#endif
