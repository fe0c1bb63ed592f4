/* Unit tests of the tokenizer internals: byte-level alphabet, BPE merges
 * (both JSON merge formats, rank order, ties), byte fallback and unk,
 * normalizers, added/special-token splitting with their flags, decoders,
 * the streaming detokenizer's invariants, and error paths. Real-file parity
 * lives in tests/python/test_tokenizer.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/strbuf.h"
#include "tokenizer/tok_int.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

static tok_tokenizer *load(const char *json) {
    tok_tokenizer *t = tok_load_json_buf(json, strlen(json), NULL, 0, "test.json");
    if (!t) fprintf(stderr, "load failed: %s\n", vc_err_msg());
    return t;
}

static void expect_ids(const tok_tokenizer *t, const char *text, bool special, const int32_t *want, size_t n) {
    int32_t *ids;
    size_t k;
    assert_int_equal(tok_encode(t, text, strlen(text), special, &ids, &k), 0);
    if (k != n) {
        fprintf(stderr, "'%s': got %zu ids:", text, k);
        for (size_t i = 0; i < k; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(k, n);
    for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], want[i]);
    free(ids);
}
#define EXPECT(t, text, special, ...)                                                        \
    do {                                                                                     \
        const int32_t w_[] = {__VA_ARGS__};                                                  \
        expect_ids(t, text, special, w_, sizeof w_ / sizeof w_[0]);                          \
    } while (0)

static char *decode(const tok_tokenizer *t, const int32_t *ids, size_t n, bool skip) {
    char *s;
    assert_int_equal(tok_decode(t, ids, n, skip, &s, NULL), 0);
    return s;
}

/* Byte-level BPE test tokenizer: ids 0..255 are the 256 alphabet chars in
 * byte order, then merges; plus two added tokens. */
static char *bytelevel_json(const char *merges_json, const char *extra_vocab, const char *added) {
    vc_strbuf sb = {0};
    vc_sb_puts(&sb, "{\"added_tokens\": [");
    vc_sb_puts(&sb, added);
    vc_sb_puts(&sb, "], \"normalizer\": {\"type\": \"NFC\"},"
                    "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},"
                    "\"decoder\": {\"type\": \"ByteLevel\"},"
                    "\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)b);
        char u[8];
        if (cp == '"' || cp == '\\') snprintf(u, sizeof u, "\\%c", (char)cp);
        else if (cp < 0x80) snprintf(u, sizeof u, "%c", (char)cp);
        else snprintf(u, sizeof u, "%c%c", (char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F)));
        vc_sb_printf(&sb, "%s\"%s\": %d", b ? ", " : "", u, b);
    }
    vc_sb_puts(&sb, extra_vocab);
    vc_sb_puts(&sb, "}, \"merges\": ");
    vc_sb_puts(&sb, merges_json);
    vc_sb_puts(&sb, "}}");
    return vc_sb_steal(&sb);
}

static const char ADDED[] =
    "{\"id\": 300, \"content\": \"<|end|>\", \"special\": true, \"normalized\": false},"
    "{\"id\": 301, \"content\": \"<tool>\", \"special\": false, \"normalized\": false, \"lstrip\": true, \"rstrip\": true},"
    "{\"id\": 302, \"content\": \"word\", \"special\": false, \"normalized\": true, \"single_word\": true}";

/* ---- tests ---- */

static void test_byte_alphabet(void **st) {
    (void)st;
    assert_int_equal(tok_byte_to_cp(' '), 0x120); /* Ġ */
    assert_int_equal(tok_byte_to_cp('\n'), 0x10A); /* Ċ */
    assert_int_equal(tok_byte_to_cp('A'), 'A');
    assert_int_equal(tok_byte_to_cp(0xAD), 0x143);
    for (int b = 0; b < 256; b++) assert_int_equal(tok_cp_to_byte(tok_byte_to_cp((uint8_t)b)), b);
    assert_int_equal(tok_cp_to_byte(0x3000), -1);
}

