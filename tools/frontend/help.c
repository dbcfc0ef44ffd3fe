/* help.c — every help text of the front end: ingot --help, ingot help COMMAND, COMMAND --help. */
#define _GNU_SOURCE
#include "frontend.h"

#include <stdio.h>
#include <string.h>

/* The build options (build, run, serve and chat take them); the --dtype names between the two
 * halves come from the one table of weight types. */
static const char BUILD_OPTIONS_BEFORE_DTYPES[] =
    "Build options (they choose the binary; run and serve take them too):\n"
    "  --name NAME          output name: build/NAME/NAME (default: the model's file or folder\n"
    "                       name in lower case, plus -nofuse for --no-fuse)\n"
    "  --dtype D            weight type the kernels are compiled for: native (default: as\n"
    "                       stored, zero copy), or one of runtime/load/dtype_table.h's:\n";

static const char BUILD_OPTIONS_AFTER_DTYPES[] =
    "                       (quantized once at load as llama.cpp's presets do: the LM\n"
    "                       head q6_k; q2_k and the *_k_s/m/l mixes with attn_v,\n"
    "                       ffn_down, attn_output at other types in some layers; rows not\n"
    "                       a multiple of 256 in a 32-block type)\n"
    "  --backend cpu|cuda   cpu (default) or cuda (nvcc; the binary needs an NVIDIA GPU)\n"
    "  --cudasim            with --backend cuda: build the CUDA sources against the CPU\n"
    "                       simulator as build/NAME/NAME-cudasim (runs anywhere, slowly)\n"
    "  --no-fuse            one kernel per op (the baseline for fused-vs-unfused comparisons)\n"
    "  --act-quant auto|k8|q16|q8|none  how activations meet block-quantized weights in the\n"
    "                       CPU matmuls. k8 (auto's choice on the CPU): int8 per 256 where a\n"
    "                       matmul's weights are all Q4_K/Q5_K/Q6_K (llama.cpp's Q8_K rounding:\n"
    "                       one integer chain per weight), else as q16. q16: 15-bit integers\n"
    "                       per block of 32 against weights interleaved in groups of 16\n"
    "                       rows at load (integer dot products; 128x finer than int8:\n"
    "                       SmolLM2's perplexity moves by under 0.01%).\n"
    "                       q8: int8 activations per block of 32 for every block type\n"
    "                       (llama.cpp's numerics). none: f32 activations everywhere (exact;\n"
    "                       auto's choice on CUDA)\n"
    "  --kv-dtype f32|f16|q8_0|q4  the element type of the KV cache: f16 (the default) halves\n"
    "                       its memory and what attention reads at long contexts; q8_0 (int8\n"
    "                       per 32 values with an f16 scale, llama.cpp's -ctk/-ctv q8_0) takes\n"
    "                       0.53x of f16; q4 (each 32 values rotated, then 16 levels and an\n"
    "                       f16 scale) 0.28x; f32 is exact\n"
    "  --max-tokens N       most tokens one forward step takes (default 512, at most 65536)\n"
    "  --isa native|all|LEVEL  native (default): compiled for this machine's CPU (-march=native);\n"
    "                       all: once per level (x86-64: avx512 (VNNI), avx2, portable; aarch64:\n"
    "                       i8mm, dotprod, armv8) and a launcher that runs the best one the CPU\n"
    "                       has, so the binary runs on any machine of its architecture\n"
    "                       (INGOT_ISA=LEVEL forces a lower one); LEVEL: that level alone\n"
    "  --target host|aarch64-linux|wasm32  the machine the binary runs on (default: this one);\n"
    "                       aarch64-linux cross-compiles for 64-bit ARM Linux (Debian's\n"
    "                       gcc-aarch64-linux-gnu: scripts/setup.sh --cross) into\n"
    "                       build/NAME-aarch64 with every ARM level (--isa all), and runs it here\n"
    "                       under qemu-user where that is installed; wasm32 (a GGUF file) makes a\n"
    "                       web page that chats with the model in the browser, WebAssembly with\n"
    "                       SIMD128 (Debian's emscripten: scripts/setup.sh --wasm) in\n"
    "                       build/NAME-wasm32: serve that folder and open it\n"
    "  --cuda-arch LIST     with --backend cuda: the GPU architectures to carry cubins for,\n"
    "                       all (default: 80,86,89,90) or a comma-separated subset (90 for an\n"
    "                       H100 alone: a quarter of the nvcc time); the newest one's PTX rides\n"
    "                       along for later GPUs, and any other GPU runs NVRTC-compiled code\n"
    "  --san                AddressSanitizer + UBSan build (NAME-san)\n"
    "  --models FILE        the descriptions to cast from (default: the tree's models.lua): a copy\n"
    "                       to try an entry in\n"
    "  --allow-unused       build even if the description reads not every tensor of the\n"
    "                       checkpoint (a warning instead of an error)\n"
    "  --draft DRAFT        also cast DRAFT (a smaller model with the same vocabulary) into the\n"
    "                       binary, with the same options, for speculative decoding: serve,\n"
    "                       generate and batch take --spec draft (CPU backend)\n";

