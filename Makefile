# ingot — the runtime library, tools and C tests.
#
#   make            runtime library + tools + the router (optimized)
#   make SAN=1      the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make lib ISA=avx2   the runtime library for one x86-64 level (build/_obj-isa-avx2; build/flags.mk)
#   make tests      C test programs (tests/c/test_*.c)
#   make soak       10 minutes of mixed traffic against one server: what is lost, latency, RSS
#   make check      C tests + a generator dry run of every fixture, the edit loop (scripts/check.sh)
#   make test       the default tier, what CI runs (see README)
#   make test-full  every test at full breadth, both passes over every file
#   make fuzz       every libFuzzer harness (tests/fuzz) for FUZZ_SECONDS each (scripts/fuzz.sh)
#   make SAN=fuzz fuzzers   the harnesses alone (clang, libFuzzer, ASan + UBSan; build/_obj-fuzz)
#   make SAN=msan fuzzers   the same under MemorySanitizer (build/_obj-msan; scripts/msan_deps.sh first)
#
# A model binary is built by ./ingot build (see README), which uses build/model.mk.

include build/flags.mk

# the library: every runtime/ source but the model binary's entry point (tools/router, ingot-router, is a
# program of its own)
RUNTIME_SRC := $(filter-out runtime/core/main.c,$(wildcard runtime/*/*.c))
RUNTIME_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(RUNTIME_SRC))
TOOLS       := $(patsubst tools/%.c,$(OBJDIR)/tools/%,$(wildcard tools/*.c))
TESTS       := $(patsubst tests/c/%.c,$(OBJDIR)/tests/%,$(wildcard tests/c/test_*.c))
HEADERS     := $(wildcard runtime/*/*.h kernels/cpu/*.h tests/c/*.h tools/*.h tools/router/*.h)
FUZZERS     := $(patsubst tests/fuzz/%.c,$(OBJDIR)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))

ROUTER_OBJ  := $(patsubst %.c,$(OBJDIR)/%.o,$(wildcard tools/router/*.c))
ROUTER      := $(OBJDIR)/ingot-router

# main.c, the model binary's entry point, compiled once here rather than in every model build;
# main_draft.o is the same with INGOT_DRAFT (a binary that carries a draft model)
MAIN_OBJ    := $(OBJDIR)/runtime/core/main.o $(OBJDIR)/runtime/core/main_draft.o
ifeq ($(TARGET),wasm32)
# a web page's module (TARGET=wasm32): no server (libevent), no terminal chat (libedit); its entry
# points are templates/wasm/ingot_web.c's
RUNTIME_SRC := $(filter-out runtime/serve/% runtime/core/chat_cli.c,$(RUNTIME_SRC))
RUNTIME_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(RUNTIME_SRC))
MAIN_OBJ    := $(OBJDIR)/templates/wasm/ingot_web.o
endif

.PHONY: all lib tools router tests check soak test test-full fuzz fuzzers clean
all: $(OBJDIR)/libingot.a $(MAIN_OBJ) tools router
lib: $(OBJDIR)/libingot.a $(MAIN_OBJ)
tools: $(TOOLS)
router: $(ROUTER)
tests: $(TESTS)
fuzzers: $(FUZZERS)

$(OBJDIR)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# the chat page (runtime/serve/web/chat.html) as a C array for web_page.c: the binary carries it
$(OBJDIR)/gen/web_chat_html.h: runtime/serve/web/chat.html
	@mkdir -p $(dir $@)
	{ echo '/* generated from runtime/serve/web/chat.html by the Makefile */'; \
	  echo 'static const unsigned char WEB_CHAT_HTML[] = {'; \
	  od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '};'; } > $@.tmp && mv $@.tmp $@
$(OBJDIR)/runtime/serve/web_page.o: $(OBJDIR)/gen/web_chat_html.h
$(OBJDIR)/runtime/serve/web_page.o: CFLAGS += -I$(OBJDIR)/gen

$(OBJDIR)/runtime/core/main_draft.o: runtime/core/main.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DINGOT_DRAFT -c $< -o $@

$(OBJDIR)/libingot.a: $(RUNTIME_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(OBJDIR)/tools/%: tools/%.c $(OBJDIR)/libingot.a $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(OBJDIR)/libingot.a $(LDLIBS)

# several models behind one endpoint: it takes the HTTP guard and the Prometheus registry from
# the library (the static link pulls in nothing that needs a model)
$(ROUTER): $(ROUTER_OBJ) $(OBJDIR)/libingot.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ROUTER_OBJ) -o $@ $(OBJDIR)/libingot.a $(LDLIBS)

$(OBJDIR)/tests/%: tests/c/%.c $(OBJDIR)/libingot.a $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(OBJDIR)/libingot.a $(LDLIBS)

# a harness links libFuzzer's main (LDLIBS under SAN=fuzz)
$(OBJDIR)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_common.h $(OBJDIR)/libingot.a $(HEADERS) $(LINK_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(OBJDIR)/libingot.a $(LDLIBS)

# the sliding-window and recurrent variants are test_scheduler.c compiled with KV_WINDOW / RECURRENT set
$(OBJDIR)/tests/test_scheduler_window: tests/c/test_scheduler.c
$(OBJDIR)/tests/test_scheduler_state: tests/c/test_scheduler.c
# and the f16-, q8_0- and q4-KV variants are test_kernels.c compiled with KC_KV_F16 / KC_KV_Q8 / KC_KV_Q4 set
$(OBJDIR)/tests/test_kernels_kvf16: tests/c/test_kernels.c
$(OBJDIR)/tests/test_kernels_kvq8: tests/c/test_kernels.c
$(OBJDIR)/tests/test_kernels_kvq4: tests/c/test_kernels.c

FUZZ_SECONDS ?= 60
fuzz:
	./scripts/fuzz.sh $(FUZZ_SECONDS)

check:
	./scripts/check.sh

# ten minutes of mixed traffic against one server (scripts/soak.py)
soak:
	python3 scripts/soak.py --minutes 10

test:
	./scripts/test.sh

test-full:
	./scripts/test.sh --full

clean:
	rm -rf build/_obj build/_obj-san build/_obj-fuzz build/_obj-msan build/_obj-isa-* build/_obj-aarch64* build/_obj-wasm32* build/_obj-cudasim build/fuzz
