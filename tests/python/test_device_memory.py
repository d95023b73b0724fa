"""Device memory through the plugin API (docs/gpu_memory.md): on a GPU runtime device, ORT
allocates MLX partitions' tensors from the EP's allocator, and a state kept on the device with
IOBinding (a KV cache, say) crosses runs without any host copy. The runner's byte counters (in the
EP's report) prove it: every run's input is read in place and every output handed to ORT in place.

On the CPU device the EP registers no device memory (ORT's host memory is wrapped directly); there
the same check runs in a child process with ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=force, which turns the
device-memory path on over MLX's CPU allocator (the registration, allocator, data transfer,
in-place inputs and adopted outputs are the same code), and a test checks the counters of the
default zero-copy input path."""
import gc
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep

SHAPE = [2, 4, 16, 8]  # a (batch, heads, sequence, head_dim) state


def state_update_model():
    """state_out = state * 0.5 + x: one partition whose output is the next run's input."""
    half = helper.make_tensor("half", TensorProto.FLOAT, [1], [0.5])
    nodes = [helper.make_node("Mul", ["state", "half"], ["scaled"]),
             helper.make_node("Add", ["scaled", "x"], ["state_out"])]
    graph = helper.make_graph(
        nodes, "state_update",
        [helper.make_tensor_value_info("state", TensorProto.FLOAT, SHAPE),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("state_out", TensorProto.FLOAT, SHAPE)], [half])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def off_page_start(a):
    """`a`'s values in a buffer that does not start a page: the CPU device wraps such a buffer
    (runtime/device.cc, WrapHostMemory) and copies one that starts a page, so a test counting
    wrapped bytes must not leave that to where the allocator happens to put an array (1 in 256
    4 KiB numpy buffers start a page; CI drew one)."""
    room = np.empty(a.size + 64, a.dtype)
    skip = 16 if room.ctypes.data % 4096 < 64 else 0
    out = room[skip:skip + a.size].reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 4096 >= 8 and out.flags.c_contiguous
    return out


def ep_device():
    mlx_ep.register_execution_provider_library()
    (device,) = mlx_ep.get_ep_devices()
    return device


def on_gpu():
    return ep_device().ep_metadata.get("mlx_device") == "gpu"


def session_with_report(model, path):
    os.environ["ONNXRUNTIME_EP_MLX_REPORT"] = path
    try:
        so = ort.SessionOptions()
        mlx_ep.append_to_session_options(so)
        return ort.InferenceSession(model.SerializeToString(), so)
    finally:
        del os.environ["ONNXRUNTIME_EP_MLX_REPORT"]


def read_report(path):
    gc.collect()
    with open(path) as f:
        return json.load(f)["runtime"]


def partition_counters(path):
    (part,) = read_report(path)["partitions"]
    return part


def to_numpy(value):
    """A device OrtValue's contents, through the EP's data transfer."""
    host = ort.OrtValue.ortvalue_from_shape_and_type(value.shape(), np.float32)
    ort.copy_tensors([value], [host])
    return host.numpy()


