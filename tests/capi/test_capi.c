/* The C library on real engines:
 *  - tiny-llama (HF fixture, no tokenizer): token-id completions equal the
 *    transformers greedy goldens; text and chat fail clearly; bad sampling
 *    and structured output are refused;
 *  - llama-2-tiny-random.gguf (../shared, has a tokenizer, no template):
 *    complete / stream / stop / early stop, requests from several threads
 *    with cancel, chat and chat streaming (plain "role: content" prompt);
 *  - SmolLM2-135M-Instruct (models/, skipped when absent): chat through
 *    the model's template equals a completion of the same ChatML text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "vllm.h"

#define TINY VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-llama"
#define RANDOM_GGUF VLLM_SHARED_DIR "/models/llama-2-tiny-random-gguf/llama-2-tiny-random.gguf"
#define SMOL VLLM_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf"

static vllm_engine *load(const char *path, int32_t num_blocks) {
    vllm_model_params mp = vllm_model_params_default();
    mp.model_path = path;
    mp.block_size = 16;
    mp.num_blocks = num_blocks;
    mp.max_num_seqs = 8;
    vllm_engine *e = NULL;
    if (vllm_engine_load(&mp, &e) != VLLM_OK) fail_msg("load %s: %s", path, vllm_last_error());
    return e;
}

static vllm_sampling_params greedy(int32_t max_tokens) {
    vllm_sampling_params sp = vllm_sampling_params_default();
    sp.temperature = 0.0f;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = 1;
    return sp;
}

/* Case cs of a golden.json (HF greedy ids): its prompt and expected ids
 * (at most 64 each). */
static void golden_case(json_t *g, json_t *cs, int32_t *prompt, int32_t *np, int32_t *want, int32_t *nw) {
    json_t *pj = json_array_get(json_object_get(g, "prompts"), (size_t)json_integer_value(json_object_get(cs, "prompt")));
    json_t *gr = json_object_get(cs, "greedy");
    *np = (int32_t)json_array_size(pj);
    *nw = (int32_t)json_array_size(gr);
    assert_true(*np <= 64 && *nw <= 64);
    for (int32_t k = 0; k < *np; k++) prompt[k] = (int32_t)json_integer_value(json_array_get(pj, (size_t)k));
    for (int32_t k = 0; k < *nw; k++) want[k] = (int32_t)json_integer_value(json_array_get(gr, (size_t)k));
}

/* ---- tiny-llama: token ids */

