# sluice: one GNU Makefile. Objects under build/ (build-asan/ for the
# sanitizer pass), header dependencies via -MMD -MP, quiet unless V=1.
# Every module folder's *.c goes into libsluice.a; cli/main.c is the binary;
# tests/test_*.c form one Criterion binary; tests/bench/bench_*.c are
# benchmark programs run by `make bench`.

CC      ?= cc
BUILD   ?= build
BINDIR  ?= bin
OPT     ?= -O2
SAN     ?=
# snprintf truncation is bounded and intended (messages, names), so that
# one warning is off; every other warning is an error.
CFLAGS  := -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wno-format-truncation \
           -D_DEFAULT_SOURCE \
           -D_GNU_SOURCE -I. $(SAN) $(EXTRA_CFLAGS)
LDFLAGS := $(SAN)
LIBS    := -ljansson -lgsl -lopenblas -lpthread -lm
TESTLIBS := -lcriterion

# MPI (OpenMPI from Debian) is optional: detected with pkg-config, NO_MPI=1
# builds without it (the executor then runs in one process only).
ifeq ($(NO_MPI),)
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS := $(shell pkg-config --libs ompi-c 2>/dev/null)
endif
ifneq ($(MPI_LIBS),)
CFLAGS += -DSLUICE_HAVE_MPI $(MPI_CFLAGS)
LIBS += $(MPI_LIBS)
endif

MODULES := util profiles sim planner exec kernels plots
LIB_SRC := $(sort $(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
PROFILE_JSON := $(sort $(wildcard profiles/hw/*.json profiles/models/*.json))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/builtin.o
TEST_SRC := $(sort $(wildcard tests/test_*.c)) tests/harness.c
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
BENCH_SRC := $(sort $(wildcard tests/bench/bench_*.c))
BENCH_BIN := $(BENCH_SRC:tests/bench/%.c=$(BUILD)/bench/%)
CU_SRC  := $(sort $(wildcard kernels/*.cu exec/*.cu))

ifeq ($(V),1)
Q :=
else
Q := @
endif

.PHONY: all test test-plain test-asan bench cuda run clean features validate

all: $(BINDIR)/sluice

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# Built-in profiles are compiled in: the binary runs from any folder.
$(BUILD)/gen/builtin.c: profiles/embed.sh $(PROFILE_JSON)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN   $@")
	$(Q)sh profiles/embed.sh $@ $(PROFILE_JSON)

$(BUILD)/gen/builtin.o: $(BUILD)/gen/builtin.c
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libsluice.a: $(LIB_OBJ)
	@$(if $(Q),echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# Whole archive: commands are reached through weak references, which alone
# would not pull their objects out of the library.
$(BINDIR)/sluice: $(BUILD)/cli/main.o $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) $(BUILD)/cli/main.o -Wl,--whole-archive \
	    $(BUILD)/libsluice.a -Wl,--no-whole-archive $(LIBS) -o $@

$(BUILD)/tests/run_tests: $(TEST_OBJ) $(BUILD)/libsluice.a
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) $^ $(TESTLIBS) $(LIBS) -o $@

$(BUILD)/bench/%: tests/bench/%.c $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) $< $(BUILD)/libsluice.a $(LIBS) -o $@

# The suite runs twice: optimised, then under AddressSanitizer and UBSan.
# GCC's UBSan leaves out float-to-int conversions out of range (a NaN made
# an int): asked for by name. Tests find the binary through SLUICE_BIN.
test: test-plain test-asan

test-plain: $(BINDIR)/sluice $(BUILD)/tests/run_tests
	@echo "== tests (-O2)"
	$(Q)SLUICE_BIN=$(BINDIR)/sluice $(BUILD)/tests/run_tests --jobs 2

test-asan:
	@echo "== tests (AddressSanitizer + UBSan)"
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan BINDIR=build-asan/bin OPT=-O1 \
	    SAN="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow -fno-omit-frame-pointer" \
	    build-asan/bin/sluice build-asan/tests/run_tests
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	    SLUICE_BIN=build-asan/bin/sluice build-asan/tests/run_tests --jobs 2

bench: $(BINDIR)/sluice $(BENCH_BIN)
	$(Q)for b in $(BENCH_BIN); do echo "== $$b"; $$b || exit 1; done

# The main job of the README's first command.
run: $(BINDIR)/sluice
	$(BINDIR)/sluice plan --hw rtx2080ti x8 --model t5-3b

# Predictions against published measurements (validation/*.csv).
validate: $(BINDIR)/sluice
	$(BINDIR)/sluice validate validation/*.csv

# CUDA is optional: detected, never required by the CPU build and tests.
NVCC ?= $(shell command -v nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCCFLAGS ?= -O2 -std=c++17 -I. -Xcompiler -Wall,-Wextra,-Werror
# The CUDA test driver compares with the CPU oracle: kernels/*.c objects
# (built by cc, no CUDA in them) are linked in with OpenBLAS.
KERN_CPU_OBJ := $(filter $(BUILD)/kernels/%,$(LIB_OBJ))
cuda: $(KERN_CPU_OBJ)
ifeq ($(NVCC),)
	@echo "cuda: nvcc not found; install the CUDA toolkit or put nvcc on PATH" >&2; exit 1
else
	@mkdir -p $(BUILD)/cuda $(BINDIR)
	@echo "  NVCC  $(CU_SRC)"
	$(Q)if [ -n "$(CU_SRC)" ]; then \
	    $(NVCC) $(NVCCFLAGS) $(CU_SRC) $(KERN_CPU_OBJ) \
	        -o $(BINDIR)/sluice-cuda-test \
	        -L$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart -lopenblas -lm; \
	else echo "cuda: no CUDA sources yet"; fi
endif

features:
	@printf 'CUDA   %s\n' "$(if $(NVCC),found ($(NVCC)),not found)"
	@printf 'MPI    %s\n' "$(if $(MPI_LIBS),found (OpenMPI),not found (install libopenmpi-dev))"
	@printf 'NCCL   %s\n' "$(if $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),found,not found)"
	@printf 'gnuplot %s\n' "$$(command -v gnuplot >/dev/null && echo found || echo 'not found (plots disabled)')"

clean:
	rm -rf build build-asan bin

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/cli/main.d
