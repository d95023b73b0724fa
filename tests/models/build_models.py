"""Small whole models in the layouts real exporters write, for tests/python/test_models.py and
bench/bench_whole_models.py. Random weights from fixed seeds; every batch/sequence/spatial
dimension of the graph inputs is symbolic, so ORT cannot constant-fold the shape chains.

    python tests/models/build_models.py [OUT_DIR]     # writes <name>.onnx + <name>.npz feeds

Each builder returns (onnx.ModelProto, feeds). The models:
  bert_encoder   BERT-style embeddings + 2 encoder layers + pooler (TorchScript export of HF BERT)
  gpt2_decoder   GPT-2-style embeddings + 2 decoder blocks + LM head (HF GPT-2 export)
  mobilenet_cnn  MobileNetV3/ResNet-style CNN (Conv+BN+HardSwish/Relu, depthwise, SE, residual)
  yolo_detector  YOLOv8-style detector (SiLU convs, C2f, SPPF, nearest Resize, DFL head, anchors)
  crnn           CRNN text recognizer (conv stack, MaxPool, view to a sequence, bidirectional LSTM,
                 MatMul, LogSoftmax)
"""
import os
import sys

import numpy as np
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_builder import FLOAT, FLOAT_MIN, INT64, GraphBuilder  # noqa: E402


# --------------------------------------------------------------------------------------------
# (a) BERT-style encoder
# --------------------------------------------------------------------------------------------
def _bert_split_heads(g, t, heads, head_dim, batch=None):
    """Split into heads, then permute(0, 2, 1, 3). With `batch` (the layer input's traced
    `hidden_states.size(0)`), newer HF's `view(bsz, -1, heads, head_dim)`; without it, older HF's
    transpose_for_scores: `x.view(x.size()[:-1] + (heads, head_dim))` from x's own Shape."""
    if batch is not None:
        shape = g.concat_shape(batch, -1, heads, head_dim)
    else:
        shape = g.concat_shape(g.dim(t, 0), g.dim(t, 1), heads, head_dim)
    return g.op("Transpose", [g.op("Reshape", [t, shape])], perm=[0, 2, 1, 3])


def _bert_layer(g, x, mask, d, heads, ffn, newer_hf):
    """One encoder layer. `newer_hf`: shapes from the layer input's Shape (transformers >= 4.48
    style) and the decomposed LayerNorm of older exports; else transpose_for_scores and fused
    LayerNormalization."""
    head_dim = d // heads
    batch, seq = (g.dim(x, 0), g.dim(x, 1)) if newer_hf else (None, None)
    q = _bert_split_heads(g, g.linear(x, d, d), heads, head_dim, batch)
    k = _bert_split_heads(g, g.linear(x, d, d), heads, head_dim, batch)
    v = _bert_split_heads(g, g.linear(x, d, d), heads, head_dim, batch)
    scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = g.op("Add", [g.op("Div", [scores, g.const(np.sqrt(head_dim), np.float32)]), mask])
    ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    ctx = g.op("Transpose", [ctx], perm=[0, 2, 1, 3])
    merged = g.concat_shape(batch, seq, d) if newer_hf else g.concat_shape(g.dim(ctx, 0), g.dim(ctx, 1), d)
    ctx = g.op("Reshape", [ctx, merged])
    norm = g.layer_norm_decomposed if newer_hf else (lambda t, n: g.layer_norm(t, n, 1e-12))
    h = norm(g.op("Add", [g.linear(ctx, d, d), x]), d)
    f = g.linear(g.gelu_erf(g.linear(h, d, ffn)), ffn, d)
    return norm(g.op("Add", [f, h]), d)


