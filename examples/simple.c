/* simple — the vllm.c C library in a few lines: load a model, complete a
 * prompt, stream another, chat once.
 *
 *   build/example_simple models/SmolLM2-135M-Instruct.Q4_1.gguf ["prompt"]
 */
#include <vllm.h>

#include <stdio.h>
#include <string.h>

static bool on_delta(const char *delta, bool finished, void *user) {
    int *n = user;
    fputs(delta, stdout);
    fflush(stdout);
    if (finished) putchar('\n');
    return ++*n < 1000; /* false would stop the generation */
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [PROMPT]\n", argv[0]);
        return 2;
    }
    const char *prompt = argc > 2 ? argv[2] : "Once upon a time";
    printf("libvllm %s, ABI %d\n", vllm_version(), vllm_abi_version());

    vllm_model_params mp = vllm_model_params_default();
    mp.model_path = argv[1];
    mp.num_blocks = 64; /* 64 blocks of 32 tokens: plenty for a demo */
    vllm_engine *e;
    if (vllm_engine_load(&mp, &e) != VLLM_OK) {
        fprintf(stderr, "load: %s\n", vllm_last_error());
        return 1;
    }

    vllm_sampling_params sp = vllm_sampling_params_default();
    sp.temperature = 0.0f; /* greedy */
    sp.max_tokens = 32;
    vllm_completion c;
    if (vllm_complete(e, prompt, &sp, &c) != VLLM_OK) {
        fprintf(stderr, "complete: %s\n", vllm_last_error());
        vllm_engine_free(e);
        return 1;
    }
    printf("[complete] %s%s\n(finish %s, %d prompt + %d generated tokens)\n", prompt, c.text, c.finish_reason,
           c.prompt_tokens, c.completion_tokens);
    vllm_completion_free(&c);

    printf("[stream] %s", prompt);
    int n = 0;
    sp.temperature = 0.8f;
    sp.seed = 42;
    sp.has_seed = 1;
    if (vllm_complete_stream(e, prompt, &sp, on_delta, &n) != VLLM_OK)
        fprintf(stderr, "stream: %s\n", vllm_last_error());

    char *json;
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the capital of France?\"}],"
                      "\"max_tokens\":24,\"temperature\":0}";
    if (vllm_chat(e, req, &json) == VLLM_OK) {
        printf("[chat] %s\n", json);
        vllm_string_free(json);
    } else {
        fprintf(stderr, "chat: %s\n", vllm_last_error());
    }
    vllm_engine_free(e);
    return 0;
}
