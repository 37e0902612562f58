# Two commands do all set-up on a fresh Debian 12 machine:
#   make run    install deps, build, run the demo
#   make test   install deps, build, run every test this machine can run (label `slow` opt-in:
#               make test-slow)
# Sanitizers and fuzzers (README "Fuzzing and sanitizers"):
#   make test-asan   the cpu, mpi and nvme tests built with ASan + UBSan, in build-asan/
#   make test-tsan   the device, stream and I/O-thread tests built with TSan, in build-tsan/
#   make fuzz        each fuzzer for SLUICE_FUZZ_LONG_SECONDS (300 s), in build/fuzz/
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Unity-build the libraries (CMakeLists.txt, SLUICE_UNITY_BUILD): what a cold build such as CI's
# spends least on. UNITY=OFF for quicker rebuilds while editing a library.
UNITY ?= ON
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
# The test executables TSan runs: the device contract and the CPU device (streams, events, host
# functions, the arena), memory accounting, the ops backends on streams, the trace recorder and
# the io_uring engine's completion threads.
TSAN_TESTS ?= device_cpu_test memory_accounting_test ops_backend_test runtime_trace_test \
              offload_aio_engine_test

.PHONY: all deps configure build run test test-slow test-asan test-tsan fuzz clean format \
        python-env test-python

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_UNITY_BUILD=$(UNITY) \
	  $(CMAKE_FLAGS) > $(BUILD).configure.log \
	  || (cat $(BUILD).configure.log; exit 1)
	@grep -E 'CUDA backends|Warning' $(BUILD).configure.log || true

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The demo: a ~1.3M-parameter byte-level GPT trained on text every Debian system has; sluice train
# writes runs/demo/{metrics.jsonl,summary.json,loss.png}. The corpus is also the data of the other
# shipped configs (configs/*.yaml), so every command of the README runs after this.
run: build
	scripts/make-demo-corpus.sh data/demo_corpus.txt
	$(BUILD)/bin/sluice env
	$(BUILD)/bin/sluice config check configs/demo_gpt.yaml
	$(BUILD)/bin/sluice train --config configs/demo_gpt.yaml --run-dir runs/demo --overwrite
	@echo "loss curve (drawn by sluice train): runs/demo/loss.png"

test: build
	cd $(BUILD) && ctest -LE slow --output-on-failure -j $(JOBS) --timeout 600

test-slow: build
	cd $(BUILD) && ctest -L slow --output-on-failure -j $(JOBS)

# The `python` tests (tests/python: Sluice against transformers' GPT-2 and Llama, and
# from_pretrained on `sluice convert` output) need torch and transformers in a venv at
# $(BUILD)/python-env. `make test` never installs them (several hundred MB; the tests skip with
# the reason); `make python-env` does, and `make test-python` runs them.
python-env: build
	tests/python/make_env.sh $(BUILD)/python-env

test-python: python-env
	cd $(BUILD) && ctest -L python --output-on-failure

# The long fuzzer runs alone (they are also part of test-slow).
fuzz: build
	cd $(BUILD) && ctest -R '^fuzz_long\.' --output-on-failure -j $(JOBS)

# Everything built with -fsanitize=address,undefined; a report fails its test. The fuzzers are
# not rebuilt there (they carry the sanitizers already), nor the CUDA backends (nvcc takes no
# sanitizer, and the labels run here are the CPU ones). The tests run in the environment of
# tests/sanitizer/asan-env.sh: Open MPI's own leaks suppressed by module (with the tests that
# prove them Open MPI's), and Sluice's SIGSEGV/SIGBUS handlers left in place. The golden-curve
# tests are left out: they compare bits that depend on how the compiler vectorizes the
# `omp simd reduction` loops of kernels/cpu/ops_norm.cpp and ops_loss.cpp, which the
# instrumentation changes (with those two files built uninstrumented they pass).
ASAN_EXCLUDE ?= GoldenLossTest|train_golden_test
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DSLUICE_SANITIZE='address;undefined' -DSLUICE_FUZZ=OFF -DSLUICE_ENABLE_CUDA=OFF $(CMAKE_FLAGS) \
	  > $(ASAN_BUILD).configure.log || (cat $(ASAN_BUILD).configure.log; exit 1)
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && $(CURDIR)/tests/sanitizer/asan-env.sh . \
	  ctest -L 'cpu|mpi|nvme' -LE slow -E '$(ASAN_EXCLUDE)' --output-on-failure -j $(JOBS) \
	  --timeout 1800

# TSAN_TESTS built with -fsanitize=thread and run whole. GCC's OpenMP runtime is not
# instrumented, so TSan cannot see its barriers and would report every parallel loop: OpenMP
# teams are capped at one thread (OMP_THREAD_LIMIT; OpenBLAS's OpenMP build too, which would
# otherwise wait forever for the team members the cap denies it), and TSan checks Sluice's own threads
# (stream workers, host-function callbacks, completion threads) against each other. TSan leaves
# SIGSEGV and SIGBUS to Sluice's handlers, as under ASan (tests/sanitizer/asan-env.sh).
test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_SANITIZE=thread \
	  -DSLUICE_FUZZ=OFF -DSLUICE_ENABLE_CUDA=OFF $(CMAKE_FLAGS) \
	  > $(TSAN_BUILD).configure.log || (cat $(TSAN_BUILD).configure.log; exit 1)
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TESTS)
	@for t in $(TSAN_TESTS); do \
	  echo "== $$t (ThreadSanitizer)"; \
	  OMP_THREAD_LIMIT=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE TSAN_OPTIONS='second_deadlock_stack=1:handle_segv=0:handle_sigbus=0' \
	    $(TSAN_BUILD)/tests/$$t --gtest_brief=1 || exit 1; \
	done

format:
	@git ls-files '*.h' '*.cpp' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(BUILD).configure.log $(ASAN_BUILD) $(ASAN_BUILD).configure.log \
	  $(TSAN_BUILD) $(TSAN_BUILD).configure.log
