"""A client that disconnects mid-stream (issue 13, fault tests): on a real uvicorn server on 127.0.0.1, a raw
socket reads the first audio of a streamed response and hangs up. The job must be cancelled (the engine
stops producing soon after, long before its last chunk) and the queue must move on to the next request.

The engine is a slow `FakeEngine` (many short chunks) that counts what it produced.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode

CHUNKS = 250  # at CHUNK_DELAY_S each: a job nobody cancels runs for ~2.5 s
CHUNK_SAMPLES = 800
CHUNK_DELAY_S = 0.01
WAIT_S = 20.0


class CountingEngine(FakeEngine):
    """A FakeEngine that counts the chunks it produced."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.produced = 0
        self.cancel_flag: threading.Event | None = None  # the last job's

    def _synthesize(self, request, progress, cancel):
        self.cancel_flag = cancel
        for chunk in super()._synthesize(request, progress, cancel):
            self.produced += 1
            yield chunk


def wait_until(condition, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for: {what}")
        time.sleep(0.02)


@pytest.fixture()
def server(tmp_path: Path):
    """(base url, manager, engine) of a real uvicorn server in a thread, on a free loopback port."""
    import uvicorn

    engine = CountingEngine(name="fake-model", modes=(Mode.SFT,), speakers=("alice",), chunks=CHUNKS,
                            chunk_samples=CHUNK_SAMPLES, chunk_delay_s=CHUNK_DELAY_S)
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    app = FastAPI()
    add_routes(app, manager, Settings(voices_dir=tmp_path / "voices", rate_limit_per_min=0,
                                    check_takes=False))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=uv.run, name="uvicorn", daemon=True)
    thread.start()
    wait_until(lambda: uv.started, "uvicorn started")
    yield f"http://127.0.0.1:{port}", port, manager, engine
    uv.should_exit = True
    engine.release.set()
    thread.join(WAIT_S)


def read_first_audio_and_hang_up(port: int, path: str, body: dict) -> bytes:
    """POST `body`, read until some of the body has arrived, then close the socket (a client that left)."""
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(head + data)
        while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < 64:
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
    return received


STREAMS = [
    ("/v1/audio/speech", {"input": "hello there", "voice": "alice", "stream_format": "audio",
                          "response_format": "pcm"}),
    ("/v1/audio/speech", {"input": "hello there", "voice": "alice", "stream_format": "sse",
                          "response_format": "pcm"}),
    ("/tts", {"text": "hello there", "speaker": "alice", "stream": True, "format": "wav"}),
]


@pytest.mark.parametrize(("path", "body"), STREAMS, ids=["speech-audio", "speech-sse", "tts-stream"])
def test_disconnect_mid_stream_cancels_the_job_and_the_queue_moves_on(server, path: str, body: dict) -> None:
    url, port, manager, engine = server
    received = read_first_audio_and_hang_up(port, path, {**body, "seed": 1})
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    wait_until(lambda: not manager.busy, "the abandoned job left its slot")
    assert engine.cancel_flag is not None and engine.cancel_flag.is_set(), "the job was never cancelled"
    stopped_at = engine.produced
    print(f"{path}: the engine stopped after {stopped_at} of {CHUNKS} chunks")
    assert 0 < stopped_at < CHUNKS // 2, f"the engine made {stopped_at} of {CHUNKS} chunks for nobody"
    # The queue moved on: the next request is served whole.
    response = httpx.post(url + "/v1/audio/speech", json={"input": "hello again", "voice": "alice",
                                                           "response_format": "pcm", "seed": 2}, timeout=WAIT_S)
    assert response.status_code == 200
    assert len(response.content) == 2 * CHUNKS * CHUNK_SAMPLES, "the next request's audio is incomplete"
    assert engine.produced == stopped_at + CHUNKS, "the abandoned job kept producing after it was cancelled"


def test_a_client_waiting_in_the_queue_that_leaves_does_not_block_it(server) -> None:
    """A streamed request queued behind a running one, whose client hangs up: the running job and the next
    request still complete, and nothing stays queued."""
    url, port, manager, engine = server
    engine.release.clear()
    first: list[httpx.Response] = []
    runner = threading.Thread(target=lambda: first.append(httpx.post(
        url + "/v1/audio/speech", json={"input": "one", "voice": "alice", "response_format": "pcm", "seed": 3},
        timeout=WAIT_S)), daemon=True)
    runner.start()
    assert engine.started.wait(WAIT_S)
    data = json.dumps({"input": "two", "voice": "alice", "stream_format": "audio", "response_format": "pcm",
                       "seed": 4}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall((f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(data)}\r\n\r\n").encode() + data)
        wait_until(lambda: manager.status().queued == 1, "the streamed request queued")
    engine.release.set()
    runner.join(WAIT_S)
    assert first and first[0].status_code == 200 and len(first[0].content) == 2 * CHUNKS * CHUNK_SAMPLES
    wait_until(lambda: not manager.busy, "the queue drained")
    response = httpx.post(url + "/v1/audio/speech", json={"input": "three", "voice": "alice",
                                                           "response_format": "pcm", "seed": 5}, timeout=WAIT_S)
    assert response.status_code == 200 and len(response.content) == 2 * CHUNKS * CHUNK_SAMPLES