static void test_tiny_tokens(void **state) {
    (void)state;
    json_error_t jerr;
    json_t *g = json_load_file(TINY "/golden.json", 0, &jerr);
    assert_non_null(g);
    vllm_engine *e = load(TINY, 64);
    json_t *cases = json_object_get(g, "cases");
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        int32_t prompt[64], want[64], got[64], n_got = -1, np, nw;
        golden_case(g, cs, prompt, &np, want, &nw);
        vllm_sampling_params sp = greedy(nw);
        vllm_completion c;
        assert_int_equal(vllm_complete_tokens(e, prompt, np, &sp, got, 64, &n_got, &c), VLLM_OK);
        assert_int_equal(n_got, nw);
        assert_memory_equal(got, want, (size_t)nw * sizeof *got);
        assert_string_equal(c.finish_reason, "length");
        assert_int_equal(c.prompt_tokens, np);
        assert_int_equal(c.completion_tokens, nw);
        assert_string_equal(c.text, ""); /* no tokenizer: ids only */
        vllm_completion_free(&c);
        assert_null(c.text);
        /* A smaller buffer truncates what is reported, not the generation. */
        assert_int_equal(vllm_complete_tokens(e, prompt, np, &sp, got, 2, &n_got, NULL), VLLM_OK);
        assert_int_equal(n_got, 2);
        assert_memory_equal(got, want, 2 * sizeof *got);
    }
    json_decref(g);

    int32_t p1[] = {1, 2, 3}, n;
    vllm_sampling_params sp = greedy(4);
    int32_t bad[] = {1, 100000};
    assert_int_equal(vllm_complete_tokens(e, bad, 2, &sp, NULL, 0, &n, NULL), VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "out of range"));
    assert_int_equal(vllm_complete_tokens(e, p1, 0, &sp, NULL, 0, &n, NULL), VLLM_ERR_INVALID_ARGUMENT);
    assert_int_equal(vllm_complete_tokens(e, p1, 3, &sp, NULL, 4, &n, NULL), VLLM_ERR_INVALID_ARGUMENT);

    /* No tokenizer: text and chat fail with a message, the engine lives on. */
    vllm_completion c;
    assert_int_equal(vllm_complete(e, "hello", &sp, &c), VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "tokenizer"));
    assert_null(c.text);
    char *json;
    assert_int_equal(vllm_chat(e, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &json),
                     VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "tokenizer"));

    /* Structured output is refused, never ignored. */
    const char *choices[] = {"yes", "no"};
    struct {
        const char *field;
        vllm_sampling_params sp;
    } cases2[5];
    for (int k = 0; k < 5; k++) cases2[k].sp = greedy(4);
    cases2[0].field = "structured_json", cases2[0].sp.structured_json = "{\"type\":\"object\"}";
    cases2[1].field = "structured_regex", cases2[1].sp.structured_regex = "[0-9]+";
    cases2[2].field = "structured_choice", cases2[2].sp.structured_choice = choices,
    cases2[2].sp.n_structured_choice = 2;
    cases2[3].field = "structured_grammar", cases2[3].sp.structured_grammar = "root ::= \"a\"";
    cases2[4].field = "structured_json_object", cases2[4].sp.structured_json_object = 1;
    for (int k = 0; k < 5; k++) {
        assert_int_equal(vllm_complete_tokens(e, p1, 3, &cases2[k].sp, NULL, 0, &n, NULL),
                         VLLM_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(vllm_last_error(), cases2[k].field));
        assert_non_null(strstr(vllm_last_error(), "not supported"));
    }
    /* Bad sampling values. */
    vllm_sampling_params z;
    memset(&z, 0, sizeof z); /* repetition_penalty 0 */
    assert_int_equal(vllm_complete_tokens(e, p1, 3, &z, NULL, 0, &n, NULL), VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "repetition_penalty"));
    vllm_sampling_params s2 = greedy(4);
    s2.top_p = 0.0f;
    assert_int_equal(vllm_complete_tokens(e, p1, 3, &s2, NULL, 0, &n, NULL), VLLM_ERR_INVALID_ARGUMENT);
    s2 = greedy(4);
    const char *stops[] = {"a", NULL};
    s2.stop = stops;
    s2.n_stop = 2;
    assert_int_equal(vllm_complete_tokens(e, p1, 3, &s2, NULL, 0, &n, NULL), VLLM_ERR_INVALID_ARGUMENT);
    s2.n_stop = 1;
    s2.stop = NULL;
    assert_int_equal(vllm_complete_tokens(e, p1, 3, &s2, NULL, 0, &n, NULL), VLLM_ERR_INVALID_ARGUMENT);
    s2 = greedy(4);
    s2.min_tokens = 9;
    assert_int_equal(vllm_complete_tokens(e, p1, 3, &s2, NULL, 0, &n, NULL), VLLM_ERR_INVALID_ARGUMENT);
    /* max_tokens <= 0: up to the context (max_model_len = 63 blocks * 16). */
    s2 = greedy(0);
    int32_t *big = malloc(2048 * sizeof *big);
    assert_int_equal(vllm_complete_tokens(e, p1, 3, &s2, big, 2048, &n, NULL), VLLM_OK);
    vllm_ex_stats st;
    assert_int_equal(vllm_ex_engine_stats(e, &st), VLLM_OK);
    assert_int_equal(st.num_blocks, 64);
    assert_int_equal(st.block_size, 16);
    assert_int_equal(st.max_model_len, 512); /* the model's: 63 blocks hold more */
    assert_int_equal(n, 512 - 3);
    free(big);
    vllm_engine_free(e);
}


/* num_blocks pins the KV pool; without max_model_len the context shrinks
 * to fit it, with one that does not fit the load fails clearly. */
