"""Structured mutations of ONNX backend node tests: each takes (model, feeds, rng) and returns a
mutated copy or None when it does not apply. Mutants are plausible-but-wrong models, the kind a
buggy exporter or a hostile file produces: absurd attributes, stale declared shapes and types,
inputs that contradict the model, huge/empty dims, out-of-range indices, cycles, unknown
opsets, missing/extra inputs."""
from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ABSURD_INTS = [0, -1, 1, 2, 3, -2, 7, 64, 2**31 - 1, -(2**31), 2**31, 2**40, -(2**40)]
ABSURD_FLOATS = [0.0, -1.0, 1e30, -1e30, float("nan"), float("inf"), float("-inf"), 1e-30]
HUGE = [0, -1, 2**31, 2**31 - 1, 2**40, -(2**31), 1 << 16, 1 << 20]


def _node(model):
    return model.graph.node[0]


def attr_absurd(model, feeds, rng):
    """An attribute of the first node set to an absurd value of its own type."""
    m = copy.deepcopy(model)
    attrs = [a for a in _node(m).attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT,
                                                       onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS)]
    if not attrs:
        return None
    a = attrs[rng.integers(len(attrs))]
    if a.type == onnx.AttributeProto.INT:
        a.i = int(rng.choice(ABSURD_INTS))
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = float(rng.choice(ABSURD_FLOATS))
    elif a.type == onnx.AttributeProto.INTS:
        values = list(a.ints)
        if values and rng.random() < 0.5:
            values[rng.integers(len(values))] = int(rng.choice(ABSURD_INTS))
        else:
            values = values + [int(rng.choice(ABSURD_INTS))] if rng.random() < 0.5 else values[:-1]
        del a.ints[:]
        a.ints.extend(values)
    else:
        values = list(a.floats) or [0.0]
        values[rng.integers(len(values))] = float(rng.choice(ABSURD_FLOATS))
        del a.floats[:]
        a.floats.extend(values)
    return m, feeds


def attr_drop_or_add(model, feeds, rng):
    """An attribute removed, or an unknown one added."""
    m = copy.deepcopy(model)
    node = _node(m)
    if node.attribute and rng.random() < 0.6:
        del node.attribute[int(rng.integers(len(node.attribute)))]
    else:
        node.attribute.append(helper.make_attribute("not_an_attribute", 3))
    return m, feeds


def _set_dims(vi, dims):
    t = vi.type.tensor_type
    t.shape.Clear()
    for d in dims:
        dim = t.shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        else:
            dim.dim_value = d


def declared_shape(model, feeds, rng):
    """A graph output's declared static shape made stale (another dim, another rank)."""
    m = copy.deepcopy(model)
    outs = [o for o in m.graph.output if o.type.HasField("tensor_type")]
    if not outs:
        return None
    o = outs[rng.integers(len(outs))]
    dims = [d.dim_value if d.HasField("dim_value") else 3 for d in o.type.tensor_type.shape.dim]
    choice = rng.integers(3)
    if choice == 0 and dims:
        dims[rng.integers(len(dims))] += int(rng.integers(1, 5))
    elif choice == 1:
        dims = dims + [2]
    else:
        dims = dims[:-1] if dims else [1, 1]
    _set_dims(o, dims)
    return m, feeds


ELEM_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.INT32,
              TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL]


def declared_dtype(model, feeds, rng):
    """A graph output declared with another element type."""
    m = copy.deepcopy(model)
    outs = [o for o in m.graph.output if o.type.HasField("tensor_type")]
    if not outs:
        return None
    o = outs[rng.integers(len(outs))]
    o.type.tensor_type.elem_type = int(rng.choice([t for t in ELEM_TYPES if t != o.type.tensor_type.elem_type]))
    return m, feeds


def _symbolic_inputs(m):
    for i, vi in enumerate(m.graph.input):
        if vi.type.HasField("tensor_type"):
            _set_dims(vi, [f"d{i}_{k}" for k in range(len(vi.type.tensor_type.shape.dim))])


def feed_shape(model, feeds, rng):
    """An input fed with another shape than the model was built for (declared dims symbolic)."""
    names = [k for k, v in feeds.items() if v.ndim > 0]
    if not names:
        return None
    m = copy.deepcopy(model)
    _symbolic_inputs(m)
    name = names[rng.integers(len(names))]
    x = feeds[name]
    shape = list(x.shape)
    shape[rng.integers(len(shape))] = int(rng.choice([1, 2, 5]))
    new = dict(feeds)
    new[name] = np.resize(x, shape).astype(x.dtype)
    return m, new


def feed_dtype(model, feeds, rng):
    """An input fed (and declared) as another element type."""
    if not feeds:
        return None
    m = copy.deepcopy(model)
    idx = [i for i, vi in enumerate(m.graph.input) if vi.name in feeds]
    if not idx:
        return None
    vi = m.graph.input[idx[rng.integers(len(idx))]]
    t = int(rng.choice(ELEM_TYPES))
    vi.type.tensor_type.elem_type = t
    new = dict(feeds)
    new[vi.name] = feeds[vi.name].astype(helper.tensor_dtype_to_np_dtype(t))
    return m, new


