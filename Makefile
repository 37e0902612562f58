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

# The demo: a ~1.3M-parameter byte-level GPT trained on text every Debian system has; writes
# runs/demo/{metrics.jsonl,summary.json,loss.png}.
run: build
	scripts/make-demo-corpus.sh data/demo_corpus.txt
	$(BUILD)/bin/sluice env
	$(BUILD)/bin/sluice config check configs/demo_gpt.yaml
	$(BUILD)/bin/sluice train --config configs/demo_gpt.yaml --run-dir runs/demo
	gnuplot -e "set terminal pngcairo size 960,540; set output 'runs/demo/loss.png'; set title 'Sluice demo: byte-level GPT on Debian text'; set xlabel 'optimizer step'; set ylabel 'loss (nats per byte)'; set grid; set arrow from graph 0, first 2 to graph 1, first 2 nohead dashtype 2; plot '< sed -n \"s/^{.step.:\\([0-9]*\\),.loss.:\\([-+0-9.e]*\\),.*/\\1 \\2/p\" runs/demo/metrics.jsonl' with lines title 'train', '< sed -n \"s/^{.step.:\\([0-9]*\\),.*.val_loss.:\\([-+0-9.e]*\\).*/\\1 \\2/p\" runs/demo/metrics.jsonl' with linespoints pointtype 7 title 'validation'"
	@echo "loss curve: runs/demo/loss.png"

test: build
	cd $(BUILD) && ctest -LE slow --output-on-failure -j $(JOBS) --timeout 600

test-slow: build
	cd $(BUILD) && ctest -L slow --output-on-failure -j $(JOBS)

format:
	@git ls-files '*.h' '*.cpp' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
