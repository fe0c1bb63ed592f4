/* vllm bench serve — client-mode serving benchmark against an
 * OpenAI-compatible server (vLLM's `vllm bench serve`, random dataset):
 * N streaming /v1/completions requests of random token ids, at most C in
 * flight, ignore_eos so every request makes its output length. Reports
 * vLLM's metrics: throughput, TTFT, TPOT = (e2e - ttft) / (out - 1), ITL
 * (gaps between streamed chunks) and E2EL, mean / median / P99. */
#include "base/err.h"
#include "base/clock.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "cli/cli_http.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm bench serve --base-url http://HOST:PORT [options]\n"
            "  --base-url URL          the server (required)\n"
            "  --model NAME            model name to send (default: the server's first model)\n"
            "  --num-prompts N         requests (default 64)\n"
            "  --random-input-len N    prompt tokens (default 1024)\n"
            "  --random-output-len N   output tokens (default 128)\n"
            "  --max-concurrency C     requests in flight (default: all)\n"
            "  --seed S                prompt seed (default 0)\n"
            "  --vocab-size V          prompt ids in [V/8, V) (default: found with the server's /detokenize;\n"
            "                          give it for servers without one that refuses ids past the vocabulary)\n"
            "  --api-key KEY           bearer key (also $VLLM_API_KEY)\n");
}

typedef struct {
    bool ok;
    double ttft, e2e;
    int32_t in_tokens, out_tokens;
    double *itl;
    int32_t n_itl, cap_itl;
} req_result;

typedef struct {
    const cli_http_target *t;
    const char *model;
    int64_t n, in_len, out_len, vocab;
    uint64_t seed;
    req_result *res;
    pthread_mutex_t mu;
    int64_t next;
} bench;

typedef struct {
    req_result *r;
    double t0, last;
    bool got_first;
} sse_state;

static void on_sse(void *user, const char *data) {
    sse_state *st = user;
    if (!strcmp(data, "[DONE]")) return;
    double t = vc_now_s();
    json_t *j = json_loads(data, 0, NULL);
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        st->r->in_tokens = (int32_t)json_integer_value(json_object_get(u, "prompt_tokens"));
        st->r->out_tokens = (int32_t)json_integer_value(json_object_get(u, "completion_tokens"));
    }
    const char *txt = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    if (txt && *txt) {
        if (!st->got_first) {
            st->r->ttft = t - st->t0;
            st->got_first = true;
        } else if (st->r->n_itl < st->r->cap_itl) {
            st->r->itl[st->r->n_itl++] = t - st->last;
        }
        st->last = t;
    }
    json_decref(j);
}

