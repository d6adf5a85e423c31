#!/usr/bin/env bash
# Run the whole test suite (what CI runs):  bash test.sh [pytest args]
# Installs what it needs: .venv with the app + test requirements, Debian's chromium and CJK fonts for the
# browser tests and espeak-ng for the fallback voice's tests (as root, or through passwordless sudo), and the
# Wyoming bridge's own venv. Golden-data tests read ../shared/fixtures: without it they skip with a reason, except
# under CI=true, where a missing fixture fails the run.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v chromium >/dev/null 2>&1 || ! command -v espeak-ng >/dev/null 2>&1 \
    || ! fc-list 2>/dev/null | grep -qi "noto sans cjk"; then
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; fi
  if [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; then
    echo "Installing chromium, fonts and espeak-ng for the tests ..."
    $SUDO apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji espeak-ng \
      podman runc debootstrap \
      || echo "warning: chromium could not be installed; browser tests will be skipped"
  else
    echo "warning: not root and no sudo: install chromium yourself for the browser tests"
  fi
fi

bash scripts/install.sh --dev --serve
# The Home Assistant (Wyoming) bridge test needs Python >= 3.12 in a venv of its own.
WYOMING_OPENAI_PYTHON="$(bash scripts/install_bridge.sh)"
export WYOMING_OPENAI_PYTHON
exec .venv/bin/python -m pytest -q "$@"
