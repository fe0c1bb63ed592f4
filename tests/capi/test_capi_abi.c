/* The C library's ABI against vllm.cpp's ABI v5, the contract LocalAI
 * loads: struct sizes and field offsets, status values, function
 * signatures, defaults, and the symbols libvllm.so exports (all of v5 and
 * ours, nothing internal).
 *
 * Where the numbers come from: mudler/vllm.cpp include/vllm.h (the v5
 * fields are the leading fields of every later version, which only
 * appends) and its vllm_*_params_default() in the C API source; the
 * offsets are that declaration laid out by the x86-64 System V ABI (LP64:
 * pointers 8 bytes, int32/float 4, uint64 8 with 8-byte alignment):
 *   vllm_model_params: model_path 0, tokenizer_config_path 8, block_size 16,
 *     num_blocks 20, max_model_len 24, max_num_seqs 28, tool_parser 32,
 *     reasoning_parser 40; size 48.
 *   vllm_sampling_params: temperature 0, top_p 4, top_k 8, min_p 12,
 *     max_tokens 16, (pad) seed 24, has_seed 32, presence_penalty 36,
 *     frequency_penalty 40, repetition_penalty 44, min_tokens 48,
 *     ignore_eos 52, stop 56, n_stop 64, (pad) structured_json 72,
 *     structured_regex 80, structured_choice 88, n_structured_choice 96,
 *     (pad) structured_grammar 104, structured_json_object 112; size 120.
 *   vllm_completion: text 0, finish_reason 8, prompt_tokens 16,
 *     completion_tokens 20; size 24.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "vllm.h"

#define SIG(fn, type) _Static_assert(_Generic(&fn, type: 1, default: 0), #fn " has the v5 signature")
SIG(vllm_model_params_default, vllm_model_params (*)(void));
SIG(vllm_sampling_params_default, vllm_sampling_params (*)(void));
SIG(vllm_engine_load, vllm_status (*)(const vllm_model_params *, vllm_engine **));
SIG(vllm_engine_free, void (*)(vllm_engine *));
SIG(vllm_complete, vllm_status (*)(vllm_engine *, const char *, const vllm_sampling_params *, vllm_completion *));
SIG(vllm_complete_stream, vllm_status (*)(vllm_engine *, const char *, const vllm_sampling_params *,
                                          vllm_token_callback, void *));
SIG(vllm_request_submit, vllm_status (*)(vllm_engine *, const char *, const vllm_sampling_params *,
                                         vllm_token_callback, void *, vllm_request **));
SIG(vllm_request_cancel, vllm_status (*)(vllm_request *));
SIG(vllm_request_wait, vllm_status (*)(vllm_request *));
SIG(vllm_request_done, bool (*)(const vllm_request *));
SIG(vllm_request_error, const char *(*)(const vllm_request *));
SIG(vllm_request_free, void (*)(vllm_request *));
SIG(vllm_chat, vllm_status (*)(vllm_engine *, const char *, char **));
SIG(vllm_chat_stream, vllm_status (*)(vllm_engine *, const char *, vllm_token_callback, void *));
SIG(vllm_string_free, void (*)(char *));
SIG(vllm_completion_free, void (*)(vllm_completion *));
SIG(vllm_last_error, const char *(*)(void));
SIG(vllm_version, const char *(*)(void));
SIG(vllm_abi_version, int32_t (*)(void));
/* vllm.cpp's later (v13) signature, which we export already. */
SIG(vllm_complete_tokens, vllm_status (*)(vllm_engine *, const int32_t *, int32_t, const vllm_sampling_params *,
                                          int32_t *, int32_t, int32_t *, vllm_completion *));
_Static_assert(_Generic((vllm_token_callback)0, bool (*)(const char *, bool, void *): 1, default: 0),
               "callback type");

