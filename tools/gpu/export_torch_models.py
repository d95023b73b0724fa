"""Exports the whole-model test set with torch's own ONNX exporters (run on the GPU machine,
which has torch, torchvision and transformers; the export itself runs on its CPU).

Each model is tiny (random weights from a fixed seed, well under 1 MB) but built from the real
architecture code: transformers' BertModel, GPT2Model and LlamaModel (grouped-query attention),
torchvision's MobileNetV3, and small YOLO-style and CRNN modules. Each goes through the
TorchScript exporter (`dynamo=False`) and the dynamo exporter (`dynamo=True`) with symbolic
batch/sequence dims, so the files hold the runtime shape arithmetic real exports hold. The
files land in tests/models/torch/ (committed, with this script as their source).

    python3 tools/gpu/export_torch_models.py OUT_DIR
"""
import json
import sys
import traceback
from pathlib import Path

import torch
from torch import nn

torch.manual_seed(0)
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "torch_models")
OUT.mkdir(parents=True, exist_ok=True)


class Wrap(nn.Module):
    """Returns the main tensor of a transformers model's output (its last hidden state). The
    attention mask is passed explicitly, as serving code does (without it transformers 5 looks
    for packed sequences with aten::diff, which the TorchScript exporter lacks)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]


def ids_and_mask():
    return (torch.randint(0, 96, (2, 9)), torch.ones(2, 9, dtype=torch.int64))


def bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
    return Wrap(BertModel(cfg)), ids_and_mask(), ["input_ids", "attention_mask"], {0: "batch", 1: "seq"}


def gpt2():
    from transformers import GPT2Config, GPT2Model
    cfg = GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False,
                     attn_implementation="eager")
    return Wrap(GPT2Model(cfg)), ids_and_mask(), ["input_ids", "attention_mask"], {0: "batch", 1: "seq"}


def llama():
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      use_cache=False, attn_implementation="eager")
    return Wrap(LlamaModel(cfg)), ids_and_mask(), ["input_ids", "attention_mask"], {0: "batch", 1: "seq"}


def mobilenet():
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf
    setting, last = _mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
    model = MobileNetV3(setting, last, num_classes=10)
    return model, (torch.randn(2, 3, 64, 64),), ["image"], {0: "batch"}


class ConvSiLU(nn.Sequential):
    def __init__(self, cin, cout, k=3, s=1):
        super().__init__(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class TinyYolo(nn.Module):
    """YOLOv8-shaped: SiLU conv blocks, C2f-style split/concat, SPPF, nearest 2x upsampling,
    a distribution-focal head (Reshape/Transpose/Softmax)."""

    def __init__(self, c=8, reg_max=4, classes=3):
        super().__init__()
        self.stem = nn.Sequential(ConvSiLU(3, c, 3, 2), ConvSiLU(c, 2 * c, 3, 2))
        self.c2f = ConvSiLU(2 * c, 2 * c, 1)
        self.c2f_m = ConvSiLU(c, c, 3)
        self.c2f_out = ConvSiLU(3 * c, 2 * c, 1)
        self.down = ConvSiLU(2 * c, 4 * c, 3, 2)
        self.sppf_in = ConvSiLU(4 * c, 2 * c, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.sppf_out = ConvSiLU(8 * c, 4 * c, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.neck = ConvSiLU(6 * c, 2 * c, 3)
        self.reg_max, self.classes = reg_max, classes
        self.head = nn.Conv2d(2 * c, 4 * reg_max + classes, 1)

    def forward(self, x):
        p3 = self.c2f(self.stem(x))
        a, b = p3.chunk(2, 1)
        p3 = self.c2f_out(torch.cat([a, b, self.c2f_m(b)], 1))
        s = self.sppf_in(self.down(p3))
        y1 = self.pool(s)
        y2 = self.pool(y1)
        p4 = self.sppf_out(torch.cat([s, y1, y2, self.pool(y2)], 1))
        n = self.neck(torch.cat([self.up(p4), p3], 1))
        out = self.head(n).flatten(2)  # [B, 4*reg_max + classes, HW]
        box, cls = out.split([4 * self.reg_max, self.classes], 1)
        b, _, hw = box.shape
        dist = box.view(b, 4, self.reg_max, hw).transpose(2, 1).softmax(1)
        proj = torch.arange(self.reg_max, dtype=torch.float32).view(1, self.reg_max, 1, 1)
        ltrb = (dist * proj).sum(1)
        return torch.cat([ltrb, cls.sigmoid()], 1)


def yolo():
    return TinyYolo(), (torch.randn(1, 3, 64, 64),), ["image"], {0: "batch", 2: "height", 3: "width"}


class TinyCrnn(nn.Module):
    """Text-recognizer shaped: conv stack, pooling to height 1, sequence over width,
    bidirectional LSTM, per-step classifier with LogSoftmax."""

    def __init__(self, c=8, hidden=16, classes=12):
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(1, c, 3, 1, 1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(c, 2 * c, 3, 1, 1), nn.BatchNorm2d(2 * c), nn.ReLU(), nn.MaxPool2d((2, 1), (2, 1)),
            nn.Conv2d(2 * c, 2 * c, 3, 1, 1), nn.ReLU(), nn.AvgPool2d((4, 1)))  # height 16 -> 1
        self.rnn = nn.LSTM(2 * c, hidden, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        f = self.convs(x).squeeze(2).permute(0, 2, 1)  # [B, W, C]
        y, _ = self.rnn(f)
        return self.fc(y).log_softmax(-1)


def crnn():
    return TinyCrnn(), (torch.randn(2, 1, 16, 40),), ["image"], {0: "batch", 3: "width"}


MODELS = {"bert": bert, "gpt2": gpt2, "llama": llama, "mobilenetv3": mobilenet, "yolo": yolo, "crnn": crnn}


def export(name, build, dynamo):
    model, args, names, dyn = build()
    model.eval()
    path = OUT / f"{name}_{'dynamo' if dynamo else 'torchscript'}.onnx"
    axes = {n: dyn for n in names}
    with torch.no_grad():
        if dynamo:
            # Spatial dims stay static here: torch.export would need their divisibility spelled out.
            dyn = {k: v for k, v in dyn.items() if v in ("batch", "seq")}
            dims = {v: torch.export.Dim(v, min=2 if v == "seq" else 1, max=64) for v in dyn.values()}
            shapes = tuple({k: dims[v] for k, v in dyn.items()} for _ in names)
            torch.onnx.export(model, args, str(path), input_names=names, output_names=["output"],
                              dynamic_shapes=shapes, dynamo=True, external_data=False, optimize=True)
        else:
            torch.onnx.export(model, args, str(path), input_names=names, output_names=["output"],
                              dynamic_axes={**axes, "output": {0: "batch"}}, opset_version=17, dynamo=False)
    return path


def main():
    import onnx
    summary = {}
    for name, build in MODELS.items():
        for dynamo in (False, True):
            key = f"{name}_{'dynamo' if dynamo else 'torchscript'}"
            try:
                path = export(name, build, dynamo)
                m = onnx.load(str(path))
                ops = sorted({n.op_type for n in m.graph.node})
                summary[key] = {"bytes": path.stat().st_size, "nodes": len(m.graph.node),
                                "opset": m.opset_import[0].version, "ops": ops}
                print(f"{key}: {summary[key]['nodes']} nodes, {summary[key]['bytes']} bytes", flush=True)
            except Exception as e:  # noqa: BLE001 - report every export, keep going
                summary[key] = {"error": f"{type(e).__name__}: {e}"[:2000]}
                traceback.print_exc()
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1))
    print(torch.__version__)


if __name__ == "__main__":
    main()
