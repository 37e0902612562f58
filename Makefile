# Two commands do all set-up on a fresh Debian 12 machine:
#   make run    install deps, build, run the demo
#   make test   install deps, build, run every test this machine can run (label `slow` opt-in:
#               make test-slow)
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build run test test-slow clean format

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).configure.log \
	  || (cat $(BUILD).configure.log; exit 1)
	@grep -E 'CUDA backends|Warning' $(BUILD).configure.log || true

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/bin/sluice env
	$(BUILD)/bin/sluice config check configs/default.yaml

test: build
	cd $(BUILD) && ctest -LE slow --output-on-failure -j $(JOBS) --timeout 600

test-slow: build
	cd $(BUILD) && ctest -L slow --output-on-failure -j $(JOBS)

format:
	@git ls-files '*.h' '*.cpp' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