static void test_layout(void **state) {
    (void)state;
    assert_int_equal(VLLM_ABI_VERSION, 5);
    assert_int_equal(VLLM_OK, 0);
    assert_int_equal(VLLM_ERR_INVALID_ARGUMENT, 1);
    assert_int_equal(VLLM_ERR_MODEL_LOAD, 2);
    assert_int_equal(VLLM_ERR_RUNTIME, 3);
    assert_int_equal(VLLM_ERR_UNKNOWN, 4);
    assert_int_equal(sizeof(vllm_status), 4);
#if defined(__x86_64__) || defined(__aarch64__)
    assert_int_equal(sizeof(vllm_model_params), 48);
    assert_int_equal(offsetof(vllm_model_params, model_path), 0);
    assert_int_equal(offsetof(vllm_model_params, tokenizer_config_path), 8);
    assert_int_equal(offsetof(vllm_model_params, block_size), 16);
    assert_int_equal(offsetof(vllm_model_params, num_blocks), 20);
    assert_int_equal(offsetof(vllm_model_params, max_model_len), 24);
    assert_int_equal(offsetof(vllm_model_params, max_num_seqs), 28);
    assert_int_equal(offsetof(vllm_model_params, tool_parser), 32);
    assert_int_equal(offsetof(vllm_model_params, reasoning_parser), 40);

    assert_int_equal(sizeof(vllm_sampling_params), 120);
    assert_int_equal(offsetof(vllm_sampling_params, temperature), 0);
    assert_int_equal(offsetof(vllm_sampling_params, top_p), 4);
    assert_int_equal(offsetof(vllm_sampling_params, top_k), 8);
    assert_int_equal(offsetof(vllm_sampling_params, min_p), 12);
    assert_int_equal(offsetof(vllm_sampling_params, max_tokens), 16);
    assert_int_equal(offsetof(vllm_sampling_params, seed), 24);
    assert_int_equal(offsetof(vllm_sampling_params, has_seed), 32);
    assert_int_equal(offsetof(vllm_sampling_params, presence_penalty), 36);
    assert_int_equal(offsetof(vllm_sampling_params, frequency_penalty), 40);
    assert_int_equal(offsetof(vllm_sampling_params, repetition_penalty), 44);
    assert_int_equal(offsetof(vllm_sampling_params, min_tokens), 48);
    assert_int_equal(offsetof(vllm_sampling_params, ignore_eos), 52);
    assert_int_equal(offsetof(vllm_sampling_params, stop), 56);
    assert_int_equal(offsetof(vllm_sampling_params, n_stop), 64);
    assert_int_equal(offsetof(vllm_sampling_params, structured_json), 72);
    assert_int_equal(offsetof(vllm_sampling_params, structured_regex), 80);
    assert_int_equal(offsetof(vllm_sampling_params, structured_choice), 88);
    assert_int_equal(offsetof(vllm_sampling_params, n_structured_choice), 96);
    assert_int_equal(offsetof(vllm_sampling_params, structured_grammar), 104);
    assert_int_equal(offsetof(vllm_sampling_params, structured_json_object), 112);

    assert_int_equal(sizeof(vllm_completion), 24);
    assert_int_equal(offsetof(vllm_completion, text), 0);
    assert_int_equal(offsetof(vllm_completion, finish_reason), 8);
    assert_int_equal(offsetof(vllm_completion, prompt_tokens), 16);
    assert_int_equal(offsetof(vllm_completion, completion_tokens), 20);
#endif
    /* Field types (sizes), independent of the platform's padding. */
    vllm_sampling_params sp;
    assert_int_equal(sizeof sp.seed, 8);
    assert_int_equal(sizeof sp.has_seed, 4);
    assert_int_equal(sizeof sp.ignore_eos, 4);
    assert_int_equal(sizeof sp.structured_json_object, 4);
    assert_int_equal(sizeof sp.temperature, 4);
}

