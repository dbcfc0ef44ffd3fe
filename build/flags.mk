# Compiler flags shared by the runtime, the tools, the tests and every model binary.
# SAN=1 selects an AddressSanitizer + UndefinedBehaviorSanitizer build in its own folder; SAN=fuzz
# the same with clang and libFuzzer's coverage hooks, for the fuzz harnesses (tests/fuzz).
CC      ?= cc
SAN     ?= 0
ROOT    ?= .
# TARGET: the machine the binaries run on. host (the default): this one. aarch64-linux: 64-bit ARM
# Linux (./ingot build --target aarch64-linux), compiled by Debian's gcc-aarch64-linux-gnu on any
# other host, by the host's own compiler on an ARM one; its objects live apart (build/_obj-aarch64*).
# wasm32: WebAssembly for a web page (./ingot build --target wasm32), compiled by Debian's emscripten
# against the libraries scripts/wasm_deps.sh builds for it (build/_obj-wasm32*).
TARGET  ?= host
HOST_ARCH := $(shell uname -m)
ifeq ($(TARGET),host)
TARGET_ARCH := $(if $(filter aarch64 arm64,$(HOST_ARCH)),aarch64,x86_64)
else ifeq ($(TARGET),aarch64-linux)
TARGET_ARCH := aarch64
else ifeq ($(TARGET),wasm32)
TARGET_ARCH := wasm32
else
$(error unknown TARGET '$(TARGET)' (host, aarch64-linux or wasm32))
endif
# a cross build: its own compiler and folders (the tools that run during a build stay the host's)
CROSS   := $(if $(filter wasm32,$(TARGET_ARCH)),wasm32,$(if $(and $(filter aarch64,$(TARGET_ARCH)),$(filter-out aarch64 arm64,$(HOST_ARCH))),aarch64,))
ifeq ($(CROSS),aarch64)
CC      := aarch64-linux-gnu-gcc
AR      := aarch64-linux-gnu-ar
else ifeq ($(CROSS),wasm32)
CC      := emcc
AR      := emar
# Emscripten's tools are node programs that require Debian's node-acorn (/usr/share/nodejs), which a
# node installed from elsewhere does not search
export NODE_PATH := /usr/share/nodejs$(if $(NODE_PATH),:$(NODE_PATH),)
endif
# ISA: the instruction-set level everything is compiled for. native (the default): this machine's
# own (-march=native; -mcpu=native on ARM). A model built with ./ingot build --isa all is compiled
# once per level below (each against a runtime library of that level, in its own folder), and a
# launcher picks the best one the CPU runs at start (templates/cpu/isa_launcher.c).
# x86-64: avx512 (AVX-512 VNNI), avx2, portable. aarch64: i8mm (Armv8.6-A), dotprod
# (Armv8.2-A + sdot: Neoverse N1, Cortex-A76 and later), armv8 (Armv8-A NEON: Cortex-A53, A72).
# wasm32: simd128 (WebAssembly's 128-bit vectors, in every browser since 2021), its one level.
ifeq ($(TARGET_ARCH),wasm32)
ISA_FLAGS_simd128  := -msimd128
ISA_LEVELS         := simd128
ISA_BASE           := simd128
else ifeq ($(TARGET_ARCH),aarch64)
ISA_FLAGS_native   := $(if $(CROSS),,-mcpu=native)
ISA_FLAGS_i8mm     := -march=armv8.6-a+i8mm -mtune=generic
ISA_FLAGS_dotprod  := -march=armv8.2-a+dotprod -mtune=generic
ISA_FLAGS_armv8    := -march=armv8-a -mtune=generic
ISA_LEVELS         := i8mm dotprod armv8
ISA_BASE           := armv8
else
ISA_FLAGS_native   := -march=native
ISA_FLAGS_avx512   := -march=x86-64-v4 -mavx512vnni -mtune=generic
ISA_FLAGS_avx2     := -march=x86-64-v3 -mtune=generic
ISA_FLAGS_portable := -march=x86-64 -mtune=generic
ISA_LEVELS         := avx512 avx2 portable
ISA_BASE           := portable
endif
# a cross build has no native level: by default its baseline
ISA     ?= $(if $(CROSS),$(ISA_BASE),native)
ifeq ($(ISA_FLAGS_$(ISA)),)
$(error unknown ISA '$(ISA)' for $(TARGET_ARCH) ($(if $(CROSS),,native, )$(ISA_LEVELS)))
endif
ARCH    ?= $(ISA_FLAGS_$(ISA))
ISA_DIR := $(if $(CROSS),-$(CROSS),)$(if $(filter native,$(ISA)),,-isa-$(ISA))
ifneq ($(CROSS),)
ifneq ($(filter-out 0,$(SAN)),)
$(error SAN=$(SAN): the sanitizer builds run on the host (TARGET=host))
endif
endif
WARN    := -Wall -Wextra -Werror -Wno-unused-function
# the runtime's folders (runtime/README.md): every header is included by its bare name
# static libraries a build links besides Debian's (SAN=msan: the instrumented ones)
LINK_DEPS :=
RUNTIME_INC := -I$(ROOT)/runtime/core -I$(ROOT)/runtime/load -I$(ROOT)/runtime/text -I$(ROOT)/runtime/serve
CFLAGS  := -std=c11 -D_GNU_SOURCE $(WARN) $(ARCH) -DINGOT_ISA='"$(ISA)"' -pthread $(RUNTIME_INC) -I$(ROOT)/kernels/cpu
LDLIBS  := -lcjson -lutf8proc -levent -levent_pthreads -lpcre2-8 -ledit -lm -pthread
ifeq ($(CROSS),aarch64)
# Debian's libevent-dev cannot be installed for two architectures at once (its event-config.h is
# not in a multiarch folder, though the same bytes on every 64-bit Linux): a cross build reads the
# host's headers and links the arm64 shared libraries by their file names
LDLIBS  := $(subst -levent_pthreads,-l:libevent_pthreads-2.1.so.7,$(subst -levent ,-l:libevent-2.1.so.7 ,$(LDLIBS)))
else ifeq ($(CROSS),wasm32)
# one thread (a page's WebAssembly threads need cross-origin isolation): no -pthread, which would
# make Emscripten build for shared memory; the libraries are scripts/wasm_deps.sh's static ones
WASM_DEPS := $(ROOT)/build/wasm-deps
CFLAGS  := -I$(WASM_DEPS)/include $(filter-out -pthread,$(CFLAGS))
LINK_DEPS := $(addprefix $(WASM_DEPS)/lib/,libcjson.a libutf8proc.a libpcre2-8.a)
LDLIBS  := $(LINK_DEPS) -lm
endif
ifeq ($(SAN),fuzz)
# the fuzz harnesses' library (tests/fuzz): clang, libFuzzer's coverage hooks, ASan + UBSan
CC      := clang
OBJDIR  := $(ROOT)/build/_obj-fuzz$(ISA_DIR)
CFLAGS  += -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LDLIBS  += -fsanitize=fuzzer,address,undefined
else ifeq ($(SAN),msan)
# the fuzz harnesses under MemorySanitizer (scripts/fuzz.sh --msan): clang and libFuzzer's hooks as
# above, against cJSON, utf8proc and libevent built instrumented by scripts/msan_deps.sh (an
# uninstrumented library's writes would read as uninitialized); their headers come first
CC      := clang
OBJDIR  := $(ROOT)/build/_obj-msan$(ISA_DIR)
MSAN_DEPS := $(ROOT)/build/msan-deps
CFLAGS  := -I$(MSAN_DEPS)/include $(CFLAGS) -O1 -g -fsanitize=fuzzer-no-link,memory -fsanitize-memory-track-origins \
           -fno-omit-frame-pointer
LINK_DEPS := $(addprefix $(MSAN_DEPS)/lib/,libcjson.a libutf8proc.a libevent.a libevent_pthreads.a)
LDLIBS  := $(LINK_DEPS) -lpcre2-8 -ledit -lm -pthread -fsanitize=fuzzer,memory
else ifeq ($(SAN),1)
OBJDIR  := $(ROOT)/build/_obj-san$(ISA_DIR)
CFLAGS  += -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LDLIBS  += -fsanitize=address,undefined
else
OBJDIR  := $(ROOT)/build/_obj$(ISA_DIR)
CFLAGS  += -O2 -g
endif
