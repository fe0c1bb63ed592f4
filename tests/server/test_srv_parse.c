/* Unit tests of the server's pure parts: request validation (srv_parse_gen),
 * UTF-8 checking, error JSON, and the reasoning / hermes tool-call splitter
 * fed whole and one byte at a time. No model needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/srv_internal.h"

#include <string.h>

static int parse(const char *body, bool chat, srv_gen *g, srv_error *e) {
    return srv_parse_gen(body, strlen(body), chat, g, e);
}

static void test_completion_fields(void **state) {
    (void)state;
    srv_gen g;
    srv_error e;
    assert_int_equal(parse("{\"prompt\": \"hi\", \"max_tokens\": 7, \"temperature\": 0.5, \"top_k\": 40, "
                           "\"seed\": 9, \"stop\": [\"a\", \"bc\"], \"stop_token_ids\": [3, 4], \"n\": 2, "
                           "\"stream\": true, \"stream_options\": {\"include_usage\": true}, \"echo\": true, "
                           "\"ignore_eos\": true, \"min_tokens\": 2, \"unknown\": {}}",
                           false, &g, &e), 0);
    assert_int_equal(g.n_prompts, 1);
    assert_string_equal(g.prompts[0].text, "hi");
    assert_int_equal(g.max_tokens, 7);
    assert_true(g.sp.temperature == 0.5f);
    assert_int_equal(g.sp.top_k, 40);
    assert_true(g.sp.has_seed && g.sp.seed == 9);
    assert_int_equal(g.sp.n_stop, 2);
    assert_string_equal(g.sp.stop[1], "bc");
    assert_int_equal(g.sp.n_stop_token_ids, 2);
    assert_int_equal(g.n, 2);
    assert_true(g.stream && g.include_usage && g.echo && g.sp.ignore_eos);
    assert_int_equal(g.sp.min_tokens, 2);
    srv_gen_free(&g);

    assert_int_equal(parse("{\"prompt\": [[1, 2], \"x\"]}", false, &g, &e), 0);
    assert_int_equal(g.n_prompts, 2);
    assert_int_equal(g.prompts[0].n_ids, 2);
    assert_int_equal(g.prompts[0].ids[1], 2);
    assert_int_equal(g.max_tokens, -1);
    srv_gen_free(&g);
}

static void test_rejects(void **state) {
    (void)state;
    const char *bad[] = {
        "", "{", "[]", "{\"prompt\": 1}", "{\"prompt\": []}", "{\"prompt\": [-1]}", "{\"prompt\": [1.5]}",
        "{\"prompt\": \"x\", \"max_tokens\": 0}", "{\"prompt\": \"x\", \"max_tokens\": 1.0}",
        "{\"prompt\": \"x\", \"temperature\": \"hot\"}", "{\"prompt\": \"x\", \"top_p\": 1.5}",
        "{\"prompt\": \"x\", \"n\": 1000}", "{\"prompt\": \"x\", \"stop\": [1]}", "{\"prompt\": \"x\", \"stop\": \"\"}",
        "{\"prompt\": \"x\", \"stream_options\": {}}", "{\"prompt\": \"x\", \"logprobs\": 21}", "{\"prompt\": \"x\", \"logprobs\": true}",
        "{\"prompt\": \"x\", \"min_tokens\": 5, \"max_tokens\": 2}", "{\"prompt\": \"x\", \"prompt\": \"y\"}",
        "{\"prompt\": \"x\", \"logit_bias\": {\"a\": 2}}", "{\"prompt\": \"x\", \"allowed_token_ids\": []}",
        "{\"prompt\": \"x\", \"bad_words\": [\" \"]}", "{\"prompt\": \"x\", \"prompt_logprobs\": 21}",
        "{\"prompt\": \"x\", \"response_format\": {\"type\": "
        "\"json_schema\"}}", "{\"prompt\": \"x\", \"stop_token_ids\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
        "{\"prompt\": \"\xff\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_gen g;
        srv_error e;
        if (parse(bad[i], false, &g, &e) == 0) fail_msg("accepted: %s", bad[i]);
        assert_int_equal(e.status, 400);
        assert_true(e.msg[0] != 0);
        srv_gen_free(&g);
    }
    const char *bad_chat[] = {
        "{\"messages\": []}", "{\"messages\": {}}", "{\"messages\": [1]}",
        "{\"messages\": [{\"role\": \"x\", \"content\": \"a\"}]}", "{\"messages\": [{\"content\": \"a\"}]}",
        "{\"messages\": [{\"role\": \"user\"}]}", "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"top_logprobs\": 2}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": 1}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tool_choice\": \"required\"}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"chat_template_kwargs\": []}",
    };
    for (size_t i = 0; i < sizeof bad_chat / sizeof bad_chat[0]; i++) {
        srv_gen g;
        srv_error e;
        if (parse(bad_chat[i], true, &g, &e) == 0) fail_msg("accepted: %s", bad_chat[i]);
        assert_int_equal(e.status, 400);
        srv_gen_free(&g);
    }
}

static void test_chat_fields(void **state) {
    (void)state;
    srv_gen g;
    srv_error e;
    assert_int_equal(parse("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
                           "{\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": null}],"
                           "\"max_completion_tokens\": 3, \"add_generation_prompt\": false, "
                           "\"chat_template_kwargs\": {\"enable_thinking\": false}, \"logprobs\": false}",
                           true, &g, &e), 0);
    assert_string_equal(json_string_value(json_object_get(json_array_get(g.messages, 0), "content")), "a\nb");
    assert_int_equal(g.max_tokens, 3);
    assert_false(g.add_generation_prompt);
    assert_non_null(g.template_kwargs);
    srv_gen_free(&g);
}

static void test_utf8_and_error_json(void **state) {
    (void)state;
    assert_true(srv_utf8_valid("h\xc3\xa9llo \xf0\x9f\x98\x80", 11));
    assert_false(srv_utf8_valid("\xc0\xaf", 2));         /* overlong */
    assert_false(srv_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    assert_false(srv_utf8_valid("\xe2\x82", 2));         /* truncated */
    assert_false(srv_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    srv_error e;
    srv_err(&e, 404, "model", "no \"%s\"", "m");
    char *s = srv_error_json(&e);
    json_t *j = json_loads(s, 0, NULL);
    json_t *in = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(in, "message")), "no \"m\"");
    assert_string_equal(json_string_value(json_object_get(in, "type")), "NotFoundError");
    assert_string_equal(json_string_value(json_object_get(in, "param")), "model");
    assert_int_equal(json_integer_value(json_object_get(in, "code")), 404);
    json_decref(j);
    free(s);
}

