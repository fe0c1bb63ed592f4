/* vllm bench — offline throughput/latency benchmark on the engine:
 * N random prompts of fixed input/output lengths (EOS ignored), at most
 * `concurrency` in flight, metrics laid out like vLLM's benchmark
 * (TTFT, TPOT = (latency - ttft) / (out - 1), ITL, E2EL). */
#include "base/err.h"
#include "base/clock.h"
#include "base/log.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "engine/engine.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f, "usage: vllm bench [--model PATH] [options]\n"
               "  --num-prompts N             requests (default 64)\n"
               "  --input-len N               prompt tokens (default 128)\n"
               "  --output-len N              generated tokens (default 64)\n"
               "  --concurrency N             requests in flight (default: max-num-seqs)\n"
               "  --max-num-seqs N            (default 256 on a GPU, 64 on the CPU)\n"
               "  --max-num-batched-tokens N  (default 8192 on a GPU of 70+ GiB, else 2048)\n"
               "  --kv-cache-memory BYTES     KV budget (default: 25%% of available memory)\n"
               "  --block-size N              KV cache tokens per block, a power of two <= 1024 (default 16)\n"
               "  --threads N                 CPU threads (default: all cores)\n"
               "  --device auto|cpu|cuda      backend (default auto: cuda where the build has it and a GPU is found)\n"
               "  --tensor-parallel-size N, -tp N  split the model over N ranks (default 1)\n"
               "  --async-scheduling / --no-async-scheduling  schedule step N+1 while step N runs\n"
               "                              (vLLM's flags; default: on a GPU with one rank, off on the CPU)\n"
               "  --kv-cache-dtype T          auto (default), float32, float16, bfloat16\n"
               "  --gpu-memory-utilization F  device backends: KV cache fills the device to F (0.9)\n"
               "  --seed S                    prompt and sampling seed (default 0)\n"
               "  --temperature T             sampling temperature (default 1.0; 0 = greedy)\n"
               "  --top-p P                   nucleus sampling (default 1.0: off)\n"
               "  --top-k K                   top-k sampling (default 0: off)\n"
               "  --min-p P                   min-p sampling (default 0: off)\n");
}

typedef struct {
    double start, first, last;
    int32_t n_out;
} req_times;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void stat_line(const char *name, const char *unit, double *v, int64_t n) {
    if (n == 0) return;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += v[i];
    double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    int64_t p99 = (int64_t)ceil(0.99 * (double)n) - 1;
    printf("Mean %-6s (%s): %*.2f\n", name, unit, 36 - (int)strlen(name), 1e3 * sum / (double)n);
    printf("Median %-4s (%s): %*.2f\n", name, unit, 36 - (int)strlen(name), 1e3 * med);
    printf("P99 %-7s (%s): %*.2f\n", name, unit, 36 - (int)strlen(name), 1e3 * v[p99 < 0 ? 0 : p99]);
}

