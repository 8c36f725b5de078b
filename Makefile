# Thin wrappers around CMake. Every target installs its Debian packages first (quietly, only
# when missing), so `make test` works on a fresh Debian 12 machine.
JOBS      ?= $(shell nproc)
BUILD     ?= build
CMAKE_GEN := -G Ninja
# Decided when a recipe runs (`=`, not `:=`), i.e. after `deps` has installed ccache: deciding it
# when make reads this file made a fresh machine's `make run` configure without ccache and the
# following `make test` reconfigure with it, which rebuilt everything.
LAUNCHER   = $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache,)
CONFIGURE  = cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release $(LAUNCHER) >/dev/null

.PHONY: all deps configure build test test-asan test-tsan run run-random serve bench fuzz fuzz-build clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@$(CONFIGURE)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The tokenizer oracle (Hugging Face tokenizers from npm) is optional: without it those two
# tests skip, and the install script never fails the build.
test: build
	@scripts/install-tokenizer-oracle.sh $(CURDIR)/build/oracle
	@scripts/install-server-client.sh $(CURDIR)/$(BUILD)/server-client
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	@cmake -S . -B build-asan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV41_SANITIZE=ON $(LAUNCHER) >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@scripts/install-server-client.sh $(CURDIR)/build-asan/server-client
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer over the code that shares state between threads: the engine and scheduler, the
# CPU backend's row groups and gemm_many jobs, the loopback ranks of expert parallelism, the
# SSD store's writer thread, the server's engine loop and HTTP threads (C++ tests, and the real
# server driven by the SDK and curl tests). build-tsan/; docs/SERVER.md.
TSAN_TESTS := Engine\.|AttentionIndexDecode\.|DeviceExpertParallel\.|CliGenerate\.Ranks|CliRanks\.|RankBatchBench\.|TimedCommunicator\.|CpuBackendRowGroups\.|GemmMany\.|Loopback\.|ExpertParallel\.|ExpertParallelEngine\.|EngineLoop\.|Scheduler\.|ServerImage\.|SsdStore\.|DramPool\.|ServeTurn\.|ThreadPool\.|TwoEngines\.|ChoiceStream\.|StopMatcher\.|OpenAiRequest\.|Metrics\.|server_
test-tsan: deps
	@cmake -S . -B build-tsan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV41_TSAN=ON $(LAUNCHER) >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target dsv41 dsv41_tests
	@scripts/install-server-client.sh $(CURDIR)/build-tsan/server-client
	@cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

# The main job: generate text with the embedded default model (models/dsv41-mini) and print the
# speed and the packed-cache memory report. `run-random` does the same with a tiny random-weight
# model, written once by init-random into models/tiny-random/.random/ (gitignored).
RANDOM_MODEL := models/tiny-random/.random
# Builds only what it runs (the dsv41 executable and its library), not the tests.
run: configure
	@cmake --build $(BUILD) -j $(JOBS) --target dsv41
	@echo "=== dsv41-mini, the embedded default model (18M parameters, trained on Debian documentation"
	@echo "=== and source code; models/dsv41-mini/MODEL_CARD.md). Sampled: temperature 0.8, top-p 0.9, seed 1."
	@$(BUILD)/dsv41 run -m models/dsv41-mini -p "Python's asyncio module" -n 120 --temp 0.8 --top-p 0.9 --seed 1

# The tiny random-weight model (any shape can be made with `dsv41 init-random`).
run-random: configure
	@cmake --build $(BUILD) -j $(JOBS) --target dsv41
	@test -f $(RANDOM_MODEL)/model.safetensors.index.json || \
	  $(BUILD)/dsv41 init-random --config models/tiny-random/config.json --out $(RANDOM_MODEL) --force
	@echo "=== RANDOM WEIGHTS: $(RANDOM_MODEL) (seed 0) -- the output text is meaningless by design ==="
	@$(BUILD)/dsv41 run -m $(RANDOM_MODEL) -p "The small model reads a line of text and" -n 32

# The OpenAI-compatible server on the default model (docs/SERVER.md); extra flags in SERVE_ARGS,
# e.g. make serve SERVE_ARGS="--port 9000 --api-key secret".
serve: configure
	@cmake --build $(BUILD) -j $(JOBS) --target dsv41
	@$(BUILD)/dsv41 serve -m models/dsv41-mini $(SERVE_ARGS)

bench: configure
	@cmake --build $(BUILD) -j $(JOBS) --target dsv41_bench
	@$(BUILD)/dsv41_bench

# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/ and runs each for
# FUZZ_SECONDS (default 60); `fuzz-build` only compiles them (what CI does). docs/FUZZING.md.
FUZZ_TARGETS := $(basename $(notdir $(wildcard fuzz/*_fuzz.cpp)))
fuzz-build:
	@scripts/install-deps.sh --fuzz
	@cmake -S . -B build-fuzz $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DDSV41_FUZZ=ON $(LAUNCHER) >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)

fuzz: fuzz-build
	@scripts/run-fuzzers.sh build-fuzz

clean:
	rm -rf build build-asan build-tsan build-fuzz
