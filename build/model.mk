# Builds one model binary from its generated sources:
#   make -f build/model.mk MODEL_DIR=build/<name> NAME=<name> [SAN=1]
# ./ingot build runs this after the generator; the binary is $(MODEL_DIR)/$(NAME).
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
include $(ROOT)/build/flags.mk

MODEL_DIR ?= $(error MODEL_DIR is required)
NAME      ?= $(error NAME is required)
SUFFIX    := $(if $(filter 1,$(SAN)),-san,)
BIN       := $(MODEL_DIR)/$(NAME)$(SUFFIX)
HEADERS   := $(wildcard $(ROOT)/runtime/*.h $(ROOT)/kernels/cpu/*.h $(ROOT)/templates/cpu/*.h)

$(BIN): $(MODEL_DIR)/gen/model.c $(ROOT)/runtime/main.c $(OBJDIR)/libingot.a $(HEADERS)
	$(CC) $(CFLAGS) -I$(ROOT)/templates/cpu $(MODEL_DIR)/gen/model.c $(ROOT)/runtime/main.c -o $@ $(OBJDIR)/libingot.a $(LDLIBS)

$(OBJDIR)/libingot.a: FORCE
	$(MAKE) -s -C $(ROOT) SAN=$(SAN) $(OBJDIR)/libingot.a tools

FORCE:
.PHONY: FORCE