int cli_bench(int argc, char **argv) {
    eng_params ep = eng_params_default();
    int64_t num = 64, in_len = 128, out_len = 64, conc = 0, v, seed = 0;
    ereq_sampling sp = ereq_sampling_default(); /* every request samples with these */
    int device = CLI_DEVICE_AUTO, async = CLI_ASYNC_AUTO;
    int32_t seqs = 0, toks = 0; /* 0: the device's default (cli_budget_defaults) */
    char defpath[4096];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--async-scheduling")) { async = 1; continue; }
        if (!strcmp(a, "--no-async-scheduling")) { async = 0; continue; }
        if (!val) { fprintf(stderr, "vllm bench: %s needs a value\n", a); return 2; }
        int rc = 0;
        if (!strcmp(a, "--model")) ep.model = val;
        else if (!strcmp(a, "--num-prompts")) rc = cli_parse_i64(a, val, 1, 1000000, &num);
        else if (!strcmp(a, "--input-len")) rc = cli_parse_i64(a, val, 1, 1 << 20, &in_len);
        else if (!strcmp(a, "--output-len")) rc = cli_parse_i64(a, val, 1, 1 << 20, &out_len);
        else if (!strcmp(a, "--concurrency")) rc = cli_parse_i64(a, val, 1, 1 << 20, &conc);
        else if (!strcmp(a, "--seed")) rc = cli_parse_i64(a, val, 0, INT64_MAX, &seed);
        else if (!strcmp(a, "--temperature")) rc = cli_parse_f32(a, val, 0.0f, 1e6f, &sp.temperature);
        else if (!strcmp(a, "--top-p")) rc = cli_parse_f32(a, val, 1e-9f, 1.0f, &sp.top_p);
        else if (!strcmp(a, "--min-p")) rc = cli_parse_f32(a, val, 0.0f, 1.0f, &sp.min_p);
        else if (!strcmp(a, "--top-k")) { rc = cli_parse_i64(a, val, -1, INT32_MAX, &v); sp.top_k = (int32_t)v; }
        else if (!strcmp(a, "--gpu-memory-utilization")) rc = cli_parse_f32d(a, val, &ep.gpu_memory_utilization);
        else if (!strcmp(a, "--device")) {
            rc = cli_parse_device(val, &device);
        }
        else if (!strcmp(a, "--max-num-seqs")) { rc = cli_parse_i64(a, val, 1, 1 << 20, &v); seqs = (int32_t)v; }
        else if (!strcmp(a, "--max-num-batched-tokens")) { rc = cli_parse_i64(a, val, 1, 1 << 24, &v); toks = (int32_t)v; }
        else if (!strcmp(a, "--threads")) { rc = cli_parse_i64(a, val, 1, 1024, &v); ep.n_threads = (int)v; }
        else if (!strcmp(a, "--kv-cache-dtype")) { int kd; rc = mdl_parse_kv_dtype(val, &kd); ep.kv_cache_dtype = val; }
        else if (!strcmp(a, "--tensor-parallel-size") || !strcmp(a, "-tp")) { rc = cli_parse_i64(a, val, 1, 64, &v); ep.tensor_parallel_size = (int)v; }
        else if (!strcmp(a, "--block-size")) rc = cli_parse_block_size(a, val, &ep.block_size);
        else if (!strcmp(a, "--kv-cache-memory")) { rc = cli_parse_i64(a, val, 1, INT64_MAX, &v); ep.kv_cache_memory = (size_t)v; }
        else { fprintf(stderr, "vllm bench: unknown option '%s'\n", a); usage(stderr); return 2; }
        if (rc < 0) { fprintf(stderr, "vllm bench: %s\n", vc_err_msg()); return 2; }
        i++;
    }
    if (!ep.model) {
        if (cli_default_model(defpath, sizeof defpath) < 0) { fprintf(stderr, "vllm bench: %s\n", vc_err_msg()); return 1; }
        ep.model = defpath;
    }
    if (vc_log_get_level() > VC_LOG_INFO) vc_log_set_level(VC_LOG_INFO);
    ep.device = (rt_device)cli_device_resolve(device);
    ep.async_scheduling = cli_async_resolve(async, ep.device, ep.tensor_parallel_size);
    cli_budget_defaults(ep.device, &seqs, &toks);
    ep.max_num_seqs = seqs, ep.max_num_batched_tokens = toks;
    if (!conc) conc = ep.max_num_seqs;
    ep.max_model_len = (int32_t)(in_len + out_len + 1);
    eng_engine *e = eng_create(&ep);
    if (!e) { fprintf(stderr, "vllm bench: %s\n", vc_err_msg()); return 1; }
    int status = 1;
    int64_t V = eng_model_config(e)->vocab;
    int32_t *prompt = malloc((size_t)in_len * sizeof *prompt);
    req_times *rt = calloc((size_t)num, sizeof *rt);
    double *itl = malloc((size_t)(num * out_len) * sizeof *itl);
    double *tmp = malloc((size_t)num * sizeof *tmp);
    if (!prompt || !rt || !itl || !tmp) { fprintf(stderr, "vllm bench: out of memory\n"); goto done; }
    uint64_t x = (uint64_t)seed * 2654435761u + 1;
    sp.max_tokens = (int32_t)out_len;
    sp.ignore_eos = true;
    int64_t submitted = 0, finished = 0, n_itl = 0, in_flight = 0, total_out = 0;
    double t0 = vc_now_s();
    while (finished < num) {
        while (submitted < num && in_flight < conc) {
            for (int64_t j = 0; j < in_len; j++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                prompt[j] = (int32_t)(V / 8 + (int64_t)((x >> 33) % (uint64_t)(V - V / 8)));
            }
            sp.seed = (uint64_t)seed + (uint64_t)submitted;
            sp.has_seed = true;
            int64_t id;
            rt[submitted].start = vc_now_s();
            if (eng_add_tokens(e, prompt, (int32_t)in_len, &sp, (void *)(intptr_t)submitted, &id) < 0) {
                fprintf(stderr, "vllm bench: %s\n", vc_err_msg());
                goto done;
            }
            submitted++;
            in_flight++;
        }
        eng_output *o;
        int32_t n;
        if (eng_step(e, &o, &n) < 0) { fprintf(stderr, "vllm bench: %s\n", vc_err_msg()); goto done; }
        double t = vc_now_s();
        for (int32_t j = 0; j < n; j++) {
            req_times *r = &rt[(intptr_t)o[j].user];
            if (o[j].n_token_ids > 0) {
                if (r->n_out == 0) r->first = t;
                else itl[n_itl++] = t - r->last;
                r->last = t;
                r->n_out += o[j].n_token_ids;
                total_out += o[j].n_token_ids;
            }
            if (o[j].finished) { finished++; in_flight--; }
        }
    }
    double dur = vc_now_s() - t0;
    printf("============ Serving Benchmark Result ============\n");
    printf("%-40s %10lld\n", "Successful requests:", (long long)num);
    printf("Sampling: temperature %g, top_p %g, top_k %d, min_p %g\n", (double)sp.temperature, (double)sp.top_p,
           (int)sp.top_k, (double)sp.min_p);
    printf("%-40s %10.2f\n", "Benchmark duration (s):", dur);
    printf("%-40s %10lld\n", "Total input tokens:", (long long)(num * in_len));
    printf("%-40s %10lld\n", "Total generated tokens:", (long long)total_out);
    printf("%-40s %10.2f\n", "Request throughput (req/s):", (double)num / dur);
    printf("%-40s %10.2f\n", "Output token throughput (tok/s):", (double)total_out / dur);
    printf("%-40s %10.2f\n", "Total Token throughput (tok/s):", (double)(total_out + num * in_len) / dur);
    printf("---------------Time to First Token----------------\n");
    for (int64_t i = 0; i < num; i++) tmp[i] = rt[i].first - rt[i].start;
    stat_line("TTFT", "ms", tmp, num);
    printf("-----Time per Output Token (excl. 1st token)------\n");
    int64_t k = 0;
    for (int64_t i = 0; i < num; i++)
        if (rt[i].n_out > 1) tmp[k++] = (rt[i].last - rt[i].first) / (rt[i].n_out - 1);
    stat_line("TPOT", "ms", tmp, k);
    printf("---------------Inter-token Latency----------------\n");
    stat_line("ITL", "ms", itl, n_itl);
    printf("----------------End-to-end Latency----------------\n");
    for (int64_t i = 0; i < num; i++) tmp[i] = rt[i].last - rt[i].start;
    stat_line("E2EL", "ms", tmp, num);
    printf("==================================================\n");
    status = 0;
done:
    free(prompt);
    free(rt);
    free(itl);
    free(tmp);
    eng_free(e);
    return status;
}
