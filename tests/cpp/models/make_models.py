"""Writes the small models the C++ host test runs."""
import os
import sys

import onnx
from onnx import TensorProto, helper


def save(graph, path, opset=17):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    f = TensorProto.FLOAT
    # y = relu((a + b) * a): every node can run on MLX.
    save(helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"]),
         helper.make_node("Mul", ["s", "a"], ["p"]),
         helper.make_node("Relu", ["p"], ["y"])],
        "add_mul_relu",
        [helper.make_tensor_value_info("a", f, [2, 3]), helper.make_tensor_value_info("b", f, [3])],
        [helper.make_tensor_value_info("y", f, [2, 3])]), os.path.join(out_dir, "add_mul_relu.onnx"))
    # y = Add(a, b) then an op MLX does not claim (Det), then Add: MLX, CPU, MLX.
    save(helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"]),
         helper.make_node("Det", ["s"], ["d"]),
         helper.make_node("Add", ["d", "c"], ["y"])],
        "mixed_fallback",
        [helper.make_tensor_value_info("a", f, [3, 3]), helper.make_tensor_value_info("b", f, [3, 3]),
         helper.make_tensor_value_info("c", f, [])],
        [helper.make_tensor_value_info("y", f, [])]), os.path.join(out_dir, "mixed_fallback.onnx"))
    # shape_churn.cc: y1 = Softmax(x W + b), x [a, 16]; y2 = Relu(2 * Gather(E, i)), E[r][c] = r - c,
    # i [k]. Both outputs' shapes follow a and k, so every (a, k) is a trace of its own.
    w = [((r * 7 + c * 3) % 11 - 5) / 8.0 for r in range(16) for c in range(16)]
    table = [float(r - c) for r in range(16) for c in range(16)]
    save(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Add", ["h", "b"], ["z"]),
         helper.make_node("Softmax", ["z"], ["y1"], axis=-1),
         helper.make_node("Gather", ["table", "i"], ["g"], axis=0),
         helper.make_node("Mul", ["g", "two"], ["d"]),
         helper.make_node("Relu", ["d"], ["y2"])],
        "shape_churn",
        [helper.make_tensor_value_info("x", f, ["a", 16]), helper.make_tensor_value_info("i", TensorProto.INT64, ["k"])],
        [helper.make_tensor_value_info("y1", f, ["a", 16]), helper.make_tensor_value_info("y2", f, ["k", 16])],
        [helper.make_tensor("w", f, [16, 16], w), helper.make_tensor("b", f, [16], [0.1 * c for c in range(16)]),
         helper.make_tensor("table", f, [16, 16], table), helper.make_tensor("two", f, [], [2.0])]),
        os.path.join(out_dir, "shape_churn.onnx"))


if __name__ == "__main__":
    main(sys.argv[1])