/* Run text through a splitter in pieces of `step` bytes. */
static void split(const char *text, size_t step, srv_reasoning reasoning, srv_tool_parser tp, vc_strbuf *c, vc_strbuf *r,
                  json_t *calls) {
    srv_splitter sp;
    srv_splitter_init(&sp, reasoning, tp);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step) {
        size_t k = n - i < step ? n - i : step;
        srv_splitter_push(&sp, text + i, k, false, c, r, calls);
    }
    srv_splitter_push(&sp, "", 0, true, c, r, calls);
    srv_splitter_free(&sp);
}

static void test_splitter(void **state) {
    (void)state;
    const char *text = "<think>plan it</think>Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"city\": \"Paris\"}}\n</tool_call><tool_call>{\"name\": \"f\"}</tool_call> done <tool";
    size_t steps[] = {1, 3, 1000};
    for (size_t s = 0; s < 3; s++) {
        vc_strbuf c = {0}, r = {0};
        json_t *calls = json_array();
        split(text, steps[s], SRV_REASON_QWEN3, SRV_TOOLS_HERMES, &c, &r, calls);
        assert_string_equal(r.s, "plan it");
        assert_string_equal(c.s, "Sure.  done <tool");
        assert_int_equal(json_array_size(calls), 2);
        json_t *f0 = json_object_get(json_array_get(calls, 0), "function");
        assert_string_equal(json_string_value(json_object_get(f0, "name")), "get_weather");
        assert_string_equal(json_string_value(json_object_get(f0, "arguments")), "{\"city\": \"Paris\"}");
        assert_int_equal(json_integer_value(json_object_get(json_array_get(calls, 1), "index")), 1);
        assert_string_equal(json_string_value(json_object_get(json_array_get(calls, 0), "type")), "function");
        json_decref(calls);
        vc_sb_free(&c);
        vc_sb_free(&r);
    }
    /* Parsers off: text passes through untouched. */
    vc_strbuf c = {0}, r = {0};
    json_t *calls = json_array();
    split(text, 2, SRV_REASON_NONE, SRV_TOOLS_NONE, &c, &r, calls);
    assert_string_equal(c.s, text);
    assert_null(r.s);
    assert_int_equal(json_array_size(calls), 0);
    vc_sb_free(&c);
    /* A broken tool call stays content. */
    split("<tool_call>not json</tool_call>", 4, SRV_REASON_NONE, SRV_TOOLS_HERMES, &c, &r, calls);
    assert_string_equal(c.s, "<tool_call>not json</tool_call>");
    assert_int_equal(json_array_size(calls), 0);
    json_decref(calls);
    vc_sb_free(&c);
    vc_sb_free(&r);
    /* deepseek_r1: reasoning from the start (leading <think> dropped) up to </think>. */
    const char *r1[] = {"let me see</think>The answer", "<think>let me see</think>The answer"};
    for (int k = 0; k < 2; k++)
        for (size_t st = 1; st <= 5; st += 4) {
            vc_strbuf c2 = {0}, r2 = {0};
            json_t *cl = json_array();
            split(r1[k], st, SRV_REASON_R1, SRV_TOOLS_NONE, &c2, &r2, cl);
            assert_string_equal(r2.s, "let me see");
            assert_string_equal(c2.s, "The answer");
            json_decref(cl);
            vc_sb_free(&c2);
            vc_sb_free(&r2);
        }
    /* llama3_json: whole-output JSON call(s); mistral: [TOOL_CALLS] [...]. */
    struct { srv_tool_parser tp; const char *text; int calls; const char *content; } W[] = {
        {SRV_TOOLS_LLAMA3_JSON, " {\"name\": \"f\", \"parameters\": {\"a\": 1}}", 1, NULL},
        {SRV_TOOLS_LLAMA3_JSON, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\"}", 2, NULL},
        {SRV_TOOLS_LLAMA3_JSON, "{\"not\": \"a call\"}", 0, "{\"not\": \"a call\"}"},
        {SRV_TOOLS_LLAMA3_JSON, "Hello {\"name\": \"f\"}", 0, "Hello {\"name\": \"f\"}"},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": \"y\"}}]", 1, NULL},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS] oops", 0, "[TOOL_CALLS] oops"},
        {SRV_TOOLS_MISTRAL, "[TOOL", 0, "[TOOL"},
    };
    for (size_t k = 0; k < sizeof W / sizeof W[0]; k++)
        for (size_t st = 1; st <= 7; st += 6) {
            vc_strbuf c4 = {0}, r4 = {0};
            json_t *cl = json_array();
            split(W[k].text, st, SRV_REASON_NONE, W[k].tp, &c4, &r4, cl);
            assert_int_equal(json_array_size(cl), W[k].calls);
            if (W[k].content) assert_string_equal(c4.s, W[k].content);
            else assert_null(c4.s);
            if (W[k].calls) {
                json_t *f = json_object_get(json_array_get(cl, 0), "function");
                assert_string_equal(json_string_value(json_object_get(f, "name")), "f");
                json_t *args = json_loads(json_string_value(json_object_get(f, "arguments")), 0, NULL);
                assert_true(json_is_object(args));
                json_decref(args);
            }
            json_decref(cl);
            vc_sb_free(&c4);
            vc_sb_free(&r4);
        }
    /* qwen3 without any tag: all content. */
    vc_strbuf c3 = {0}, r3 = {0};
    json_t *cl3 = json_array();
    split("plain <thin", 3, SRV_REASON_QWEN3, SRV_TOOLS_NONE, &c3, &r3, cl3);
    assert_string_equal(c3.s, "plain <thin");
    assert_null(r3.s);
    json_decref(cl3);
    vc_sb_free(&c3);
}

