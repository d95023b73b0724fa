#!/usr/bin/env bash
# Fetches the trained ONNX models that some PyPI wheels ship, for tests/python/test_real_models.py
# and bench/bench_whole_models.py: `pip download --no-deps` of pinned wheels (scripts/versions.env),
# then only the listed .onnx members are extracted into build/models/real/ and checked against
# their sha256. Never committed. Idempotent: a stamp holds the manifest; files are re-checked.
# Called by scripts/setup.sh unless EP_MLX_FETCH_MODELS=0; needs PyPI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=versions.env
source "$ROOT/scripts/versions.env"
OUT="$ROOT/build/models/real"
WHEELS="$ROOT/build/models/wheels"
PYTHON="$ROOT/.venv/bin/python"
[ -x "$PYTHON" ] || PYTHON="${PYTHON_FALLBACK:-python3}"
log() { printf '[fetch_models] %s\n' "$*"; }

# requirement | pip download extra flags | member inside the wheel | file in build/models/real | sha256
MANIFEST="\
rapidocr-onnxruntime==$RAPIDOCR_ONNXRUNTIME_VERSION||rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx|ppocr_v4_det.onnx|d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9
rapidocr-onnxruntime==$RAPIDOCR_ONNXRUNTIME_VERSION||rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx|ppocr_v4_rec.onnx|48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b
rapidocr-onnxruntime==$RAPIDOCR_ONNXRUNTIME_VERSION||rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx|ppocr_mobile_v2_cls.onnx|e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c
nudenet==$NUDENET_VERSION||nudenet/320n.onnx|nudenet_320n.onnx|c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f
magika==$MAGIKA_VERSION|--only-binary=:all: --platform manylinux_2_28_x86_64|magika/models/standard_v3_3/model.onnx|magika_standard_v3_3.onnx|fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c
silero-vad==$SILERO_VAD_VERSION||silero_vad/data/silero_vad_16k_sequence.onnx|silero_vad_16k_sequence.onnx|9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85
silero-vad==$SILERO_VAD_VERSION||silero_vad/data/silero_vad.onnx|silero_vad.onnx|1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

all_ok=1
while IFS='|' read -r _ _ _ file sha; do sha_ok "$OUT/$file" "$sha" || all_ok=0; done <<< "$MANIFEST"
if [ "$all_ok" = 1 ] && [ -f "$OUT/.manifest" ] && [ "$(cat "$OUT/.manifest")" = "$MANIFEST" ]; then
  log "models up to date in $OUT"
  exit 0
fi

mkdir -p "$OUT" "$WHEELS"
while IFS='|' read -r req flags member file sha; do
  sha_ok "$OUT/$file" "$sha" && continue
  name="${req%%==*}"; version="${req##*==}"
  wheel_glob="$WHEELS/$(echo "$name" | tr '-' '_')-$version-*.whl"
  # shellcheck disable=SC2086
  if ! compgen -G "$wheel_glob" >/dev/null; then
    log "downloading $req"
    # shellcheck disable=SC2086
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps $flags -d "$WHEELS" "$req"
  fi
  wheel=$(compgen -G "$wheel_glob" | head -1)
  "$PYTHON" - "$wheel" "$member" "$OUT/$file.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  if ! sha_ok "$OUT/$file.part" "$sha"; then
    echo "[fetch_models] $member from $wheel: sha256 mismatch" >&2
    rm -f "$OUT/$file.part"
    exit 1
  fi
  mv "$OUT/$file.part" "$OUT/$file"
  log "extracted $file ($(du -h "$OUT/$file" | cut -f1)) from $(basename "$wheel")"
done <<< "$MANIFEST"
echo "$MANIFEST" > "$OUT/.manifest"
rm -rf "$WHEELS"  # the wheels are only a means to the .onnx members
log "done"
