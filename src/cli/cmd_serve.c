/* vllm serve — load a model into the async engine and answer the OpenAI
 * API over HTTP (src/server) until SIGINT / SIGTERM. */
#include "base/err.h"
#include "base/log.h"
#include "base/mapfile.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "engine/async_engine.h"
#include "server/server.h"

#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: vllm serve [MODEL] [options]\n"
            "  MODEL, --model PATH          .gguf file or Hugging Face model folder (default: the default model)\n"
            "  --host ADDR                  numeric address to bind (default 127.0.0.1)\n"
            "  --port N                     default 8000 (0: any free port)\n"
            "  --served-model-name NAME     the model name clients use (default: MODEL as given;\n"
            "                               the default model's file stem without --model)\n"
            "  --api-key KEY                require `Authorization: Bearer KEY` on /v1/* (also $VLLM_API_KEY)\n"
            "  --chat-template FILE|TEXT    Jinja chat template (default: the tokenizer's)\n"
            "  --tool-call-parser NAME      hermes | llama3_json | mistral (default: detected from the template)\n"
            "  --enable-auto-tool-choice    accepted for vLLM compatibility (tool_choice auto is the default)\n"
            "  --reasoning-parser NAME      deepseek_r1 | qwen3: split <think>...</think> into `reasoning`\n"
            "  --max-model-len N            context length (default: the model's, capped by the engine)\n"
            "  --max-num-seqs N             concurrent sequences (default 256 on a GPU, 64 on the CPU)\n"
            "  --max-num-batched-tokens N   tokens per engine step (default 8192 on a GPU of 70+ GiB, else 2048)\n"
            "  --enable-prefix-caching / --no-enable-prefix-caching   (default on)\n"
            "  --kv-cache-memory BYTES      KV cache budget, suffix K/M/G allowed (default: a fraction of memory)\n"
            "  --kv-cache-dtype T           auto (default), float32, float16, bfloat16\n"
            "  --block-size N               KV cache tokens per block, a power of two <= 1024 (default 16)\n"
            "  --tensor-parallel-size N, -tp N  split the model over N ranks (default 1)\n"
            "  --async-scheduling / --no-async-scheduling   schedule step N+1 while step N runs\n"
            "                               (default: on a GPU with one rank, off on the CPU)\n"
            "  --threads N                  CPU threads (default: all cores)\n"
            "  --device auto|cpu|cuda       backend (default auto: cuda where the build has it and a GPU is found)\n"
            "  --gpu-memory-utilization F   device backends: KV cache fills the device to F (0.9)\n"
            "  --max-body-bytes N           request body limit (default 4M)\n"
            "  --allowed-origins LIST       CORS origins: JSON list or comma-separated (default [\"*\"])\n"
            "  --allowed-methods LIST       CORS preflight methods, same forms (default [\"*\"])\n"
            "  --allowed-headers LIST       CORS preflight headers, same forms (default [\"*\"])\n"
            "  --allow-credentials          CORS: allow credentials (the Origin is echoed)\n"
            "  --ssl-keyfile FILE           HTTPS: PEM private key (with --ssl-certfile)\n"
            "  --ssl-certfile FILE          HTTPS: PEM certificate\n");
}

static int parse_bytes(const char *flag, const char *s, int64_t *out) {
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    if (*end) {
        char c = (char)toupper((unsigned char)*end);
        mul = c == 'K' ? 1024.0 : c == 'M' ? 1048576.0 : c == 'G' ? 1073741824.0 : 0;
        if (mul == 0 || (end[1] && !((end[1] == 'i' || end[1] == 'B') && (!end[2] || end[2] == 'B'))))
            return vc_err_set(VC_ERR_INVALID, "%s: bad size '%s' (bytes, or a number with K/M/G)", flag, s);
    }
    if (end == s || !(v > 0) || v * mul > 9e18)
        return vc_err_set(VC_ERR_INVALID, "%s: bad size '%s'", flag, s);
    *out = (int64_t)(v * mul);
    return VC_OK;
}

/* A --chat-template value: a readable file's contents, else the text itself. */
static char *load_template(const char *v) {
    struct stat st;
    if (stat(v, &st) == 0 && S_ISREG(st.st_mode)) {
        char *buf = NULL;
        size_t n = 0;
        if (vc_read_file(v, &buf, &n) < 0) return NULL;
        return buf;
    }
    char *s = strdup(v);
    if (!s) vc_err_set(VC_ERR_OOM, "out of memory");
    return s;
}

