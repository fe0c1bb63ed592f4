/* vllm — command-line entry: dispatches to one subcommand per file. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm <command> [options]\n"
            "commands:\n"
            "  run       generate text from a prompt\n"
            "  tokenize  encode text or render a chat prompt\n"
            "  bench     offline throughput / latency benchmark on the engine\n"
            "            (`vllm bench serve --base-url URL`: against a server)\n"
            "  serve     OpenAI-compatible HTTP server\n"
            "  chat      interactive chat, local or against a server URL\n"
            "  version   print the version\n"
            "Run `vllm <command> --help` for the options of a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cli_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench") && argc > 2 && !strcmp(argv[2], "serve")) return cli_bench_serve(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cli_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cli_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("vllm.c %s\n", VLLM_VERSION_STR);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "vllm: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
