# The two commands of the README: `make demo` and `make test`. Both install what is missing first.
PRESET ?= release
BUILD_DIR := $(if $(filter release,$(PRESET)),build,build-$(PRESET))
JOBS ?= $(shell nproc)
# CUDA tests (ctest label `gpu`) run only where a GPU answers.
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
CTEST_FILTER := $(if $(HAVE_GPU),,-LE gpu)

.PHONY: all bootstrap build test demo bench asan clean

all: build

bootstrap:
	@./scripts/bootstrap.sh

build: bootstrap
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_FILTER)

# The main job: the seed experiment, BF16 vs FP8 (see README.md).
demo: build
	@./scripts/demo.sh $(BUILD_DIR)

bench: build
	@for b in $(BUILD_DIR)/bench/bench_*; do [ -x "$$b" ] && "$$b"; done

asan:
	@$(MAKE) --no-print-directory test PRESET=asan

clean:
	rm -rf build build-debug build-asan
