# Entry points. `make demo` and `make test` do all set-up first, on a fresh machine too.
SHELL := /bin/bash
ROOT := $(abspath .)
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
BUILD := $(ROOT)/build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: setup build test test-cpp test-python conformance demo bench format clean

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

clean:
	rm -rf $(BUILD)
