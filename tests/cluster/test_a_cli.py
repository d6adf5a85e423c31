"""`python -m cosyvoice_ui cluster ... --ui-port N` end to end, as a user runs it: a local head, the API on one port,
the thin-client UI on another, a request through each, and Ctrl-C for a clean stop. Runs first (file order),
before the session's cluster exists."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from conftest import API_KEY

ROOT = Path(__file__).resolve().parents[2]
API_PORT, UI_PORT = 8771, 8772


def wait_healthy(url: str, deadline: float) -> dict:
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{url}/health", timeout=5)
            if response.status_code == 200:
                return response.json()
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"{url} did not answer /health in time")


def test_cluster_command_serves_the_api_and_the_thin_ui(cluster_root):
    command = [sys.executable, "-m", "cosyvoice_ui", "cluster", "--models", "tiny-a", "--models-dir",
               str(cluster_root / "models"), "--voices-dir", str(cluster_root / "cli-voices"), "--port", str(API_PORT),
               "--ui-port", str(UI_PORT), "--replica-cpus", "0.25", "--api-key", API_KEY, "--idle-unload", "0",
               "--output-dir", str(cluster_root / "cli-out"), "--projects-dir", str(cluster_root / "cli-projects"),
               "--glossary-dir", str(cluster_root / "cli-glossaries"), "--take-retries", "0"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        api = wait_healthy(f"http://127.0.0.1:{API_PORT}", deadline)
        assert api["cluster"]["replicas"]["running"] == 1
        ui = wait_healthy(f"http://127.0.0.1:{UI_PORT}", deadline)
        assert ui["engine_url"] == f"http://127.0.0.1:{API_PORT}"  # the UI process is a thin client
        headers = {"Authorization": f"Bearer {API_KEY}"}
        body = {"text": "Through the command line's cluster.", "mode": "sft", "speaker": "英文女", "seed": 3}
        for port in (API_PORT, UI_PORT):
            response = httpx.post(f"http://127.0.0.1:{port}/tts", json=body, headers=headers, timeout=120)
            assert response.status_code == 200, response.text
        os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0, output[-3000:]
        assert "CosyVoice Studio cluster on http://127.0.0.1:8771" in output
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