static void test_merges_formats_and_ranks(void **st) {
    (void)st;
    /* 'a'=97 'b'=98 'c'=99; ab=256 bc=257 abc=258 aa=259 */
    const char *vocab = ", \"ab\": 256, \"bc\": 257, \"abc\": 258, \"aa\": 259";
    char *j1 = bytelevel_json("[\"a b\", \"ab c\", \"b c\", \"a a\"]", vocab, ADDED);
    char *j2 = bytelevel_json("[[\"a\", \"b\"], [\"ab\", \"c\"], [\"b\", \"c\"], [\"a\", \"a\"]]", vocab, ADDED);
    char *j3 = bytelevel_json("[\"b c\", \"a b\", \"ab c\", \"a a\"]", vocab, ADDED);
    tok_tokenizer *t1 = load(j1), *t2 = load(j2), *t3 = load(j3);
    assert_non_null(t1);
    assert_non_null(t2);
    assert_non_null(t3);
    EXPECT(t1, "abc", false, 258);
    EXPECT(t2, "abc", false, 258);
    EXPECT(t3, "abc", false, 97, 257); /* "b c" ranks first: a + bc, no (a, bc) merge */
    EXPECT(t1, "aaa", false, 259, 97); /* equal ranks: leftmost first */
    EXPECT(t1, "aaaa", false, 259, 259);
    EXPECT(t1, "ab ab", false, 256, 32, 256); /* pieces "ab", " ab"; byte 32 has id 32 */
    free(j1);
    free(j2);
    free(j3);
    tok_free(t1);
    tok_free(t2);
    tok_free(t3);
}

static void test_bad_merge_rejected(void **st) {
    (void)st;
    char *j = bytelevel_json("[\"a zz\"]", "", ADDED);
    assert_null(tok_load_json_buf(j, strlen(j), NULL, 0, "bad.json"));
    assert_non_null(strstr(vc_err_msg(), "bad.json"));
    free(j);
}

static void test_added_tokens(void **st) {
    (void)st;
    char *j = bytelevel_json("[]", "", ADDED);
    tok_tokenizer *t = load(j);
    assert_non_null(t);
    EXPECT(t, "x<|end|>y", false, 'x', 300, 'y');
    /* lstrip/rstrip swallow the surrounding whitespace */
    EXPECT(t, "a  <tool>  b", false, 'a', 301, 'b');
    /* single_word: only matches as a whole word */
    EXPECT(t, "a word b", false, 'a', 32, 302, 32, 'b');
    EXPECT(t, "swordfish", false, 's', 'w', 'o', 'r', 'd', 'f', 'i', 's', 'h');
    /* partial special token is plain text */
    EXPECT(t, "<|end", false, '<', '|', 'e', 'n', 'd');
    assert_true(tok_is_special(t, 300));
    assert_false(tok_is_special(t, 301));
    assert_int_equal(tok_token_id(t, "<|end|>", 7), 300);
    assert_int_equal(tok_token_id(t, "ab", 2), -1);
    int32_t ids[] = {'h', 300, 'i'};
    char *s = decode(t, ids, 3, false);
    assert_string_equal(s, "h<|end|>i");
    free(s);
    s = decode(t, ids, 3, true);
    assert_string_equal(s, "hi");
    free(s);
    free(j);
    tok_free(t);
}

