/* fuzz_tokenizer_json.c — a Hugging Face tokenizer.json (runtime/text/tokenizer.c): the model's
 * vocabulary and merges, added tokens, the pre-tokenizer and normalizer, then an encode and a
 * decode with whatever it built. */
#include "fuzz_common.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[64], err[256];
    const int fd = fuzz_memfile(data, n, path, sizeof path);
    if (fd < 0) return 0;
    tok_tokenizer *t = tok_from_json_file(path, err, sizeof err);
    if (t) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        static const char text[] = "Hello, world! 123  caf\xc3\xa9\t<|endoftext|> \xf0\x9f\x98\x80\n";
        if (tok_encode(t, text, sizeof text - 1, 1, 1, &ids, &n_ids, err, sizeof err) == 0)
            free(tok_decode(t, ids, n_ids, 0));
        free(ids);
        tok_free(t);
    }
    close(fd);
    return 0;
}
