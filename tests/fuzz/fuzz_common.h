/* fuzz_common.h — shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c, `make fuzz`).
 *
 * The loaders open paths (they mmap), so an input becomes an anonymous in-memory file named by
 * /proc/self/fd/N: no disk, and nothing left behind. */
#ifndef INGOT_FUZZ_COMMON_H
#define INGOT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* data[0..n) as a file: its fd (close it after), path filled; -1 on failure. */
static int fuzz_memfile(const uint8_t *data, size_t n, char *path, size_t cap) {
    const int fd = memfd_create("fuzz-input", 0);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write(fd, data + done, n - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* data[0..n) NUL-terminated (malloc'd), for parsers of C strings. */
static char *fuzz_cstring(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, data, n);
    s[n] = 0;
    return s;
}

#ifdef INGOT_TOKENIZER_H
/* A tokenizer built from the input, exercised: a fixed text with specials, bytes and emoji encoded
 * and decoded, then freed. */
static void fuzz_use_tokenizer(tok_tokenizer *t) {
    char err[256];
    int32_t *ids = NULL;
    size_t n_ids = 0;
    static const char text[] = "Hello, world! 123  caf\xc3\xa9\t<|endoftext|> <|im_end|> \xf0\x9f\x98\x80\n";
    if (tok_encode(t, text, sizeof text - 1, 1, 1, &ids, &n_ids, err, sizeof err) == 0)
        free(tok_decode(t, ids, n_ids, 0));
    free(ids);
    tok_free(t);
}
#endif

#endif