/* Streaming: text in pieces of `step` bytes with a fresh delta array per
 * push (as one SSE chunk each); the deltas are assembled the way clients
 * do (by index: id/type/name once, arguments concatenated). Returns the
 * assembled calls; *first_hdr_push is the push that carried call 0's header. */
static json_t *split_stream(const char *prefill, const char *text, size_t step, vc_strbuf *c, int *first_hdr_push) {
    srv_splitter sp;
    srv_splitter_init(&sp, SRV_REASON_NONE, SRV_TOOLS_HERMES);
    sp.stream = true;
    if (prefill) srv_splitter_prefill(&sp, prefill);
    json_t *out = json_array();
    size_t n = strlen(text);
    int push = 0;
    *first_hdr_push = -1;
    for (size_t i = 0; i <= n; i += step, push++) {
        size_t k = i >= n ? 0 : (n - i < step ? n - i : step);
        vc_strbuf r = {0};
        json_t *d = json_array();
        srv_splitter_push(&sp, text + i, k, i + k >= n && k == 0, c, &r, d);
        if (i + k >= n && k) srv_splitter_push(&sp, "", 0, true, c, &r, d);
        size_t j;
        json_t *x;
        json_array_foreach(d, j, x) {
            int idx = (int)json_integer_value(json_object_get(x, "index"));
            json_t *fn = json_object_get(x, "function");
            if ((size_t)idx == json_array_size(out)) {
                assert_non_null(json_object_get(x, "id")); /* the first delta of a call names it */
                assert_string_equal(json_string_value(json_object_get(x, "type")), "function");
                assert_non_null(json_object_get(fn, "name"));
                json_array_append_new(out, json_pack("{s:O, s:s}", "name", json_object_get(fn, "name"), "arguments", ""));
                if (idx == 0) *first_hdr_push = push;
            }
            assert_true((size_t)idx < json_array_size(out));
            const char *a = json_string_value(json_object_get(fn, "arguments"));
            if (a) {
                json_t *o = json_array_get(out, (size_t)idx);
                char buf[512];
                snprintf(buf, sizeof buf, "%s%s", json_string_value(json_object_get(o, "arguments")), a);
                json_object_set_new(o, "arguments", json_string(buf));
            }
        }
        json_decref(d);
        vc_sb_free(&r);
        if (i >= n) break;
    }
    srv_splitter_free(&sp);
    return out;
}

