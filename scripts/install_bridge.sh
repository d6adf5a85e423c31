#!/usr/bin/env bash
# Create .venv-bridge (or $BRIDGE_VENV) with the wyoming-openai bridge (requirements-bridge.txt) for tests/test_wyoming.py and
# print its interpreter. It needs Python >= 3.12: python3.13/python3.12 on PATH, else a pyenv version.
# Prints nothing (and the test skips with the reason) when no such Python exists or the install fails.
set -uo pipefail
cd "$(dirname "$0")/.."
find_python() {
  local c v
  for c in python3.13 python3.12; do
    if "$c" -c "import sys; assert sys.version_info >= (3, 12)" >/dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    for v in "$(pyenv root)"/versions/3.1[23]*/bin/python3; do
      if [ -x "$v" ]; then echo "$v"; return 0; fi
    done
  fi
  return 1
}
VENV="${BRIDGE_VENV:-.venv-bridge}"  # test.sh may keep it in the machine's cache
want=$(sha256sum requirements-bridge.txt | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
  py=$(find_python) || { echo "no Python >= 3.12 for the wyoming-openai bridge; its test will skip" >&2; exit 0; }
  rm -rf "$VENV"
  { "$py" -m venv "$VENV" && "$VENV/bin/python" -m pip --disable-pip-version-check install -q \
      -r requirements-bridge.txt && echo "$want" > "$VENV/.requirements.sha256"; } >&2 \
    || { echo "warning: the wyoming-openai bridge could not be installed; its test will skip" >&2; rm -rf "$VENV"; exit 0; }
fi
case "$VENV" in /*) echo "$VENV/bin/python" ;; *) echo "$(pwd)/$VENV/bin/python" ;; esac
