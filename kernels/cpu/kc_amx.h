/* kc_amx.h — what the AMX tile kernels (kc_x16.h, kc_x16s.h) share: whether the process may use
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
