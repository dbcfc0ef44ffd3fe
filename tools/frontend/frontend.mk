# frontend.mk — the ./ingot front end (tools/frontend/*.c) as build/_obj/ingot-frontend. ./ingot
# runs `make -s -f tools/frontend/frontend.mk` before every command: a make that reads nothing
# else (not build/flags.mk), so that a command that builds nothing starts at once.
#
# Two front ends started at once may both find it stale: each links to a file of its own and
# renames it into place, so neither ever runs a half-written binary.
ROOT     := $(patsubst %/tools/frontend/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
FRONTEND := $(ROOT)/build/_obj/ingot-frontend
SOURCES  := $(wildcard $(ROOT)/tools/frontend/*.c)
HEADERS  := $(ROOT)/tools/frontend/frontend.h $(ROOT)/tools/tool_file.h $(ROOT)/runtime/load/dtype_table.h
# the host's own compiler, whatever CC says: CC chooses the models' compiler (it is part of a build's
# options), and may be a cross compiler
FRONTEND_CC := $(or $(INGOT_FRONTEND_CC),cc)
FRONTEND_CFLAGS := -std=c11 -O2 -g -Wall -Wextra -Werror
# INGOT_FRONTEND_SAN=1 (the tests' sanitizer pass): the front end under ASan + UBSan too
ifeq ($(INGOT_FRONTEND_SAN),1)
FRONTEND := $(FRONTEND)-san
FRONTEND_CFLAGS += -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
endif

$(FRONTEND): $(SOURCES) $(HEADERS) $(lastword $(MAKEFILE_LIST))
	@mkdir -p $(dir $@)
	$(FRONTEND_CC) $(FRONTEND_CFLAGS) $(SOURCES) -o $@.$$$$ -lcjson -lcrypto && mv -f $@.$$$$ $@