static void test_kv_sizing(void **state) {
    (void)state;
    vllm_model_params mp = vllm_model_params_default();
    mp.model_path = TINY;
    mp.block_size = 16;
    mp.num_blocks = 4;
    vllm_engine *e;
    assert_int_equal(vllm_engine_load(&mp, &e), VLLM_OK);
    vllm_ex_stats st;
    assert_int_equal(vllm_ex_engine_stats(e, &st), VLLM_OK);
    assert_int_equal(st.num_blocks, 4);
    assert_int_equal(st.max_model_len, 48);
    assert_int_equal(st.block_size, 16);
    vllm_engine_free(e);
    mp.max_model_len = 512;
    assert_int_equal(vllm_engine_load(&mp, &e), VLLM_ERR_MODEL_LOAD);
    assert_null(e);
    assert_non_null(strstr(vllm_last_error(), "num_blocks"));
    /* num_blocks <= 0: sized from a byte budget (vllm_ex) or free memory. */
    vllm_ex_engine_params xp = vllm_ex_engine_params_default();
    xp.base.model_path = TINY;
    xp.base.num_blocks = 0;
    xp.base.block_size = 16;
    xp.base.max_model_len = 64;
    xp.kv_cache_memory_bytes = 1 << 20;
    xp.n_threads = 1;
    xp.device = 7;
    assert_int_equal(vllm_ex_engine_load(&xp, &e), VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "device"));
    if (rt_backend_device_count(RT_DEV_CUDA, NULL) < 1) { /* no backend, or no GPU: a clear refusal */
        xp.device = 2;
        assert_int_equal(vllm_ex_engine_load(&xp, &e), VLLM_ERR_MODEL_LOAD);
        assert_non_null(strstr(vllm_last_error(), "CUDA"));
    }
    xp.device = 0; /* auto: the GPU where there is one, else the CPU; loads either way */
    assert_int_equal(vllm_ex_engine_load(&xp, &e), VLLM_OK);
    vllm_engine_free(e);
    e = NULL;
    xp.device = 1;
    assert_int_equal(vllm_ex_engine_load(&xp, &e), VLLM_OK);
    assert_int_equal(vllm_ex_engine_stats(e, &st), VLLM_OK);
    /* 2 layers * (K + V) * 2 kv heads * 16 dims * 16 tokens * 4 bytes = 8 KiB a block: 128 would fit,
     * max_num_seqs 8 * 4 blocks + 1 can be used. */
    assert_true(st.num_blocks > 4 && st.num_blocks <= 128);
    assert_int_equal(st.max_model_len, 64);
    vllm_engine_free(e);
}

/* ---- tensor parallelism and the other engine knobs of vllm_ex_engine_params */

/* tiny-llama split over 2 ranks (CPU thread groups): the same HF greedy
 * goldens as one rank; bad knob values are refused with a message. */
static void test_tiny_tokens_tp(void **state) {
    (void)state;
    vllm_ex_engine_params xp = vllm_ex_engine_params_default();
    xp.base.model_path = TINY;
    xp.base.block_size = 16;
    xp.base.num_blocks = 64;
    xp.base.max_num_seqs = 8;
    xp.device = 1;
    xp.n_threads = 2;
    vllm_engine *e = NULL;
    xp.tensor_parallel_size = 65;
    assert_int_equal(vllm_ex_engine_load(&xp, &e), VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "tensor_parallel_size"));
    xp.tensor_parallel_size = 2;
    xp.gpu_memory_utilization = 1.5;
    assert_int_equal(vllm_ex_engine_load(&xp, &e), VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "gpu_memory_utilization"));
    xp.gpu_memory_utilization = 0.0;
    xp.kv_cache_dtype = "float8";
    assert_int_equal(vllm_ex_engine_load(&xp, &e), VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "KV cache dtype"));
    assert_null(e);
    xp.kv_cache_dtype = "auto";
    xp.tensor_parallel_size = 3; /* 4 heads, 2 kv heads: no even split */
    assert_int_equal(vllm_ex_engine_load(&xp, &e), VLLM_ERR_MODEL_LOAD);
    printf("  TP 3: %s\n", vllm_last_error());
    assert_null(e);
    xp.tensor_parallel_size = 2;
    if (vllm_ex_engine_load(&xp, &e) != VLLM_OK) fail_msg("load %s at TP 2: %s", TINY, vllm_last_error());
    json_error_t jerr;
    json_t *g = json_load_file(TINY "/golden.json", 0, &jerr);
    assert_non_null(g);
    json_t *cases = json_object_get(g, "cases");
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        int32_t prompt[64], want[64], got[64], n_got = -1, np, nw;
        golden_case(g, cs, prompt, &np, want, &nw);
        vllm_sampling_params sp = greedy(nw);
        assert_int_equal(vllm_complete_tokens(e, prompt, np, &sp, got, 64, &n_got, NULL), VLLM_OK);
        assert_int_equal(n_got, nw);
        assert_memory_equal(got, want, (size_t)nw * sizeof *got);
    }
    json_decref(g);
    vllm_engine_free(e);
}

/* ---- llama-2-tiny-random.gguf: text */

