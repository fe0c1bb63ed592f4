/* Output processor: stop strings split across tokens, hold-back of stream
 * text, include_stop_str_in_output, list-order precedence, min_tokens,
 * EOS / stop-token text, finish reasons and usage, driven through the
 * scheduler with a scripted detokenizer; then UTF-8 boundary safety with
 * real vocabularies (GPT-2 byte-level BPE, Llama SentencePiece with byte
 * fallback) from ../shared, skipped when absent. */
#include "sched_sim.h"

#include "engine/output.h"

/* ---- scripted detokenizer: token id -> fixed text piece */

#define NPIECE 64
static const char *g_piece[NPIECE];

static int piece_push(void *ctx, int32_t id, char **delta, size_t *len) {
    (void)ctx;
    const char *p = id >= 0 && id < NPIECE && g_piece[id] ? g_piece[id] : "~";
    *len = strlen(p);
    *delta = *len ? strdup(p) : NULL;
    return 0;
}

static eout_detok piece_detok(void) { return (eout_detok){NULL, piece_push, NULL}; }

typedef struct {
    char streamed[1024];
    size_t n;
    eout_delta last;
    int32_t calls;
    int32_t tokens;
    char stop_str[64]; /* copy of last.stop_str ("" when none): the request is gone */
} stream_log;

/* Run one request to the end through scheduler + output processor, checking
 * after every step that what was streamed is a prefix of the final text
 * (nothing shown is ever taken back). pieces[k] is output k's id. */
static void run_one(const int32_t *outs, int32_t n_outs, ereq_sampling *sp, bool async, stream_log *lg,
                    char *final_text, size_t final_cap) {
    esched_params p = sim_params(256, 4, 512, 64, 16);
    sim *m = sim_new(&p, async);
    m->script[0] = outs;
    m->script_len[0] = n_outs;
    ereq *r = sim_add(m, NULL, 12, sp, 0, 0);
    eout_detok d = piece_detok();
    eout_req *o = eout_req_create(r, &d);
    assert_non_null(o);
    memset(lg, 0, sizeof *lg);
    bool done = false;
    for (int step = 0; step < 200 && !done; step++) {
        sim_step(m);
        eout_delta dl;
        assert_int_equal(eout_req_process(o, r, m->s, &dl), VC_OK);
        assert_int_equal(strlen(dl.text), dl.text_len);
        assert_true(lg->n + dl.text_len < sizeof lg->streamed);
        memcpy(lg->streamed + lg->n, dl.text, dl.text_len);
        lg->n += dl.text_len;
        lg->streamed[lg->n] = 0;
        lg->tokens += dl.n_token_ids;
        lg->calls++;
        lg->last = dl;
        /* the whole text so far always extends what was streamed */
        size_t tl;
        const char *t = eout_req_text(o, &tl);
        assert_true(tl >= lg->n);
        assert_memory_equal(t, lg->streamed, lg->n);
        done = dl.finished;
    }
    assert_true(done);
    assert_true(ereq_is_finished(r));
    size_t tl;
    const char *t = eout_req_text(o, &tl);
    assert_true(tl < final_cap);
    memcpy(final_text, t, tl + 1);
    assert_string_equal(lg->streamed, final_text); /* finished: everything streamed */
    assert_int_equal(lg->tokens, ereq_num_output(r));
    assert_int_equal(lg->last.usage.completion_tokens, ereq_num_output(r));
    assert_int_equal(lg->last.usage.prompt_tokens, 12);
    snprintf(lg->stop_str, sizeof lg->stop_str, "%s", lg->last.stop_str ? lg->last.stop_str : "");
    lg->last.stop_str = NULL;
    eout_req_free(o);
    sim_run(m, 10); /* flush the async pipeline */
    sim_free(m);
}

static void set_pieces(void) {
    memset(g_piece, 0, sizeof g_piece);
    g_piece[2] = "</s>";
    g_piece[11] = "Hel";
    g_piece[12] = "lo W";
    g_piece[13] = "or";
    g_piece[14] = "ld!!";
    g_piece[15] = " and";
    g_piece[16] = "x";
    g_piece[17] = "AyB";
    g_piece[18] = "STOP";
    g_piece[19] = "ab";
    g_piece[20] = "\xC3\xA9"; /* é */
    g_piece[21] = "12345";
    g_piece[22] = "<stop>";
}