static void *client(void *arg) {
    bench *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        int64_t i = b->next < b->n ? b->next++ : -1;
        pthread_mutex_unlock(&b->mu);
        if (i < 0) break;
        req_result *r = &b->res[i];
        json_t *ids = json_array();
        uint64_t x = (b->seed + (uint64_t)i) * 0x9E3779B97F4A7C15ull + 1;
        int64_t lo = b->vocab > 16 ? b->vocab / 8 : 0;
        for (int64_t k = 0; k < b->in_len; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            json_array_append_new(ids, json_integer(lo + (int64_t)((x >> 33) % (uint64_t)(b->vocab - lo))));
        }
        json_t *req = json_pack("{s:s, s:o, s:I, s:b, s:b, s:{s:b}, s:f}", "model", b->model, "prompt", ids,
                                "max_tokens", (json_int_t)b->out_len, "ignore_eos", 1, "stream", 1, "stream_options",
                                "include_usage", 1, "temperature", 1.0);
        char *body = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        r->cap_itl = (int32_t)b->out_len;
        r->itl = malloc((size_t)r->cap_itl * sizeof *r->itl);
        sse_state st = {.r = r, .t0 = vc_now_s()};
        vc_strbuf out = {0};
        int status = 0;
        int rc = body && r->itl ? cli_http_call(b->t, "POST", "/v1/completions", body, on_sse, &st, &status, &out)
                                : VC_ERR_OOM;
        /* a failed request says why on stderr: refused, cut, or a stream
         * without text (vLLM's benchmark counts that one failed too: no
         * first token to time) */
        if (rc == 0 && status == 200 && st.got_first) {
            r->e2e = vc_now_s() - st.t0;
            r->ok = true;
        } else if (status && status != 200) {
            fprintf(stderr, "vllm bench serve: request %lld: HTTP %d %s\n", (long long)i, status, out.s ? out.s : "");
        } else if (rc < 0) {
            fprintf(stderr, "vllm bench serve: request %lld: %s\n", (long long)i, vc_err_msg());
        } else {
            fprintf(stderr, "vllm bench serve: request %lld: no text in the stream\n", (long long)i);
        }
        vc_sb_free(&out);
        free(body);
    }
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void stat_lines(const char *name, double *v, int64_t n) {
    if (n == 0) {
        printf("Mean %s (ms): %*s\n", name, 34 - (int)strlen(name), "n/a");
        return;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += v[i];
    double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    int64_t p99 = (int64_t)ceil(0.99 * (double)n) - 1;
    printf("Mean %s (ms):%*.2f\n", name, 35 - (int)strlen(name), 1e3 * sum / (double)n);
    printf("Median %s (ms):%*.2f\n", name, 33 - (int)strlen(name), 1e3 * med);
    printf("P99 %s (ms):%*.2f\n", name, 36 - (int)strlen(name), 1e3 * v[p99 < 0 ? 0 : p99]);
}

/* The vocabulary size, found with /detokenize (400 past the vocabulary). */
static int64_t find_vocab(const cli_http_target *t) {
    int64_t lo = 0, hi = 1 << 22; /* lo valid, hi invalid */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        char body[64];
        snprintf(body, sizeof body, "{\"tokens\": [%lld]}", (long long)mid);
        vc_strbuf out = {0};
        int status = 0;
        if (cli_http_call(t, "POST", "/detokenize", body, NULL, NULL, &status, &out) < 0) {
            vc_sb_free(&out);
            return -1;
        }
        vc_sb_free(&out);
        if (status == 200) lo = mid;
        else hi = mid;
    }
    return lo + 1;
}

