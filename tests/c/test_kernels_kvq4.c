/* test_kernels_kvq4.c — test_kernels.c with the KV cache in q4 (a model built
 * with --kv-dtype q4): the store rotates each 32 values of a K or V row and
 * quantizes them to 16 levels with a shared f16 scale, and attention rotates
 * its query and output to match, against a reference over the stored rows
 * rotated back; plus the rotation's orthogonality and the error the store
 * leaves (test_kv_q4). Head sizes that are not a multiple of 32 are skipped
 * (the generator refuses them for q4). */
#define KC_KV_Q4 1
#include "test_kernels.c"
