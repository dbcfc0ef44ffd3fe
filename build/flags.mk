# Compiler flags shared by the runtime, the tools, the tests and every model binary.
# SAN=1 selects an AddressSanitizer + UndefinedBehaviorSanitizer build in its own folder.
CC      ?= cc
SAN     ?= 0
ROOT    ?= .
ARCH    ?= -march=native
WARN    := -Wall -Wextra -Werror -Wno-unused-function
# the runtime's folders (runtime/README.md): every header is included by its bare name
RUNTIME_INC := -I$(ROOT)/runtime/core -I$(ROOT)/runtime/load -I$(ROOT)/runtime/text -I$(ROOT)/runtime/serve
CFLAGS  := -std=c11 -D_GNU_SOURCE $(WARN) $(ARCH) -pthread $(RUNTIME_INC) -I$(ROOT)/kernels/cpu
LDLIBS  := -lcjson -lutf8proc -levent -levent_pthreads -lm -pthread
ifeq ($(SAN),1)
OBJDIR  := $(ROOT)/build/_obj-san
CFLAGS  += -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LDLIBS  += -fsanitize=address,undefined
else
OBJDIR  := $(ROOT)/build/_obj
CFLAGS  += -O2 -g
endif
