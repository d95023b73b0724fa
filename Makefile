# Entry points. `make demo` and `make test` do all set-up first, on a fresh machine too.
SHELL := /bin/bash
ROOT := $(abspath .)
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
BUILD := $(ROOT)/build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Sanitizer + fuzzing build (clang, ASan + UBSan + libFuzzer coverage on the EP's own code).
FUZZ_BUILD := $(ROOT)/build-fuzz
FUZZ_SECONDS ?= 600

.PHONY: setup build test test-cpp test-python conformance demo bench format clean fuzz-build fuzz sanitize cuda-check

setup:
	@bash scripts/setup.sh

build: setup
	@MLX_DIR=$$($(PY) -c "import mlx, os; print(list(mlx.__path__)[0])"); \
	cmake -S . -B $(BUILD) -DMLX_ROOT=$$MLX_DIR -DPython_EXECUTABLE=$(PY) -DCMAKE_BUILD_TYPE=Release >/dev/null && \
	cmake --build $(BUILD) -j$(JOBS)

# All tests: C++ (ctest), Python parity/bad-input tests, strict ONNX conformance.
test: build
	@$(MAKE) --no-print-directory test-cpp test-python

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure

test-python: build
	$(PY) -m pytest -q tests/python

conformance: build
	$(PY) tests/conformance/run_conformance.py

demo: build
	$(PY) examples/demo.py

bench: build
	$(PY) bench/bench_models.py

format:
	clang-format -i src/*/*.cc src/*/*.h src/blas/*.c tests/cpp/*.cc tests/cpp/*.h tools/list_ops/*.cc

# The EP, its C++ tests and the libFuzzer target under ASan + UBSan, in build-fuzz/ (the normal
# build is untouched; MLX and ORT stay uninstrumented). docs/reliability.md has the figures.
fuzz-build: setup
	@MLX_DIR=$$($(PY) -c "import mlx, os; print(list(mlx.__path__)[0])"); \
	cmake -S . -B $(FUZZ_BUILD) -DMLX_ROOT=$$MLX_DIR -DPython_EXECUTABLE=$(PY) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O1 -DNDEBUG' \
	  -DCMAKE_C_FLAGS_RELWITHDEBINFO='-O1 -DNDEBUG' 	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DMLX_EP_SANITIZE=address,undefined -DMLX_EP_FUZZ=ON >/dev/null && \
	cmake --build $(FUZZ_BUILD) -j$(JOBS)

# libFuzzer over model bytes for FUZZ_SECONDS (default 600); crashes land in build-fuzz/fuzz-artifacts/.
fuzz: fuzz-build
	bash tools/fuzz/libfuzzer/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# ctest (LeakSanitizer on) and a Python subset (LD_PRELOADed ASan runtime) against the sanitized EP;
# VALGRIND=1 adds valgrind memcheck of the host test from the normal build.
sanitize: fuzz-build build
	bash tools/fuzz/sanitize.sh $(FUZZ_BUILD)

# The EP library built against MLX's CUDA wheel with this machine's CUDA toolkit, no GPU needed
# (build-cuda-check/; tools/gpu/compile_here.sh): GPU code compiles before a device lease.
cuda-check: setup
	bash tools/gpu/compile_here.sh

clean:
	rm -rf $(BUILD)
