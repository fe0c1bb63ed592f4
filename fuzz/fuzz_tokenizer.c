/* libFuzzer target for the tokenizer.
 *
 * The first input byte picks a mode:
 *   even: the rest is a tokenizer.json document (mutations of a small valid
 *         one reach deep into the loader); when it loads, a sample text is
 *         encoded, decoded and streamed;
 *   odd:  the rest drives a fixed tokenizer: as text (encode -> decode must
 *         round-trip for byte-level BPE) and as 16-bit ids (decode and the
 *         streaming invariant: deltas are valid UTF-8 and concatenate to the
 *         full decode).
 * VLLM_FUZZ_TOKENIZER=PATH uses a real tokenizer (folder/.json/.gguf) for
 * the odd mode instead of the built-in one (no round-trip check then). */
#include "base/err.h"
#include "base/strbuf.h"
#include "tokenizer/tok_int.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tok_tokenizer *g_tok;
static bool g_builtin;

static char *builtin_json(void) {
    vc_strbuf sb = {0};
    vc_sb_puts(&sb, "{\"added_tokens\": [{\"id\": 300, \"content\": \"<|end|>\", \"special\": true},"
                    "{\"id\": 301, \"content\": \"<t>\", \"lstrip\": true, \"rstrip\": true, \"normalized\": false},"
                    "{\"id\": 302, \"content\": \"wd\", \"single_word\": true, \"normalized\": true}],"
                    "\"normalizer\": {\"type\": \"NFC\"},"
                    "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\p{N}{1,3}\"}, \"behavior\": \"Isolated\"},"
                    "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}]},"
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
    vc_sb_puts(&sb, ", \"ab\": 256, \"abc\": 257, \"\\u0120a\": 258, \"\\u0120ab\": 259}, "
                    "\"merges\": [\"a b\", \"ab c\", \"\\u0120 a\", \"\\u0120a b\"]}}");
    return vc_sb_steal(&sb);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *p = getenv("VLLM_FUZZ_TOKENIZER");
    if (p) {
        g_tok = tok_load(p);
        if (!g_tok) fprintf(stderr, "fuzz_tokenizer: %s\n", vc_err_msg());
    }
    if (!g_tok) {
        char *j = builtin_json();
        g_tok = tok_load_json_buf(j, strlen(j), NULL, 0, "builtin");
        free(j);
        g_builtin = true;
        if (!g_tok) {
            fprintf(stderr, "fuzz_tokenizer: builtin tokenizer failed: %s\n", vc_err_msg());
            abort();
        }
    }
    return 0;
}

static void check_stream(const tok_tokenizer *t, const int32_t *ids, size_t n, bool skip) {
    tok_stream *s = tok_stream_create(t, skip);
    if (!s) return;
    vc_strbuf acc = {0};
    vc_sb_append(&acc, "", 0);
    char *d;
    size_t dl;
    for (size_t i = 0; i <= n; i++) {
        int rc = i < n ? tok_stream_push_n(s, ids[i], &d, &dl) : tok_stream_flush_n(s, &d, &dl);
        if (rc < 0) abort();
        if (d) {
            if (!tok_utf8_valid(d, dl)) abort();
            vc_sb_append(&acc, d, dl);
            free(d);
        }
    }
    char *full;
    size_t fl;
    if (tok_decode(t, ids, n, skip, &full, &fl) < 0) abort();
    if (fl != acc.len || memcmp(full, acc.s, fl)) abort();
    free(full);
    vc_sb_free(&acc);
    tok_stream_free(s);
}

static void exercise(const tok_tokenizer *t, const char *text, size_t len, bool roundtrip) {
    int32_t *ids;
    size_t n;
    if (tok_encode(t, text, len, true, &ids, &n) < 0) return; /* e.g. invalid UTF-8: an error, not a crash */
    char *s;
    size_t sl;
    if (tok_decode(t, ids, n, false, &s, &sl) < 0) abort();
    if (!tok_utf8_valid(s, sl)) abort();
    /* NFC may change the text and <t> (lstrip/rstrip) eats spaces: compare
     * only ASCII text without <t> */
    bool ascii = !memmem(text, len, "<t>", 3);
    for (size_t i = 0; i < len; i++) ascii = ascii && (unsigned char)text[i] < 0x80;
    if (roundtrip && ascii && (sl != len || memcmp(s, text, len))) abort();
    free(s);
    check_stream(t, ids, n, true);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if ((data[0] & 1) == 0) {
        tok_tokenizer *t = tok_load_json_buf((const char *)p, n, NULL, 0, "fuzz.json");
        if (t) {
            static const char sample[] = "Hello wd <|end|>  <t> 12345 h\xC3\xA9llo \xF0\x9F\x98\x80 ab abc";
            exercise(t, sample, sizeof sample - 1, false);
            tok_free(t);
        }
        return 0;
    }
    exercise(g_tok, (const char *)p, n, g_builtin);
    size_t k = n / 2;
    int32_t *ids = malloc((k + 1) * sizeof *ids);
    if (!ids) return 0;
    size_t v = tok_vocab_size(g_tok) + 8;
    for (size_t i = 0; i < k; i++) ids[i] = (int32_t)(((size_t)p[2 * i] | ((size_t)p[2 * i + 1] << 8)) % v) - 4;
    char *s;
    size_t sl;
    if (tok_decode(g_tok, ids, k, false, &s, &sl) < 0 || !tok_utf8_valid(s, sl)) abort();
    free(s);
    check_stream(g_tok, ids, k, false);
    check_stream(g_tok, ids, k, true);
    free(ids);
    return 0;
}