/* vllm.cpp's defaults, field by field. */
static void check_defaults(vllm_model_params mp, vllm_sampling_params sp) {
    assert_null(mp.model_path);
    assert_null(mp.tokenizer_config_path);
    assert_int_equal(mp.block_size, 32);
    assert_int_equal(mp.num_blocks, 256);
    assert_int_equal(mp.max_model_len, 0);
    assert_int_equal(mp.max_num_seqs, 8);
    assert_null(mp.tool_parser);
    assert_null(mp.reasoning_parser);

    assert_true(sp.temperature == 1.0f);
    assert_true(sp.top_p == 1.0f);
    assert_int_equal(sp.top_k, 0);
    assert_true(sp.min_p == 0.0f);
    assert_int_equal(sp.max_tokens, 16);
    assert_int_equal(sp.seed, 0);
    assert_int_equal(sp.has_seed, 0);
    assert_true(sp.presence_penalty == 0.0f);
    assert_true(sp.frequency_penalty == 0.0f);
    assert_true(sp.repetition_penalty == 1.0f);
    assert_int_equal(sp.min_tokens, 0);
    assert_int_equal(sp.ignore_eos, 0);
    assert_null(sp.stop);
    assert_int_equal(sp.n_stop, 0);
    assert_null(sp.structured_json);
    assert_null(sp.structured_regex);
    assert_null(sp.structured_choice);
    assert_int_equal(sp.n_structured_choice, 0);
    assert_null(sp.structured_grammar);
    assert_int_equal(sp.structured_json_object, 0);
}

static void test_defaults(void **state) {
    (void)state;
    check_defaults(vllm_model_params_default(), vllm_sampling_params_default());
    assert_int_equal(vllm_abi_version(), 5);
    assert_non_null(vllm_version());
    assert_non_null(vllm_last_error());
}

/* NULL everywhere: a status and a message, never a crash. */
static void test_null_arguments(void **state) {
    (void)state;
    vllm_engine *e = (vllm_engine *)1;
    assert_int_equal(vllm_engine_load(NULL, &e), VLLM_ERR_INVALID_ARGUMENT);
    assert_null(e);
    assert_true(strlen(vllm_last_error()) > 0);
    vllm_model_params mp = vllm_model_params_default();
    assert_int_equal(vllm_engine_load(&mp, NULL), VLLM_ERR_INVALID_ARGUMENT);
    assert_int_equal(vllm_engine_load(&mp, &e), VLLM_ERR_INVALID_ARGUMENT); /* no model_path */
    assert_non_null(strstr(vllm_last_error(), "model_path"));
    vllm_sampling_params sp = vllm_sampling_params_default();
    vllm_completion c;
    assert_int_equal(vllm_complete(NULL, "x", &sp, &c), VLLM_ERR_INVALID_ARGUMENT);
    assert_null(c.text);
    assert_int_equal(vllm_complete_stream(NULL, "x", &sp, NULL, NULL), VLLM_ERR_INVALID_ARGUMENT);
    vllm_request *r = (vllm_request *)1;
    assert_int_equal(vllm_request_submit(NULL, "x", &sp, NULL, NULL, &r), VLLM_ERR_INVALID_ARGUMENT);
    assert_null(r);
    assert_int_equal(vllm_request_cancel(NULL), VLLM_ERR_INVALID_ARGUMENT);
    assert_int_equal(vllm_request_wait(NULL), VLLM_ERR_INVALID_ARGUMENT);
    assert_false(vllm_request_done(NULL));
    assert_string_equal(vllm_request_error(NULL), "");
    vllm_request_free(NULL);
    char *json = (char *)1;
    assert_int_equal(vllm_chat(NULL, "{}", &json), VLLM_ERR_INVALID_ARGUMENT);
    assert_null(json);
    assert_int_equal(vllm_chat_stream(NULL, "{}", NULL, NULL), VLLM_ERR_INVALID_ARGUMENT);
    int32_t n = 7;
    assert_int_equal(vllm_complete_tokens(NULL, NULL, 0, &sp, NULL, 0, &n, NULL), VLLM_ERR_INVALID_ARGUMENT);
    assert_int_equal(n, 0);
    assert_int_equal(vllm_ex_engine_stats(NULL, NULL), VLLM_ERR_INVALID_ARGUMENT);
    assert_int_equal(vllm_ex_engine_load(NULL, &e), VLLM_ERR_INVALID_ARGUMENT);
    vllm_ex_engine_params xp = vllm_ex_engine_params_default();
    xp.struct_size = 8;
    assert_int_equal(vllm_ex_engine_load(&xp, &e), VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "struct_size"));
    vllm_engine_free(NULL);
    vllm_string_free(NULL);
    vllm_completion_free(NULL);
}

