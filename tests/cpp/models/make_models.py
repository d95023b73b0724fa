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


if __name__ == "__main__":
    main(sys.argv[1])
