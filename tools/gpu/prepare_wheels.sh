#!/usr/bin/env bash
# Run HERE (the machine with PyPI access): downloads the CUDA MLX wheel and the ONNX Runtime
# wheel for the GPU machine's Python (3.12), and splits them into two parts under 64 MiB each,
# because the device tool carries at most 64 MiB per call. See tools/gpu/README.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source scripts/versions.env
GPU="$ROOT/.gpu"
if [ -f "$GPU/.pins" ] && [ "$(cat "$GPU/.pins")" = "$MLX_CUDA_VERSION $ONNXRUNTIME_VERSION" ]; then
  echo "[gpu] wheels already prepared"; exit 0
fi
rm -rf "$GPU" && mkdir -p "$GPU/wheels" "$GPU/p1" "$GPU/p2"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$GPU/wheels" "mlx-cuda-13==$MLX_CUDA_VERSION" "onnxruntime==$ONNXRUNTIME_VERSION"
tar -cf "$GPU/bundle.tar" -C "$GPU/wheels" .
size=$(stat -c %s "$GPU/bundle.tar")
split -b $(( size / 2 + 1 )) "$GPU/bundle.tar" "$GPU/part_"
mv "$GPU/part_aa" "$GPU/p1/" && mv "$GPU/part_ab" "$GPU/p2/"
rm -rf "$GPU/wheels" "$GPU/bundle.tar"
echo "$MLX_CUDA_VERSION $ONNXRUNTIME_VERSION" > "$GPU/.pins"
ls -la "$GPU"/p1 "$GPU"/p2
