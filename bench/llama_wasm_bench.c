/* llama_wasm_bench.c — llama.cpp's side of bench/bench_wasm.py: its library, built for WebAssembly
 * by bench/build_llama_cpp.sh --target wasm32, timed the way llama-bench times (llama-bench itself is
 * not built for Emscripten by llama.cpp's CMake). Under node:
 *
 *   node build/llama-cpp-wasm32/llama_wasm_bench.js MODEL.gguf PROMPT N_GEN
 *
 * Tokenizes PROMPT (with BOS, control tokens recognized, as ingot's `generate -p` does), runs it in
 * one llama_decode (prefill; logits of the last token only, as llama-bench's pp), then N_GEN greedy
 * tokens one llama_decode each (decode, as its tg), and prints one JSON line: prompt and generated
 * token counts, the seconds of each phase, and the token ids. One thread (a page's WebAssembly has
 * one); every other setting is llama.cpp's default context. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT N_GEN\n", argv[0]);
        return 2;
    }
    const int n_gen = atoi(argv[3]);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    llama_token prompt[4096];
    const int n_prompt = llama_tokenize(vocab, argv[2], (int32_t)strlen(argv[2]), prompt, 4096, 1, 1);
    if (n_prompt <= 0) return fprintf(stderr, "cannot tokenize the prompt\n"), 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_gen + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)n_prompt; /* the prompt in one step */
    cp.n_threads = cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fprintf(stderr, "cannot make a context\n"), 1;
    struct llama_sampler *greedy = llama_sampler_init_greedy();
    const double t0 = now();
    if (llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) != 0) return fprintf(stderr, "prefill failed\n"), 1;
    const double t1 = now();
    printf("{\"prompt_tokens\": %d, \"prefill_s\": %.6f, \"ids\": [", n_prompt, t1 - t0);
    int generated = 0;
    for (; generated < n_gen; generated++) {
        llama_token next = llama_sampler_sample(greedy, ctx, -1);
        printf("%s%d", generated ? ", " : "", next);
        if (generated + 1 < n_gen && llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0)
            return fprintf(stderr, "decode failed\n"), 1;
    }
    const double t2 = now();
    printf("], \"generated\": %d, \"decode_s\": %.6f}\n", generated, t2 - t1);
    llama_sampler_free(greedy);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
