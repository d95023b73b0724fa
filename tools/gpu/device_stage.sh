#!/usr/bin/env bash
# Run on the GPU machine for each wheel part but the last (one call per part, back to back, while
# the machine stays warm): parks the carried part outside the work tree so that the last call can
# reassemble the bundle. See tools/gpu/README.md.
set -euo pipefail
mkdir -p /tmp/mlx-ep-gpu
cp .gpu/p*/part_* /tmp/mlx-ep-gpu/
ls -la /tmp/mlx-ep-gpu