int cli_serve(int argc, char **argv) {
    eng_params ep = eng_params_default();
    srv_params sp = srv_params_default();
    int device = CLI_DEVICE_AUTO, async = CLI_ASYNC_AUTO;
    int32_t seqs = 0, toks = 0; /* 0: the device's default (cli_budget_defaults) */
    const char *tmpl_arg = NULL;
    int64_t v;
    char defpath[4096];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { serve_usage(stdout); return 0; }
        if (a[0] != '-') {
            if (ep.model) { fprintf(stderr, "vllm serve: more than one model given ('%s')\n", a); return 2; }
            ep.model = a;
            continue;
        }
        if (!strcmp(a, "--enable-prefix-caching")) { ep.enable_prefix_caching = true; continue; }
        if (!strcmp(a, "--no-enable-prefix-caching")) { ep.enable_prefix_caching = false; continue; }
        if (!strcmp(a, "--enable-auto-tool-choice")) continue;
        if (!strcmp(a, "--allow-credentials")) { sp.allow_credentials = true; continue; }
        if (!strcmp(a, "--async-scheduling")) { async = 1; continue; }
        if (!strcmp(a, "--no-async-scheduling")) { async = 0; continue; }
        if (!val) { fprintf(stderr, "vllm serve: %s needs a value\n", a); serve_usage(stderr); return 2; }
        int rc = 0;
        if (!strcmp(a, "--model")) ep.model = val;
        else if (!strcmp(a, "--host")) sp.host = val;
        else if (!strcmp(a, "--port")) { rc = cli_parse_i64(a, val, 0, 65535, &v); sp.port = (int)v; }
        else if (!strcmp(a, "--served-model-name")) sp.model_name = val;
        else if (!strcmp(a, "--api-key")) sp.api_key = val;
        else if (!strcmp(a, "--chat-template")) tmpl_arg = val;
        else if (!strcmp(a, "--tool-call-parser")) sp.tool_call_parser = val;
        else if (!strcmp(a, "--reasoning-parser")) sp.reasoning_parser = val;
        else if (!strcmp(a, "--max-model-len")) { rc = cli_parse_i64(a, val, 2, 1 << 24, &v); ep.max_model_len = (int32_t)v; }
        else if (!strcmp(a, "--max-num-seqs")) { rc = cli_parse_i64(a, val, 1, 1 << 20, &v); seqs = (int32_t)v; }
        else if (!strcmp(a, "--max-num-batched-tokens")) { rc = cli_parse_i64(a, val, 1, 1 << 24, &v); toks = (int32_t)v; }
        else if (!strcmp(a, "--block-size")) rc = cli_parse_block_size(a, val, &ep.block_size);
        else if (!strcmp(a, "--kv-cache-memory")) { rc = parse_bytes(a, val, &v); ep.kv_cache_memory = (size_t)v; }
        else if (!strcmp(a, "--gpu-memory-utilization")) rc = cli_parse_f32d(a, val, &ep.gpu_memory_utilization);
        else if (!strcmp(a, "--device")) {
            rc = cli_parse_device(val, &device);
        }
        else if (!strcmp(a, "--threads")) { rc = cli_parse_i64(a, val, 1, 1024, &v); ep.n_threads = (int)v; }
        else if (!strcmp(a, "--tensor-parallel-size") || !strcmp(a, "-tp")) { rc = cli_parse_i64(a, val, 1, 64, &v); ep.tensor_parallel_size = (int)v; }
        else if (!strcmp(a, "--kv-cache-dtype")) { int kd; rc = mdl_parse_kv_dtype(val, &kd); ep.kv_cache_dtype = val; }
        else if (!strcmp(a, "--max-body-bytes")) { rc = parse_bytes(a, val, &v); sp.max_body_bytes = (size_t)v; }
        else if (!strcmp(a, "--allowed-origins")) sp.allowed_origins = val;
        else if (!strcmp(a, "--allowed-methods")) sp.allowed_methods = val;
        else if (!strcmp(a, "--allowed-headers")) sp.allowed_headers = val;
        else if (!strcmp(a, "--ssl-keyfile")) sp.ssl_keyfile = val;
        else if (!strcmp(a, "--ssl-certfile")) sp.ssl_certfile = val;
        else { fprintf(stderr, "vllm serve: unknown option '%s'\n", a); serve_usage(stderr); return 2; }
        if (rc < 0) { fprintf(stderr, "vllm serve: %s\n", vc_err_msg()); return 2; }
        i++;
    }
    char defname[256] = "";
    if (!ep.model) {
        if (cli_default_model(defpath, sizeof defpath) < 0) { fprintf(stderr, "vllm serve: %s\n", vc_err_msg()); return 1; }
        ep.model = defpath;
        /* the default model is served under its file stem, not a path */
        const char *base = strrchr(defpath, '/');
        snprintf(defname, sizeof defname, "%.200s", base ? base + 1 : defpath);
        char *dot = strstr(defname, ".gguf");
        if (dot) *dot = 0;
        if (!sp.model_name) sp.model_name = defname;
    }
    if (!sp.model_name) sp.model_name = ep.model;
    if (!sp.api_key) sp.api_key = getenv("VLLM_API_KEY");
    sp.version = VLLM_VERSION_STR;
    char *tmpl = NULL;
    if (tmpl_arg && !(tmpl = load_template(tmpl_arg))) {
        fprintf(stderr, "vllm serve: --chat-template: %s\n", vc_err_msg());
        return 2;
    }
    sp.chat_template = tmpl;
    if (vc_log_get_level() > VC_LOG_INFO) vc_log_set_level(VC_LOG_INFO); /* KV block count at start-up */

    /* Signals are taken by sigwait below; every thread started from here
     * on inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    int status = 1;
    srv_server *s = NULL;
    ep.device = (rt_device)cli_device_resolve(device);
    ep.async_scheduling = cli_async_resolve(async, ep.device, ep.tensor_parallel_size);
    cli_budget_defaults(ep.device, &seqs, &toks);
    ep.max_num_seqs = seqs, ep.max_num_batched_tokens = toks;
    aeng *a = aeng_create(&ep);
    if (!a) { fprintf(stderr, "vllm serve: %s\n", vc_err_msg()); goto done; }
    s = srv_create(a, &sp);
    if (!s) { fprintf(stderr, "vllm serve: %s\n", vc_err_msg()); goto done; }
    fprintf(stderr, "vllm serve: model '%s' (max_model_len %d) listening on %s://%s:%d\n", sp.model_name,
            aeng_max_model_len(a), sp.ssl_keyfile ? "https" : "http", strchr(sp.host, ':') ? "[::]" : sp.host,
            srv_port(s));
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "vllm serve: signal %d, shutting down\n", sig);
    status = 0;
done:
    srv_free(s);
    aeng_free(a);
    free(tmpl);
    return status;
}