static void test_load_missing(void **state) {
    (void)state;
    vllm_model_params mp = vllm_model_params_default();
    mp.model_path = "/nonexistent/dir/model.gguf";
    vllm_engine *e = (vllm_engine *)1;
    assert_int_equal(vllm_engine_load(&mp, &e), VLLM_ERR_MODEL_LOAD);
    assert_null(e);
    assert_non_null(strstr(vllm_last_error(), "/nonexistent/dir/model.gguf"));
    /* A file that is not a model. */
    mp.model_path = VLLM_SOURCE_DIR "/CMakeLists.txt";
    assert_int_equal(vllm_engine_load(&mp, &e), VLLM_ERR_MODEL_LOAD);
    assert_null(e);
    assert_true(strlen(vllm_last_error()) > 0);
}

/* The error message is per thread. */
static void *other_thread(void *arg) {
    (void)arg;
    return (void *)(intptr_t)(vllm_last_error()[0] == 0); /* its buffer dies with the thread */
}

static void test_error_thread_local(void **state) {
    (void)state;
    vllm_model_params mp = vllm_model_params_default();
    vllm_engine *e;
    assert_int_equal(vllm_engine_load(&mp, &e), VLLM_ERR_INVALID_ARGUMENT);
    pthread_t t;
    void *msg;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, &msg);
    assert_int_equal((intptr_t)msg, 1);
    assert_true(strlen(vllm_last_error()) > 0);
}

/* libvllm.so exports every v5 function and ours, and none of vllmcore's
 * internals. */
static void test_exports(void **state) {
    (void)state;
    void *h = dlopen(VLLM_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("dlopen %s: %s", VLLM_SHARED_LIB, dlerror());
    static const char *const v5[] = {
        "vllm_model_params_default", "vllm_sampling_params_default", "vllm_engine_load", "vllm_engine_free",
        "vllm_complete", "vllm_complete_stream", "vllm_request_submit", "vllm_request_cancel", "vllm_request_wait",
        "vllm_request_done", "vllm_request_error", "vllm_request_free", "vllm_chat", "vllm_chat_stream",
        "vllm_string_free", "vllm_completion_free", "vllm_last_error", "vllm_version", "vllm_abi_version",
        /* additions */
        "vllm_complete_tokens", "vllm_ex_engine_params_default", "vllm_ex_engine_load", "vllm_ex_engine_stats",
        "vllm_ex_tokenize", "vllm_ex_tokens_free", "vllm_ex_detokenize"};
    for (size_t i = 0; i < sizeof v5 / sizeof *v5; i++)
        if (!dlsym(h, v5[i])) fail_msg("libvllm.so does not export %s", v5[i]);
    static const char *const hidden[] = {"aeng_create", "eng_create", "vc_err_set", "tok_encode",
                                         "chat_template_create", "capi_fail", "capi_sampling"};
    for (size_t i = 0; i < sizeof hidden / sizeof *hidden; i++)
        if (dlsym(h, hidden[i])) fail_msg("libvllm.so exports the internal %s", hidden[i]);
    /* Through the loaded library itself. */
    int32_t (*abi)(void) = (int32_t(*)(void))dlsym(h, "vllm_abi_version");
    assert_int_equal(abi(), 5);
    vllm_model_params (*mpd)(void) = (vllm_model_params(*)(void))dlsym(h, "vllm_model_params_default");
    vllm_sampling_params (*spd)(void) = (vllm_sampling_params(*)(void))dlsym(h, "vllm_sampling_params_default");
    check_defaults(mpd(), spd());
    vllm_status (*load)(const vllm_model_params *, vllm_engine **) =
        (vllm_status(*)(const vllm_model_params *, vllm_engine **))dlsym(h, "vllm_engine_load");
    const char *(*last)(void) = (const char *(*)(void))dlsym(h, "vllm_last_error");
    vllm_model_params mp = mpd();
    mp.model_path = "/nonexistent.gguf";
    vllm_engine *e;
    assert_int_equal(load(&mp, &e), VLLM_ERR_MODEL_LOAD);
    assert_non_null(strstr(last(), "/nonexistent.gguf"));
    dlclose(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_null_arguments), cmocka_unit_test(test_load_missing),
        cmocka_unit_test(test_error_thread_local), cmocka_unit_test(test_exports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