static void test_bytelevel_roundtrip_and_lossy(void **st) {
    (void)st;
    char *j = bytelevel_json("[]", "", ADDED);
    tok_tokenizer *t = load(j);
    assert_non_null(t);
    const char *text = "héllo 世界 😀\n\t  x";
    int32_t *ids;
    size_t n;
    assert_int_equal(tok_encode(t, text, strlen(text), true, &ids, &n), 0);
    assert_int_equal(n, strlen(text)); /* no merges: one id per byte */
    char *s = decode(t, ids, n, false);
    assert_string_equal(s, text);
    free(s);
    /* a truncated 4-byte sequence decodes to one U+FFFD (maximal subpart) */
    int32_t bad[] = {0xF0, 0x9F, 0x98, 'A'};
    s = decode(t, bad, 4, false);
    assert_string_equal(s, "\xEF\xBF\xBD" "A");
    free(s);
    free(ids);
    /* invalid UTF-8 input is refused */
    assert_true(tok_encode(t, "\xC3(", 2, false, &ids, &n) < 0);
    free(j);
    tok_free(t);
}

static void test_normalizers(void **st) {
    (void)st;
    vc_strbuf out = {0};
    tok_norm n = {0};
    n.type = TN_NFC;
    assert_int_equal(tok_norm_apply(&n, "e\xCC\x81", 3, &out), 0);
    assert_string_equal(out.s, "\xC3\xA9");
    n.type = TN_NFKC;
    assert_int_equal(tok_norm_apply(&n, "\xEF\xAC\x81", 3, &out), 0); /* ﬁ */
    assert_string_equal(out.s, "fi");
    n.type = TN_NFD;
    assert_int_equal(tok_norm_apply(&n, "\xC3\xA9", 2, &out), 0);
    assert_string_equal(out.s, "e\xCC\x81");
    n.type = TN_LOWER;
    assert_int_equal(tok_norm_apply(&n, "AbÇ\xC4\xB0", 6, &out), 0);
    assert_string_equal(out.s, "ab\xC3\xA7i\xCC\x87");
    n.type = TN_STRIP;
    n.strip_left = n.strip_right = true;
    assert_int_equal(tok_norm_apply(&n, " \t x y \xE3\x80\x80", 10, &out), 0);
    assert_string_equal(out.s, "x y");
    tok_norm seq = {0}, items[2] = {{0}};
    seq.type = TN_SEQ;
    seq.items = items;
    seq.n_items = 2;
    items[0].type = TN_PREPEND;
    items[0].content = "\xE2\x96\x81";
    items[0].content_n = 3;
    items[1].type = TN_REPLACE;
    items[1].pat = tok_regex_new(" ", 1, true, "test");
    items[1].content = "\xE2\x96\x81";
    items[1].content_n = 3;
    assert_int_equal(tok_norm_apply(&seq, "a b", 3, &out), 0);
    assert_string_equal(out.s, "\xE2\x96\x81" "a" "\xE2\x96\x81" "b");
    assert_int_equal(tok_norm_apply(&seq, "", 0, &out), 0); /* Prepend skips empty text */
    assert_string_equal(out.s, "");
    tok_regex_free(items[1].pat);
    vc_sb_free(&out);
}

/* SentencePiece-style BPE: Prepend/Replace normalizer, byte fallback, unk. */
static const char SPM_JSON[] =
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true, \"normalized\": false},"
    "  {\"id\": 1, \"content\": \"<s>\", \"special\": true, \"normalized\": false}],"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"},"
    "   {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]},"
    " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
    "   {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1]}}},"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"},"
    "   \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
    "   {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
    " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": true,"
    "   \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"<0xC3>\": 2, \"<0xA9>\": 3, \"\\u2581\": 4, \"h\": 5, \"i\": 6,"
    "     \"\\u2581h\": 7, \"\\u2581hi\": 8},"
    "   \"merges\": [\"\\u2581 h\", \"\\u2581h i\"]}}";