static void test_stop_string_split_across_tokens(void **st) {
    (void)st;
    set_pieces();
    const int32_t outs[] = {11, 12, 13, 14, 15, 15, 15};
    for (int async = 0; async < 2; async++) {
        char *stops[] = {"World"};
        ereq_sampling sp = ereq_sampling_default();
        sp.max_tokens = 7;
        sp.stop = stops;
        sp.n_stop = 1;
        stream_log lg;
        char text[256];
        run_one(outs, 7, &sp, async, &lg, text, sizeof text);
        assert_string_equal(text, "Hello ");
        assert_true(lg.last.finished);
        assert_string_equal(lg.last.finish_reason, "stop");
        assert_string_equal(lg.stop_str, "World");
        assert_false(lg.last.has_stop_token);
        assert_int_equal(lg.tokens, 4); /* the token completing the stop string is the last */

        sp.include_stop_str_in_output = true;
        run_one(outs, 7, &sp, async, &lg, text, sizeof text);
        assert_string_equal(text, "Hello World"); /* "!!" of the same token is cut */
        assert_string_equal(lg.stop_str, "World");
    }
}

static void test_hold_back(void **st) {
    (void)st;
    set_pieces();
    /* stop strings "abc" and "é!" -> hold back 2 characters while running */
    char *stops[] = {"abc", "\xC3\xA9!"};
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 4;
    sp.stop = stops;
    sp.n_stop = 2;
    esched_params p = sim_params(256, 4, 512, 64, 16);
    sim *m = sim_new(&p, false);
    const int32_t outs[] = {21, 20, 20, 20};
    m->script[0] = outs;
    m->script_len[0] = 4;
    ereq *r = sim_add(m, NULL, 5, &sp, 0, 0);
    eout_detok d = piece_detok();
    eout_req *o = eout_req_create(r, &d);
    eout_delta dl;
    sim_step(m); /* "12345" */
    eout_req_process(o, r, m->s, &dl);
    assert_string_equal(dl.text, "123");
    assert_false(dl.finished);
    assert_null(dl.finish_reason);
    sim_step(m); /* "12345é": hold "5é" (2 characters, 3 bytes) */
    eout_req_process(o, r, m->s, &dl);
    assert_string_equal(dl.text, "4");
    sim_step(m); /* "12345éé" */
    eout_req_process(o, r, m->s, &dl);
    assert_string_equal(dl.text, "5");
    sim_step(m); /* "12345ééé", length: everything goes out */
    eout_req_process(o, r, m->s, &dl);
    assert_true(dl.finished);
    assert_string_equal(dl.finish_reason, "length");
    assert_string_equal(dl.text, "\xC3\xA9\xC3\xA9\xC3\xA9");
    assert_null(dl.stop_str);
    eout_req_free(o);
    sim_free(m);

    /* with include_stop_str_in_output nothing is held back */
    sp.include_stop_str_in_output = true;
    m = sim_new(&p, false);
    m->script[0] = outs;
    m->script_len[0] = 4;
    r = sim_add(m, NULL, 5, &sp, 0, 0);
    d = piece_detok();
    o = eout_req_create(r, &d);
    sim_step(m);
    eout_req_process(o, r, m->s, &dl);
    assert_string_equal(dl.text, "12345");
    eout_req_free(o);
    sim_run(m, 10);
    sim_free(m);
}

static void test_list_order_and_min_tokens(void **st) {
    (void)st;
    set_pieces();
    /* one token brings "AyB": both stops match; the first listed wins */
    char *stops[] = {"B", "A"};
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 5;
    sp.stop = stops;
    sp.n_stop = 2;
    const int32_t outs[] = {16, 17, 15, 15, 15};
    stream_log lg;
    char text[256];
    run_one(outs, 5, &sp, false, &lg, text, sizeof text);
    assert_string_equal(text, "xAy");
    assert_string_equal(lg.stop_str, "B");

    /* min_tokens = 2: "STOP" in the first two outputs is not searched, even
     * across the boundary; the third "STOP" stops */
    char *stops2[] = {"STOP"};
    sp = ereq_sampling_default();
    sp.max_tokens = 6;
    sp.min_tokens = 2;
    sp.stop = stops2;
    sp.n_stop = 1;
    const int32_t outs2[] = {18, 18, 19, 18, 15, 15};
    run_one(outs2, 6, &sp, false, &lg, text, sizeof text);
    assert_string_equal(text, "STOPSTOPab");
    assert_int_equal(lg.tokens, 4);
    assert_string_equal(lg.last.finish_reason, "stop");
}