def huge_dim(model, feeds, rng):
    """An integer input (often a shape, pads, repeats, k or axes) given a huge, zero or negative
    element."""
    names = [k for k, v in feeds.items() if v.dtype.kind in "iu" and v.size > 0]
    if not names:
        return None
    name = names[rng.integers(len(names))]
    x = feeds[name].copy().reshape(-1)
    info = np.iinfo(x.dtype)
    x[rng.integers(x.size)] = int(np.clip(rng.choice(HUGE), info.min, info.max))
    new = dict(feeds)
    new[name] = x.reshape(feeds[name].shape)
    return model, new


def index_out_of_range(model, feeds, rng):
    """An integer input shifted far out of any valid index range."""
    names = [k for k, v in feeds.items() if v.dtype.kind in "iu" and v.size > 0]
    if not names:
        return None
    name = names[rng.integers(len(names))]
    x = feeds[name].copy().reshape(-1)
    info = np.iinfo(x.dtype)
    shift = int(rng.choice([7, 100, -100, 1000]))
    k = rng.integers(x.size)
    x[k] = int(np.clip(int(x[k]) + shift, info.min, info.max))
    new = dict(feeds)
    new[name] = x.reshape(feeds[name].shape)
    return model, new


def empty_input(model, feeds, rng):
    """A float input with a zero dim (declared dims symbolic)."""
    names = [k for k, v in feeds.items() if v.ndim > 0]
    if not names:
        return None
    m = copy.deepcopy(model)
    _symbolic_inputs(m)
    name = names[rng.integers(len(names))]
    x = feeds[name]
    shape = list(x.shape)
    shape[rng.integers(len(shape))] = 0
    new = dict(feeds)
    new[name] = np.zeros(shape, x.dtype)
    return m, new


def nan_inf(model, feeds, rng):
    """NaN / inf sprinkled into a float input."""
    names = [k for k, v in feeds.items() if v.dtype.kind == "f" and v.size > 0]
    if not names:
        return None
    name = names[rng.integers(len(names))]
    x = feeds[name].copy().reshape(-1)
    for _ in range(max(1, x.size // 4)):
        x[rng.integers(x.size)] = rng.choice([np.nan, np.inf, -np.inf])
    new = dict(feeds)
    new[name] = x.reshape(feeds[name].shape)
    return model, new


def cycle(model, feeds, rng):
    """A node reads its own output (or a later node's)."""
    m = copy.deepcopy(model)
    node = m.graph.node[-1]
    if not node.input or not node.output:
        return None
    node.input[rng.integers(len(node.input))] = node.output[0]
    return m, feeds


def unknown_opset(model, feeds, rng):
    """An opset that does not exist (too new), or the node moved to an unknown domain."""
    m = copy.deepcopy(model)
    if rng.random() < 0.5:
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = int(rng.choice([999, 0]))
    else:
        _node(m).domain = "com.example.unknown"
        m.opset_import.append(helper.make_opsetid("com.example.unknown", 1))
    return m, feeds


def missing_input(model, feeds, rng):
    """The node's last input removed (and the graph input feeding it)."""
    m = copy.deepcopy(model)
    node = _node(m)
    if not node.input:
        return None
    gone = node.input[-1]
    del node.input[-1]
    keep = [vi for vi in m.graph.input if vi.name != gone or any(gone in n.input for n in m.graph.node)]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    new = {k: v for k, v in feeds.items() if any(k == vi.name for vi in keep)}
    return m, new


def extra_input(model, feeds, rng):
    """One more input than the op takes (a copy of its first input)."""
    m = copy.deepcopy(model)
    node = _node(m)
    if not node.input:
        return None
    node.input.append(node.input[0])
    return m, feeds


def swap_inputs(model, feeds, rng):
    """Two inputs of the node swapped."""
    m = copy.deepcopy(model)
    node = _node(m)
    if len(node.input) < 2:
        return None
    i, j = rng.choice(len(node.input), 2, replace=False)
    node.input[i], node.input[j] = node.input[j], node.input[i]
    return m, feeds


MUTATORS = {f.__name__: f for f in [attr_absurd, attr_drop_or_add, declared_shape, declared_dtype, feed_shape,
                                    feed_dtype, huge_dim, index_out_of_range, empty_input, nan_inf, cycle,
                                    unknown_opset, missing_input, extra_input, swap_inputs]}


def load_case(test_dir):
    """(model, feeds) of an ONNX node test, or None when it has non-tensor inputs."""
    model = onnx.load(str(test_dir / "model.onnx"))
    model.ir_version = min(model.ir_version, 10)  # newer onnx wheels stamp IRs ORT cannot load
    feeds = {}
    for i, vi in enumerate(model.graph.input):
        if not vi.type.HasField("tensor_type"):
            return None
        path = test_dir / "test_data_set_0" / f"input_{i}.pb"
        if not path.exists():
            return None
        t = TensorProto()
        t.ParseFromString(path.read_bytes())
        if t.data_type in (TensorProto.STRING, TensorProto.BFLOAT16) or t.data_type > TensorProto.BFLOAT16:
            return None
        feeds[vi.name] = numpy_helper.to_array(t)
    if any(not o.type.HasField("tensor_type") for o in model.graph.output):
        return None
    return model, feeds