static const char HELP_MAIN[] =
    "usage: ingot COMMAND [options]\n"
    "\n"
    "ingot casts one model into one dedicated binary: it generates C (or CUDA) for\n"
    "the model from models.lua and compiles it into build/NAME/NAME.\n"
    "\n"
    "Commands:\n"
    "  build MODEL [build options]            generate and compile the model's binary\n"
    "  run MODEL [build options] [--] [...]   build if needed, then generate text (NAME generate)\n"
    "  serve MODEL [build options] [--] [...] build if needed, then serve the OpenAI API (NAME serve)\n"
    "  chat MODEL [build options] [--] [...]  build if needed, then talk with it in the terminal (NAME chat)\n"
    "  list                                   the models built under build/\n"
    "  check ENTRY... [options]               check models.lua entries against transformers (--all: every one)\n"
    "  help [COMMAND]                         this text, or a command's options\n"
    "\n"
    "MODEL is a .gguf file, a .safetensors file with config.json beside it, or a\n"
    "folder with config.json and model.safetensors (or its sharded index).\n"
    "'ingot COMMAND --help' describes each command.\n";

static const char HELP_BUILD[] =
    "usage: ingot build MODEL [build options]\n"
    "\n"
    "Generates the model's sources (build/NAME/gen/) from models.lua and compiles\n"
    "them into build/NAME/NAME; prints the binary's path on stdout. It always runs\n"
    "(make rebuilds only what changed); run and serve skip it when nothing changed.\n"
    "\n";
static const char HELP_BUILD_AFTER[] =
    "";

static const char HELP_RUN[] =
    "usage: ingot run MODEL [build options] [--] [generate options]\n"
    "\n"
    "Builds the model's binary when it is missing or any of its inputs changed\n"
    "(models.lua, the generator, runtime, kernels, templates, the build options or\n"
    "the checkpoint), then runs 'build/NAME/NAME generate' with every other option.\n"
    "Options after -- all go to the binary.\n"
    "\n";
static const char HELP_RUN_AFTER[] =
    "\n"
    "Generate options (the binary's; see 'build/NAME/NAME --help'):\n"
    "  -p TEXT  -n 64  --temp 0  --top-k 0  --top-p 1  --min-p 0  --seed S\n"
    "  --repeat-penalty 1  --ignore-eos  --ids-out FILE  --threads N  --weights PATH\n"
    "  --tokenizer PATH  --spec off|ngram|draft  --spec-k 4  --draft-weights PATH\n"
    "\n"
    "example: ingot run models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf -p \"Hello\" -n 32\n";

static const char HELP_CHAT[] =
    "usage: ingot chat MODEL [build options] [--] [chat options]\n"
    "\n"
    "Builds the model's binary when needed (as 'ingot run'), then runs\n"
    "'build/NAME/NAME chat': a conversation in the terminal with the model's own\n"
    "chat template. Answers stream as they are written; Ctrl-C stops an answer,\n"
    "Ctrl-D or /exit leaves; /help lists the commands (/system, /clear, /save FILE,\n"
    "/load FILE). A line ending in \\ continues on the next; \"\"\" on a line of its\n"
    "own opens and closes a block of several lines.\n"
    "\n";
static const char HELP_CHAT_AFTER[] =
    "\n"
    "Chat options (the binary's):\n"
    "  --system TEXT  -n MAX_TOKENS (per answer; default: the rest of the context)\n"
    "  --ctx 8192 (the conversation's room, at most the model's context)\n"
    "  --temp 0  --top-k 0  --top-p 1  --min-p 0  --repeat-penalty 1  --seed S  --threads N\n"
    "\n"
    "example: ingot chat models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --system \"Be brief.\"\n";

static const char HELP_SERVE[] =
    "usage: ingot serve MODEL [build options] [--] [serve options]\n"
    "       ingot serve MODEL MODEL... [build options] [router options] [-- serve options]\n"
    "       ingot serve --config MODELS.json [build options] [router options] [-- serve options]\n"
    "\n"
    "One model: builds the model's binary when it is missing or any of its inputs\n"
    "changed (as 'ingot run'), then runs 'build/NAME/NAME serve' (an\n"
    "OpenAI-compatible server) with every other option. Options after -- all go to\n"
    "the binary.\n"
    "\n"
    "Several models (or --config): builds every binary first, then runs the router\n"
    "(build/_obj/ingot-router), which serves them all on one port: each request\n"
    "goes to the model its \"model\" field names, /v1/models lists them all. A\n"
    "model's process starts on its first request; the least recently used idle one\n"
    "is stopped when starting another would exceed --memory-budget; one that\n"
    "crashes is restarted by the next request. Build options given here apply to\n"
    "every model; serve options after -- go to every model's process.\n"
    "\n"
    "MODELS.json: {\"models\": [{\"path\": \"models/a.gguf\", \"name\": \"a\",\n"
    "  \"build\": [\"--dtype\", \"q8_0\"], \"serve\": [\"--kv-memory\", \"256\"]}, ...]}\n"
    "(path relative to the file's folder; name, build and serve are optional).\n"
    "\n"
    "Router options:\n"
    "  --host 127.0.0.1  --port 8080  --api-key KEY (checked by the router)\n"
    "  --memory-budget BYTES (512M, 4G: the sum of the running models' weights + KV + scratch)\n"
    "  --start-timeout 120 (s a request waits for its model to start)  --stop-timeout 10\n"
    "  --max-body BYTES  --max-waiting 256 (requests waiting for one model's start)\n"
    "  --read-timeout 30  --max-connections 512 (as serve's: the same HTTP guard is in front)\n"
    "\n";
