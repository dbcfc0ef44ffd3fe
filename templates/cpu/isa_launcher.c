/* isa_launcher.c — build/NAME/NAME of a model built for several instruction-set levels (./ingot
 * build --isa all).
 *
 * The model is compiled once per level (NAME.avx512, NAME.avx2, NAME.portable beside this file on
 * x86-64; NAME.i8mm, NAME.dotprod, NAME.armv8 on 64-bit ARM), each with its own runtime library
 * (build/model.mk ISAS), because the kernels are chosen at compile time (kernels/cpu: AVX-512
 * VNNI, AVX2 + FMA, NEON with or without sdot, or plain C). This program picks the best level the CPU
 * runs and execs that binary with the same arguments, so the process, its output, exit status and
 * signals are the model binary's own. INGOT_ISA=<level> forces a level (a lower one, e.g. to check
 * the portable path on a machine that has AVX-512); one the CPU lacks is an error, never a SIGILL.
 * The chosen binary's --info says which level runs and why (INGOT_ISA_CHOICE, set here).
 *
 * Compiled for the baseline level (x86-64, Armv8-A) so that it runs anywhere. Exit status 126/127 as a shell's when
 * the variant cannot be executed.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef INGOT_ISA_VARIANTS
#error "INGOT_ISA_VARIANTS (the levels built, best first, comma-separated) is set by build/model.mk"
#endif
#ifndef INGOT_BINARY
#error "INGOT_BINARY (the binary's name) is set by build/model.mk"
#endif

#if defined(__aarch64__)
#include <sys/auxv.h>
/* the kernel's feature bits (asm/hwcap.h), spelled here so that an older libc's headers build */
#define LAUNCHER_HWCAP_ASIMDDP (1UL << 20)
#define LAUNCHER_HWCAP2_I8MM (1UL << 13)
/* Whether this CPU runs the code of a level (build/flags.mk): the kernel says which instructions it
 * lets user code run in the auxiliary vector (Linux's AT_HWCAP and AT_HWCAP2). i8mm is Armv8.6-A,
 * which also holds the dot products. */
static int cpu_runs(const char *isa) {
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    if (strcmp(isa, "i8mm") == 0) return (hw & LAUNCHER_HWCAP_ASIMDDP) && (hw2 & LAUNCHER_HWCAP2_I8MM);
    if (strcmp(isa, "dotprod") == 0) return (hw & LAUNCHER_HWCAP_ASIMDDP) != 0;
    return strcmp(isa, "armv8") == 0;
}
#else
/* Whether this CPU (and its OS: __builtin_cpu_supports reads the CPUID bits the kernel exposes)
 * runs the code of a level; the levels are the compiler's x86-64 micro-architecture levels that
 * build/flags.mk compiles them for. */
static int cpu_runs(const char *isa) {
    __builtin_cpu_init();
    if (strcmp(isa, "avx512") == 0) return __builtin_cpu_supports("x86-64-v4") && __builtin_cpu_supports("avx512vnni");
    if (strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("x86-64-v3");
    return strcmp(isa, "portable") == 0;
}
#endif

int main(int argc, char **argv) {
    (void)argc;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "%s: cannot find its own folder (/proc/self/exe): %s\n", INGOT_BINARY, strerror(errno));
        return 127;
    }
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) slash[1] = 0;

    const char *forced = getenv("INGOT_ISA");
    if (forced && !*forced) forced = NULL;
    char list[] = INGOT_ISA_VARIANTS;
    const char *chosen = NULL;
    for (char *save = NULL, *isa = strtok_r(list, ",", &save); isa; isa = strtok_r(NULL, ",", &save)) {
        if (forced && strcmp(forced, isa) != 0) continue;
        if (!cpu_runs(isa)) {
            if (forced) {
                fprintf(stderr, "%s: INGOT_ISA=%s: this CPU does not run that level's instructions\n", INGOT_BINARY, forced);
                return 1;
            }
            continue;
        }
        chosen = isa;
        break;
    }
    if (!chosen) {
        fprintf(stderr, "%s: INGOT_ISA=%s: not a level of this build (%s)\n", INGOT_BINARY, forced ? forced : "",
                INGOT_ISA_VARIANTS);
        return 1;
    }
    /* the level's binary: NAME.<isa>, or NAME.<isa>-san in a sanitizer build (the level goes
     * before the -san suffix, as build/model.mk names it) */
    const char *bin = INGOT_BINARY;
    const size_t len = strlen(bin);
    const int base = (int)(len >= 4 && strcmp(bin + len - 4, "-san") == 0 ? len - 4 : len);
    char path[PATH_MAX + 64];
    if (snprintf(path, sizeof path, "%s%.*s.%s%s", self, base, bin, chosen, bin + base) >= (int)sizeof path) {
        fprintf(stderr, "%s: path too long\n", INGOT_BINARY);
        return 127;
    }
    setenv("INGOT_ISA_CHOICE", forced ? "forced by INGOT_ISA" : "the best level this CPU runs", 1);
    execv(path, argv);
    fprintf(stderr, "%s: cannot run %s: %s\n", INGOT_BINARY, path, strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
