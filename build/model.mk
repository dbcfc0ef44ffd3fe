# Builds one model binary from its generated sources:
#   make -f build/model.mk MODEL_DIR=build/<name> NAME=<name> [SAN=1] [DRAFT_DIR=build/<name>/draft]
#   make -f build/model.mk MODEL_DIR=... NAME=... BACKEND=cuda      nvcc: cubins for gen/cuda_arch.mk's
#                                                   architectures (sm_80/86/89/90 by default) + PTX
#   make -f build/model.mk MODEL_DIR=... NAME=... BACKEND=cudasim   the CUDA sources on cudasim (CPU)
#   make -f build/model.mk MODEL_DIR=... NAME=... ISAS="avx512 avx2 portable"   one binary per x86-64
#                                                   level and a launcher (./ingot build --isa all)
#   make -f build/model.mk MODEL_DIR=... NAME=... TARGET=aarch64-linux ISAS="i8mm dotprod armv8"
#                                                   the same for 64-bit ARM Linux (--target aarch64-linux)
#   make -f build/model.mk MODEL_DIR=... NAME=... TARGET=wasm32
#                                                   a web page's WebAssembly module and the page
#                                                   (--target wasm32): $(MODEL_DIR)/ingot.js is its $(BIN)
# ./ingot build runs this after the generator; the binary is $(MODEL_DIR)/$(NAME)
# ($(NAME)-cudasim for BACKEND=cudasim, -san suffixed for SAN=1).
comma := ,
empty :=
space := $(empty) $(empty)
MODEL_MK := $(abspath $(lastword $(MAKEFILE_LIST)))
ROOT := $(abspath $(dir $(MODEL_MK))/..)
include $(ROOT)/build/flags.mk

# A generated model's source is compiled with line tables only (-g1: file and line for profilers,
# debuggers' backtraces and the sanitizers' reports), not full debug info: the same code, a
# fifth less compile time per model. The runtime library keeps -g.
MODEL_CFLAGS := $(filter-out -g,$(CFLAGS)) -g1

