/* libFuzzer target: arbitrary template source -> parse -> render with a
 * small fixed conversation under tight limits (so no input can hang or
 * exhaust memory). Any crash, sanitizer report or leak is a bug.
 *
 *   CC=clang cmake -S . -B build-fuzz -DVLLM_FUZZ=ON && cmake --build build-fuzz --target fuzz_chat_template
 *   ./build-fuzz/fuzz_chat_template -max_total_time=60 -max_len=4096
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jj.h"

static const char *CONTEXT =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"h\\u00e9llo\"}]},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\","
    "   \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [null, true]}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"enable_thinking\": false, \"n\": 3}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *vars;
    if (!vars) vars = json_loads(CONTEXT, JSON_PRESERVE_ORDER, NULL);
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    char err[512];
    jj_program prog;
    if (jj_parse(src, &prog, err, sizeof err) == 0) {
        jj_limits lim = {.max_steps = 20000, .max_output = 1 << 16, .max_arena = 16 << 20};
        char *out = NULL;
        if (jj_render(&prog, vars, &lim, &out, err, sizeof err) == 0) free(out);
        jj_program_free(&prog);
    }
    free(src);
    return 0;
}
