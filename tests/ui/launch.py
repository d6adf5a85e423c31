"""Start the real app (`app.py`) on a free loopback port in a subprocess, for tests that talk to it over HTTP."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.web_client import free_port

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def running_app(model_dir: Path, work: Path, *flags: str, timeout_s: float = 120) -> Iterator[str]:
    """Yield the base URL ("http://127.0.0.1:PORT/") of `app.py --model-dir model_dir *flags`, run in `work`."""
    with running_app_process(model_dir, work, *flags, timeout_s=timeout_s) as (url, _):
        yield url


@contextlib.contextmanager
def running_app_process(model_dir: Path, work: Path, *flags: str,
                        timeout_s: float = 120) -> Iterator[tuple[str, subprocess.Popen]]:
    """Like `running_app`, yielding (base URL, the server's process) for tests that watch its memory."""
    port = free_port()
    log_path = work / "app.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(REPO / "app.py"), "--model-dir", str(model_dir),
                                 "--port", str(port), "--idle-unload", "0", "--output-dir", str(work / "outputs"),
                                 "--models-dir", str(work / "models"), "--voices-dir", str(work / "voices"), *flags],
                                cwd=work, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(url + "health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("the app exited: " + log_path.read_text()[-2000:])
                if time.monotonic() > deadline:
                    pytest.fail(f"the app did not start within {timeout_s:.0f} s: " + log_path.read_text()[-2000:])
                time.sleep(0.5)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
