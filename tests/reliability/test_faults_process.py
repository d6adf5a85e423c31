"""SIGTERM during a job (issue 13, fault tests): the real server (`python -m cosyvoice_ui serve`, tiny model,
127.0.0.1) gets SIGTERM while it streams a result. The shutdown is graceful: the running job finishes (the
client gets the whole audio), work that arrives meanwhile is refused with a clear 503 + Retry-After (or the
closed port refuses the connection), the process exits with code 0, and nothing is left half-written.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from cosyvoice_ui.serving.voices import VoiceLibrary

from .test_faults_storage import clip_b64
from tests.web_client import free_port

REPO = Path(__file__).resolve().parents[2]
START_S = 240.0  # bounds only: a loaded CI machine imports gradio and torch slowly
JOB_S = 600.0  # a loaded 2-core machine runs the tiny model ~10x slower than real time
TEXT = " ".join(["The quick brown fox jumps over the lazy dog, and then it runs far away."] * 2)


class Stream(threading.Thread):
    """A streamed /v1/audio/speech request: how many bytes came, whether it ended cleanly or how it failed."""

    def __init__(self, url: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.first_bytes = threading.Event()
        self.status = 0
        self.size = 0
        self.complete = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + "v1/audio/speech", json=self.body, timeout=JOB_S) as response:
                self.status = response.status_code
                for piece in response.iter_bytes():
                    self.size += len(piece)
                    self.first_bytes.set()
            self.complete = True
        except BaseException as exc:  # recorded for the test
            self.error = exc
        finally:
            self.first_bytes.set()


@pytest.fixture()
def server(tiny_sft: Path, tmp_path: Path):
    port = free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cosyvoice_ui", "serve", "--model-dir", str(tiny_sft), "--port", str(port),
             "--host", "127.0.0.1", "--device", "cpu", "--idle-unload", "0", "--output-dir",
             str(tmp_path / "outputs"), "--models-dir", str(tmp_path / "models"), "--voices-dir",
             str(tmp_path / "voices")],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                if httpx.get(url + "health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                pytest.fail("the server exited: " + log_path.read_text()[-2000:])
            if time.monotonic() > deadline:
                pytest.fail("the server did not start: " + log_path.read_text()[-2000:])
            time.sleep(0.5)
        yield url, proc, log_path, tmp_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


@pytest.mark.slow
def test_sigterm_during_a_job_finishes_it_refuses_new_work_and_exits_0(server) -> None:
    url, proc, log_path, work = server
    saved = httpx.post(url + "v1/voices", json={"name": "Kept", "transcript": "hello", "audio": clip_b64()},
                       timeout=JOB_S)
    assert saved.status_code == 201, saved.text
    body = {"input": TEXT, "voice": "英文女", "stream_format": "audio", "response_format": "pcm", "seed": 11}
    reference = Stream(url, {**body, "normalize": False})  # the same audio (other gain, no cache hit)
    reference.run()
    assert reference.complete and reference.status == 200 and reference.size > 0, reference.error

    stream = Stream(url, body)
    stream.start()
    assert stream.first_bytes.wait(JOB_S) and stream.error is None
    assert not stream.complete, "the job ended before SIGTERM: make TEXT longer"
    proc.send_signal(signal.SIGTERM)
    try:  # work that arrives during the shutdown: refused by the manager, or by a closed port
        late = httpx.post(url + "v1/audio/speech", json={**body, "seed": 12, "stream_format": None},
                          timeout=JOB_S)
        assert late.status_code == 503 and late.json()["error"]["code"] == "shutting_down", late.text
        assert int(late.headers["Retry-After"]) > 0
    except httpx.TransportError:
        pass
    stream.join(JOB_S)
    assert stream.error is None and stream.complete and stream.status == 200, f"the job was cut: {stream.error!r}"
    assert stream.size == reference.size, "the client got part of the audio"
    assert proc.wait(JOB_S) == 0, "a graceful stop did not exit with 0: " + log_path.read_text()[-2000:]
    log = log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    leftovers = [p.name for p in work.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".staging")]
    assert not leftovers, f"half-written files: {leftovers}"
    library = VoiceLibrary(work / "voices")
    assert library.ids() == ("kept",) and library.audio("kept").duration > 3


# --- the same on a slow fake engine: fast, so it runs in every pass ------------------------------------------

FAKE_SERVER = """
import sys

from fastapi import FastAPI
import uvicorn

from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.web.server import graceful_server

engine = FakeEngine(name="fake-model", speakers=("alice",), chunks=60, chunk_samples=800, chunk_delay_s=0.05)
manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                       describe_model=lambda mid: engine.info)
app = FastAPI()
add_routes(app, manager, Settings(voices_dir=sys.argv[2], rate_limit_per_min=0))
server = graceful_server(uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning"), manager)
try:
    server.run()
finally:
    manager.shutdown()
    print("released:", engine.closed, flush=True)
"""


def test_graceful_server_finishes_the_stream_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen([sys.executable, str(script), str(port), str(tmp_path / "voices")],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                if httpx.get(url + "health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "the fake server did not start"
                time.sleep(0.2)
        stream = Stream(url, {"input": "hello", "voice": "alice", "stream_format": "audio",
                              "response_format": "pcm", "seed": 1})
        stream.start()
        assert stream.first_bytes.wait(JOB_S) and not stream.complete
        proc.send_signal(signal.SIGTERM)
        stream.join(JOB_S)
        assert stream.error is None and stream.complete and stream.size == 60 * 800 * 2, \
            f"the in-flight stream was cut at {stream.size} bytes: {stream.error!r}"
        assert proc.wait(JOB_S) == 0, "SIGTERM did not end the server with exit code 0"
        output = proc.stdout.read()
        assert "released: True" in output and "Traceback" not in output, output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
