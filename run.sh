#!/usr/bin/env bash
# Start CosyVoice Studio (web UI + REST API on http://127.0.0.1:7860).
#
#   bash run.sh [app.py flags]        e.g.  bash run.sh --share --auth me:secret
#
# First run: creates .venv, installs requirements (torch as the CPU build unless a GPU is found), and, when the
# model hub is reachable and no model is given or found, downloads the recommended model (Fun-CosyVoice3-0.5B,
# 3.4 GB) into pretrained_models/. Later runs start in seconds.
# Environment:
#   TORCH_VARIANT=auto|cpu|cuda   which torch build to install (auto: cuda when `nvidia-smi -L` works)
#   COSYVOICE_AUTO_DOWNLOAD=0     never download a model (the offline default voice is used until you add one)
#   PYTHON=python3.11             interpreter used to create .venv
set -euo pipefail
cd "$(dirname "$0")"

bash scripts/install.sh
PY=.venv/bin/python

# A model given (--model-dir, --engine-url) or only help asked for: nothing to download. The models folder is
# where the app looks (--models-dir, default pretrained_models), so a model there counts and a download goes there.
given_model=0
models_dir=pretrained_models
previous=""
for arg in "$@"; do
  case "$arg" in
    --model-dir|--model-dir=*|--engine-url|--engine-url=*|-h|--help) given_model=1 ;;
    --models-dir=*) models_dir=${arg#--models-dir=} ;;
  esac
  if [ "$previous" = --models-dir ]; then models_dir=$arg; fi
  previous=$arg
done
if [ "${COSYVOICE_AUTO_DOWNLOAD:-1}" != 0 ] && [ "$given_model" = 0 ] \
    && ! "$PY" -c "import sys; from pathlib import Path; from cosyvoice_ui.cosyvoice.hub import find_models; sys.exit(0 if find_models(Path(sys.argv[1])) else 1)" "$models_dir"; then
  if "$PY" -c "import sys; from cosyvoice_ui.cosyvoice.hub import hub_reachable; sys.exit(0 if hub_reachable(3) else 1)"; then
    recommended=$("$PY" -c "from cosyvoice_ui.known_models import recommended_model as r; m = r(); print(f'{m.name} {m.size_gb:.1f}')")
    name=${recommended% *}
    echo "No model in $models_dir yet: downloading $name (${recommended#* } GB; Ctrl-C to skip, COSYVOICE_AUTO_DOWNLOAD=0 to never ask;"
    echo "CosyVoice-300M-SFT, 1.7 GB, stays one click away in the model panel)"
    "$PY" -m cosyvoice_ui download "$name" --models-dir "$models_dir" \
      || echo "download failed; continuing with the offline default voice"
  else
    echo "No model in $models_dir yet and the model hub is unreachable: starting with the offline default voice."
  fi
fi

exec "$PY" app.py "$@"