def bert_encoder(batch=2, seq=11, d=32, heads=4, ffn=64, vocab=64, max_pos=32, layers=2, seed=1):
    g = GraphBuilder("bert_encoder", seed)
    ids = g.input("input_ids", INT64, ["batch", "sequence"])
    attn = g.input("attention_mask", INT64, ["batch", "sequence"])
    seq_len = g.dim(ids, 1)
    # position_ids = self.position_ids[:, :seq_len]; token_type_ids = buffer[:, :seq_len].expand(b, s)
    pos_buf = g.init(np.arange(max_pos, dtype=np.int64)[None, :], "position_ids")
    pos = g.op("Slice", [pos_buf, g.const([0]), seq_len, g.const([1])])
    tt_buf = g.init(np.zeros((1, max_pos), np.int64), "token_type_ids")
    tt = g.op("Expand", [g.op("Slice", [tt_buf, g.const([0]), seq_len, g.const([1])]), g.op("Shape", [ids])])
    emb = lambda n: g.init((0.5 * g.rng.standard_normal((n, d))).astype(np.float32), "embedding")  # noqa: E731
    x = g.op("Add", [g.op("Gather", [emb(vocab), ids], axis=0), g.op("Gather", [emb(2), tt], axis=0)])
    x = g.layer_norm(g.op("Add", [x, g.op("Gather", [emb(max_pos), pos], axis=0)]), d, 1e-12)
    # extended mask: (1.0 - mask[:, None, None, :].float()) * finfo.min
    m = g.op("Unsqueeze", [g.op("Unsqueeze", [attn, g.const([1])]), g.const([2])])
    m = g.op("Sub", [g.const(1.0, np.float32), g.op("Cast", [m], to=FLOAT)])
    m = g.op("Mul", [m, g.const(FLOAT_MIN, np.float32)])
    for layer in range(layers):
        x = _bert_layer(g, x, m, d, heads, ffn, newer_hf=(layer == 0))
    g.op("Identity", [x], ["last_hidden_state"])
    first = g.op("Gather", [x, g.const(0)], axis=1)  # hidden_states[:, 0]
    pooled = g.op("Gemm", [first, g.weight([d, d], d), g.bias(d)], transB=1)
    g.op("Tanh", [pooled], ["pooler_output"])
    g.output("last_hidden_state", FLOAT, ["batch", "sequence", d])
    g.output("pooler_output", FLOAT, ["batch", d])
    rng = np.random.default_rng(seed + 100)
    mask = np.ones((batch, seq), np.int64)
    mask[1, seq - 3:] = 0  # a padded second sequence
    feeds = {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64), "attention_mask": mask}
    return g.model(opset=17), feeds


# --------------------------------------------------------------------------------------------
# (b) GPT-2-style decoder
# --------------------------------------------------------------------------------------------
def _conv1d(g, x, d_in, d_out):
    """HF's Conv1D: size_out = x.size()[:-1] + (nf,); addmm(b, x.view(-1, x.size(-1)), W).view(size_out)."""
    size_out = g.concat_shape(g.shape_prefix(x, -1), d_out)
    flat = g.op("Reshape", [x, g.concat_shape(-1, g.dim(x, -1))])
    y = g.op("Gemm", [flat, g.weight([d_in, d_out], d_in), g.bias(d_out)])
    return g.op("Reshape", [y, size_out])


def _gpt2_split_heads(g, t, heads, head_dim, perm):
    shape = g.concat_shape(g.shape_prefix(t, -1), heads, head_dim)
    return g.op("Transpose", [g.op("Reshape", [t, shape])], perm=perm)


def _gpt2_causal_mask_slice(g, w, q, kt, bias_buf):
    """Older HF GPT-2: bias[:, :, key_len - query_len:key_len, :key_len] and torch.where."""
    q_len, k_len = g.dim(q, 2), g.dim(kt, 3)
    rows = g.op("Slice", [bias_buf, g.op("Sub", [k_len, q_len]), k_len, g.const([2])])
    causal = g.op("Slice", [rows, g.const([0]), k_len, g.const([3])])
    return g.op("Where", [causal, w, g.const(FLOAT_MIN, np.float32)])


