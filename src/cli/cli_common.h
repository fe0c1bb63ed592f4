/* cli_common — flag value parsing and default-model lookup shared by the
 * subcommands. Errors set vc_err and return < 0. */
#ifndef CLI_COMMON_H
#define CLI_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cli_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_f32(const char *flag, const char *s, float lo, float hi, float *out);
/* --block-size N: KV cache tokens per block, a power of two in [1, 1024]
 * (vLLM takes 1, 8, 16, 32, 64, 128; the CUDA tensor-core attention
 * kernels need a power of two). */
int cli_parse_block_size(const char *flag, const char *s, int32_t *out);
/* A fraction in (0, 1] into a double. */
int cli_parse_f32d(const char *flag, const char *s, double *out);
/* The default model: $VLLM_MODEL, else models/<default file> next to the
 * binary's build folder or under the current directory. */
int cli_default_model(char *out, size_t cap);
/* --device NAME: "auto" (CLI_DEVICE_AUTO, resolved by cli_device_resolve),
 * "cpu" or "cuda" (when compiled in). */
enum { CLI_DEVICE_AUTO = -1 };
int cli_parse_device(const char *s, int *out);
/* The device to use for a parsed --device value: CLI_DEVICE_AUTO (the
 * default) is the CUDA backend where this build has it and the machine has
 * a GPU (rt_backend_device_count), else the CPU, as vLLM picks its platform;
 * logged. Other values pass through. */
int cli_device_resolve(int d);
/* --async-scheduling / --no-async-scheduling: CLI_ASYNC_AUTO (neither, the
 * default) is on for an accelerator with one rank (as vLLM, which turned
 * async scheduling on by default in late 2025; session 24 on the H200:
 * serving throughput +12-17% at 16-256 requests, first-token latency at
 * one request +0.1-0.8 ms) and off on the CPU (whose compute threads take
 * every core) and under tensor parallelism; logged. */
enum { CLI_ASYNC_AUTO = -1 };
bool cli_async_resolve(int flag, int device, int tp);
/* The step budget where --max-num-seqs / --max-num-batched-tokens left it
 * 0: on a GPU 256 sequences and, from 70 GiB of device memory, 8,192
 * tokens a step, else 2,048 (vLLM's server: 1,024 / 8,192 on such a GPU,
 * 256 / 2,048 on smaller ones; 256 sequences is the most measured here),
 * on the CPU 64 / 2,048 (eng_params_default); the GPU's logged. */
void cli_budget_defaults(int device, int32_t *max_num_seqs, int32_t *max_num_batched_tokens);

#endif
