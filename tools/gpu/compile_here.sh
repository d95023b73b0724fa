#!/usr/bin/env bash
# Run HERE (no GPU needed): builds the EP library against MLX's CUDA wheel (mlx-cuda-13, the one
# the H200 runs) with the CUDA toolkit of this machine, so that code for GPUs is known to compile
# before a device lease spends ~2.5 minutes finding out. Links the library only: the test hosts
# would need the CUDA driver (libcuda.so), which only the GPU machine has.
#
#   bash tools/gpu/compile_here.sh          # -> build-cuda-check/libonnxruntime_ep_mlx.so
#
# Needs scripts/setup.sh's ORT headers (.deps/prefix) and cuDNN's headers (found under the CUDA
# toolkit, /usr/local/include or CUDNN_DIR). Idempotent: the wheel is unpacked once into
# .gpu/cuda-check and the build is incremental.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
bash tools/gpu/prepare_wheels.sh >/dev/null
MLX_DIR="$ROOT/.gpu/cuda-check"
if [ ! -f "$MLX_DIR/mlx/lib/libmlx.so" ]; then
  T=$(mktemp -d)
  cat .gpu/p*/part_* | tar -x -C "$T"
  python3 -m zipfile -e "$T"/mlx_cuda_13-*.whl "$MLX_DIR"
  rm -rf "$T"
fi
CUDA="${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}"
CUDNN_H=$(find "${CUDNN_DIR:-$CUDA}" /usr/local/include -name cudnn.h 2>/dev/null | head -1)
[ -n "$CUDNN_H" ] || { echo "compile_here: no cudnn.h (set CUDNN_DIR)" >&2; exit 1; }
CUDNN_LIB=$(dirname "$(find "${CUDNN_DIR:-$CUDA}" /usr/local/lib* -name 'libcudnn.so*' 2>/dev/null | head -1)")
cmake -S . -B build-cuda-check -DMLX_ROOT="$MLX_DIR/mlx" -DMLX_EP_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
  -DCUDNN_INCLUDE_PATH="$(dirname "$CUDNN_H")" -DCUDNN_LIBRARY_PATH="$CUDNN_LIB" >/dev/null
cmake --build build-cuda-check -j"$(nproc)" --target onnxruntime_ep_mlx
echo "compile_here: built $ROOT/build-cuda-check/libonnxruntime_ep_mlx.so against $(ls "$MLX_DIR" | grep dist-info)"