def _gpt2_causal_mask_triu(g, w, q, kt):
    """Newer HF style: triu(full((q_len, k_len), finfo.min), diagonal=1) added to the scores."""
    full = g.op("ConstantOfShape", [g.concat_shape(g.dim(q, 2), g.dim(kt, 3))],
                value=numpy_helper.from_array(np.array([FLOAT_MIN], np.float32)))
    return g.op("Add", [w, g.op("Trilu", [full, g.const(1)], upper=1)])


def _gpt2_block(g, h, mask, d, heads, bias_buf, block):
    head_dim = d // heads
    qkv = _conv1d(g, g.layer_norm(h, d), d, 3 * d)
    q, k, v = g.op("Split", [qkv, g.const([d, d, d])], outputs=3, axis=2)
    q = _gpt2_split_heads(g, q, heads, head_dim, [0, 2, 1, 3])
    kt = _gpt2_split_heads(g, k, heads, head_dim, [0, 2, 3, 1])
    v = _gpt2_split_heads(g, v, heads, head_dim, [0, 2, 1, 3])
    w = g.op("Div", [g.op("MatMul", [q, kt]), g.const(np.sqrt(head_dim), np.float32)])
    w = _gpt2_causal_mask_slice(g, w, q, kt, bias_buf) if block == 0 else _gpt2_causal_mask_triu(g, w, q, kt)
    a = g.op("MatMul", [g.op("Softmax", [g.op("Add", [w, mask])], axis=-1), v])
    a = g.op("Transpose", [a], perm=[0, 2, 1, 3])
    a = g.op("Reshape", [a, g.concat_shape(g.shape_prefix(a, -2), d)])
    h = g.op("Add", [h, _conv1d(g, a, d, d)])
    m = _conv1d(g, g.gelu_tanh(_conv1d(g, g.layer_norm(h, d), d, 4 * d)), 4 * d, d)
    return g.op("Add", [h, m])


def gpt2_decoder(batch=2, seq=9, d=32, heads=4, vocab=64, n_pos=32, layers=2, seed=2):
    g = GraphBuilder("gpt2_decoder", seed)
    ids = g.input("input_ids", INT64, ["batch", "sequence"])
    attn = g.input("attention_mask", INT64, ["batch", "sequence"])
    # position_ids = torch.arange(0, input_shape[-1]).unsqueeze(0)
    pos = g.op("Range", [g.const(0), g.scalar_dim(ids, 1), g.const(1)])
    pos = g.op("Unsqueeze", [pos, g.const([0])])
    wte_value = (0.5 * g.rng.standard_normal((vocab, d))).astype(np.float32)
    wte = g.init(wte_value, "wte")
    wpe = g.init((0.5 * g.rng.standard_normal((n_pos, d))).astype(np.float32), "wpe")
    h = g.op("Add", [g.op("Gather", [wte, ids], axis=0), g.op("Gather", [wpe, pos], axis=0)])
    m = g.op("Unsqueeze", [attn, g.const([1, 2])])
    m = g.op("Mul", [g.op("Sub", [g.const(1.0, np.float32), g.op("Cast", [m], to=FLOAT)]),
                     g.const(FLOAT_MIN, np.float32)])
    bias_buf = g.init(np.tril(np.ones((n_pos, n_pos), bool))[None, None], "attn_bias")
    for block in range(layers):
        h = _gpt2_block(g, h, m, d, heads, bias_buf, block)
    h = g.layer_norm(h, d)
    lm_head = g.init(np.ascontiguousarray(wte_value.T), "lm_head")  # tied weights, exported transposed
    g.op("MatMul", [h, lm_head], ["logits"])
    g.output("logits", FLOAT, ["batch", "sequence", vocab])
    rng = np.random.default_rng(seed + 100)
    mask = np.ones((batch, seq), np.int64)
    mask[0, :2] = 0  # left padding in the first sequence
    feeds = {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64), "attention_mask": mask}
    return g.model(opset=17), feeds


