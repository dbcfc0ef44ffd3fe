/* kc_amx.h — what the AMX tile kernels (kc_x16k.h, kc_x16s.h) share: whether the process may use
 * AMX, the tile configuration's layout, and each thread's scratch. */
#ifndef INGOT_KC_AMX_H
#define INGOT_KC_AMX_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__GNUC__) &&                         \
    (defined(__clang__) || __GNUC__ >= 11)
#define KC_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
/* Whether this process may run AMX: the CPU has AMX-TILE and AMX-INT8, Linux grants the tile
 * state (arch_prctl ARCH_REQ_XCOMP_PERM), and INGOT_AMX is not 0 (the tests run both paths;
 * they give the same bits). Asked once; any thread may ask first (the grant is per process). */
static int kc__amx_state = -1;
static inline int kc_amx_ready(void) {
    int s = __atomic_load_n(&kc__amx_state, __ATOMIC_ACQUIRE);
    if (s >= 0) return s;
    unsigned a = 0, b = 0, c = 0, d = 0;
    const char *env = getenv("INGOT_AMX");
    s = !(env && strcmp(env, "0") == 0) && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) &&
        syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
    __atomic_store_n(&kc__amx_state, s, __ATOMIC_RELEASE);
    return s;
}

/* the target of every AMX function (the rest of a build may lack these instruction sets) */
#define KC_AMX_TARGET __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,f16c,fma"), noinline))
#define KC_AMX_INLINE __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,f16c,fma"), always_inline)) static inline

/* ldtilecfg's 64 bytes (palette 1) */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} kc__amx_config;

/* Loads a configuration of 8 tiles: tile i has rows[i] rows of colsb[i] bytes. */
KC_AMX_INLINE void kc_amx_configure(const uint8_t rows[8], const uint16_t colsb[8]) {
    kc__amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) cfg.rows[i] = rows[i], cfg.colsb[i] = colsb[i];
    __asm__ volatile("" : : "r"(&cfg) : "memory"); /* ldtilecfg reads cfg, which the compiler cannot see */
    _tile_loadconfig(&cfg);
}

/* The AMX kernels' order of steps: within a chunk of `groups` row groups, each block (or
 * super-block) b meets the chunk's groups in turn, then the next block, then the next chunk.
 * The step after (group g0 + gi, block b): its group and block, for making its weights ready
 * one step ahead; *ng >= the row range's group count means there is none. */
static inline void kc_amx_next_step(int g0, int gi, int cg, int b, int nb, int groups, int *ng, int *nbk) {
    *ng = gi + 1 < cg ? g0 + gi + 1 : b + 1 < nb ? g0 : g0 + groups;
    *nbk = gi + 1 < cg ? b : b + 1 < nb ? b + 1 : 0;
}

/* A chunk's float sums (acc: [group gi][token j][16 rows]) out to Y, as the vector kernels end a
 * row group: sum + bias, then + Y when accumulating. */
KC_AMX_INLINE void kc_amx_write_sums(float *Y, int ldy, const float *acc, int nt, int cg, int r, const float *bias,
                                     int accumulate) {
    for (int j = 0; j < nt; j++)
        for (int gi = 0; gi < cg; gi++) {
            float *y = Y + (size_t)j * (size_t)ldy + r + 16 * gi;
            __m512 v = _mm512_add_ps(_mm512_load_ps(acc + ((size_t)gi * (size_t)nt + (size_t)j) * 16),
                                     bias ? _mm512_loadu_ps(bias + r + 16 * gi) : _mm512_setzero_ps());
            if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(y), v);
            _mm512_storeu_ps(y, v);
        }
}

/* This thread's scratch for a kernel's weight planes, float sums and activation tiles, kept and
 * grown as needed, freed when the thread ends (a thread-specific key: a pool thread's buffer is
 * not a leak). The first 64 bytes hold the capacity. */
static pthread_key_t kc_amx_key;
static pthread_once_t kc_amx_once = PTHREAD_ONCE_INIT;
static void kc_amx_key_init(void) {
    if (pthread_key_create(&kc_amx_key, free) != 0) abort();
}
static inline uint8_t *kc_amx_scratch(size_t bytes) {
    pthread_once(&kc_amx_once, kc_amx_key_init);
    uint8_t *buf = pthread_getspecific(kc_amx_key);
    size_t cap = 0;
    if (buf) memcpy(&cap, buf, sizeof cap);
    if (bytes > cap) { /* the old buffer stays the key's until the new one is */
        uint8_t *grown = aligned_alloc(64, 64 + (bytes + 63) / 64 * 64);
        if (!grown) return NULL;
        memcpy(grown, &bytes, sizeof bytes);
        if (pthread_setspecific(kc_amx_key, grown) != 0) {
            free(grown);
            return NULL;
        }
        free(buf);
        buf = grown;
    }
    return buf + 64;
}
#else
#define KC_AMX 0
static inline int kc_amx_ready(void) { return 0; }
#endif

#endif
