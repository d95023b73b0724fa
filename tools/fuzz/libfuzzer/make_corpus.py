"""Seed corpus and dictionary for the libFuzzer target (fuzz_model.cc).

    python tools/fuzz/libfuzzer/make_corpus.py OUT_DIR

writes OUT_DIR/seeds/ (every ONNX backend node test's model.onnx up to 64 KiB, named after its
test, plus the C++ host test's tiny models) and OUT_DIR/onnx.dict (libFuzzer dictionary: ONNX op
types, attribute names, domains, opset/IR protobuf fields, so that byte mutations can swap in
real names).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MAX_SEED_BYTES = 64 << 10


def node_models(build_dir: Path):
    sys.path.insert(0, str(ROOT / "tests" / "conformance"))
    from node_tests import node_test_dir  # generates the node tests once when the wheel has none

    node_dir, _ = node_test_dir(build_dir)
    for test in sorted(node_dir.iterdir()):
        model = test / "model.onnx"
        if model.is_file() and model.stat().st_size <= MAX_SEED_BYTES:
            yield test.name, model


def dictionary_tokens():
    from onnx import defs

    tokens = set()
    for schema in defs.get_all_schemas_with_history():
        tokens.add(schema.name)
        tokens.update(schema.attributes)
        if schema.domain:
            tokens.add(schema.domain)
    return sorted(t for t in tokens if t.isascii() and t.isprintable() and '"' not in t and "\\" not in t)


def main(out: Path):
    seeds = out / "seeds"
    shutil.rmtree(seeds, ignore_errors=True)
    seeds.mkdir(parents=True)
    count = 0
    for name, model in node_models(ROOT / "build"):
        shutil.copyfile(model, seeds / f"{name}.onnx")
        count += 1
    tiny = out / "tiny"
    subprocess.run([sys.executable, str(ROOT / "tests/cpp/models/make_models.py"), str(tiny)], check=True)
    for model in sorted(tiny.glob("*.onnx")):
        shutil.copyfile(model, seeds / f"host_{model.name}")
        count += 1
    lines = [f'"{t}"' for t in dictionary_tokens()]
    # Protobuf keys of ModelProto.ir_version (1, varint), opset_import (8), OperatorSetIdProto.version (2).
    lines += ['"\\x08\\x08"', '"\\x08\\x0a"', '"\\x42\\x04\\x0a\\x00\\x10"', '"\\x10\\x11"']
    (out / "onnx.dict").write_text("\n".join(lines) + "\n")
    print(f"{count} seeds in {seeds}, {len(lines)} dictionary entries in {out / 'onnx.dict'}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build-fuzz" / "corpus"))
