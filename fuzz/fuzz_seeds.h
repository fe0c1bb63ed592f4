/* fuzz_seeds — the seed hook of the targets that write their own seeds
 * (scripts/fuzz_smoke.sh runs each target once with VLLM_FUZZ_EMIT_SEEDS=DIR
 * -runs=0): FUZZ_SEEDS_INIT(emit) defines LLVMFuzzerInitialize, which
 * calls emit(DIR) and exits when the variable is set, and returns 0
 * otherwise. */
#ifndef FUZZ_SEEDS_H
#define FUZZ_SEEDS_H

#include <stdlib.h>

#define FUZZ_SEEDS_INIT(emit)                                  \
    int LLVMFuzzerInitialize(int *argc, char ***argv);         \
    int LLVMFuzzerInitialize(int *argc, char ***argv) {        \
        (void)argc;                                            \
        (void)argv;                                            \
        const char *fuzz_seed_dir = getenv("VLLM_FUZZ_EMIT_SEEDS"); \
        if (fuzz_seed_dir) {                                   \
            emit(fuzz_seed_dir);                               \
            exit(0);                                           \
        }                                                      \
        return 0;                                              \
    }

#endif