# --------------------------------------------------------------------------------------------
# (c) MobileNetV3 / ResNet-style CNN
# --------------------------------------------------------------------------------------------
def _conv_bn(g, x, c_in, c_out, k, stride=1, group=1, act=None):
    y = g.batch_norm(g.conv(x, c_in, c_out, k, stride, group=group, bias=False), c_out)
    if act == "hardswish":
        return g.op("HardSwish", [y])
    if act == "relu":
        return g.op("Relu", [y])
    if act == "relu6":
        return g.op("Clip", [y, g.const(0.0, np.float32), g.const(6.0, np.float32)])
    return y


def _squeeze_excite(g, x, c, reduced):
    s = g.op("GlobalAveragePool", [x])
    s = g.op("Relu", [g.conv(s, c, reduced, 1)])
    s = g.op("HardSigmoid", [g.conv(s, reduced, c, 1)], alpha=1.0 / 6, beta=0.5)
    return g.op("Mul", [x, s])


def mobilenet_cnn(batch=2, height=40, width=36, classes=10, seed=3):
    g = GraphBuilder("mobilenet_cnn", seed)
    x = g.input("images", FLOAT, ["batch", 3, "height", "width"])
    x = _conv_bn(g, x, 3, 16, 3, stride=2, act="hardswish")
    # inverted residual with squeeze-excite (MobileNetV3), stride 1: residual Add
    y = _conv_bn(g, x, 16, 32, 1, act="hardswish")
    y = _conv_bn(g, y, 32, 32, 3, group=32, act="hardswish")  # depthwise
    y = _squeeze_excite(g, y, 32, 8)
    x = g.op("Add", [x, _conv_bn(g, y, 32, 16, 1)])
    # MobileNetV2 block with ReLU6 (Clip), depthwise stride 2
    y = _conv_bn(g, x, 16, 48, 1, act="relu6")
    y = _conv_bn(g, y, 48, 48, 3, stride=2, group=48, act="relu6")
    x = _conv_bn(g, y, 48, 24, 1)
    # ResNet basic block with a strided 1x1 projection shortcut
    y = _conv_bn(g, x, 24, 32, 3, stride=2, act="relu")
    y = _conv_bn(g, y, 32, 32, 3)
    x = g.op("Relu", [g.op("Add", [y, _conv_bn(g, x, 24, 32, 1, stride=2)])])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    g.op("Gemm", [x, g.weight([classes, 32], 32), g.bias(classes)], ["logits"], transB=1)
    g.output("logits", FLOAT, ["batch", classes])
    rng = np.random.default_rng(seed + 100)
    feeds = {"images": rng.standard_normal((batch, 3, height, width)).astype(np.float32)}
    return g.model(opset=14), feeds


# --------------------------------------------------------------------------------------------
# (d) YOLOv8-style detector
# --------------------------------------------------------------------------------------------
def _cbs(g, x, c_in, c_out, k, stride=1):
    """Conv (BatchNorm folded into it by the exporter) + SiLU."""
    return g.silu(g.conv(x, c_in, c_out, k, stride))


