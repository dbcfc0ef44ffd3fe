# Compiler flags shared by the runtime, the tools, the tests and every model binary.
# SAN=1 selects an AddressSanitizer + UndefinedBehaviorSanitizer build in its own folder; SAN=fuzz
# the same with clang and libFuzzer's coverage hooks, for the fuzz harnesses (tests/fuzz).
CC      ?= cc
SAN     ?= 0
ROOT    ?= .
# ISA: the x86-64 level everything is compiled for. native (the default): this machine's own
# (-march=native). A model built with ./ingot build --isa all is compiled once per level below
# (each against a runtime library of that level, in its own folder), and a launcher picks the
# best one this CPU runs at start (templates/cpu/isa_launcher.c).
ISA     ?= native
ISA_FLAGS_native   := -march=native
ISA_FLAGS_avx512   := -march=x86-64-v4 -mavx512vnni -mtune=generic
ISA_FLAGS_avx2     := -march=x86-64-v3 -mtune=generic
ISA_FLAGS_portable := -march=x86-64 -mtune=generic
ifeq ($(ISA_FLAGS_$(ISA)),)
$(error unknown ISA '$(ISA)' (native, avx512, avx2 or portable))
endif
ARCH    ?= $(ISA_FLAGS_$(ISA))
ISA_DIR := $(if $(filter native,$(ISA)),,-isa-$(ISA))
WARN    := -Wall -Wextra -Werror -Wno-unused-function
# the runtime's folders (runtime/README.md): every header is included by its bare name
# static libraries a build links besides Debian's (SAN=msan: the instrumented ones)
LINK_DEPS :=
RUNTIME_INC := -I$(ROOT)/runtime/core -I$(ROOT)/runtime/load -I$(ROOT)/runtime/text -I$(ROOT)/runtime/serve
CFLAGS  := -std=c11 -D_GNU_SOURCE $(WARN) $(ARCH) -DINGOT_ISA='"$(ISA)"' -pthread $(RUNTIME_INC) -I$(ROOT)/kernels/cpu
LDLIBS  := -lcjson -lutf8proc -levent -levent_pthreads -lpcre2-8 -ledit -lm -pthread
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
