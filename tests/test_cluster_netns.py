"""Runs tests/cluster on a real local Ray cluster, inside a fresh network namespace where only loopback is up.

Ray binds its services to the machine's external address and Serve's replicas listen on every interface, so the
cluster tests never run in the test process's own namespace: `unshare -n` gives them one with `lo` alone (no
traffic can leave loopback), and they are told to use 127.0.0.1. Skipped where Ray Serve is not installed or no
namespace can be made (not root); under CI=true both are failures.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"
INNER_TIMEOUT_S = 900

pytestmark = pytest.mark.slow  # a real Ray cluster: minutes


def _unavailable() -> str | None:
    if importlib.util.find_spec("ray") is None:
        return "Ray Serve is not installed (pip install -r requirements-serve.txt)"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is missing (util-linux, iproute2)"
    probe = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"no network namespace can be made here ({probe.stderr.strip() or 'not root'})"
    return None


def test_cluster_suite_in_a_loopback_only_namespace():
    reason = _unavailable()
    if reason:
        if IN_CI:
            pytest.fail(f"the cluster tests must run in CI: {reason}")
        pytest.skip(reason)
    env = {**os.environ, "COSYVOICE_NETNS": "1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(name, None)
    inner = (f"ip link set lo up && exec {sys.executable} -m pytest -q -s -p no:cacheprovider "
             "-W ignore::DeprecationWarning tests/cluster")
    run = subprocess.run(["unshare", "-n", "bash", "-c", inner], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=INNER_TIMEOUT_S)
    output = run.stdout + run.stderr
    report = [line for line in output.splitlines()
              if line.startswith(("cluster up", "scaled to zero", "cold start", "killed replica"))]
    print("\n".join(report))
    summary = [line for line in output.splitlines() if " passed" in line or " failed" in line or "error" in line]
    assert run.returncode == 0, output[-8000:]
    assert summary and "failed" not in summary[-1], output[-4000:]
