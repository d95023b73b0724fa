"""tools/gpu/kernel_times.py's reading of Nsight Compute's CSV, on text laid out as `ncu --csv`
prints it (its "raw" page: a header, a units row, a row a kernel; its "details" page: a row a
metric). The tool runs on the H200 only; these samples are written here, not captured there.
And the names tools/gpu/lease_env.sh gives a lease (its parity files and split tests)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "gpu"))
import kernel_times  # noqa: E402

RAW = '''==PROF== Connected to process 4242
==PROF== Profiling "gemv": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum"
"","","","","","","","","","","","nsecond"
"0","4242","python3","h200","void mlx::core::cu::gemv_single<__half, 256>(const __half *, int)","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","5,120"
"1","4242","python3","h200","mlx_ep_gqa_decode_step_float16_64","1","7","(128, 1, 1)","(32, 1, 1)","0","9.0","12,480"
"2","4242","python3","h200","void mlx::core::cu::gemv_single<__half, 128>(const __half *, int)","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","4,880"
'''

DETAILS = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python3","h","rms_norm_kernel<float>","1","7","(256, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","3.50"
"0","1","python3","h","rms_norm_kernel<float>","1","7","(256, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes.sum","byte","1024"
'''


def test_raw_page_rows_and_units():
    got = kernel_times.parse_ncu_csv(RAW)
    assert [ns for _, ns in got] == [5120.0, 12480.0, 4880.0]
    assert got[1][0] == "mlx_ep_gqa_decode_step_float16_64"


def test_details_page_takes_the_time_metric_only():
    assert kernel_times.parse_ncu_csv(DETAILS) == [("rms_norm_kernel<float>", 3500.0)]


def test_no_kernels_when_ncu_printed_no_table():
    assert kernel_times.parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM - no permission to access counters\n") == []


@pytest.mark.parametrize("name,want", [
    ("void mlx::core::cu::gemv_single<__half, 256>(const __half *, int)", "mlx::core::cu::gemv_single"),
    ("mlx_ep_gqa_decode_step_float16_64", "mlx_ep_gqa_decode_step_float16_64"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm<(int)1>>(Params)", "cutlass::Kernel2")])
def test_kernel_families(name, want):
    assert kernel_times.family(name) == want


def test_summary_per_run_by_family():
    s = kernel_times.summary(kernel_times.parse_ncu_csv(RAW), runs=1)
    assert s["kernels_per_run"] == 3 and s["gpu_us_per_run"] == pytest.approx(22.48)
    assert s["by_family"][0][0] == "mlx_ep_gqa_decode_step_float16_64"
    assert s["by_family"][1] == ["mlx::core::cu::gemv_single", 2.0, pytest.approx(10.0)]


# A torch.profiler Chrome trace as export_chrome_trace writes it (events of other categories
# beside the kernels; "ts"/"dur" in µs); written here, not captured on the H200.
TRACE = {"traceEvents": [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 100.0, "dur": 8.0},
    {"ph": "X", "cat": "kernel", "name": "void mlx::core::cu::gemv_single<__half, 256>(const __half *, int)",
     "ts": 120.0, "dur": 10.0},
    {"ph": "X", "cat": "kernel", "name": "mlx_ep_gqa_decode_step_float16_64", "ts": 125.0, "dur": 10.0},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 140.0, "dur": 2.0},
    {"ph": "X", "cat": "kernel", "name": "void mlx::core::cu::gemv_single<__half, 128>(const __half *, int)",
     "ts": 150.0, "dur": 5.0},
    {"ph": "i", "cat": "kernel", "name": "an instant, not a kernel", "ts": 151.0},
]}


def test_chrome_trace_kernels_only():
    got = kernel_times.parse_chrome_trace(TRACE)
    assert [(start, dur) for _, start, dur in got] == [(120.0, 10.0), (125.0, 10.0), (150.0, 5.0)]


def test_busy_time_is_the_union_of_intervals():
    kernels = kernel_times.parse_chrome_trace(TRACE)
    assert kernel_times.busy_us(kernels) == 20.0  # [120, 135) and [150, 155)
    assert kernel_times.busy_us([("a", 0.0, 10.0), ("b", 2.0, 3.0), ("c", 9.0, 4.0)]) == 13.0
    assert kernel_times.busy_us([]) == 0.0


def test_timeline_summary_per_run():
    kernels = kernel_times.parse_chrome_trace(TRACE)
    s = kernel_times.timeline_summary(kernels, 1, [0.5])
    assert s["kernels_per_run"] == 3 and s["gpu_us_per_run"] == 25.0
    assert s["busy_us_per_run"] == 20.0 and s["span_us_per_run"] == 35.0 and s["wall_ms_per_run"] == 0.5
    assert s["by_family"][0][0] == "mlx::core::cu::gemv_single" and s["by_family"][0][1:] == [2, 15.0]


# Two runs marked as kernel_times' timeline marks them: run 1's last launch ends at 30, its kernels
# run until 45 (write 12 µs after the launch, a norm 3 µs); run 2 has no launch call (left out).
TAILS_TRACE = {"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "kernel_times_run", "ts": 0.0, "dur": 50.0},
    {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "ts": 5.0, "dur": 3.0},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 25.0, "dur": 5.0},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventSynchronize", "ts": 31.0, "dur": 18.0},
    {"ph": "X", "cat": "kernel", "name": "mlx::core::cu::rms_norm_small<__half>", "ts": 20.0, "dur": 13.0},
    {"ph": "X", "cat": "kernel", "name": "mlx::core::cu::custom_kernel_mlx_ep_rows_into_float16_t", "ts": 33.0,
     "dur": 12.0},
    {"ph": "X", "cat": "user_annotation", "name": "kernel_times_run", "ts": 60.0, "dur": 10.0},
    {"ph": "X", "cat": "kernel", "name": "mlx::core::cu::gemv_single", "ts": 61.0, "dur": 2.0},
]}


def test_run_tails_wait_after_the_last_launch():
    tails = kernel_times.run_tails(TAILS_TRACE)
    assert len(tails) == 1
    assert tails[0]["wait_us"] == 20.0  # the run ends at 50, its last launch call at 30
    assert tails[0]["kernels_after_last_launch_us"] == {
        "mlx::core::cu::rms_norm_small": 3.0, "mlx::core::cu::custom_kernel_mlx_ep_rows_into_float16_t": 12.0}
    s = kernel_times.tails_summary(tails)
    assert s["wait_us_median"] == 20.0 and s["runs"] == 1
    assert s["after_last_launch"][0] == ["mlx::core::cu::custom_kernel_mlx_ep_rows_into_float16_t", 12.0]
    assert kernel_times.tails_summary([]) is None


# tools/gpu/kernel_census.py's reading of MLX's CUDA graph dumps (cudaGraphDebugDotPrint: a node a
# kernel with its mangled name in the label, edges "a" -> "b"); a sample written here.
DOT = '''digraph dot {
subgraph cluster_1 {
label="graph_1" graph[style="dashed"];
"graph_1_node_0"[style="solid" shape="record" label="{0 | KERNEL | _ZN3mlx4core2cu11gemv_singleIfEEvv}"];
"graph_1_node_1"[style="solid" shape="record" label="{1 | KERNEL | _ZN3mlx4core2cu9copy_g_ndIfEEvv}"];
"graph_1_node_2"[style="solid" shape="record" label="{2 | KERNEL | _ZN3mlx4core2cu11gemv_singleIfEEvv}"];
"graph_1_node_3"[style="solid" shape="record" label="{3 | MEMSET}"];
"graph_1_node_0" -> "graph_1_node_1";
"graph_1_node_1" -> "graph_1_node_2";
}
}
'''


def test_census_counts_kernels_and_node_kinds(tmp_path):
    import kernel_census

    f = tmp_path / "graph_1.dot"
    f.write_text(DOT)
    kernels, kinds = kernel_census.census([f])
    assert kinds == {"KERNEL": 3, "MEMSET": 1}
    assert sum(kernels.values()) == 3 and len(kernels) == 2


def test_copies_named_with_the_kernels_around_them(tmp_path):
    import kernel_census

    f = tmp_path / "graph_1.dot"
    f.write_text(DOT)
    (before, copy, after), n = kernel_census.neighbours([f]).most_common(1)[0]
    assert n == 1 and "copy_g_nd" in copy and "gemv_single" in before and "gemv_single" in after
    assert not kernel_census.neighbours([f], pattern="no such kernel")


def test_lease_names_files_that_exist():
    """tools/gpu/lease_env.sh's PARITY_ONLY (the parity files a lease runs, by name) and SPLIT_TESTS:
    a misspelt name would drop its file without a word (parity_files keeps the names it finds), so
    every name must be a parity file of device_session.sh and every split node id collectable."""
    import subprocess
    root = Path(__file__).resolve().parents[2]
    script = ('. tools/gpu/lease_env.sh && ROOT=$PWD && '
              'source <(sed -n "/^parity_files()/,/^}/p" tools/gpu/device_session.sh) && '
              'echo "$PARITY_ONLY" | wc -w && parity_files | wc -l && echo "$SPLIT_TESTS"')
    out = subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    named, found, split = int(out[0]), int(out[1]), out[2:]
    assert named == 0 or found == named, (named, found)
    for node in split:
        path, _, name = node.partition("::")
        assert (root / path).is_file(), node
        assert not name or f"def {name.split('[')[0]}(" in (root / path).read_text(), node
