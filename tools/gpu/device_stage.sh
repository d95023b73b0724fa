#!/usr/bin/env bash
# Run on the GPU machine, call 1 of 2: keeps the first wheel part outside the work tree so the
# second call (carrying the second part) can reassemble the bundle. See tools/gpu/README.md.
set -euo pipefail
mkdir -p /tmp/mlx-ep-gpu
cp .gpu/p1/part_* /tmp/mlx-ep-gpu/
ls -la /tmp/mlx-ep-gpu