static bool have(const char *path) { return access(path, R_OK) == 0; }

typedef struct {
    char text[8192];
    int calls, finals, stop_after;
    bool finished_last;
} sink;

static bool collect(const char *delta, bool finished, void *user) {
    sink *s = user;
    s->calls++;
    if (finished) s->finals++;
    s->finished_last = finished;
    strncat(s->text, delta, sizeof s->text - strlen(s->text) - 1);
    return !(s->stop_after && s->calls >= s->stop_after);
}

static const char *PROMPTS[] = {"Hello world", "The quick brown fox", "Once upon a time there was", "1 2 3 4",
                                "Paris is the capital of", "int main(void) {", "a", "Lorem ipsum dolor sit amet"};
#define NP 8

static void test_text(void **state) {
    (void)state;
    if (!have(RANDOM_GGUF)) skip();
    vllm_engine *e = load(RANDOM_GGUF, 128);
    vllm_sampling_params sp = greedy(24);
    vllm_completion c;
    assert_int_equal(vllm_complete(e, "Hello world", &sp, &c), VLLM_OK);
    assert_string_equal(c.finish_reason, "length");
    assert_int_equal(c.completion_tokens, 24);
    int32_t *ids, n;
    assert_int_equal(vllm_ex_tokenize(e, "Hello world", true, &ids, &n), VLLM_OK);
    assert_int_equal(c.prompt_tokens, n);
    vllm_ex_tokens_free(ids);
    assert_true(strlen(c.text) > 0);

    /* Streaming gives the same text, then one final call. */
    sink s = {0};
    assert_int_equal(vllm_complete_stream(e, "Hello world", &sp, collect, &s), VLLM_OK);
    assert_string_equal(s.text, c.text);
    assert_int_equal(s.finals, 1);
    assert_true(s.finished_last);

    /* Returning false stops it: no more calls, VLLM_OK, the engine goes on. */
    sink s2 = {.stop_after = 3};
    vllm_sampling_params lng = greedy(200);
    assert_int_equal(vllm_complete_stream(e, "Hello world", &lng, collect, &s2), VLLM_OK);
    assert_int_equal(s2.calls, 3);
    assert_int_equal(s2.finals, 0);
    vllm_ex_stats st;
    assert_int_equal(vllm_ex_engine_stats(e, &st), VLLM_OK);
    assert_int_equal(st.num_running + st.num_waiting, 0);
    sink s3 = {.stop_after = 1};
    assert_int_equal(vllm_complete_stream(e, "Hello world", &lng, collect, &s3), VLLM_OK);
    assert_int_equal(s3.calls, 1);

    /* A stop string from the middle of the greedy text cuts it there. */
    size_t L = strlen(c.text);
    if (L >= 8) {
        char stop[5];
        memcpy(stop, c.text + L / 2, 4);
        stop[4] = 0;
        const char *stops[] = {stop};
        vllm_sampling_params ss = greedy(24);
        ss.stop = stops;
        ss.n_stop = 1;
        vllm_completion c2;
        assert_int_equal(vllm_complete(e, "Hello world", &ss, &c2), VLLM_OK);
        assert_string_equal(c2.finish_reason, "stop");
        const char *at = strstr(c.text, stop);
        assert_int_equal(strlen(c2.text), (size_t)(at - c.text));
        assert_memory_equal(c2.text, c.text, strlen(c2.text));
        vllm_completion_free(&c2);
    }
    /* Detokenize round trip of the prompt. */
    assert_int_equal(vllm_ex_tokenize(e, "Hello world", false, &ids, &n), VLLM_OK);
    char *back;
    assert_int_equal(vllm_ex_detokenize(e, ids, n, true, &back), VLLM_OK);
    assert_string_equal(back, "Hello world");
    vllm_string_free(back);
    vllm_ex_tokens_free(ids);
    vllm_completion_free(&c);
    vllm_engine_free(e);
}

/* ---- requests from several threads */

typedef struct {
    vllm_engine *e;
    int t;
    char texts[4][4096];
    const char *err;
} worker;

static char g_base[NP][4096];

