#!/usr/bin/env bash
# Run the whole test suite (what CI runs):  bash test.sh [pytest args]
# Installs what it needs: .venv with the app + test requirements, Debian's chromium and CJK fonts for the
# browser tests, espeak-ng for the fallback voice's tests and podman/runc/debootstrap for the container image test
# (as root, or through passwordless sudo), Ray Serve for the cluster tests (requirements-serve.txt; they run in a
# network namespace with only loopback), and the Wyoming bridge's own venv. Golden-data tests read ../shared/fixtures: without it they skip with a reason, except
# under CI=true, where a missing fixture fails the run.
set -euo pipefail
cd "$(dirname "$0")"

missing_tools() {
  command -v chromium >/dev/null 2>&1 && command -v espeak-ng >/dev/null 2>&1 \
    && fc-list 2>/dev/null | grep -qi "noto sans cjk" && command -v podman >/dev/null 2>&1 \
    && command -v runc >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 && return 1
  return 0
}
if missing_tools; then
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; fi
  if [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; then
    echo "Installing chromium, fonts and espeak-ng (and podman, runc, debootstrap for the image test) ..."
    $SUDO apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji espeak-ng \
      || echo "warning: chromium could not be installed; browser tests will be skipped"
    # The container image test (tests/test_container_image.py) builds the real image with these; without them it
    # skips with the reason and the host-venv stand-in (tests/test_containers.py) runs instead.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq podman runc debootstrap \
      || echo "warning: podman could not be installed; the container image will not be built"
  else
    echo "warning: not root and no sudo: install chromium yourself for the browser tests"
  fi
fi

bash scripts/install.sh --dev --serve
# The Home Assistant (Wyoming) bridge test needs Python >= 3.12 in a venv of its own.
WYOMING_OPENAI_PYTHON="$(bash scripts/install_bridge.sh)"
export WYOMING_OPENAI_PYTHON
exec .venv/bin/python -m pytest -q "$@"
