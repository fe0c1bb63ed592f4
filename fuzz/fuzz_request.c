/* libFuzzer target: arbitrary bytes as a request body -> srv_parse_gen as
 * a completions and as a chat request (validation must answer every input
 * with 0 or a 400-class error, never crash or leak), then the same bytes
 * through the reasoning + tool-call splitter (parser picked by the first
 * byte) in uneven pieces.
 *
 *   CC=clang cmake -S . -B build-fuzz -DVLLM_FUZZ=ON && cmake --build build-fuzz --target fuzz_request
 *   ./build-fuzz/fuzz_request -max_total_time=60 -max_len=8192
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int chat = 0; chat < 2; chat++) {
        srv_gen g;
        srv_error e;
        int rc = srv_parse_gen((const char *)data, size, chat, &g, &e);
        if (rc < 0 && (e.status < 400 || e.status > 599 || !e.msg[0])) abort();
        if (rc == 0 && (g.n < 1 || (chat ? !g.messages : g.n_prompts < 1))) abort();
        char *ej = rc < 0 ? srv_error_json(&e) : NULL;
        free(ej);
        srv_gen_free(&g);
    }
    srv_splitter sp;
    static const srv_tool_parser TP[] = {SRV_TOOLS_HERMES, SRV_TOOLS_LLAMA3_JSON, SRV_TOOLS_MISTRAL, SRV_TOOLS_NONE};
    srv_splitter_init(&sp, size && (data[0] & 8) ? SRV_REASON_R1 : SRV_REASON_QWEN3, TP[size ? (data[0] >> 4) & 3 : 0]);
    sp.stream = size && (data[0] & 4); /* streamed tool-call deltas */
    if (size && (data[0] & 2)) srv_splitter_prefill(&sp, "<tool_call>\n{\"name\": \"f\", \"arguments\": ");
    vc_strbuf c = {0}, r = {0};
    json_t *calls = json_array();
    size_t step = size ? 1 + data[0] % 7 : 1;
    for (size_t i = 0; i < size; i += step)
        srv_splitter_push(&sp, (const char *)data + i, size - i < step ? size - i : step, false, &c, &r, calls);
    srv_splitter_push(&sp, "", 0, true, &c, &r, calls);
    srv_splitter_free(&sp);
    vc_sb_free(&c);
    vc_sb_free(&r);
    json_decref(calls);
    return 0;
}
