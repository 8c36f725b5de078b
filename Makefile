# Thin wrappers around CMake. Every target installs its Debian packages first (quietly, only
# when missing), so `make test` works on a fresh Debian 12 machine.
JOBS      ?= $(shell nproc)
BUILD     ?= build
CMAKE_GEN := -G Ninja
LAUNCHER  := $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache,)

.PHONY: all deps build test test-asan run bench fuzz clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release $(LAUNCHER) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The tokenizer oracle (Hugging Face tokenizers from npm) is optional: without it those two
# tests skip, and the install script never fails the build.
test: build
	@scripts/install-tokenizer-oracle.sh $(CURDIR)/build/oracle
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	@cmake -S . -B build-asan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV41_SANITIZE=ON $(LAUNCHER) >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# The main job. Until the forward pass lands this prints the cost table of the real
# DeepSeek-V4.1-Flash config (no weights needed).
run: build
	@$(BUILD)/dsv41 cost --config data/configs/deepseek-v4.1-flash.json

bench: build
	@$(BUILD)/dsv41_bench

fuzz:
	@scripts/install-deps.sh --fuzz
	@cmake -S . -B build-fuzz $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DDSV41_FUZZ=ON $(LAUNCHER) >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@scripts/run-fuzzers.sh build-fuzz

clean:
	rm -rf build build-asan build-fuzz
