"""Trained models that PyPI wheels ship (fetched by scripts/fetch_models.sh into build/models/real)
and realistic inputs for them, made here from deterministic synthetic data: a text-like page for
the OCR models, a photo-like image for the detector, real file bytes for the file-type model and
a voiced audio signal for the voice-activity detector. Preprocessing follows each package's own.

    REAL_MODELS: name -> (file, make_feeds)
"""
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.path.join(ROOT, "build", "models", "real")


def text_page(height, width, seed):
    """uint8 HxWx3: a light page with dark text-like strokes in lines (glyph-sized blocks)."""
    rng = np.random.default_rng(seed)
    page = np.full((height, width, 3), 235, np.uint8) + rng.integers(0, 15, (height, width, 1), dtype=np.uint8)
    line_h = max(8, height // 6)
    for top in range(line_h // 2, height - line_h, line_h * 2):
        x = int(rng.integers(2, 10))
        while x < width - 8:
            w = int(rng.integers(3, 8))
            strokes = rng.random((line_h, w)) < 0.45
            page[top:top + line_h, x:x + w][strokes] = rng.integers(10, 60)
            x += w + int(rng.integers(1, 4)) + (6 if rng.random() < 0.15 else 0)
    return page


def photo(height, width, seed):
    """uint8 HxWx3: smooth colour gradients, a few shapes and sensor noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
    img = np.stack([120 + 80 * np.sin(3 * xx + 1), 100 + 90 * yy, 140 + 60 * np.cos(4 * xx * yy)], -1)
    for _ in range(4):
        cy, cx, r = rng.uniform(0.2, 0.8) * height, rng.uniform(0.2, 0.8) * width, rng.uniform(0.08, 0.2) * height
        disk = (np.mgrid[0:height, 0:width][0] - cy) ** 2 + (np.mgrid[0:height, 0:width][1] - cx) ** 2 < r * r
        img[disk] = rng.uniform(30, 220, 3)
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def ppocr_input(img):
    """RapidOCR's normalisation: (img / 255 - 0.5) / 0.5, HWC -> NCHW, float32."""
    x = (img.astype(np.float32) / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def ppocr_det_feeds():
    return {"x": ppocr_input(text_page(96, 160, 1))}


def ppocr_rec_feeds():
    # two text lines, height 48 as RapidOCR resizes them
    return {"x": np.concatenate([ppocr_input(text_page(48, 160, s)) for s in (2, 3)])}


def ppocr_cls_feeds():
    return {"x": np.concatenate([ppocr_input(text_page(48, 192, s)) for s in (4, 5)])}


def nudenet_feeds(size=320):
    """NudeNet's YOLOv8 preprocessing: RGB / 255, NCHW, square input."""
    img = photo(size, size, 6)
    return {"images": np.ascontiguousarray((img.astype(np.float32) / 255.0).transpose(2, 0, 1)[None])}


def magika_feeds():
    """Magika v3_3's features: the first and last 1024 bytes of a file (stripped of leading and
    trailing whitespace), padded with token 256; here two real files of this repository."""
    rows = []
    for rel in ("tests/python/harness.py", "README.md"):
        with open(os.path.join(ROOT, rel), "rb") as f:
            data = f.read().strip()
        beg = list(data[:1024]) + [256] * max(0, 1024 - len(data))
        end = [256] * max(0, 1024 - len(data)) + list(data[-1024:])
        rows.append(beg[:1024] + end[-1024:])
    return {"bytes": np.array(rows, np.int32)}


def silero_feeds(seconds=1.0, sr=16000):
    """silero_vad_16k_sequence: [chunks, 64 context + 512 samples] of 16 kHz audio, h and c
    zero. The audio: silence, then a voiced vowel-like tone (pitch + formant harmonics), noise."""
    rng = np.random.default_rng(7)
    t = np.arange(int(seconds * sr)) / sr
    f0 = 140 + 20 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    voiced = sum(a * np.sin(k * phase) for k, a in ((1, 0.5), (2, 0.3), (3, 0.25), (5, 0.15), (7, 0.1)))
    envelope = (t > 0.3) * (t < 0.85) * np.minimum(1, (t - 0.3) * 20)
    audio = (0.3 * voiced * envelope + 0.005 * rng.standard_normal(t.size)).astype(np.float32)
    chunks = audio[: audio.size // 512 * 512].reshape(-1, 512)
    context = np.concatenate([np.zeros((1, 64), np.float32), chunks[:-1, -64:]])
    return {"input": np.ascontiguousarray(np.concatenate([context, chunks], axis=1)),
            "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}


def silero_vad_feeds():
    """silero_vad (the streaming model, whose network sits in an If on the sample rate `sr`):
    the chunks of silero_feeds as a batch of 16 kHz windows (64 context + 512 samples), state zero."""
    chunks = silero_feeds()["input"][:8]
    return {"input": chunks, "state": np.zeros((2, chunks.shape[0], 128), np.float32),
            "sr": np.array(16000, np.int64)}


REAL_MODELS = {
    "ppocr_v4_det": ("ppocr_v4_det.onnx", ppocr_det_feeds),
    "ppocr_v4_rec": ("ppocr_v4_rec.onnx", ppocr_rec_feeds),
    "ppocr_mobile_v2_cls": ("ppocr_mobile_v2_cls.onnx", ppocr_cls_feeds),
    "nudenet_320n": ("nudenet_320n.onnx", nudenet_feeds),
    "magika_standard_v3_3": ("magika_standard_v3_3.onnx", magika_feeds),
    "silero_vad_16k_sequence": ("silero_vad_16k_sequence.onnx", silero_feeds),
    "silero_vad": ("silero_vad.onnx", silero_vad_feeds),
}


def model_path(name):
    return os.path.join(MODEL_DIR, REAL_MODELS[name][0])