MODEL_DIR ?= $(error MODEL_DIR is required)
NAME      ?= $(error NAME is required)
SUFFIX    := $(if $(filter 1,$(SAN)),-san,)
# ISAS=avx512 avx2 portable (./ingot build --isa all): one binary per x86-64 level,
# $(NAME).<isa>, each made by this file again with ISA=<isa>, and $(NAME) the launcher that execs
# the best one the CPU runs (templates/cpu/isa_launcher.c). ISA_TAG names a level's own files.
ISAS      ?=
ISA_TAG   := $(if $(or $(filter native,$(ISA)),$(ISAS)),,.$(ISA))
BIN       := $(MODEL_DIR)/$(NAME)$(ISA_TAG)$(SUFFIX)
HEADERS   := $(wildcard $(ROOT)/runtime/*/*.h $(ROOT)/kernels/cpu/*.h)
# main.c, compiled once with the library (the root Makefile's MAIN_OBJ), with INGOT_DRAFT where the
# binary carries a draft model
MAIN_O    := $(OBJDIR)/runtime/core/main$(if $(DRAFT_DIR),_draft,).o
MAIN_SRC  := $(ROOT)/runtime/core/main.c
ifeq ($(TARGET),wasm32)
MAIN_O    := $(OBJDIR)/templates/wasm/ingot_web.o
MAIN_SRC  := $(ROOT)/templates/wasm/ingot_web.c
endif

BACKEND   ?= cpu
CUDA_HOME ?= /usr/local/cuda
NVCC      := $(CUDA_HOME)/bin/nvcc
GEN       := $(MODEL_DIR)/gen
CUDA_HDRS := $(wildcard $(ROOT)/kernels/cuda/*.cuh $(ROOT)/runtime/cuda/*.h) $(GEN)/kernels.cu $(GEN)/kernel_sources.h
# Cubins for the architectures the generator wrote into $(GEN)/cuda_arch.mk (./ingot build
# --cuda-arch; by default every datacenter/workstation one since Ampere: 80 86 89 90), plus the
# newest one's PTX, which the driver compiles for any later GPU.
ifeq ($(BACKEND),cuda)
include $(GEN)/cuda_arch.mk
endif
CUDA_NEWEST := $(lastword $(CUDA_ARCH))
CUDA_ARCHS := $(foreach a,$(filter-out $(CUDA_NEWEST),$(CUDA_ARCH)),-gencode arch=compute_$(a),code=sm_$(a)) \
              -gencode arch=compute_$(CUDA_NEWEST),code=[sm_$(CUDA_NEWEST),compute_$(CUDA_NEWEST)]
CUDA_INC  := -I$(ROOT)/kernels/cuda -I$(ROOT)/runtime/cuda $(RUNTIME_INC) -I$(GEN)
# cudasim mode: plain, or race (shared/global-memory race detection); asan under SAN=1
SIM_MODE  ?= $(if $(filter 1,$(SAN)),asan,plain)

ifeq ($(TARGET),wasm32)
ifneq ($(BACKEND)$(DRAFT_DIR),cpu)
$(error TARGET=wasm32 is a CPU-backend build without a draft model)
endif
# The model and the runtime as one WebAssembly module (ingot.wasm, with Emscripten's loader ingot.js)
# beside the page that chats with it (templates/wasm): what a static web server needs, with the
# checkpoint (./ingot build links it there as model.gguf). Memory grows as the weights load, up to
# WebAssembly's 4 GiB; the entry points are templates/wasm/ingot_web.c's.
WASM_PAGE    := $(addprefix $(MODEL_DIR)/,index.html chat.js worker.js)
WASM_EXPORTS := ingot_web_load ingot_web_info ingot_web_start ingot_web_start_text ingot_web_next ingot_web_token \
                ingot_web_error ingot_web_logits malloc free
BIN := $(MODEL_DIR)/ingot.js
$(BIN): $(MODEL_DIR)/gen/model.c $(MAIN_O) $(MAIN_SRC) $(OBJDIR)/libingot.a $(HEADERS) $(WASM_PAGE)
	$(CC) $(filter-out -g%,$(MODEL_CFLAGS)) $(MODEL_DIR)/gen/model.c $(MAIN_O) -o $@ $(OBJDIR)/libingot.a $(LDLIBS) \
	  -sMODULARIZE=1 -sEXPORT_NAME=createIngot -sALLOW_MEMORY_GROWTH=1 -sMAXIMUM_MEMORY=4GB \
	  -sEXPORTED_FUNCTIONS=$(subst $(space),$(comma),$(addprefix _,$(WASM_EXPORTS))) \
	  -sEXPORTED_RUNTIME_METHODS=ccall,FS,UTF8ToString,HEAP32,HEAPF32
$(WASM_PAGE): $(MODEL_DIR)/%: $(ROOT)/templates/wasm/%
	cp $< $@
else ifneq ($(ISAS),)
ifneq ($(BACKEND),cpu)
$(error ISAS (one binary per x86-64 level) is a CPU-backend build)
endif
ISA_BINS := $(foreach i,$(ISAS),$(MODEL_DIR)/$(NAME).$(i)$(SUFFIX))
$(BIN): $(ROOT)/templates/cpu/isa_launcher.c $(ISA_BINS)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O2 $(ISA_FLAGS_$(ISA_BASE)) $(if $(filter 1,$(SAN)),-fsanitize=address$(comma)undefined,) \
	  -DINGOT_ISA_VARIANTS='"$(subst $(space),$(comma),$(strip $(ISAS)))"' -DINGOT_BINARY='"$(NAME)$(SUFFIX)"' $< -o $@
$(MODEL_DIR)/$(NAME).%$(SUFFIX): FORCE
	$(MAKE) -s -f $(MODEL_MK) MODEL_DIR=$(MODEL_DIR) NAME=$(NAME) SAN=$(SAN) TARGET=$(TARGET) ISA=$* ISAS= \
	  DRAFT_DIR=$(DRAFT_DIR)
else ifeq ($(BACKEND),cpu)
# DRAFT_DIR=build/<name>/draft (./ingot build --draft): the draft model's generated source, whose table of
# entry points is named ingot_generated_draft (templates/model_table.c.in) instead of the target's
# ingot_generated_model, linked beside the target's. Everything else in a generated source is static:
# the check below refuses a draft object that defines any other global symbol (but the ODR indicator
# ASan adds for the table under SAN=1).
ifneq ($(DRAFT_DIR),)
DRAFT_OBJS := $(GEN)/draft_model$(ISA_TAG)$(SUFFIX).o
$(GEN)/draft_model$(ISA_TAG)$(SUFFIX).o: $(DRAFT_DIR)/gen/model.c $(HEADERS)
	$(CC) $(MODEL_CFLAGS) -DINGOT_MODEL_TABLE=ingot_generated_draft -c $< -o $@
	@nm -g --defined-only $@ | awk '$$3 != "ingot_generated_draft" && $$3 != "__odr_asan.ingot_generated_draft" { print "the draft model defines " $$3 " (a generated source exports only its table)"; bad = 1 } END { exit bad }' || { rm -f $@; exit 1; }
endif
$(BIN): $(MODEL_DIR)/gen/model.c $(MAIN_O) $(MAIN_SRC) $(OBJDIR)/libingot.a $(HEADERS) $(DRAFT_OBJS)
	$(CC) $(MODEL_CFLAGS) $(MODEL_DIR)/gen/model.c $(MAIN_O) $(DRAFT_OBJS) -o $@ $(OBJDIR)/libingot.a $(LDLIBS)

endif

ifeq ($(BACKEND),cuda)
# ptxas -v for every kernel goes to $(MODEL_DIR)/ptxas.txt (registers, shared memory, spills).
$(GEN)/model.cuda.o: $(GEN)/model.cu $(GEN)/cuda_arch.mk $(CUDA_HDRS) $(HEADERS)
	$(NVCC) -std=c++17 -O3 $(CUDA_ARCHS) --threads 2 -Werror all-warnings -Xptxas -v -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-function \
	  $(CUDA_INC) -c $< -o $@ 2> $(MODEL_DIR)/ptxas.txt || { cat $(MODEL_DIR)/ptxas.txt >&2; rm -f $@; exit 1; }
$(GEN)/model_host.o: $(GEN)/model.c $(HEADERS)
	$(CC) $(MODEL_CFLAGS) -c $< -o $@
$(BIN): $(GEN)/model.cuda.o $(GEN)/model_host.o $(MAIN_O) $(MAIN_SRC) $(OBJDIR)/libingot.a $(HEADERS)
	$(NVCC) $(CUDA_ARCHS) $(GEN)/model.cuda.o $(GEN)/model_host.o $(MAIN_O) $(OBJDIR)/libingot.a -o $@ \
	  -cudart static -ldl -lrt $(filter-out -pthread -fsanitize%,$(LDLIBS)) -lpthread $(if $(filter 1,$(SAN)),-Xcompiler -fsanitize=address$(comma)undefined)
endif

ifeq ($(BACKEND),cudasim)
BIN := $(MODEL_DIR)/$(NAME)-cudasim$(if $(filter race,$(SIM_MODE)),-race,)$(SUFFIX)
# The same model.cu on cudasim: every CUDA thread a fiber, on the CPU (kernels/cudasim).
$(GEN)/model_host$(SUFFIX).o: $(GEN)/model.c $(HEADERS)
	$(CC) $(MODEL_CFLAGS) -c $< -o $@
$(BIN): $(GEN)/model.cu $(CUDA_HDRS) $(wildcard $(ROOT)/kernels/cudasim/*.cpp $(ROOT)/kernels/cudasim/*.h $(ROOT)/kernels/cudasim/*.py) $(GEN)/model_host$(SUFFIX).o $(MAIN_O) $(MAIN_SRC) $(OBJDIR)/libingot.a $(HEADERS)
	python3 $(ROOT)/kernels/cudasim/cudasim_build.py --mode $(SIM_MODE) -o $@ $(GEN)/model.cu \
	  --link-arg=$(GEN)/model_host$(SUFFIX).o --link-arg=$(MAIN_O) --link-arg=$(OBJDIR)/libingot.a \
	  $(foreach l,$(LDLIBS) $(if $(filter 1,$(SAN)),-fsanitize=undefined),--link-arg=$(l)) \
	  -- $(CUDA_INC) -I$(ROOT)/kernels/cpu -Wno-unused-function -Wno-unused-parameter -Wno-missing-field-initializers
endif

.DEFAULT_GOAL := $(BIN)

# The library's make (below) compiles MAIN_O; make took MAIN_O's time before that make ran, so a
# binary also names MAIN_O's source: a changed main.c or ingot_web.c relinks in the same build.
$(MAIN_O): $(OBJDIR)/libingot.a ;
# one build of a library folder at a time: two model builds (two ./ingot processes, parallel
# tests) that both find it stale would otherwise write the same objects at once
$(OBJDIR)/libingot.a: FORCE
	@mkdir -p $(OBJDIR)
	$(if $(filter wasm32,$(TARGET)),mkdir -p $(ROOT)/build/wasm-deps && flock $(ROOT)/build/wasm-deps/.lock $(ROOT)/scripts/wasm_deps.sh)
	flock $(OBJDIR)/.lock $(MAKE) -s -C $(ROOT) SAN=$(SAN) TARGET=$(TARGET) ISA=$(ISA) lib $(if $(ISA_TAG)$(CROSS),,tools)

FORCE:
.PHONY: FORCE
