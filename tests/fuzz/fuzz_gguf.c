/* fuzz_gguf.c — a GGUF file's header, metadata and tensor table (runtime/load/gguf.c), and the
 * vocabulary a tokenizer builds from it (runtime/text/tokenizer.c). */
#include "gguf.h"
#include "tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[64], err[256];
    const int fd = fuzz_memfile(data, n, path, sizeof path);
    if (fd < 0) return 0;
    gguf_file *g = gguf_open(path, err, sizeof err);
    if (g) {
        int64_t v;
        double d;
        for (size_t i = 0; i < gguf_n_kv(g); i++) {
            const gguf_kv *kv = gguf_kv_at(g, i);
            (void)gguf_arr_int(kv, 0, &v);
            (void)gguf_arr_float(kv, 0, &d);
        }
        for (size_t i = 0; i < gguf_n_tensors(g); i++) (void)gguf_tensor_at(g, i);
        tok_tokenizer *t = tok_from_gguf(g, err, sizeof err);
        if (t) fuzz_use_tokenizer(t);
        gguf_close(g);
    }
    close(fd);
    return 0;
}