def check_state_stays_on_device():
    """Six runs of state_update_model with the state and inputs in the EP's memory (IOBinding),
    each run's output the next one's state: no byte copied by the host."""
    runs = 6
    rng = np.random.default_rng(0)
    state0 = rng.standard_normal(SHAPE).astype(np.float32)
    xs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(runs)]
    memory = ep_device().memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    assert memory is not None, "the EP device registers no device memory info"
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        sess = session_with_report(state_update_model(), report)
        # The state and the per-run input in the EP's memory, written once from the host.
        state = ort.OrtValue.ortvalue_from_shape_and_type(SHAPE, np.float32, memory_info=memory)
        ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(state0)], [state])
        x_dev = [ort.OrtValue.ortvalue_from_shape_and_type(SHAPE, np.float32, memory_info=memory)
                 for _ in xs]
        ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(x) for x in xs], x_dev)
        expected = state0
        for x, xd in zip(xs, x_dev):
            io = sess.io_binding()
            io.bind_ortvalue_input("state", state)
            io.bind_ortvalue_input("x", xd)
            io.bind_output("state_out", *mlx_ep.binding_device())  # ORT allocates it from the EP's allocator
            sess.run_with_iobinding(io)
            state = io.get_outputs()[0]
            expected = expected * np.float32(0.5) + x
        np.testing.assert_allclose(to_numpy(state), expected, rtol=1e-5, atol=1e-6)
        del sess, io, state, x_dev
        runtime = read_report(report)
    (part,) = runtime["partitions"]
    nbytes = int(np.prod(SHAPE)) * 4
    # A fresh process (the caller's): its data transfer copied the initial state and the inputs
    # to the device once and the final state back, nothing per run.
    assert runtime["device_memory"] is True, runtime
    assert runtime["transfer_bytes"] == {"host_to_device": (runs + 1) * nbytes, "device_to_host": nbytes,
                                         "device_to_device": 0}, runtime
    assert part["runs"] == runs, part
    if os.environ.get("ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS", "copy") in ("1", "copy"):
        # On a CUDA GPU (device writes) every byte copied in from the host was copied by the
        # driver (the default, =copy) or handed to it to move (=1); elsewhere no CUDA driver is
        # loaded and none was (the values above: the host's memcpy).
        moved_early = runtime["transfer_bytes"]["host_to_device"] if runtime["device_writes"] else 0
        assert runtime["prefetched_bytes"] == moved_early, runtime
    assert part["bytes_in_host_copied"] == 0 and part["bytes_out_host_copied"] == 0, part
    assert part["bytes_in_wrapped"] == 2 * nbytes * runs, part
    # On a CUDA GPU a kernel copies each output into ORT's buffer (device writes: adopting MLX's
    # buffer would move it out of the CUDA pool); elsewhere ORT's output is MLX's buffer itself.
    moved = "bytes_out_device_copied" if runtime["device_writes"] else "bytes_out_adopted"
    idle = "bytes_out_adopted" if runtime["device_writes"] else "bytes_out_device_copied"
    assert part[moved] == nbytes * runs and part[idle] == 0, part


@pytest.mark.skipif(not on_gpu(), reason="the EP registers device memory on a GPU runtime device only; "
                    "this MLX runs on the CPU (ORT's host memory is wrapped there without a copy)")
def test_state_stays_on_device_across_runs():
    check_in_child_process(ONNXRUNTIME_EP_MLX_DEVICE_MEMORY="1")


def test_state_stays_in_ep_memory_forced_on_cpu():
    if on_gpu():
        pytest.skip("on a GPU the device-memory path is tested without forcing (the test above)")
    check_in_child_process(ONNXRUNTIME_EP_MLX_DEVICE_MEMORY="force")


def check_in_child_process(function="check_state_stays_on_device", **env):
    """`function` of this module in a fresh process (the device-memory switch is read once per
    process; check_state_stays_on_device's transfer counters are process-wide)."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys; sys.path[:0] = [{os.path.join(here, '..', '..', 'python')!r}, {here!r}]; "
            f"import test_device_memory as t; t.{function}()")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, **env}, timeout=120)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{function} did not finish in 120 s (a hang): {e.stderr}")
    assert proc.returncode == 0, proc.stderr


def check_split_decoder_in_device_memory():
    """A genai-layout decoder split around every SiLU's Sigmoid (the child declines Sigmoid, so ORT's
    CPU EP runs it between MLX partitions), greedy through past/present bound in the EP's memory:
    the tokens of ORT's CPU EP. With ORT's memory patterns (on by default) the partitions' inputs
    from ORT are tensors inside one allocation of the EP's memory."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(here, "..", "models", "llm")]
    import build_llm_models as llm
    from llm_client import Decoder, cpu_session, mlx_session

    dirs, cfg = llm.build(os.path.join(here, "..", "..", "build", "models", "llm"), "tiny", names=["genai_fp32_shared"])
    path = os.path.join(dirs["genai_fp32_shared"], "model.onnx")
    got = Decoder(mlx_session(path), cfg, np.float32, True).greedy([5, 17, 99, 3], 6)[1]
    want = Decoder(cpu_session(path), cfg, np.float32, True).greedy([5, 17, 99, 3], 6)[1]
    assert got == want, (got, want)