static const char HELP_SERVE_AFTER[] =
    "\n"
    "Serve options (the binary's; see 'build/NAME/NAME --help'):\n"
    "  --host 127.0.0.1  --port 8080 (0: any free port, printed on the \"listening on\" line)\n"
    "  --api-key KEY  --kv-memory MiB | --kv-blocks N  --max-batch-tokens N  --max-running N\n"
    "  --no-prefix-cache  --grace 30  --threads N  --weights PATH  --tokenizer PATH\n"
    "\n"
    "example: ingot serve models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --port 8080\n"
    "         ingot serve a.gguf b.gguf --port 8080 --memory-budget 2G -- --kv-memory 256\n";

static const char HELP_LIST[] =
    "usage: ingot list\n"
    "\n"
    "Lists the model binaries under build/: name, models.lua entry (architecture),\n"
    "backend, fused or not, weight dtypes (kind and count), binary size, checkpoint.\n"
    "A build made before manifests existed is described from its generated source.\n";

static const char HELP_CHECK[] =
    "usage: ingot check ENTRY... | --all  [--seeds 3] [--first-seed 1] [--cudasim] [--no-unfused]\n"
    "                                    [--keep DIR] [--models FILE]\n"
    "\n"
    "Checks models.lua entries (--all: every one, in one process, so torch is\n"
    "imported once) against Hugging Face transformers: for each\n"
    "architecture it lists, builds tiny random models with transformers (random\n"
    "head counts and GQA ratios, head sizes, tied or untied embeddings, windows\n"
    "shorter than the sequence, RoPE scaling, partial rotary, biases and experts\n"
    "where the config has them, every switch and scale the entry reads; every norm\n"
    "and bias random and non-zero; saved as f32, bf16 or f16), casts each with\n"
    "./ingot build fused and --no-fuse (--cudasim: also the CUDA backend on\n"
    "cudasim, fused and --no-fuse), and prints max |delta logits| for prefill, chunked prefill and\n"
    "decode with the verdict against the bound (1e-4, scaled by max|logit| / 8\n"
    "when larger, at most 1e-3 max|logit|). Exit status 1 if any case fails; a failed\n"
    "build shows its whole error. --models FILE checks an entry of another\n"
    "descriptions file (a copy being worked on).\n"
    "Needs torch and transformers: scripts/setup.sh --check.\n";

static const char HELP_HELP[] =
    "usage: ingot help [COMMAND]\n"
    "\n"
    "Describes ingot, or one command's options (the same as 'ingot COMMAND --help').\n";

/* the --dtype names but native, folded at 62 columns on spaces and indented to the column of the
 * options' descriptions */
static void print_dtype_names(void) {
    const char *const *names = fe_dtype_choices() + 1;
    size_t column = 0;
    for (size_t i = 0; names[i]; i++) {
        size_t n = strlen(names[i]);
        if (column && column + 1 + n > 61) {
            putchar('\n');
            column = 0;
        }
        printf("%s%s", column ? " " : "                         ", names[i]);
        column += (column ? 1 : 0) + n;
    }
    putchar('\n');
}

static void print_with_build_options(const char *before, const char *after) {
    fputs(before, stdout);
    fputs(BUILD_OPTIONS_BEFORE_DTYPES, stdout);
    print_dtype_names();
    fputs(BUILD_OPTIONS_AFTER_DTYPES, stdout);
    fputs(after, stdout);
}

int fe_help(const char *command) {
    if (!*command) fputs(HELP_MAIN, stdout);
    else if (strcmp(command, "build") == 0) print_with_build_options(HELP_BUILD, HELP_BUILD_AFTER);
    else if (strcmp(command, "run") == 0) print_with_build_options(HELP_RUN, HELP_RUN_AFTER);
    else if (strcmp(command, "chat") == 0) print_with_build_options(HELP_CHAT, HELP_CHAT_AFTER);
    else if (strcmp(command, "serve") == 0) print_with_build_options(HELP_SERVE, HELP_SERVE_AFTER);
    else if (strcmp(command, "list") == 0) fputs(HELP_LIST, stdout);
    else if (strcmp(command, "check") == 0) fputs(HELP_CHECK, stdout);
    else if (strcmp(command, "help") == 0) fputs(HELP_HELP, stdout);
    else return -1;
    return 0;
}