int cli_bench_serve(int argc, char **argv) {
    const char *url = NULL, *model = NULL, *key = getenv("VLLM_API_KEY");
    int64_t n = 64, in_len = 1024, out_len = 128, conc = 0, seed = 0, vocab = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!val) { fprintf(stderr, "vllm bench serve: %s needs a value\n", a); return 2; }
        int rc = 0;
        if (!strcmp(a, "--base-url")) url = val;
        else if (!strcmp(a, "--model")) model = val;
        else if (!strcmp(a, "--api-key")) key = val;
        else if (!strcmp(a, "--num-prompts")) rc = cli_parse_i64(a, val, 1, 1000000, &n);
        else if (!strcmp(a, "--random-input-len")) rc = cli_parse_i64(a, val, 1, 1 << 20, &in_len);
        else if (!strcmp(a, "--random-output-len")) rc = cli_parse_i64(a, val, 1, 1 << 20, &out_len);
        else if (!strcmp(a, "--max-concurrency")) rc = cli_parse_i64(a, val, 1, 4096, &conc);
        else if (!strcmp(a, "--seed")) rc = cli_parse_i64(a, val, 0, INT64_MAX, &seed);
        else if (!strcmp(a, "--vocab-size")) rc = cli_parse_i64(a, val, 2, 1 << 30, &vocab);
        else { fprintf(stderr, "vllm bench serve: unknown option '%s'\n", a); usage(stderr); return 2; }
        if (rc < 0) { fprintf(stderr, "vllm bench serve: %s\n", vc_err_msg()); return 2; }
        i++;
    }
    if (!url) { fprintf(stderr, "vllm bench serve: --base-url is required\n"); usage(stderr); return 2; }
    signal(SIGPIPE, SIG_IGN);
    cli_http_target t = {.key = key};
    if (cli_http_parse_url(url, &t) < 0) { fprintf(stderr, "vllm bench serve: %s\n", vc_err_msg()); return 2; }
    char *model_owned = NULL;
    if (!model) {
        vc_strbuf out = {0};
        int status = 0;
        if (cli_http_call(&t, "GET", "/v1/models", NULL, NULL, NULL, &status, &out) == 0 && status == 200) {
            json_t *j = json_loads(out.s ? out.s : "", 0, NULL);
            const char *id = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
            if (id) model_owned = strdup(id);
            json_decref(j);
        }
        vc_sb_free(&out);
        if (!model_owned) { fprintf(stderr, "vllm bench serve: cannot list the server's models at %s\n", url); return 1; }
        model = model_owned;
    }
    bench b = {.t = &t, .model = model, .n = n, .in_len = in_len, .out_len = out_len, .seed = (uint64_t)seed};
    b.vocab = vocab ? vocab : find_vocab(&t);
    if (b.vocab < 2) { fprintf(stderr, "vllm bench serve: cannot find the vocabulary size (/detokenize)\n"); free(model_owned); return 1; }
    if (!conc || conc > n) conc = n;
    pthread_mutex_init(&b.mu, NULL);
    b.res = calloc((size_t)n, sizeof *b.res);
    pthread_t *th = calloc((size_t)conc, sizeof *th);
    int status = 1;
    if (!b.res || !th) { fprintf(stderr, "vllm bench serve: out of memory\n"); goto done; }
    double t0 = vc_now_s();
    int64_t started = 0;
    for (; started < conc; started++)
        if (pthread_create(&th[started], NULL, client, &b) != 0) break;
    for (int64_t i = 0; i < started; i++) pthread_join(th[i], NULL);
    double dur = vc_now_s() - t0;
    int64_t ok = 0, in_tok = 0, out_tok = 0, n_itl = 0, n_tpot = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!b.res[i].ok) continue;
        ok++;
        in_tok += b.res[i].in_tokens;
        out_tok += b.res[i].out_tokens;
        n_itl += b.res[i].n_itl;
    }
    double *ttft = malloc((size_t)(ok + 1) * sizeof *ttft), *tpot = malloc((size_t)(ok + 1) * sizeof *tpot);
    double *e2e = malloc((size_t)(ok + 1) * sizeof *e2e), *itl = malloc((size_t)(n_itl + 1) * sizeof *itl);
    if (!ttft || !tpot || !e2e || !itl) { fprintf(stderr, "vllm bench serve: out of memory\n"); goto done2; }
    int64_t k = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        req_result *r = &b.res[i];
        if (!r->ok) continue;
        ttft[k] = r->ttft;
        e2e[k++] = r->e2e;
        if (r->out_tokens > 1) tpot[n_tpot++] = (r->e2e - r->ttft) / (r->out_tokens - 1);
        for (int32_t j = 0; j < r->n_itl; j++) itl[m++] = r->itl[j];
    }
    printf("============ Serving Benchmark Result ============\n");
    printf("Successful requests:%*lld\n", 30, (long long)ok);
    printf("Maximum request concurrency:%*lld\n", 22, (long long)conc);
    printf("Benchmark duration (s):%*.2f\n", 27, dur);
    printf("Total input tokens:%*lld\n", 31, (long long)in_tok);
    printf("Total generated tokens:%*lld\n", 27, (long long)out_tok);
    printf("Request throughput (req/s):%*.2f\n", 23, (double)ok / dur);
    printf("Output token throughput (tok/s):%*.2f\n", 18, (double)out_tok / dur);
    printf("Total Token throughput (tok/s):%*.2f\n", 19, (double)(in_tok + out_tok) / dur);
    printf("---------------Time to First Token----------------\n");
    stat_lines("TTFT", ttft, ok);
    printf("-----Time per Output Token (excl. 1st token)------\n");
    stat_lines("TPOT", tpot, n_tpot);
    printf("---------------Inter-token Latency----------------\n");
    stat_lines("ITL", itl, m);
    printf("----------------End-to-end Latency----------------\n");
    stat_lines("E2EL", e2e, ok);
    printf("==================================================\n");
    status = ok == n ? 0 : 1;
    if (ok != n) fprintf(stderr, "vllm bench serve: %lld of %lld requests failed\n", (long long)(n - ok), (long long)n);
done2:
    free(ttft);
    free(tpot);
    free(e2e);
    free(itl);
done:
    if (b.res)
        for (int64_t i = 0; i < n; i++) free(b.res[i].itl);
    free(b.res);
    free(th);
    free(model_owned);
    pthread_mutex_destroy(&b.mu);
    return status;
}