static void test_eos_and_stop_token_text(void **st) {
    (void)st;
    set_pieces();
    const int32_t outs[] = {11, 12, 2, 15};
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 4;
    sp.eos_token_id = 2;
    stream_log lg;
    char text[256];
    run_one(outs, 4, &sp, false, &lg, text, sizeof text);
    assert_string_equal(text, "Hello W"); /* EOS text not shown */
    assert_string_equal(lg.last.finish_reason, "stop");
    assert_string_equal(lg.stop_str, "");
    assert_false(lg.last.has_stop_token);
    assert_int_equal(lg.tokens, 3); /* but its id is an output */

    sp.include_stop_str_in_output = true;
    run_one(outs, 4, &sp, true, &lg, text, sizeof text);
    assert_string_equal(text, "Hello W</s>");

    const int32_t outs2[] = {11, 22, 15};
    sp = ereq_sampling_default();
    sp.max_tokens = 4;
    sp.stop_token_ids[0] = 22;
    sp.n_stop_token_ids = 1;
    run_one(outs2, 3, &sp, false, &lg, text, sizeof text);
    assert_string_equal(text, "Hel");
    assert_true(lg.last.has_stop_token);
    assert_int_equal(lg.last.stop_token, 22);
    assert_string_equal(lg.last.finish_reason, "stop");
}

static void test_stop_string_on_last_allowed_token(void **st) {
    (void)st;
    set_pieces();
    /* the scheduler finishes it by length on the same token that completes
     * the stop string: the stop string wins */
    char *stops[] = {"World"};
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 4;
    sp.stop = stops;
    sp.n_stop = 1;
    const int32_t outs[] = {11, 12, 13, 14};
    stream_log lg;
    char text[256];
    run_one(outs, 4, &sp, false, &lg, text, sizeof text);
    assert_string_equal(text, "Hello ");
    assert_string_equal(lg.last.finish_reason, "stop");
    assert_string_equal(lg.stop_str, "World");
}

static void test_abort_and_usage(void **st) {
    (void)st;
    set_pieces();
    esched_params p = sim_params(4096, 4, 4096, 300, 16);
    sim *m = sim_new(&p, false);
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 50;
    int32_t prompt[100];
    for (int i = 0; i < 100; i++) prompt[i] = 30 + i;
    ereq *a = sim_add(m, prompt, 100, &sp, 0, 0);
    sim_step(m);
    ereq *b = sim_add(m, prompt, 100, &sp, 0, 1); /* shares 96 tokens (6 blocks) */
    eout_detok d = piece_detok();
    eout_req *o = eout_req_create(b, &d);
    sim_step(m);
    sim_step(m);
    eout_delta dl;
    eout_req_process(o, b, m->s, &dl);
    assert_int_equal(dl.usage.cached_tokens, 96);
    assert_int_equal(dl.usage.prompt_tokens, 100);
    assert_int_equal(dl.usage.completion_tokens, 2);
    assert_int_equal(dl.n_token_ids, 2);
    assert_string_equal(dl.text, "~~");
    esched_abort(m->s, b->id);
    eout_req_process(o, b, m->s, &dl);
    assert_true(dl.finished);
    assert_string_equal(dl.finish_reason, "abort");
    assert_int_equal(dl.n_token_ids, 0);
    eout_req_free(o);
    (void)a;
    sim_run(m, 100);
    sim_free(m);
}

/* ---- real vocabularies */

static bool utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        int k = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
        if (k < 0 || i + (size_t)k >= n) return false;
        for (int j = 1; j <= k; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return false;
        i += (size_t)k + 1;
    }
    return true;
}

static tok_tokenizer *load_vocab(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/ggml-vocab/%s", VLLM_SHARED_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    tok_tokenizer *t = tok_load(path);
    if (!t) fail_msg("%s: %s", path, vc_err_msg());
    return t;
}

static const char *k_text = "Hello \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x8E\x89 na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 done";

