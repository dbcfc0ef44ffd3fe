/* fuzz_tokenizer_json.c — a Hugging Face tokenizer.json (runtime/text/tokenizer.c): the model's
 * vocabulary and merges, added tokens, the pre-tokenizer and normalizer, then an encode and a
 * decode with whatever it built. */
#include "tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[64], err[256];
    const int fd = fuzz_memfile(data, n, path, sizeof path);
    if (fd < 0) return 0;
    tok_tokenizer *t = tok_from_json_file(path, err, sizeof err);
    if (t) fuzz_use_tokenizer(t);
    close(fd);
    return 0;
}
