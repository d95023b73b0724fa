"""Whole models as torch's exporters write them (tests/models/torch/, made by
tools/gpu/export_torch_models.py from transformers' BERT, GPT-2 and Llama, torchvision's
MobileNetV3, and YOLO- and CRNN-shaped modules; TorchScript and dynamo exporters, symbolic
batch/sequence dims). Each must run as one MLX partition with no node left on CPU, under ORT's
default graph optimizations (what a user gets), and match ORT's CPU EP."""
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from harness import assert_close, run_mlx_with_report

MODELS = Path(__file__).resolve().parents[1] / "models" / "torch"
EP = "MLXExecutionProvider"


def text_feeds(batch, seq, seed):
    """Token ids and an attention mask whose second row is padded (the mask path is exercised)."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq - 3:] = 0
    return {"input_ids": rng.integers(0, 96, (batch, seq)).astype(np.int64), "attention_mask": mask}


def image_feeds(shape, seed):
    return {"image": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


# model file stem -> feeds for two runs of different shapes (where the export has symbolic dims).
CASES = {
    "bert_torchscript": [text_feeds(2, 9, 0), text_feeds(3, 16, 1)],
    "bert_dynamo": [text_feeds(2, 9, 0), text_feeds(3, 16, 1)],
    "gpt2_torchscript": [text_feeds(2, 9, 0), text_feeds(3, 16, 1)],
    "gpt2_dynamo": [text_feeds(2, 9, 0), text_feeds(3, 16, 1)],
    "llama_torchscript": [text_feeds(2, 9, 0), text_feeds(3, 16, 1)],
    "llama_dynamo": [text_feeds(2, 9, 0), text_feeds(3, 16, 1)],
    "mobilenetv3_torchscript": [image_feeds((2, 3, 64, 64), 0), image_feeds((1, 3, 64, 64), 1)],
    "mobilenetv3_dynamo": [image_feeds((2, 3, 64, 64), 0), image_feeds((1, 3, 64, 64), 1)],
    "yolo_torchscript": [image_feeds((1, 3, 64, 64), 0), image_feeds((2, 3, 96, 64), 1)],
    "yolo_dynamo": [image_feeds((1, 3, 64, 64), 0), image_feeds((2, 3, 64, 64), 1)],
    "crnn_torchscript": [image_feeds((2, 1, 16, 40), 0), image_feeds((1, 1, 16, 64), 1)],
    "crnn_dynamo": [image_feeds((2, 1, 16, 40), 0), image_feeds((3, 1, 16, 40), 1)],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_exported_model_is_one_mlx_partition(name):
    path = MODELS / f"{name}.onnx"
    feeds_list = CASES[name]
    outs, report, providers = run_mlx_with_report(str(path), feeds_list)
    assert_one_mlx_partition(report, providers)
    for feeds, got in zip(feeds_list, outs):
        ref = run_cpu_session(path, feeds)
        for g, r in zip(got, ref):
            # fp32 through a few layers: ORT and MLX sum in different orders, so compare at
            # the fp32 tolerance relative to the output's scale.
            assert_close(g, r, rtol=1e-5, atol=1e-5 * float(np.abs(r).max()), what=name)


def assert_one_mlx_partition(report, providers):
    (graph,) = report["graphs"]
    assert graph["declined"] == [], [(d["op_type"], d["reason"]) for d in graph["declined"]]
    assert len(graph["partitions"]) == 1, graph["boundaries"]
    assert providers == [EP], providers  # the one fused node; nothing ran on CPU


def run_cpu_session(path, feeds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


FLOAT16_CASES = ["bert_torchscript", "bert_dynamo", "gpt2_dynamo", "llama_torchscript"]


@pytest.mark.parametrize("name", FLOAT16_CASES)
def test_float16_conversion_is_one_mlx_partition(name, tmp_path):
    """The float16 form GPU users run (onnxruntime.transformers.float16, keep_io_types): one
    partition too. float16 Softmax used to be declined, which split a float16 BERT-base into 25
    partitions on the H200 (ORT expands a declined Softmax and places the expansion apart)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    path = tmp_path / f"{name}_fp16.onnx"
    onnx.save(convert_float_to_float16(onnx.load(str(MODELS / f"{name}.onnx")), keep_io_types=True), str(path))
    feeds_list = CASES[name]
    outs, report, providers = run_mlx_with_report(str(path), feeds_list)
    assert_one_mlx_partition(report, providers)
    for feeds, got in zip(feeds_list, outs):
        truth = run_cpu_session(MODELS / f"{name}.onnx", feeds)  # the float32 model
        ort16 = run_cpu_session(path, feeds)
        for g, t, o in zip(got, truth, ort16):
            # A float16 model is off its float32 original by ~1e-3 of the output's scale after a
            # few layers, differently in every implementation (ORT's CPU EP, default
            # optimizations: 5e-4 to 1e-3 on the BERT/GPT-2 exports, 1.5e-2 on Llama; unfused:
            # 3e-4 to 1.6e-3; the EP: 7e-4 to 1.8e-3, measured 2026-12-01). So the float32 model
            # is the truth; the EP must be within 2e-3 of its scale, or no worse than ORT's own
            # float16 run. (On the dynamo exports the EP's error is 2-3x ORT's unfused one: not
            # yet explained; no single op shows it, MatMul's error equals ORT's.)
            scale = float(np.abs(t).max())
            err = float(np.abs(g.astype(np.float32) - t).max())
            ort_err = float(np.abs(o.astype(np.float32) - t).max())
            assert err <= max(1.5 * ort_err, 2e-3 * scale), (name, err / scale, ort_err / scale)
