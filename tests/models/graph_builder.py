"""A small graph builder for whole-model tests: nodes in the forms torch's TorchScript exporter
writes (weights as initializers, small integer constants as Constant nodes, shapes computed at
run time from Shape/Gather/Unsqueeze/Concat), random weights from one seeded generator."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT_MIN = float(np.finfo(np.float32).min)  # torch.finfo(float32).min, the exporters' mask value


class GraphBuilder:
    """Collects nodes and initializers; every method returns the name(s) of what it made."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes, self.initializers, self.inputs, self.outputs = [], [], [], []
        self._count = 0

    def _fresh(self, stem):
        self._count += 1
        return f"{stem}_{self._count}"

    # --- graph inputs/outputs and values -------------------------------------------------
    def input(self, name, elem_type, dims):
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, dims))
        return name

    def output(self, name, elem_type, dims=None):
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, dims))

    def init(self, value, stem="w"):
        """A constant initializer (weights, buffers)."""
        name = self._fresh(stem)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def const(self, value, dtype=np.int64):
        """A Constant node, as the exporter writes for shape pieces, axes and scalars."""
        out = self._fresh("const")
        tensor = numpy_helper.from_array(np.asarray(value, dtype=dtype), out + "_value")
        self.nodes.append(helper.make_node("Constant", [], [out], name=out + "_node", value=tensor))
        return out

    def weight(self, shape, fan_in=None, scale=1.0):
        """Random normal weights scaled by 1/sqrt(fan_in) so activations stay O(1)."""
        fan_in = fan_in or (int(np.prod(shape[1:])) if len(shape) > 1 else shape[0])
        return self.init((self.rng.standard_normal(shape) * scale / np.sqrt(fan_in)).astype(np.float32))

    def bias(self, n, scale=0.1):
        return self.init((self.rng.standard_normal(n) * scale).astype(np.float32), "b")

    # --- nodes -----------------------------------------------------------------------------
    def op(self, op_type, inputs, outputs=1, name=None, **attrs):
        """One node; `outputs` is a count (fresh names) or a list of names."""
        stem = name or op_type.lower()
        outs = [self._fresh(stem) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self._fresh(op_type), **attrs))
        return outs[0] if len(outs) == 1 else outs

    # --- runtime shape arithmetic (what traced `x.size(i)` and `x.size()[:-1]` export to) --
    def dim(self, x, axis):
        """`x.size(axis)` as a 1-element int64 tensor: Shape -> Gather -> Unsqueeze."""
        shape = self.op("Shape", [x])
        d = self.op("Gather", [shape, self.const(axis)], axis=0)
        return self.op("Unsqueeze", [d, self.const([0])])

    def scalar_dim(self, x, axis):
        """`x.size(axis)` as a 0-d int64 tensor: Shape -> Gather."""
        return self.op("Gather", [self.op("Shape", [x]), self.const(axis)], axis=0)

    def shape_prefix(self, x, end):
        """`x.size()[:end]`: Shape -> Slice."""
        return self.op("Slice", [self.op("Shape", [x]), self.const([0]), self.const([end]), self.const([0])])

    def concat_shape(self, *parts):
        """Concat of 1-D int64 pieces: names of tensors, or python ints for constant pieces."""
        names = [self.const([p]) if isinstance(p, int) else p for p in parts]
        return self.op("Concat", names, axis=0)

    # --- layers ------------------------------------------------------------------------------
    def linear(self, x, d_in, d_out):
        """torch.nn.Linear on a 3-D input: MatMul + Add."""
        return self.op("Add", [self.op("MatMul", [x, self.weight([d_in, d_out], d_in)]), self.bias(d_out)])

    def layer_norm(self, x, d, eps=1e-5):
        """torch.nn.LayerNorm at opset >= 17: one LayerNormalization node."""
        gamma = self.init((1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32), "gamma")
        return self.op("LayerNormalization", [x, gamma, self.bias(d)], axis=-1, epsilon=eps)

    def layer_norm_decomposed(self, x, d, eps=1e-12):
        """The pre-opset-17 export of LayerNorm: ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div."""
        gamma = self.init((1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32), "gamma")
        mean = self.op("ReduceMean", [x], axes=[-1], keepdims=1)
        centred = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [centred, self.const(2.0, np.float32)])], axes=[-1], keepdims=1)
        std = self.op("Sqrt", [self.op("Add", [var, self.const(eps, np.float32)])])
        return self.op("Add", [self.op("Mul", [self.op("Div", [centred, std]), gamma]), self.bias(d)])

    def gelu_erf(self, x):
        """torch.nn.functional.gelu (exact): x * 0.5 * (1 + erf(x / sqrt(2)))."""
        e = self.op("Erf", [self.op("Div", [x, self.const(np.sqrt(2.0), np.float32)])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.const(1.0, np.float32)])]),
                               self.const(0.5, np.float32)])

    def gelu_tanh(self, x):
        """GPT-2's gelu_new: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
        cube = self.op("Mul", [self.op("Pow", [x, self.const(3.0, np.float32)]), self.const(0.044715, np.float32)])
        inner = self.op("Mul", [self.op("Add", [x, cube]), self.const(np.sqrt(2.0 / np.pi), np.float32)])
        one_plus = self.op("Add", [self.op("Tanh", [inner]), self.const(1.0, np.float32)])
        return self.op("Mul", [self.op("Mul", [self.const(0.5, np.float32), x]), one_plus])

    def conv(self, x, c_in, c_out, k, stride=1, pad=None, group=1, bias=True, dilation=1):
        """Conv with square kernel `k` (int or (kh, kw)) and symmetric padding (default: same)."""
        kh, kw = (k, k) if isinstance(k, int) else k
        pads = [(kh - 1) // 2 * dilation, (kw - 1) // 2 * dilation] if pad is None else list(pad)
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        w = self.weight([c_out, c_in // group, kh, kw], c_in // group * kh * kw, scale=np.sqrt(2.0))
        ins = [x, w] + ([self.bias(c_out)] if bias else [])
        return self.op("Conv", ins, kernel_shape=[kh, kw], strides=[sh, sw], pads=pads + pads, group=group,
                       dilations=[dilation, dilation])

    def batch_norm(self, x, c, eps=1e-5):
        """BatchNormalization in inference mode with random statistics."""
        r = self.rng
        scale = self.init((1 + 0.2 * r.standard_normal(c)).astype(np.float32), "bn_scale")
        shift = self.init((0.1 * r.standard_normal(c)).astype(np.float32), "bn_bias")
        mean = self.init((0.1 * r.standard_normal(c)).astype(np.float32), "bn_mean")
        var = self.init(r.uniform(0.5, 2.0, c).astype(np.float32), "bn_var")
        return self.op("BatchNormalization", [x, scale, shift, mean, var], epsilon=eps, momentum=0.9)

    def silu(self, x):
        """torch.nn.SiLU as exported: Sigmoid + Mul."""
        return self.op("Mul", [x, self.op("Sigmoid", [x])])

    def model(self, opset, ir_version=8):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tests/models/build_models.py")
        m.ir_version = ir_version
        onnx.checker.check_model(m, full_check=True)
        return m


INT64, FLOAT = TensorProto.INT64, TensorProto.FLOAT
