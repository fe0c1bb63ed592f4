/* bench_tokenizer — load time and encode/decode throughput of a tokenizer.
 *
 *   bench_tokenizer PATH [TEXT_FILE]
 * PATH: tokenizer folder, tokenizer.json or .gguf. TEXT_FILE defaults to a
 * built-in mixed English/code/multilingual sample repeated to ~4 MB.
 * Prints: load ms, encode MB/s (single thread), tokens/s, decode MB/s. */
#include "base/err.h"
#include "base/mapfile.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of the process: on a shared, busy machine wall time mostly
 * measures the other tenants. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char SAMPLE[] =
    "The quick brown fox jumps over the lazy dog. In 2024, researchers trained models with 1,234,567 "
    "parameters on 8 GPUs; the results (see Table 3) improved by 12.5%.\n"
    "def tokenize(text: str) -> list[int]:\n    return [ord(c) for c in text if c.isalnum()]\n\n"
    "Les élèves étudient à l'université. Der Bär läuft über die Straße. Привет, как дела?\n"
    "中文分词是自然语言处理的基础任务。日本語の文章もあります。 😀👍 한국어 문장.\n";

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TOKENIZER_PATH [TEXT_FILE]\n", argv[0]);
        return 2;
    }
    double t0 = now_s(), c0 = cpu_s();
    tok_tokenizer *t = tok_load(argv[1]);
    double t1 = now_s(), c1 = cpu_s();
    if (!t) {
        fprintf(stderr, "load failed: %s\n", vc_err_msg());
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    if (argc > 2) {
        if (vc_read_file(argv[2], &text, &len) < 0) {
            fprintf(stderr, "%s\n", vc_err_msg());
            return 1;
        }
    } else {
        size_t reps = (4u << 20) / (sizeof SAMPLE - 1);
        text = malloc(reps * (sizeof SAMPLE - 1) + 1);
        if (!text) return 1;
        for (size_t i = 0; i < reps; i++) memcpy(text + len, SAMPLE, sizeof SAMPLE - 1), len += sizeof SAMPLE - 1;
        text[len] = 0;
    }
    /* encode line by line-ish chunks of ~4 KB, as requests would arrive */
    size_t chunk = 4096, n_tok = 0;
    int32_t *all = malloc((len + 16) * sizeof *all);
    double t2 = now_s(), c2 = cpu_s();
    for (size_t off = 0; off < len;) {
        size_t n = len - off < chunk ? len - off : chunk;
        while (off + n < len && ((unsigned char)text[off + n] & 0xC0) == 0x80) n++; /* whole chars */
        int32_t *ids;
        size_t k;
        if (tok_encode(t, text + off, n, false, &ids, &k) < 0) {
            fprintf(stderr, "encode failed: %s\n", vc_err_msg());
            return 1;
        }
        memcpy(all + n_tok, ids, k * sizeof *ids);
        n_tok += k;
        free(ids);
        off += n;
    }
    double t3 = now_s(), c3 = cpu_s();
    char *dec;
    size_t dn;
    tok_decode(t, all, n_tok, false, &dec, &dn);
    double t4 = now_s();
    printf("%s: load %.1f ms wall, %.1f ms cpu | encode %.2f MB/s wall, %.2f MB/s per cpu-second (%zu tokens) "
           "| decode %.1f MB/s | roundtrip %s\n",
           argv[1], (t1 - t0) * 1e3, (c1 - c0) * 1e3, len / (t3 - t2) / 1e6, len / (c3 - c2) / 1e6, n_tok,
           dn / (t4 - t3) / 1e6,
           dn == len && !memcmp(dec, text, len) ? "exact" : "differs (SentencePiece adds a space prefix per chunk)");
    free(dec);
    free(all);
    free(text);
    tok_free(t);
    return 0;
}
