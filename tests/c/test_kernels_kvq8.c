/* test_kernels_kvq8.c — test_kernels.c with the KV cache in q8_0 (a model
 * built with --kv-dtype q8_0): the store quantizes each 32 values of a K or V
 * row to int8 with a shared f16 scale and attention dequantizes in registers,
 * against a reference over the same stored values; head sizes that are not a
 * multiple of 32 are skipped (the generator refuses them for q8_0). */
#define KC_KV_Q8 1
#include "test_kernels.c"