static void test_spm_byte_fallback(void **st) {
    (void)st;
    tok_tokenizer *t = load(SPM_JSON);
    assert_non_null(t);
    assert_int_equal(tok_bos_id(t), 1); /* no config: taken from the post-processor */
    assert_string_equal(tok_bos_token_str(t), "<s>");
    EXPECT(t, "hi", true, 1, 8);
    EXPECT(t, "hi hi", false, 8, 8);
    EXPECT(t, "\xC3\xA9", false, 4, 2, 3); /* é -> byte tokens */
    EXPECT(t, "xyz", false, 4, 0);         /* unknown chars fuse into one unk */
    EXPECT(t, "<s>hi", false, 1, 8);       /* Prepend applies to each text segment */
    int32_t ids[] = {1, 8, 4, 2, 3, 4, 5};
    char *s = decode(t, ids, 7, true);
    assert_string_equal(s, "hi \xC3\xA9 h");
    free(s);
    int32_t broken[] = {8, 2, 5}; /* lone 0xC3 then h */
    s = decode(t, broken, 3, false);
    assert_string_equal(s, "hi\xEF\xBF\xBDh");
    free(s);
    tok_free(t);
}

/* Pushing ids one by one: deltas are valid UTF-8 and concatenate to the
 * full decode, for random id sequences (bytes that do not form UTF-8 too). */
static void stream_invariants(const tok_tokenizer *t, unsigned seed) {
    srand(seed);
    size_t v = tok_vocab_size(t);
    for (int rep = 0; rep < 300; rep++) {
        int32_t ids[48];
        size_t n = 1 + (size_t)rand() % 48;
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((size_t)rand() % (v + 2)) - 1; /* incl. invalid */
        for (int skip = 0; skip < 2; skip++) {
            tok_stream *s = tok_stream_create(t, skip);
            assert_non_null(s);
            vc_strbuf acc = {0};
            vc_sb_append(&acc, "", 0);
            char *d;
            size_t dl;
            for (size_t i = 0; i <= n; i++) {
                if (i < n) assert_int_equal(tok_stream_push_n(s, ids[i], &d, &dl), 0);
                else assert_int_equal(tok_stream_flush_n(s, &d, &dl), 0);
                if (d) {
                    assert_true(tok_utf8_valid(d, dl));
                    vc_sb_append(&acc, d, dl);
                }
                free(d);
            }
            size_t fl;
            char *full;
            assert_int_equal(tok_decode(t, ids, n, skip, &full, &fl), 0);
            assert_int_equal(acc.len, fl);
            assert_memory_equal(acc.s, full, fl);
            free(full);
            vc_sb_free(&acc);
            tok_stream_free(s);
        }
    }
}

static void test_stream_bytelevel(void **st) {
    (void)st;
    char *j = bytelevel_json("[\"a b\"]", ", \"ab\": 256", ADDED);
    tok_tokenizer *t = load(j);
    assert_non_null(t);
    stream_invariants(t, 1);
    /* an incomplete character is held back until it completes */
    tok_stream *s = tok_stream_create(t, false);
    char *d;
    assert_int_equal(tok_stream_push(s, 0xE4, &d), 0);
    assert_null(d);
    assert_int_equal(tok_stream_push(s, 0xB8, &d), 0);
    assert_null(d);
    assert_int_equal(tok_stream_push(s, 0xAD, &d), 0);
    assert_string_equal(d, "\xE4\xB8\xAD");
    free(d);
    tok_stream_free(s);
    free(j);
    tok_free(t);
}

static void test_stream_spm(void **st) {
    (void)st;
    tok_tokenizer *t = load(SPM_JSON);
    assert_non_null(t);
    stream_invariants(t, 2);
    tok_free(t);
}

/* The engine primes a stream with the prompt's last ids and flushes before
 * generating: the first generated "▁h" must then decode to " h", not "h". */