def test_split_decoder_with_memory_patterns_in_ep_memory():
    """Tensors ORT places inside one allocation of the EP's memory (its memory patterns) are read
    in place: the EP used to know only the allocations' start pointers and failed such a run with
    "an input is in device memory that the EP did not allocate" (found on the H200)."""
    check_in_child_process(function="check_split_decoder_in_device_memory", ONNXRUNTIME_EP_MLX_DECLINE_OPS="Sigmoid",
                           ONNXRUNTIME_EP_MLX_DEVICE_MEMORY="1" if on_gpu() else "force")

@pytest.mark.parametrize("function", ["check_state_stays_on_device", "check_split_decoder_in_device_memory"])
def test_asynchronous_run_evaluation(function):
    """ONNXRUNTIME_EP_MLX_DEVICE_WRITES=async (runtime/device_writes.h, AsyncRunEvaluation): a run's
    graph only started, the host waiting once after the device writes (on a CUDA GPU, which MLX
    orders after the graph on its stream) or before the host reads the outputs (elsewhere): the
    same states and tokens, and on MLX's CPU device still no byte copied by the host."""
    env = {"ONNXRUNTIME_EP_MLX_DEVICE_WRITES": "async",
           "ONNXRUNTIME_EP_MLX_DEVICE_MEMORY": "1" if on_gpu() else "force"}
    if function == "check_split_decoder_in_device_memory":
        env["ONNXRUNTIME_EP_MLX_DECLINE_OPS"] = "Sigmoid"
    check_in_child_process(function=function, **env)


@pytest.mark.parametrize("mode", ["1", "copy"])
@pytest.mark.parametrize("function", ["check_state_stays_on_device", "check_split_decoder_in_device_memory"])
def test_host_inputs_prefetched(function, mode):
    """ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS=1 (runtime/cuda_prefetch.h): what ORT copies from the host
    into the EP's memory handed at once to the CUDA driver to move to the GPU: the same states and
    tokens, and on a CUDA GPU every such byte counted as prefetched (check_state_stays_on_device);
    on MLX's CPU device (device memory forced) no driver is loaded and nothing is asked. =copy (the
    default since the thirtieth session; the other tests of this file run it unset): the copy
    itself made by the driver (cuMemcpyHtoD), the same values and counts."""
    env = {"ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS": mode, "ONNXRUNTIME_EP_MLX_DEVICE_MEMORY": "1" if on_gpu() else "force"}
    if function == "check_split_decoder_in_device_memory":
        env["ONNXRUNTIME_EP_MLX_DECLINE_OPS"] = "Sigmoid"
    check_in_child_process(function=function, **env)