static void test_splitter_stream(void **state) {
    (void)state;
    const char *text = "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa}ris\", "
                       "\"d\": [1, {\"x\": 2}]}}\n</tool_call><tool_call>{\"name\": \"f\"}</tool_call> done";
    size_t steps[] = {1, 2, 5, 1000};
    for (size_t k = 0; k < 4; k++) {
        vc_strbuf c = {0};
        int hdr;
        json_t *calls = split_stream(NULL, text, steps[k], &c, &hdr);
        assert_string_equal(c.s, "Sure.  done");
        assert_int_equal(json_array_size(calls), 2);
        json_t *c0 = json_array_get(calls, 0), *c1 = json_array_get(calls, 1);
        assert_string_equal(json_string_value(json_object_get(c0, "name")), "get_weather");
        /* the model's own arguments text, fragment by fragment */
        assert_string_equal(json_string_value(json_object_get(c0, "arguments")),
                            "{\"city\": \"Pa}ris\", \"d\": [1, {\"x\": 2}]}");
        assert_string_equal(json_string_value(json_object_get(c1, "name")), "f");
        assert_string_equal(json_string_value(json_object_get(c1, "arguments")), "{}");
        if (steps[k] == 1) assert_true(hdr < 40); /* the name went out long before the close tag */
        json_decref(calls);
        vc_sb_free(&c);
    }
    /* Forced tool choice: the server's prefill opens the call; junk after the
     * arguments object (or a missing close) still gives the call. */
    const char *tails[] = {"{\"city\": \"Rome\"}}\n</tool_call>", "{\"city\": \"Rome\"} and more", "{\"city\": \"Rome\"}"};
    for (int t = 0; t < 3; t++)
        for (size_t st = 1; st <= 4; st += 3) {
            vc_strbuf c = {0};
            int hdr;
            json_t *calls = split_stream("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", tails[t], st, &c, &hdr);
            assert_int_equal(c.len, 0);
            assert_int_equal(json_array_size(calls), 1);
            assert_int_equal(hdr, 0);
            assert_string_equal(json_string_value(json_object_get(json_array_get(calls, 0), "arguments")),
                                "{\"city\": \"Rome\"}");
            json_decref(calls);
            vc_sb_free(&c);
        }
    /* Non-streaming with the same prefill and junk: one call, vLLM's spacing. */
    srv_splitter sp;
    srv_splitter_init(&sp, SRV_REASON_NONE, SRV_TOOLS_HERMES);
    srv_splitter_prefill(&sp, "<tool_call>\n{\"name\": \"g\", \"arguments\": ");
    vc_strbuf c = {0}, r = {0};
    json_t *calls = json_array();
    srv_splitter_push(&sp, "{\"a\":1} x", 10, true, &c, &r, calls);
    assert_int_equal(json_array_size(calls), 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"),
                                                          "arguments")), "{\"a\": 1}");
    assert_int_equal(sp.n_tools, 1);
    srv_splitter_free(&sp);
    json_decref(calls);
    vc_sb_free(&c);
    vc_sb_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_fields), cmocka_unit_test(test_rejects), cmocka_unit_test(test_chat_fields),
        cmocka_unit_test(test_utf8_and_error_json), cmocka_unit_test(test_splitter), cmocka_unit_test(test_splitter_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