static void *work(void *arg) {
    worker *w = arg;
    vllm_request *r[4];
    sink s[4];
    memset(s, 0, sizeof s);
    for (int k = 0; k < 4; k++) {
        int p = (w->t * 4 + k) % NP;
        vllm_sampling_params sp = greedy(k == 3 ? 500 : 16);
        if (vllm_request_submit(w->e, PROMPTS[p], &sp, collect, &s[k], &r[k]) != VLLM_OK) {
            w->err = "submit failed";
            return NULL;
        }
    }
    vllm_request_cancel(r[3]); /* long one: cancelled */
    vllm_request_cancel(r[3]); /* idempotent */
    for (int k = 0; k < 4; k++) {
        if (vllm_request_wait(r[k]) != VLLM_OK) w->err = "wait failed";
        if (!vllm_request_done(r[k])) w->err = "not done after wait";
        if (strcmp(vllm_request_error(r[k]), "")) w->err = "error set";
        if (s[k].finals != 1) w->err = "no final callback";
        memcpy(w->texts[k], s[k].text, sizeof w->texts[k]);
        vllm_request_free(r[k]);
    }
    return NULL;
}

static void test_requests_threads(void **state) {
    (void)state;
    if (!have(RANDOM_GGUF)) skip();
    vllm_engine *e = load(RANDOM_GGUF, 256);
    for (int p = 0; p < NP; p++) {
        vllm_sampling_params sp = greedy(16);
        vllm_completion c;
        assert_int_equal(vllm_complete(e, PROMPTS[p], &sp, &c), VLLM_OK);
        snprintf(g_base[p], sizeof g_base[p], "%s", c.text);
        vllm_completion_free(&c);
    }
    worker w[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        w[t] = (worker){.e = e, .t = t};
        pthread_create(&th[t], NULL, work, &w[t]);
    }
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 4; t++) {
        if (w[t].err) fail_msg("thread %d: %s", t, w[t].err);
        for (int k = 0; k < 3; k++) assert_string_equal(w[t].texts[k], g_base[(t * 4 + k) % NP]);
    }
    /* Free a request that is still running, and one never waited for. */
    sink s = {0};
    vllm_request *r;
    vllm_sampling_params lng = greedy(400);
    assert_int_equal(vllm_request_submit(e, "Hello", &lng, collect, &s, &r), VLLM_OK);
    vllm_request_free(r);
    assert_int_equal(s.finals, 1);
    /* The engine freed with a request in flight: its final call comes. */
    sink s2 = {0};
    assert_int_equal(vllm_request_submit(e, "Hello", &lng, collect, &s2, &r), VLLM_OK);
    vllm_engine_free(e);
    assert_true(vllm_request_done(r));
    assert_int_equal(s2.finals, 1);
    vllm_request_free(r);
}

/* ---- chat (no template: "role: content" lines) */

typedef struct {
    char content[8192];
    int chunks, finals, usage_chunks;
    bool role_first, bad;
    char finish[16];
} chat_sink;

static bool on_chunk(const char *delta, bool finished, void *user) {
    chat_sink *s = user;
    if (finished) {
        s->finals++;
        if (*delta) s->bad = true;
        return true;
    }
    json_error_t err;
    json_t *j = json_loads(delta, 0, &err);
    if (!j || strcmp(json_string_value(json_object_get(j, "object")), "chat.completion.chunk")) {
        s->bad = true;
        json_decref(j);
        return true;
    }
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    if (!ch) {
        if (json_object_get(j, "usage")) s->usage_chunks++;
    } else {
        json_t *d = json_object_get(ch, "delta");
        if (s->chunks == 0) s->role_first = json_is_string(json_object_get(d, "role"));
        const char *t = json_string_value(json_object_get(d, "content"));
        if (t) strncat(s->content, t, sizeof s->content - strlen(s->content) - 1);
        const char *f = json_string_value(json_object_get(ch, "finish_reason"));
        if (f) snprintf(s->finish, sizeof s->finish, "%s", f);
    }
    s->chunks++;
    json_decref(j);
    return true;
}

static json_t *chat(vllm_engine *e, const char *req) {
    char *out = NULL;
    if (vllm_chat(e, req, &out) != VLLM_OK) fail_msg("vllm_chat: %s", vllm_last_error());
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    if (!j) fail_msg("vllm_chat returned invalid JSON: %s", out);
    vllm_string_free(out);
    return j;
}

