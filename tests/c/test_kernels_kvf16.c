/* test_kernels_kvf16.c — test_kernels.c with the KV cache in f16 (a model
 * built with --kv-dtype f16): the store rounds each K and V value to f16 and
 * attention widens it back, against a reference over the same stored values. */
#define KC_KV_F16 1
#include "test_kernels.c"
