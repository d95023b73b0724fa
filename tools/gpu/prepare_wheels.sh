#!/usr/bin/env bash
# Run HERE (the machine with PyPI access): downloads the CUDA MLX wheel and onnxruntime-gpu (ORT
# with its CUDA EP, the peer to measure against) for the GPU machine's Python (3.12), and splits
# them into parts of 55 MiB (.gpu/p00, .gpu/p01, ...), because the device tool carries at most
# 64 MiB per call. See tools/gpu/README.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source scripts/versions.env
GPU="$ROOT/.gpu"
# MLX's Python package (under 1 MB, for bench/mlx_launch_cost.py): a small extra, carried with
# the last part (.gpu/extra), outside the split bundle.
fetch_extra() {
  [ -n "$(ls "$GPU"/extra/mlx-*.whl 2>/dev/null)" ] && return 0
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_35_x86_64 -d "$GPU/extra" "mlx==$MLX_CUDA_VERSION"
}
if [ -f "$GPU/.pins" ] && [ "$(cat "$GPU/.pins")" = "$MLX_CUDA_VERSION $ONNXRUNTIME_GPU_VERSION" ]; then
  fetch_extra
  echo "[gpu] wheels already prepared"; exit 0
fi
rm -rf "$GPU" && mkdir -p "$GPU/wheels"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 \
  -d "$GPU/wheels" "mlx-cuda-13==$MLX_CUDA_VERSION" "onnxruntime-gpu==$ONNXRUNTIME_GPU_VERSION"
tar -cf "$GPU/bundle.tar" -C "$GPU/wheels" .
split -b 55M -d "$GPU/bundle.tar" "$GPU/part_"
for part in "$GPU"/part_*; do mkdir -p "$GPU/p${part##*_}" && mv "$part" "$GPU/p${part##*_}/"; done
rm -rf "$GPU/wheels" "$GPU/bundle.tar"
echo "$MLX_CUDA_VERSION $ONNXRUNTIME_GPU_VERSION" > "$GPU/.pins"
fetch_extra
ls -la "$GPU"/p*