static void test_chat(void **state) {
    (void)state;
    if (!have(RANDOM_GGUF)) skip();
    vllm_engine *e = load(RANDOM_GGUF, 128);
    const char *req = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                      "{\"role\":\"user\",\"content\":\"Hi there\"}],\"max_tokens\":12,\"temperature\":0,"
                      "\"ignore_eos\":true,\"stream_options\":{\"include_usage\":true}}";
    json_t *j = chat(e, req);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m");
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    const char *content = json_string_value(json_object_get(msg, "content"));
    assert_non_null(content);
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 12);
    /* The plain prompt, tokenized without special tokens. */
    int32_t *ids, n;
    assert_int_equal(vllm_ex_tokenize(e, "system: Be brief.\nuser: Hi there\nassistant:", false, &ids, &n), VLLM_OK);
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), n);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), n + 12);
    vllm_sampling_params sp = greedy(12);
    int32_t out[12], no;
    vllm_completion c;
    assert_int_equal(vllm_complete_tokens(e, ids, n, &sp, out, 12, &no, &c), VLLM_OK);
    assert_string_equal(c.text, content);
    vllm_completion_free(&c);
    vllm_ex_tokens_free(ids);

    /* Streaming: role chunk, content equal to the blocking answer, finish, usage, final. */
    chat_sink s = {0};
    assert_int_equal(vllm_chat_stream(e, req, on_chunk, &s), VLLM_OK);
    assert_false(s.bad);
    assert_true(s.role_first);
    assert_string_equal(s.content, content);
    assert_string_equal(s.finish, "length");
    assert_int_equal(s.usage_chunks, 1);
    assert_int_equal(s.finals, 1);
    json_decref(j);

    /* Refused: bad JSON, no messages, unsupported features. */
    static const char *const bad[][2] = {
        {"{not json", "invalid JSON"},
        {"[]", "object"},
        {"{\"messages\":[]}", "messages"},
        {"{\"messages\":[{\"content\":\"x\"}]}", "role"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", "temperature"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
         "not supported"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"guided_regex\":\"a+\"}", "not supported"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "not supported"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", "not supported"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}", "not supported"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}", "stop"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char *o = (char *)1;
        assert_int_equal(vllm_chat(e, bad[k][0], &o), VLLM_ERR_INVALID_ARGUMENT);
        assert_null(o);
        if (!strstr(vllm_last_error(), bad[k][1]))
            fail_msg("%s: message '%s' lacks '%s'", bad[k][0], vllm_last_error(), bad[k][1]);
        chat_sink s2 = {0};
        assert_int_equal(vllm_chat_stream(e, bad[k][0], on_chunk, &s2), VLLM_ERR_INVALID_ARGUMENT);
        assert_int_equal(s2.chunks + s2.finals, 0);
    }
    vllm_engine_free(e);

    /* A tool parser vllm.c does not have is refused at the chat call. */
    vllm_model_params mp = vllm_model_params_default();
    mp.model_path = RANDOM_GGUF;
    mp.num_blocks = 64;
    mp.tool_parser = "hermes";
    assert_int_equal(vllm_engine_load(&mp, &e), VLLM_OK);
    char *o;
    assert_int_equal(vllm_chat(e, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &o),
                     VLLM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(vllm_last_error(), "hermes"));
    vllm_engine_free(e);
}

/* ---- SmolLM2 with its chat template */

static void test_chat_template(void **state) {
    (void)state;
    const char *path = getenv("VLLM_TEST_SMOLLM2") ? getenv("VLLM_TEST_SMOLLM2") : SMOL;
    if (!have(path)) skip();
    vllm_engine *e = load(path, 32);
    json_t *j = chat(e, "{\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+2?\"}],\"max_tokens\":8,"
                        "\"temperature\":0}");
    const char *content =
        json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                                          "message"),
                                          "content"));
    assert_non_null(content);
    /* SmolLM2's template: ChatML with its default system message. */
    const char *chatml = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                         "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n";
    int32_t *ids, n;
    assert_int_equal(vllm_ex_tokenize(e, chatml, false, &ids, &n), VLLM_OK);
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), n);
    vllm_sampling_params sp = greedy(8);
    sp.ignore_eos = 0;
    int32_t out[8], no;
    vllm_completion c;
    assert_int_equal(vllm_complete_tokens(e, ids, n, &sp, out, 8, &no, &c), VLLM_OK);
    assert_string_equal(c.text, content);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), c.completion_tokens);
    vllm_completion_free(&c);
    vllm_ex_tokens_free(ids);
    json_decref(j);
    vllm_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_tokens),      cmocka_unit_test(test_tiny_tokens_tp), cmocka_unit_test(test_kv_sizing), cmocka_unit_test(test_text),
        cmocka_unit_test(test_requests_threads), cmocka_unit_test(test_chat),
        cmocka_unit_test(test_chat_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