static void test_stream_context(void **st) {
    (void)st;
    tok_tokenizer *t = load(SPM_JSON);
    assert_non_null(t);
    tok_stream *s = tok_stream_create(t, true);
    char *d;
    assert_int_equal(tok_stream_push(s, 1, &d), 0); /* <s> skipped */
    assert_null(d);
    assert_int_equal(tok_stream_push(s, 8, &d), 0);
    assert_string_equal(d, "hi");
    free(d);
    assert_int_equal(tok_stream_flush(s, &d), 0);
    assert_null(d);
    assert_int_equal(tok_stream_push(s, 7, &d), 0);
    assert_string_equal(d, " h");
    free(d);
    /* a flushed incomplete byte run that later completes does not stall */
    assert_int_equal(tok_stream_push(s, 2, &d), 0); /* 0xC3 held */
    assert_null(d);
    assert_int_equal(tok_stream_flush(s, &d), 0);
    assert_string_equal(d, "\xEF\xBF\xBD");
    free(d);
    assert_int_equal(tok_stream_push(s, 3, &d), 0); /* 0xA9: a run, held until a non-byte token */
    assert_null(d);
    assert_int_equal(tok_stream_push(s, 5, &d), 0);
    assert_non_null(d);
    assert_non_null(strstr(d, "h"));
    free(d);
    tok_stream_free(s);
    tok_free(t);
}

/* Encodes from several threads share the word cache: results must match
 * a single-threaded run. */
typedef struct {
    const tok_tokenizer *t;
    const char **texts;
    size_t n_texts;
    int32_t **ids;
    size_t *n;
    int fail;
} enc_job;

static void *enc_thread(void *arg) {
    enc_job *j = arg;
    for (int rep = 0; rep < 20; rep++)
        for (size_t i = 0; i < j->n_texts; i++) {
            int32_t *ids;
            size_t n;
            if (tok_encode(j->t, j->texts[i], strlen(j->texts[i]), false, &ids, &n) < 0) {
                j->fail = 1;
                continue;
            }
            if (n != j->n[i] || memcmp(ids, j->ids[i], n * sizeof *ids)) j->fail = 1;
            free(ids);
        }
    return NULL;
}

static void test_threads(void **st) {
    (void)st;
    char *j = bytelevel_json("[\"a b\", \"ab c\", \"b c\", \"a a\"]",
                             ", \"ab\": 256, \"bc\": 257, \"abc\": 258, \"aa\": 259", ADDED);
    tok_tokenizer *t = load(j);
    assert_non_null(t);
    const char *texts[] = {"abc abc aaa bc", "aaaa ab<|end|>c", "cab bca abcabc", "x a b c ab bc abc", "caaab"};
    size_t nt = sizeof texts / sizeof texts[0];
    int32_t *ids[5];
    size_t n[5];
    for (size_t i = 0; i < nt; i++) assert_int_equal(tok_encode(t, texts[i], strlen(texts[i]), false, &ids[i], &n[i]), 0);
    pthread_t th[4];
    enc_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (enc_job){t, texts, nt, ids, n, 0};
        assert_int_equal(pthread_create(&th[i], NULL, enc_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].fail, 0);
    }
    for (size_t i = 0; i < nt; i++) free(ids[i]);
    tok_free(t);
    free(j);
}

static void test_errors(void **st) {
    (void)st;
    assert_null(tok_load("/nonexistent/tokenizer/dir"));
    assert_non_null(strstr(vc_err_msg(), "/nonexistent/tokenizer/dir"));
    const char *bad[] = {
        "", "{", "[]", "{\"model\": 3}", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
        "{\"model\": {\"vocab\": {\"a\": -1}}}",
        "{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": \"Precompiled\"}}",
        "{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}}}",
        "{\"model\": {\"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"content\": \"x\"}]}",
        "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vc_err_clear();
        tok_tokenizer *t = tok_load_json_buf(bad[i], strlen(bad[i]), NULL, 0, "bad.json");
        if (t) fprintf(stderr, "accepted: %s\n", bad[i]);
        assert_null(t);
        assert_non_null(strstr(vc_err_msg(), "bad.json"));
    }
}

