/* dtype_table.h — the one table of weight element types. Read by C (dtype.h's enum, dtype.c's
 * names and block sizes, gguf.c's mapping of GGML type ids), by the generator
 * (generator/dtypes.lua parses these rows) and by the front end (tools/frontend/options.c: the
 * --dtype choices, by including it):
 * a type is added here, once.
 *
 *   INGOT_DTYPE(ENUM, name, block elements, block bytes, GGML type id, C block type, role)
 *
 * ENUM names the constant INGOT_<ENUM>; the row order is the enum's. GGML type id: ggml.h's enum
 * ggml_type, -1 for a type no GGUF stores. The C block type is one block (dtype.h; a plain
 * element for the float and integer types), whose size dtype.c checks against the bytes here.
 * role: build — a type the kernels are compiled for (./ingot build --dtype); stored — a kernel's
 * type read only as the file stores it; part — a safetensors element of a quantized checkpoint,
 * read, never a kernel's type; repack — what GPTQ, AWQ and FP8 checkpoints are repacked into at
 * load (quant_ckpt.h).
 *
 * INGOT_DTYPE_MIX(name, base): the --dtype names that are llama.cpp's preset mixes (base type,
 * some tensors at others: generator/main.lua's mix rules); C reads none of them.
 *
 * The including file defines INGOT_DTYPE (and INGOT_DTYPE_MIX where it wants them); no include
 * guard: it is included once per table it builds. The format of a row is fixed (one per line, no
 * spaces inside an argument): the generator parses it as text. */
#ifndef INGOT_DTYPE_MIX
#define INGOT_DTYPE_MIX(name, base)
#endif

INGOT_DTYPE(F32, f32, 1, 4, 0, float, build)
INGOT_DTYPE(F16, f16, 1, 2, 1, uint16_t, build)
INGOT_DTYPE(BF16, bf16, 1, 2, 30, uint16_t, build)
INGOT_DTYPE(Q8_0, q8_0, 32, 34, 8, block_q8_0, build)       /* f16 scale d, int8 q[32]; x = d*q */
INGOT_DTYPE(Q4_0, q4_0, 32, 18, 2, block_q4_0, build)       /* f16 scale d, 16 bytes of nibbles; x = d*(q-8) */
INGOT_DTYPE(Q4_1, q4_1, 32, 20, 3, block_q4_1, build)       /* f16 scale d, f16 min m, nibbles; x = d*q + m */
INGOT_DTYPE(Q5_0, q5_0, 32, 22, 6, block_q5_0, build)       /* d, 5-bit q (nibble + 1 bit of qh); x = d*(q-16) */
INGOT_DTYPE(Q5_1, q5_1, 32, 24, 7, block_q5_1, build)       /* d, m, 5-bit q; x = d*q + m */
INGOT_DTYPE(Q2_K, q2_k, 256, 84, 10, block_q2_K, build)     /* 16 groups of 16, 4-bit scale and min each, 2-bit q */
INGOT_DTYPE(Q3_K, q3_k, 256, 110, 11, block_q3_K, build)    /* 16 groups of 16, 6-bit signed scale, 3-bit q */
INGOT_DTYPE(Q4_K, q4_k, 256, 144, 12, block_q4_K, build)    /* 8 groups of 32, 6-bit scale and min each, 4-bit q */
INGOT_DTYPE(Q5_K, q5_k, 256, 176, 13, block_q5_K, build)    /* as Q4_K with a fifth bit per q from qh */
INGOT_DTYPE(Q6_K, q6_k, 256, 210, 14, block_q6_K, build)    /* 16 groups of 16, int8 scale, 6-bit q (4 + 2 bits) */
INGOT_DTYPE(IQ4_NL, iq4_nl, 32, 18, 20, block_iq4_nl, build) /* d, 4-bit index into a fixed non-linear table */
INGOT_DTYPE(IQ4_XS, iq4_xs, 256, 136, 23, block_iq4_xs, build) /* 8 groups of 32, 6-bit signed scale, 4-bit index */
INGOT_DTYPE(I32, i32, 1, 4, -1, int32_t, part)              /* GPTQ/AWQ packed codes, act-order indices */
INGOT_DTYPE(F8_E4M3, f8_e4m3, 1, 1, -1, uint8_t, part)      /* float8_e4m3fn (no infinities; 0x7f/0xff are NaN) */
INGOT_DTYPE(Q4_Z, q4_z, 32, 20, -1, block_q4_z, repack)     /* f16 scale d, integer zero z, nibbles; x = d*(q-z) */
INGOT_DTYPE(Q8_Z, q8_z, 32, 36, -1, block_q8_z, repack)     /* f16 scale d, integer zero z, bytes; x = d*(q-z) */
INGOT_DTYPE(F8_B32, f8_b32, 32, 36, -1, block_f8_b32, repack) /* f32 scale d, E4M3 codes; x = d*e4m3(q) */
INGOT_DTYPE(MXFP4, mxfp4, 32, 17, 39, block_mxfp4, stored)  /* E8M0 scale e, 4-bit E2M1 codes (OCP microscaling,
                                                               gpt-oss's experts); x = 2^(e-128) * value[q] */

INGOT_DTYPE_MIX(q2_k, q2_k) /* the type's own name: llama.cpp's Q2_K mix (some tensors in q3_k, q4_k) */
INGOT_DTYPE_MIX(q3_k_s, q3_k)
INGOT_DTYPE_MIX(q3_k_m, q3_k)
INGOT_DTYPE_MIX(q3_k_l, q3_k)
INGOT_DTYPE_MIX(q4_k_m, q4_k)
INGOT_DTYPE_MIX(q5_k_m, q5_k)

#undef INGOT_DTYPE
#undef INGOT_DTYPE_MIX
