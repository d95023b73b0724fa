"""Reproducers found by the libFuzzer target over model bytes (tools/fuzz/libfuzzer, docs/
reliability.md section 3): each model in fuzz_regressions/ is replayed the way the fuzz target
runs it (tools/fuzz/libfuzzer/replay.py: graph optimizations off, feeds from the declared input
types and shapes, two runs), in a subprocess, on the MLX EP and on ORT's CPU EP alone. The EP
must not kill the process and must end the same way as ORT's CPU EP: both run or both fail.

The smoke test at the end runs the fuzz target itself over the reproducers and a few seeds when
the sanitizer build (build-fuzz/, `make fuzz-build`) exists."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPLAY = ROOT / "tools" / "fuzz" / "libfuzzer" / "replay.py"
REPRODUCERS = sorted((Path(__file__).parent / "fuzz_regressions").glob("*.onnx"))
FUZZ_TARGET = ROOT / "build-fuzz" / "tools" / "fuzz" / "libfuzzer" / "mlx_ep_fuzz_model"


def replay(model, *flags):
    p = subprocess.run([sys.executable, str(REPLAY), str(model), *flags], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"{model.name}{' '.join(flags)}: exit status {p.returncode}\n{p.stderr[-3000:]}"
    return p.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("model", REPRODUCERS, ids=[m.stem for m in REPRODUCERS])
def test_fuzz_reproducer_ends_as_on_ort_cpu(model):
    mlx = replay(model)
    cpu = replay(model, "--cpu")
    assert mlx.split()[0] == cpu.split()[0], f"MLX EP: {mlx}\nCPU EP: {cpu}"


@pytest.mark.skipif(not FUZZ_TARGET.exists(), reason="no sanitizer build (make fuzz-build)")
def test_fuzz_target_smoke():
    seeds = ROOT / "build-fuzz" / "corpus" / "seeds"
    inputs = [str(m) for m in REPRODUCERS] + sorted(str(s) for s in seeds.glob("test_[a-c]*.onnx"))[:100]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # the target links its own ASan
    env.update(ASAN_OPTIONS="allocator_may_return_null=1:max_allocation_size_mb=3072:detect_leaks=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    p = subprocess.run([str(FUZZ_TARGET), "-runs=0", *inputs], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-5000:]
