/* fuzz_safetensors.c — a safetensors file's header: its length, JSON, dtypes, shapes and data
 * offsets (runtime/load/safetensors.c). */
#include "fuzz_common.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[64], err[256];
    const int fd = fuzz_memfile(data, n, path, sizeof path);
    if (fd < 0) return 0;
    st_file *f = st_open(path, err, sizeof err);
    if (f) {
        for (size_t i = 0; i < st_n_tensors(f); i++) (void)st_tensor_at(f, i);
        st_close(f);
    }
    close(fd);
    return 0;
}
