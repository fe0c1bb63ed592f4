/* concurrent — several requests in flight on one engine: submit returns at
 * once, callbacks gather each answer on the engine thread, wait collects.
 * Then a streamed chat, chunk by chunk (OpenAI chat.completion.chunk JSON).
 *
 *   build/example_concurrent models/SmolLM2-135M-Instruct.Q4_1.gguf
 */
#include <vllm.h>

#include <stdio.h>
#include <string.h>

typedef struct {
    char text[4096];
    size_t len;
} answer;

static bool gather(const char *delta, bool finished, void *user) {
    answer *a = user;
    size_t n = strlen(delta);
    if (a->len + n < sizeof a->text) {
        memcpy(a->text + a->len, delta, n + 1);
        a->len += n;
    }
    (void)finished;
    return true;
}

static bool print_chunk(const char *chunk, bool finished, void *user) {
    (void)user;
    if (!finished) printf("  %s\n", chunk);
    return true;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL\n", argv[0]);
        return 2;
    }
    vllm_model_params mp = vllm_model_params_default();
    mp.model_path = argv[1];
    mp.num_blocks = 64;
    vllm_engine *e;
    if (vllm_engine_load(&mp, &e) != VLLM_OK) {
        fprintf(stderr, "load: %s\n", vllm_last_error());
        return 1;
    }
    const char *prompts[] = {"The sun is", "My favourite food is", "In 1492,", "Water boils at"};
    enum { N = sizeof prompts / sizeof *prompts };
    vllm_request *r[N];
    answer a[N];
    vllm_sampling_params sp = vllm_sampling_params_default();
    sp.temperature = 0.0f;
    sp.max_tokens = 20;
    for (int i = 0; i < N; i++) {
        a[i].len = 0;
        a[i].text[0] = 0;
        if (vllm_request_submit(e, prompts[i], &sp, gather, &a[i], &r[i]) != VLLM_OK) {
            fprintf(stderr, "submit: %s\n", vllm_last_error());
            return 1;
        }
    }
    for (int i = 0; i < N; i++) {
        if (vllm_request_wait(r[i]) != VLLM_OK) fprintf(stderr, "request %d: %s\n", i, vllm_last_error());
        printf("[%d] %s%s\n", i, prompts[i], a[i].text);
        vllm_request_free(r[i]);
    }
    vllm_ex_stats st;
    if (vllm_ex_engine_stats(e, &st) == VLLM_OK)
        printf("engine: %d KV blocks of %d tokens, max_model_len %d, %lld steps\n", st.num_blocks, st.block_size,
               st.max_model_len, (long long)st.num_steps);

    puts("[chat stream]");
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"Say hello.\"}],\"max_tokens\":8,"
                      "\"temperature\":0,\"stream_options\":{\"include_usage\":true}}";
    if (vllm_chat_stream(e, req, print_chunk, NULL) != VLLM_OK) fprintf(stderr, "chat: %s\n", vllm_last_error());
    vllm_engine_free(e);
    return 0;
}