static void test_config(void **st) {
    (void)st;
    char *j = bytelevel_json("[]", "", ADDED);
    const char cfg[] = "{\"bos_token\": null, \"eos_token\": {\"content\": \"<|end|>\"}, \"model_max_length\": "
                       "1000000000000000019884624838656, \"chat_template\": [{\"name\": \"tool_use\", \"template\": "
                       "\"T\"}, {\"name\": \"default\", \"template\": \"D\"}]}";
    tok_tokenizer *t = tok_load_json_buf(j, strlen(j), cfg, sizeof cfg - 1, "cfg");
    assert_non_null(t);
    assert_int_equal(tok_eos_id(t), 300);
    assert_true(tok_is_eos(t, 300));
    assert_int_equal(tok_bos_id(t), -1);
    assert_null(tok_bos_token_str(t));
    assert_string_equal(tok_eos_token_str(t), "<|end|>");
    assert_string_equal(tok_chat_template(t), "D");
    tok_free(t);
    free(j);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A folder: tokenizer.json + tokenizer_config.json + generation_config.json. */
static void test_load_folder(void **st) {
    (void)st;
    char dir[] = "/tmp/tok_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *j = bytelevel_json("[]", "", ADDED);
    write_file(dir, "tokenizer.json", j);
    write_file(dir, "tokenizer_config.json", "{\"eos_token\": \"<tool>\", \"bos_token\": \"<|end|>\"}");
    write_file(dir, "generation_config.json", "{\"eos_token_id\": [300, 301, 65]}");
    tok_tokenizer *t = tok_load(dir);
    assert_non_null(t);
    const int32_t *eos;
    assert_int_equal(tok_eos_ids(t, &eos), 3);
    assert_int_equal(eos[0], 301); /* the tokenizer's own eos first */
    assert_true(tok_is_eos(t, 300) && tok_is_eos(t, 65) && !tok_is_eos(t, 66));
    assert_int_equal(tok_bos_id(t), 300);
    assert_null(tok_chat_template(t));
    tok_free(t);
    write_file(dir, "chat_template.jinja", "{{ messages }}");
    t = tok_load(dir);
    assert_non_null(t);
    assert_string_equal(tok_chat_template(t), "{{ messages }}");
    tok_free(t);
    /* the tokenizer.json path itself also works (config files beside it) */
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    t = tok_load(p);
    assert_non_null(t);
    assert_int_equal(tok_eos_id(t), 301);
    tok_free(t);
    /* a broken generation_config.json is an error naming it */
    write_file(dir, "generation_config.json", "{");
    assert_null(tok_load(dir));
    assert_non_null(strstr(vc_err_msg(), "generation_config.json"));
    snprintf(p, sizeof p, "rm -rf '%s'", dir);
    assert_int_equal(system(p), 0);
    free(j);
}

static void test_gguf_spm(void **st) {
    (void)st;
    const char *path = VLLM_SHARED_DIR "/models/ggml-vocab/ggml-vocab-llama-spm.gguf";
    FILE *f = fopen(path, "rb");
    if (!f) skip();
    fclose(f);
    tok_tokenizer *t = tok_load(path);
    assert_non_null(t);
    EXPECT(t, "Hello world", true, 1, 15043, 3186);
    EXPECT(t, " Hello", false, 29871, 15043);
    assert_int_equal(tok_bos_id(t), 1);
    assert_int_equal(tok_eos_id(t), 2);
    stream_invariants(t, 3);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_alphabet),
        cmocka_unit_test(test_merges_formats_and_ranks),
        cmocka_unit_test(test_bad_merge_rejected),
        cmocka_unit_test(test_added_tokens),
        cmocka_unit_test(test_bytelevel_roundtrip_and_lossy),
        cmocka_unit_test(test_normalizers),
        cmocka_unit_test(test_spm_byte_fallback),
        cmocka_unit_test(test_stream_bytelevel),
        cmocka_unit_test(test_stream_spm),
        cmocka_unit_test(test_stream_context),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_load_folder),
        cmocka_unit_test(test_gguf_spm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
