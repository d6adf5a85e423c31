#!/usr/bin/env bash
# Run the whole test suite (what CI runs):  bash test.sh [pytest args]
#   bash test.sh --fast [pytest args]   the inner-loop tier: everything not marked slow (-m "not slow": no browser,
#                                       no app server in a subprocess, no cluster, no container image), under 5 min
# Every run ends with its 30 slowest test phases (--durations=30), so CI's log shows where the time goes.
# Installs what it needs: .venv with the app + test requirements, Debian's chromium and CJK fonts for the
# browser tests, espeak-ng for the fallback voice's tests and podman/runc/debootstrap for the container image test
# (as root, or through passwordless sudo), Ray Serve for the cluster tests (requirements-serve.txt; they run in a
# network namespace with only loopback), and the Wyoming bridge's own venv. Golden-data tests read ../shared/fixtures: without it they skip with a reason, except
# under CI=true, where a missing fixture fails the run.
set -euo pipefail
cd "$(dirname "$0")"

selection=()
args=()
for arg in "$@"; do
  if [ "$arg" = --fast ]; then selection=(-m "not slow"); else args+=("$arg"); fi
done

missing_tools() {  # (no grep -q after a pipe: under pipefail its early exit fails fc-list, so apt ran every time)
  command -v chromium >/dev/null 2>&1 && command -v espeak-ng >/dev/null 2>&1 \
    && fc-list 2>/dev/null | grep -i "noto sans cjk" >/dev/null && command -v podman >/dev/null 2>&1 \
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

# CI runs in a fresh clone, where a venv inside the clone is always new (a 3-7 minute install). So where the clone
# has no .venv (or .venv-bridge) of its own, the venv is kept in the machine's cache instead, one per set of inputs
# (the requirement files, the install script, the Python): a machine that ran the suite before reuses it; a new
# machine, or a changed input, installs afresh. `pip freeze` is recorded after each install and compared before
# each reuse: a cached venv that anything else changed is made again, so a green run never rests on a package
# installed by hand. A developer's own .venv is used as before. COSYVOICE_VENV_CACHE=0 turns the cache off.
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/cosyvoice_ui/venvs"
venv_for() {  # venv_for NAME FILES...: the venv to use for NAME (./NAME, or the cached one for FILES)
  local name=$1; shift
  if [ -e "$name" ] || [ "${COSYVOICE_VENV_CACHE:-1}" = 0 ]; then echo "$name"; return; fi
  local key dir
  key=$({ cat "$@"; "${PYTHON:-python3}" -V 2>&1; uname -m; } | sha256sum | cut -c1-16)
  dir="$cache_root/${name#.}-$key"
  if [ -d "$dir" ] && ! { [ -f "$dir/.freeze" ] \
       && "$dir/bin/python" -m pip --disable-pip-version-check freeze 2>/dev/null | cmp -s - "$dir/.freeze"; }; then
    echo "The cached venv $dir is not as it was installed: installing it again." >&2
    rm -rf "$dir"
  fi
  mkdir -p "$cache_root"; if [ -d "$dir" ]; then touch "$dir"; fi
  # This one and the two used last of its kind stay; older ones go.
  ls -dt "$cache_root/${name#.}"-* 2>/dev/null | grep -vxF "$dir" | tail -n +3 | xargs -r rm -rf
  echo "$dir"
}
record_freeze() {  # record_freeze VENV: what a cached venv holds after its install
  case "$1" in "$cache_root"/*)
    if [ -x "$1/bin/python" ]; then
      "$1/bin/python" -m pip --disable-pip-version-check freeze > "$1/.freeze.part" && mv "$1/.freeze.part" "$1/.freeze"
    fi ;;
  esac
}
# One install at a time into the shared cache (two clones on one machine).
if command -v flock >/dev/null 2>&1; then mkdir -p "$cache_root" && exec 9>"$cache_root/.lock" && flock 9; fi
venv=$(venv_for .venv requirements*.txt scripts/install.sh)
VENV="$venv" bash scripts/install.sh --dev --serve
record_freeze "$venv"
# The Home Assistant (Wyoming) bridge test needs Python >= 3.12 in a venv of its own.
bridge=$(venv_for .venv-bridge requirements-bridge.txt scripts/install_bridge.sh)
WYOMING_OPENAI_PYTHON="$(BRIDGE_VENV="$bridge" bash scripts/install_bridge.sh)"
if [ -n "$WYOMING_OPENAI_PYTHON" ]; then record_freeze "$bridge"; fi
export WYOMING_OPENAI_PYTHON
exec 9>&-
# Two workers (pytest-xdist): the tests run torch on one thread each, so one pytest leaves the second core idle.
# Each file stays on one worker (tests/conftest.py); TEST_WORKERS=0 runs everything in one process.
workers=(-n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
if [ "${TEST_WORKERS:-2}" = 0 ]; then workers=(); fi
# (the ${x[@]+...} form: an empty array under set -u in the bash 3.2 of macOS)
exec "$venv/bin/python" -m pytest -q --durations=30 ${workers[@]+"${workers[@]}"} ${selection[@]+"${selection[@]}"} ${args[@]+"${args[@]}"}