def check_empty_operand_runs():
    """Einsum ij,jk->ik of a (3, 0) and a (0, 2) operand (zeros (3, 2)), then the same over (3, 4)
    and (4, 2), as a fresh process's first runs. A graph with an empty tensor runs on MLX's CPU
    device (PartitionRunner::ChooseDevice) while its non-empty output is written into ORT's
    buffer on the GPU: evaluated asynchronously, that hung on the H200 (docs/reliability.md, "A
    GPU waiting for the CPU")."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, None)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Einsum", ["x", "w"], ["y"], equation="ij,jk->ik")],
                              "einsum", [x, w], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=8)
    from harness import assert_ran_on_mlx, mlx_session, profiled_nodes

    sess = mlx_session(model, profile=True)
    rng = np.random.default_rng(3)
    for k in (0, 4, 0):
        feeds = {"x": rng.standard_normal((3, k)).astype(np.float32),
                 "w": rng.standard_normal((k, 2)).astype(np.float32)}
        (got,) = sess.run(None, feeds)
        np.testing.assert_allclose(got, feeds["x"] @ feeds["w"], rtol=1e-5, atol=1e-6)
    assert_ran_on_mlx(profiled_nodes(sess), "einsum over empty and non-empty operands")


@pytest.mark.parametrize("writes", ["default", "1"])
def test_empty_operand_with_device_memory(writes):
    """check_empty_operand_runs in a fresh process, the device writes' one wait a run (the default
    on a CUDA GPU) and two waits (=1); on MLX's CPU device with device memory forced and the one
    wait asked for (=async), the same code path short of the GPU."""
    env = {"ONNXRUNTIME_EP_MLX_DEVICE_MEMORY": "1" if on_gpu() else "force"}
    if writes == "1":
        env["ONNXRUNTIME_EP_MLX_DEVICE_WRITES"] = "1"
    elif not on_gpu():
        env["ONNXRUNTIME_EP_MLX_DEVICE_WRITES"] = "async"
    check_in_child_process(function="check_empty_operand_runs", **env)


def test_host_inputs_are_wrapped_on_the_cpu_device():
    if on_gpu():
        pytest.skip("the CPU device's path: host memory wrapped without a copy")
    rng = np.random.default_rng(1)
    feeds = {"state": off_page_start(rng.standard_normal(SHAPE).astype(np.float32)),
             "x": off_page_start(rng.standard_normal(SHAPE).astype(np.float32))}
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        sess = session_with_report(state_update_model(), report)
        (got,) = sess.run(None, feeds)
        np.testing.assert_allclose(got, feeds["state"] * np.float32(0.5) + feeds["x"], rtol=1e-6)
        del sess
        part = partition_counters(report)
    nbytes = int(np.prod(SHAPE)) * 4
    assert part["bytes_in_host_copied"] == 0 and part["bytes_in_wrapped"] == 2 * nbytes, part
    assert part["bytes_out_host_copied"] == nbytes and part["bytes_out_adopted"] == 0, part


def test_host_input_starting_a_page_is_copied_not_wrapped():
    """An input buffer that starts a page is copied: the EP's zero-copy view makes MLX read the
    word before the data (runtime/memory.cc, WrapHostMemory), which may lie on an unmapped page.
    The page comes from mmap, so the word before it is not this process's memory."""
    if on_gpu():
        pytest.skip("the CPU device's path: host memory wrapped without a copy")
    import mmap

    nbytes = int(np.prod(SHAPE)) * 4
    page = mmap.mmap(-1, max(nbytes, mmap.PAGESIZE))
    state = np.frombuffer(page, np.float32, int(np.prod(SHAPE))).reshape(SHAPE)
    assert state.ctypes.data % mmap.PAGESIZE == 0
    rng = np.random.default_rng(2)
    state[...] = rng.standard_normal(SHAPE).astype(np.float32)
    x = off_page_start(rng.standard_normal(SHAPE).astype(np.float32))
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        sess = session_with_report(state_update_model(), report)
        io = sess.io_binding()
        io.bind_ortvalue_input("state", ort.OrtValue.ortvalue_from_numpy(state))  # ORT reads `page` itself
        io.bind_cpu_input("x", x)
        io.bind_output("state_out")
        sess.run_with_iobinding(io)
        got = io.copy_outputs_to_cpu()[0]
        np.testing.assert_allclose(got, state * np.float32(0.5) + x, rtol=1e-6)
        del sess, io
        part = partition_counters(report)
    assert part["bytes_in_host_copied"] == nbytes and part["bytes_in_wrapped"] == nbytes, part
