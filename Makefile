# The two commands of the README, `make demo` and `make test`, and the sanitizer and fuzzing runs.
# Each installs what is missing first.
PRESET ?= release
BUILD_DIR := $(if $(filter release,$(PRESET)),build,build-$(PRESET))
JOBS ?= $(shell nproc)
# CUDA tests (ctest label `gpu`) run only where a GPU answers.
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
CTEST_FILTER := $(if $(HAVE_GPU),,-LE gpu)
# The clang tree with ASan + UBSan (preset `asan`): the sanitized CPU suite and the fuzz targets.
SAN_DIR := build-asan
SAN_ENV := UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: all bootstrap build test demo lab render bench asan asan-tree fuzz-smoke fuzz clean

all: build

bootstrap:
	@./scripts/bootstrap.sh

build: bootstrap
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The test suite, then each fuzz target briefly.
test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_FILTER)
	@$(MAKE) --no-print-directory fuzz-smoke

# The main job: the seed experiment, BF16 vs FP8 (see README.md).
demo: build
	@./scripts/demo.sh $(BUILD_DIR)

# The FP8 lab (lab 3.2.3) run for real, on the GPU when there is one: out/lab/index.html and CSV files.
lab: build
	@$(BUILD_DIR)/fp8kit lab --out out/lab

# The lab's page rendered to out/lab/index.png by headless Chromium (installed first: optional, not CI's).
render: lab
	@./scripts/bootstrap.sh --with-chromium
	@./scripts/render-html.sh out/lab/index.html out/lab/index.png 16000

bench: build
	@for b in $(BUILD_DIR)/bench/bench_*; do [ -x "$$b" ] && "$$b"; done

asan-tree: bootstrap
	@cmake --preset asan >/dev/null

# Each fuzz target for a few seconds (ctest label `fuzz`), from a seed corpus the tests write.
fuzz-smoke: asan-tree
	@cmake --build $(SAN_DIR) -j $(JOBS) --target fuzzers
	@cd $(SAN_DIR) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS) -L '^fuzz$$'

# The CPU test suite under ASan + UBSan (the fuzz smoke runs are `make test`'s).
asan: asan-tree
	@cmake --build $(SAN_DIR) -j $(JOBS)
	@cd $(SAN_DIR) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS) -LE 'gpu|fuzz'

# Each fuzz target for a million executions; stops at the first crash (saved in $(SAN_DIR)/fuzz-artifacts/).
fuzz: asan-tree
	@$(SAN_ENV) cmake --build $(SAN_DIR) -j $(JOBS) --target fuzz

clean:
	rm -rf build build-debug $(SAN_DIR)