/* Drive a request whose outputs are the ids of k_text through the
 * scheduler and the real detokenizer, one token per step. */
static void real_case(tok_tokenizer *t, char **stops, int n_stops, bool include, char *out, size_t cap,
                      const char **reason) {
    int32_t *ids, *pids;
    size_t n, np;
    assert_int_equal(tok_encode(t, k_text, strlen(k_text), false, &ids, &n), 0);
    const char *ptxt = "The answer:";
    assert_int_equal(tok_encode(t, ptxt, strlen(ptxt), false, &pids, &np), 0);
    esched_params p = sim_params(256, 4, 512, 64, 16);
    sim *m = sim_new(&p, false);
    m->script[0] = ids;
    m->script_len[0] = (int32_t)n;
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = (int32_t)n;
    sp.stop = stops;
    sp.n_stop = n_stops;
    sp.include_stop_str_in_output = include;
    ereq *r = sim_add(m, pids, (int32_t)np, &sp, 0, 0);
    eout_detok d;
    assert_int_equal(eout_detok_tokenizer(t, true, r->tokens, r->num_prompt, &d), VC_OK);
    eout_req *o = eout_req_create(r, &d);
    char streamed[512] = "";
    size_t sn = 0;
    eout_delta dl = {0};
    while (!dl.finished) {
        sim_step(m);
        assert_int_equal(eout_req_process(o, r, m->s, &dl), VC_OK);
        if (!utf8_valid(dl.text, dl.text_len)) fail_msg("delta is not valid UTF-8 after %d outputs", ereq_num_output(r));
        memcpy(streamed + sn, dl.text, dl.text_len);
        sn += dl.text_len;
        streamed[sn] = 0;
    }
    size_t tl;
    const char *txt = eout_req_text(o, &tl);
    assert_string_equal(streamed, txt);
    assert_true(tl < cap);
    memcpy(out, txt, tl + 1);
    *reason = dl.finish_reason;
    eout_req_free(o);
    sim_free(m);
    free(ids);
    free(pids);
}

static void test_real_vocab_utf8(void **st) {
    (void)st;
    const char *names[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"};
    int loaded = 0;
    for (int v = 0; v < 2; v++) {
        tok_tokenizer *t = load_vocab(names[v]);
        if (!t) continue;
        loaded++;
        char out[512];
        const char *reason;
        /* no stop: the whole text comes back, valid UTF-8 at every delta
         * (SentencePiece adds its leading space in context) */
        real_case(t, NULL, 0, false, out, sizeof out, &reason);
        /* SentencePiece: in context (the detokenizer is primed with the
         * prompt) the first word keeps its leading space, as in vLLM */
        if (v == 1) assert_int_equal(out[0], ' ');
        const char *body = v == 1 ? out + 1 : out;
        assert_string_equal(body, k_text);
        assert_string_equal(reason, "length");
        /* a stop string made of multi-byte characters split across byte tokens */
        char *stops[] = {"\xE4\xB8\x96\xE7\x95\x8C"}; /* 世界 */
        real_case(t, stops, 1, false, out, sizeof out, &reason);
        body = out[0] == ' ' && v == 1 ? out + 1 : out;
        assert_string_equal(body, "Hello ");
        assert_string_equal(reason, "stop");
        real_case(t, stops, 1, true, out, sizeof out, &reason);
        body = out[0] == ' ' && v == 1 ? out + 1 : out;
        assert_string_equal(body, "Hello \xE4\xB8\x96\xE7\x95\x8C");
        /* stop in the middle of a character sequence: "é " */
        char *stops2[] = {"\xC3\xA9 "};
        real_case(t, stops2, 1, false, out, sizeof out, &reason);
        body = out[0] == ' ' && v == 1 ? out + 1 : out;
        assert_string_equal(body, "Hello \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x8E\x89 na\xC3\xAFve caf");
        tok_free(t);
    }
    if (!loaded) skip();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_string_split_across_tokens),
        cmocka_unit_test(test_hold_back),
        cmocka_unit_test(test_list_order_and_min_tokens),
        cmocka_unit_test(test_eos_and_stop_token_text),
        cmocka_unit_test(test_stop_string_on_last_allowed_token),
        cmocka_unit_test(test_abort_and_usage),
        cmocka_unit_test(test_real_vocab_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
