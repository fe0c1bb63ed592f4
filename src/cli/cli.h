/* cli — subcommands of the `vllm` binary. Each returns a process exit code
 * (0 ok, 1 runtime/input error, 2 usage error). Flags are documented in
 * docs/CONFIG.md. */
#ifndef CLI_H
#define CLI_H

#define VLLM_VERSION_STR "0.1.0"

int cli_run(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_bench_serve(int argc, char **argv);

#endif