def _c2f(g, x, c_in, c_out):
    y = _cbs(g, x, c_in, c_out, 1)
    a, b = g.op("Split", [y, g.const([c_out // 2, c_out // 2])], outputs=2, axis=1)
    t = _cbs(g, _cbs(g, b, c_out // 2, c_out // 2, 3), c_out // 2, c_out // 2, 3)
    return _cbs(g, g.op("Concat", [a, b, g.op("Add", [b, t])], axis=1), 3 * c_out // 2, c_out, 1)


def _sppf(g, x, c):
    y = _cbs(g, x, c, c // 2, 1)
    pools = [y]
    for _ in range(3):
        pools.append(g.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    return _cbs(g, g.op("Concat", pools, axis=1), 2 * c, c, 1)


def _anchors(g, feat, stride):
    """make_anchors for one level, traced: Range over the feature map's runtime H and W."""
    h = g.op("Cast", [g.scalar_dim(feat, 2)], to=FLOAT)
    w = g.op("Cast", [g.scalar_dim(feat, 3)], to=FLOAT)
    half = g.const(0.5, np.float32)
    sx = g.op("Add", [g.op("Range", [g.const(0.0, np.float32), w, g.const(1.0, np.float32)]), half])
    sy = g.op("Add", [g.op("Range", [g.const(0.0, np.float32), h, g.const(1.0, np.float32)]), half])
    hw = g.concat_shape(g.dim(feat, 2), g.dim(feat, 3))
    gx = g.op("Expand", [g.op("Unsqueeze", [sx, g.const([0])]), hw])
    gy = g.op("Expand", [g.op("Unsqueeze", [sy, g.const([1])]), hw])
    grid = g.op("Concat", [g.op("Unsqueeze", [gx, g.const([-1])]), g.op("Unsqueeze", [gy, g.const([-1])])], axis=-1)
    points = g.op("Reshape", [grid, g.const([-1, 2])])
    n = g.op("Unsqueeze", [g.op("Mul", [g.scalar_dim(feat, 2), g.scalar_dim(feat, 3)]), g.const([0])])
    strides = g.op("ConstantOfShape", [g.concat_shape(n, 1)],
                   value=numpy_helper.from_array(np.array([stride], np.float32)))
    return points, strides


def yolo_detector(batch=1, height=64, width=64, classes=3, reg_max=8, seed=4):
    g = GraphBuilder("yolo_detector", seed)
    x = g.input("images", FLOAT, ["batch", 3, "height", "width"])
    x = _cbs(g, x, 3, 8, 3, 2)                       # /2
    x = _c2f(g, _cbs(g, x, 8, 16, 3, 2), 16, 16)     # /4
    p4 = x
    x = _c2f(g, _cbs(g, x, 16, 32, 3, 2), 32, 32)    # /8
    p8 = _sppf(g, x, 32)
    up = g.op("Resize", [p8, "", g.init(np.array([1, 1, 2, 2], np.float32), "scales")],
              mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    p4 = _c2f(g, g.op("Concat", [up, p4], axis=1), 48, 16)
    no = 4 * reg_max + classes
    levels, points, strides = [], [], []
    for feat, c, stride in ((p4, 16, 4), (p8, 32, 8)):
        box = g.conv(_cbs(g, feat, c, 16, 3), 16, 4 * reg_max, 1)
        cls = g.conv(_cbs(g, feat, c, 16, 3), 16, classes, 1)
        y = g.op("Concat", [box, cls], axis=1)
        levels.append(g.op("Reshape", [y, g.concat_shape(g.dim(y, 0), no, -1)]))
        p, s = _anchors(g, feat, stride)
        points.append(p)
        strides.append(s)
    y = g.op("Concat", levels, axis=2)
    box, cls = g.op("Split", [y, g.const([4 * reg_max, classes])], outputs=2, axis=1)
    # DFL: conv(x.view(b, 4, reg_max, a).transpose(2, 1).softmax(1)).view(b, 4, a)
    b, a = g.dim(box, 0), g.dim(box, 2)
    dist = g.op("Reshape", [box, g.concat_shape(b, 4, reg_max, a)])
    dist = g.op("Softmax", [g.op("Transpose", [dist], perm=[0, 2, 1, 3])], axis=1)
    dfl_w = g.init(np.arange(reg_max, dtype=np.float32).reshape(1, reg_max, 1, 1), "dfl")
    dist = g.op("Conv", [dist, dfl_w], kernel_shape=[1, 1])
    dist = g.op("Reshape", [dist, g.concat_shape(b, 4, a)])
    anchor = g.op("Unsqueeze", [g.op("Transpose", [g.op("Concat", points, axis=0)], perm=[1, 0]), g.const([0])])
    stride_t = g.op("Transpose", [g.op("Concat", strides, axis=0)], perm=[1, 0])
    lt, rb = g.op("Split", [dist, g.const([2, 2])], outputs=2, axis=1)
    x1y1, x2y2 = g.op("Sub", [anchor, lt]), g.op("Add", [anchor, rb])
    centre = g.op("Div", [g.op("Add", [x1y1, x2y2]), g.const(2.0, np.float32)])
    boxes = g.op("Mul", [g.op("Concat", [centre, g.op("Sub", [x2y2, x1y1])], axis=1), stride_t])
    g.op("Concat", [boxes, g.op("Sigmoid", [cls])], ["detections"], axis=1)
    g.output("detections", FLOAT, ["batch", 4 + classes, "anchors"])
    rng = np.random.default_rng(seed + 100)
    feeds = {"images": rng.uniform(0, 1, (batch, 3, height, width)).astype(np.float32)}
    return g.model(opset=17), feeds


# --------------------------------------------------------------------------------------------
# (e) CRNN text recognizer
# --------------------------------------------------------------------------------------------
def crnn(batch=2, width=40, classes=11, hidden=16, seed=5):
    g = GraphBuilder("crnn", seed)
    x = g.input("images", FLOAT, ["batch", 1, 32, "width"])
    x = g.op("Relu", [g.conv(x, 1, 8, 3)])
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])                      # 16 x W/2
    x = g.op("Relu", [g.batch_norm(g.conv(x, 8, 16, 3, bias=False), 16)])
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])                      # 8 x W/4
    x = g.op("Relu", [g.batch_norm(g.conv(x, 16, 16, 3, bias=False), 16)])
    x = g.op("MaxPool", [x], kernel_shape=[2, 1], strides=[2, 1])                      # 4 x W/4
    x = g.op("Relu", [g.conv(x, 16, 32, (4, 1), pad=[0, 0])])                         # 1 x W/4
    # b, c, h, w = conv.size(); conv.view(b, c * h, w).permute(2, 0, 1) -> [T, b, 32]
    c_h = g.op("Mul", [g.dim(x, 1), g.dim(x, 2)])
    seq = g.op("Reshape", [x, g.concat_shape(g.dim(x, 0), c_h, g.dim(x, 3))])
    seq = g.op("Transpose", [seq], perm=[2, 0, 1])
    # nn.LSTM without hx: zeros(num_layers * 2, batch, hidden) from the input's runtime batch
    zeros = g.op("ConstantOfShape", [g.concat_shape(2, g.dim(seq, 1), hidden)],
                 value=numpy_helper.from_array(np.array([0.0], np.float32)))
    w = g.weight([2, 4 * hidden, 32], 32)
    r = g.weight([2, 4 * hidden, hidden], hidden)
    bias = g.init((0.1 * g.rng.standard_normal((2, 8 * hidden))).astype(np.float32), "lstm_b")
    y, _, _ = g.op("LSTM", [seq, w, r, bias, "", zeros, zeros], outputs=3, direction="bidirectional",
                   hidden_size=hidden)
    y = g.op("Reshape", [g.op("Transpose", [y], perm=[0, 2, 1, 3]), g.const([0, 0, -1])])  # [T, b, 2h]
    logits = g.linear(y, 2 * hidden, classes)
    g.op("LogSoftmax", [logits], ["log_probs"], axis=2)
    g.output("log_probs", FLOAT, ["time", "batch", classes])
    rng = np.random.default_rng(seed + 100)
    feeds = {"images": rng.uniform(-1, 1, (batch, 1, 32, width)).astype(np.float32)}
    return g.model(opset=14), feeds


MODELS = {
    "bert_encoder": bert_encoder,
    "gpt2_decoder": gpt2_decoder,
    "mobilenet_cnn": mobilenet_cnn,
    "yolo_detector": yolo_detector,
    "crnn": crnn,
}


def build(name, out_dir):
    """Writes <out_dir>/<name>.onnx (and .npz feeds); returns (path, model, feeds)."""
    import onnx

    model, feeds = MODELS[name]()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.onnx")
    data = model.SerializeToString()
    if not (os.path.exists(path) and open(path, "rb").read() == data):
        onnx.save(model, path)
    np.savez(os.path.join(out_dir, f"{name}.npz"), **feeds)
    return path, model, feeds


if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "models", "synthetic")
    for n in MODELS:
        p, m, _ = build(n, out)
        print(f"{p}: {len(m.graph.node)} nodes, {os.path.getsize(p)} bytes")
