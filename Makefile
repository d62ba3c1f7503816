# sluice: one GNU Makefile. Objects under build/ (build-asan/ for the
# sanitizer pass), header dependencies via -MMD -MP, quiet unless V=1.
# Every module folder's *.c goes into libsluice.a; cli/main.c is the binary;
# tests/test_*.c form one Criterion binary; tests/bench/bench_*.c are
# benchmark programs run by `make bench`; tests/fuzz/ holds the fuzz
# targets, replayed by `make test` and run by `make fuzz` (clang).

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
# -lrt: shm_open (the machine's host count under mpirun) before glibc 2.34
LIBS += $(MPI_LIBS) -lrt
endif

MODULES := util profiles sim planner exec kernels plots
# C that needs CUDA's headers (the NCCL transport): built by `make cuda`
# only, never part of libsluice.a.
CU_C_SRC := exec/transport_nccl.c
LIB_SRC := $(filter-out $(CU_C_SRC), \
             $(sort $(foreach m,$(MODULES),$(wildcard $(m)/*.c))))
PROFILE_JSON := $(sort $(wildcard profiles/hw/*.json profiles/models/*.json))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/builtin.o
TEST_SRC := $(sort $(wildcard tests/test_*.c)) tests/harness.c
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
BENCH_SRC := $(sort $(wildcard tests/bench/bench_*.c))
BENCH_BIN := $(BENCH_SRC:tests/bench/%.c=$(BUILD)/bench/%)
FUZZ_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(sort $(wildcard tests/fuzz/fuzz_*.c)))

comma := ,

ifeq ($(V),1)
Q :=
else
Q := @
endif

.PHONY: all test test-plain test-asan bench cuda run clean features validate \
        fuzz fuzz-build fuzz-merge

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

# Fuzz inputs replayed through the fuzz targets, built like the rest.
$(BUILD)/tests/fuzz_replay: $(BUILD)/tests/fuzz/replay.o $(FUZZ_OBJ) \
                            $(BUILD)/libsluice.a
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

$(BUILD)/bench/%: tests/bench/%.c $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) $< $(BUILD)/libsluice.a $(LIBS) -o $@

# The suite runs twice: optimised, then under AddressSanitizer and UBSan.
# GCC's UBSan leaves out float-to-int conversions out of range (a NaN made
# an int): asked for by name. Tests find the binary through SLUICE_BIN.
# The benchmarks are built (not run) with the plain suite, so an interface
# change that breaks one fails the tests, not the next `make bench`.
test: test-plain test-asan

test-plain: $(BINDIR)/sluice $(BUILD)/tests/run_tests $(BUILD)/tests/fuzz_replay \
            $(BENCH_BIN)
	@echo "== tests (-O2)"
	$(Q)SLUICE_BIN=$(BINDIR)/sluice $(BUILD)/tests/run_tests --jobs 2
	$(Q)$(BUILD)/tests/fuzz_replay tests/fuzz

test-asan:
	@echo "== tests (AddressSanitizer + UBSan)"
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan BINDIR=build-asan/bin OPT=-O1 \
	    SAN="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow -fno-omit-frame-pointer" \
	    build-asan/bin/sluice build-asan/tests/run_tests build-asan/tests/fuzz_replay
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	    SLUICE_BIN=build-asan/bin/sluice build-asan/tests/run_tests --jobs 2
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	    build-asan/tests/fuzz_replay tests/fuzz

bench: $(BINDIR)/sluice $(BENCH_BIN)
	$(Q)for b in $(BENCH_BIN); do echo "== $$b"; $$b || exit 1; done
	@echo "== $(BUILD)/bench/bench_exec llama-tiny (Llama's decoder, the same tables)"
	$(Q)$(BUILD)/bench/bench_exec llama-tiny
	@echo "== $(BUILD)/bench/bench_calib llama-tiny (Llama's decoder: calibrated predictions against runs)"
	$(Q)$(BUILD)/bench/bench_calib llama-tiny
	@echo "== $(BUILD)/bench/bench_calib tests/bench/bert-mini.json (BERT's encoder: calibrated from GPT's runs, predicted against its own)"
	$(Q)$(BUILD)/bench/bench_calib tests/bench/bert-mini.json
	@echo "== $(BUILD)/bench/bench_calib tests/bench/t5-mini.json (T5's encoder-decoder: calibrated from GPT's runs, predicted against its own)"
	$(Q)$(BUILD)/bench/bench_calib tests/bench/t5-mini.json
	@echo "== validation (sluice validate validation/*.csv: each table's error beside its goal)"
	$(Q)$(BINDIR)/sluice validate validation/*.csv | grep -E '^validation/|mean absolute'

# The main job of the README's first command.
run: $(BINDIR)/sluice
	$(BINDIR)/sluice plan --hw rtx2080ti x8 --model t5-3b

# Predictions against published measurements (validation/*.csv).
validate: $(BINDIR)/sluice
	$(BINDIR)/sluice validate validation/*.csv

# CUDA is optional: detected, never required by the CPU build and tests.
# `make cuda` builds bin/sluice-cuda (this sluice with the CUDA backend and
# the NCCL transport linked in: `exec --backend cuda`), bin/sluice-cuda-test
# (every CUDA op against the CPU oracle) and tests/gpu/run.sh's helpers.
# Kernels launch on per-thread default streams unless given a stream.
NVCC ?= $(shell command -v nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCCFLAGS ?= -O2 -std=c++17 -I. --default-stream per-thread \
             -Xcompiler -Wall,-Wextra,-Werror
NCCL_FOUND := $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h)
CU_LIB_SRC := kernels/ops_cuda.cu exec/backend_cuda.cu
CUDA_OBJ := $(CU_LIB_SRC:%.cu=$(BUILD)/cuda/%.o) \
            $(CU_C_SRC:%.c=$(BUILD)/cuda/%.o)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 \
             -lcublas -lnccl -lcudart
# The CUDA test driver compares with the CPU oracle: kernels/*.c objects
# (built by cc, no CUDA in them) are linked in with OpenBLAS.
KERN_CPU_OBJ := $(filter $(BUILD)/kernels/%,$(LIB_OBJ))

cuda:
ifeq ($(NVCC),)
	@echo "cuda: nvcc not found; install the CUDA toolkit or put nvcc on PATH" >&2; exit 1
else ifeq ($(NCCL_FOUND),)
	@echo "cuda: nccl.h not found; install NCCL (libnccl-dev) beside CUDA" >&2; exit 1
else
	$(Q)$(MAKE) --no-print-directory $(BINDIR)/sluice-cuda \
	    $(BINDIR)/sluice-cuda-test $(BUILD)/gpu/gpu_check \
	    $(BUILD)/gpu/gemm_rate
endif

$(BUILD)/cuda/%.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC  $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/cuda/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -MMD -MP -c $< -o $@

# Linked by nvcc (the CUDA runtime and C++ library come with it); whole
# archive as for bin/sluice, so the weak references to the CUDA backend
# and the NCCL transport find them.
$(BINDIR)/sluice-cuda: $(BUILD)/cli/main.o $(BUILD)/libsluice.a $(CUDA_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(NVCC) $(BUILD)/cli/main.o \
	    -Xlinker --whole-archive,$(BUILD)/libsluice.a,--no-whole-archive \
	    $(CUDA_OBJ) $(CUDA_LIBS) $(LIBS) -o $@

$(BINDIR)/sluice-cuda-test: $(BUILD)/cuda/kernels/cuda_test.o \
                            $(BUILD)/cuda/kernels/ops_cuda.o $(KERN_CPU_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(NVCC) $^ $(CUDA_LIBS) -lopenblas -lm -lpthread -o $@

# cuBLAS's sustained bf16 GEMM rate (tests/gpu/run.sh, check (g))
$(BUILD)/gpu/gemm_rate: $(BUILD)/cuda/tests/gpu/gemm_rate.o
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(NVCC) $^ $(CUDA_LIBS) -o $@

$(BUILD)/gpu/gpu_check: tests/gpu/gpu_check.c $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) $< $(BUILD)/libsluice.a $(LIBS) -o $@

# Fuzzing (tests/fuzz/README.md): one libFuzzer binary per target under
# build-fuzz/fuzz/, each run FUZZ_S seconds on its committed corpus;
# new inputs go to build-fuzz/corpus/<target>/ (`make fuzz-merge` folds
# them into tests/fuzz/corpus/, minimised), crashes to
# tests/fuzz/crashes/<target>/.
FUZZ_CC ?= clang
FUZZ_S ?= 10
FUZZ_TARGETS ?= gpus hw model plan schedcsv ckpt cli_profile cli_sim \
                cli_plan cli_validate cli_exec
FUZZ_FLAGS ?= -timeout=10 -rss_limit_mb=2048
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer
# clang knows no -Wformat-truncation and warns of the string literal split
# over lines in planner/cmd_plan.c's table header, which gcc accepts.
FUZZ_WARN := -Wno-unknown-warning-option -Wno-string-concatenation

# libFuzzer's entry, one object per target.
.PRECIOUS: $(BUILD)/tests/fuzz/main_%.o
$(BUILD)/tests/fuzz/main_%.o: tests/fuzz/libfuzzer.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -MMD -MP -DFUZZ_FN=fuzz_$* -c $< -o $@

$(BUILD)/fuzz/%: $(BUILD)/tests/fuzz/main_%.o $(FUZZ_OBJ) $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -fsanitize=fuzzer $^ $(LIBS) -o $@

fuzz-build:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "make fuzz: $(FUZZ_CC)" \
	    "not found; install it: apt-get install clang" >&2; exit 1; }
	@mkdir -p build-fuzz
	@printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)\n{ return d[0] & (int)n & 0; }\n' \
	    > build-fuzz/check.c
	@$(FUZZ_CC) -fsanitize=fuzzer build-fuzz/check.c -o build-fuzz/check \
	    >/dev/null 2>&1 || { echo "make fuzz: $(FUZZ_CC) has no libFuzzer" \
	    "runtime; install it: apt-get install libclang-rt-$$($(FUZZ_CC) \
	    -dumpversion | cut -d. -f1)-dev" >&2; exit 1; }
	$(Q)$(MAKE) -s --no-print-directory BUILD=build-fuzz BINDIR=build-fuzz/bin \
	    CC=$(FUZZ_CC) OPT=-O1 SAN="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" \
	    EXTRA_CFLAGS="$(FUZZ_WARN)" \
	    $(FUZZ_TARGETS:%=build-fuzz/fuzz/%)

fuzz: fuzz-build
	$(Q)failed=""; for t in $(FUZZ_TARGETS); do \
	    echo "== fuzz $$t ($(FUZZ_S) s)"; \
	    mkdir -p build-fuzz/corpus/$$t tests/fuzz/crashes/$$t; \
	    nice -n 10 build-fuzz/fuzz/$$t -max_total_time=$(FUZZ_S) \
	        -print_final_stats=1 $(FUZZ_FLAGS) \
	        -artifact_prefix=$(CURDIR)/tests/fuzz/crashes/$$t/ \
	        $(CURDIR)/build-fuzz/corpus/$$t $(CURDIR)/tests/fuzz/corpus/$$t \
	        2>build-fuzz/$$t.log || failed="$$failed $$t"; \
	    grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' \
	        build-fuzz/$$t.log | tr '\n' ' '; echo; \
	done; \
	if [ -n "$$failed" ]; then \
	    echo "make fuzz: crashed:$$failed (logs: build-fuzz/<target>.log;" \
	        "inputs: tests/fuzz/crashes/<target>/)" >&2; exit 1; fi

# Folds new inputs (build-fuzz/*/<target>/: corpora grown by `make fuzz`,
# seeds from tests/fuzz/seeds.sh) into the committed corpora, keeping the
# fewest inputs that reach every edge all of them reach (edges, not hit
# counts: a corpus a third the size).
fuzz-merge: fuzz-build
	$(Q)for t in $(FUZZ_TARGETS); do \
	    rm -rf build-fuzz/merged && mkdir -p build-fuzz/merged tests/fuzz/corpus/$$t; \
	    nice -n 10 build-fuzz/fuzz/$$t -merge=1 -use_counters=0 $(FUZZ_FLAGS) \
	        $(CURDIR)/build-fuzz/merged $(CURDIR)/tests/fuzz/corpus/$$t \
	        $$(ls -d $(CURDIR)/build-fuzz/*/$$t/ 2>/dev/null) \
	        2>build-fuzz/$$t.merge.log || exit 1; \
	    rm -rf tests/fuzz/corpus/$$t && cp -r build-fuzz/merged tests/fuzz/corpus/$$t; \
	    echo "$$t: $$(ls tests/fuzz/corpus/$$t | wc -l) inputs," \
	        "$$(($$(cat tests/fuzz/corpus/$$t/* | wc -c) / 1024)) KiB"; \
	done

features:
	@printf 'CUDA   %s\n' "$(if $(NVCC),found ($(NVCC)),not found)"
	@printf 'exec backends: cpu%s\n' "$(if $(NVCC),$(comma) cuda (make cuda builds bin/sluice-cuda),; cuda needs nvcc)"
	@printf 'MPI    %s\n' "$(if $(MPI_LIBS),found (OpenMPI),not found (install libopenmpi-dev))"
	@printf 'NCCL   %s\n' "$(if $(NCCL_FOUND),found (exec --transport nccl in bin/sluice-cuda),not found)"
	@printf 'gnuplot %s\n' "$$(command -v gnuplot >/dev/null && echo found || echo 'not found (plots disabled)')"

clean:
	rm -rf build build-asan build-fuzz bin

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/cli/main.d \
         $(CUDA_OBJ:.o=.d) $(BUILD)/cuda/kernels/cuda_test.d \
         $(FUZZ_OBJ:.o=.d) $(BUILD)/tests/fuzz/replay.d \
         $(wildcard $(BUILD)/tests/fuzz/main_*.d)
