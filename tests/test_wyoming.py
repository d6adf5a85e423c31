"""Home Assistant's Wyoming path, end to end on loopback: the app ← wyoming-openai bridge ← a Wyoming client.

The app runs with the offline default voice (no model folder). The `wyoming-openai` bridge forwards a Wyoming
`synthesize` to the app's `POST /v1/audio/speech` (it asks for `response_format: "wav"`), and a client using the
`wyoming` package's AsyncTcpClient plays Home Assistant's part: `describe` → `info`, then `synthesize` →
`audio-start`, `audio-chunk`..., `audio-stop`.

wyoming-openai 0.8.0 needs Python >= 3.12, so it cannot be installed into the app's Python 3.11 venv and is not
in requirements-dev.txt. The test uses it when this interpreter can import it, or when WYOMING_OPENAI_PYTHON names
an interpreter that can (e.g. a Python 3.12 venv with `pip install wyoming-openai==0.8.0`); otherwise it skips.
The Wyoming client runs in that same interpreter, which has the `wyoming` package as the bridge's dependency.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.web_client import free_port

REPO = Path(__file__).resolve().parents[1]
API_KEY = "wyoming-test-key"
TEXT = "Hello from Home Assistant. The kitchen lights are now on."

pytestmark = pytest.mark.slow

# Home Assistant's side of the conversation, run by the bridge's interpreter; prints one JSON line.
CLIENT = r"""
import asyncio, json, sys
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeVoice

async def main(port, voice, text):
    out = {"voices": [], "start": None, "bytes": 0, "chunks": 0, "stop": False, "error": None}
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Describe().event())
        while True:
            event = await asyncio.wait_for(client.read_event(), 20)
            if event is None or Info.is_type(event.type):
                break
        info = Info.from_event(event)
        out["voices"] = [v.name for program in info.tts for v in program.voices]
    async with AsyncTcpClient("127.0.0.1", port) as client:  # Home Assistant opens a connection per request
        await client.write_event(Synthesize(text=text, voice=SynthesizeVoice(name=voice)).event())
        while True:
            event = await asyncio.wait_for(client.read_event(), 120)
            if event is None:
                break
            if AudioStart.is_type(event.type):
                start = AudioStart.from_event(event)
                out["start"] = [start.rate, start.width, start.channels]
            elif AudioChunk.is_type(event.type):
                out["bytes"] += len(AudioChunk.from_event(event).audio)
                out["chunks"] += 1
            elif AudioStop.is_type(event.type):
                out["stop"] = True
                break
            elif Error.is_type(event.type):
                out["error"] = Error.from_event(event).text
                break
    print(json.dumps(out))

asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
"""


def _can_import(python: str, module: str) -> bool:
    try:
        return subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _bridge_python() -> str:
    candidates = [sys.executable]
    if os.environ.get("WYOMING_OPENAI_PYTHON"):
        candidates.insert(0, os.environ["WYOMING_OPENAI_PYTHON"])
    for python in candidates:
        if _can_import(python, "wyoming_openai"):
            return python
    pytest.skip("wyoming_openai is not importable (wyoming-openai 0.8.0 needs Python >= 3.12; set "
                "WYOMING_OPENAI_PYTHON to an interpreter that has it)")


def _log(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _wait(check, proc: subprocess.Popen, log: Path, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{_log(log)}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"{what} not ready after {timeout:.0f} s:\n{_log(log)}")


def _get(url: str, key: str | None = None) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def _listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for proc in reversed(started):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def _start(processes: list, cmd: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "COSYVOICE_API_KEYS"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
    processes.append(proc)
    return proc


@pytest.mark.parametrize("preset", [True, False], ids=["preset-voice", "openai-voice-names"])
def test_wyoming_openai_bridge_speaks_through_the_app(tmp_path: Path, processes: list, preset: bool) -> None:
    """preset: the bridge is told this server's voice; else it offers OpenAI's names (alloy, ...) as is."""
    bridge_python = _bridge_python()
    (tmp_path / "empty_models").mkdir()
    app_port, wyoming_port = free_port(), free_port()
    base = f"http://127.0.0.1:{app_port}"

    app_log = tmp_path / "app.log"
    app = _start(processes, [sys.executable, str(REPO / "app.py"), "--host", "127.0.0.1", "--port", str(app_port),
                             "--models-dir", str(tmp_path / "empty_models"), "--idle-unload", "0",
                             "--api-key", API_KEY], tmp_path, app_log)
    _wait(lambda: _get(f"{base}/health")["status"] == "ok", app, app_log, "the app", 90)
    speakers = _get(f"{base}/v1/models", API_KEY)["data"][0]["speakers"]
    if not speakers:
        pytest.skip("the offline default voice is not installed (requirements-offline.txt): no preset speaker")
    voice = ("jf_gongitsune" if "jf_gongitsune" in speakers else speakers[0]) if preset else "alloy"
    voices = ["--tts-voices", voice] if preset else []

    bridge_log = tmp_path / "bridge.log"
    bridge = _start(processes, [bridge_python, "-m", "wyoming_openai", "--uri", f"tcp://127.0.0.1:{wyoming_port}",
                                "--tts-openai-url", f"{base}/v1", "--tts-openai-key", API_KEY,
                                "--tts-models", "tts-1", *voices, "--languages", "en"],
                    tmp_path, bridge_log)
    _wait(lambda: _listening(wyoming_port), bridge, bridge_log, "the wyoming-openai bridge", 60)

    client = subprocess.run([bridge_python, "-c", CLIENT, str(wyoming_port), voice, TEXT], capture_output=True,
                            text=True, timeout=240, cwd=tmp_path)
    detail = f"client: {client.stdout}{client.stderr}\nbridge:\n{_log(bridge_log)}\napp:\n{_log(app_log)}"
    assert client.returncode == 0, detail
    result = json.loads(client.stdout.strip().splitlines()[-1])

    assert voice in result["voices"], detail  # what Home Assistant lists in its voice picker
    assert result["error"] is None and result["stop"], detail
    assert result["start"] is not None, detail
    rate, width, channels = result["start"]
    assert (width, channels) == (2, 1) and 8000 <= rate <= 48000, detail
    assert result["chunks"] >= 1 and result["bytes"] % (width * channels) == 0, detail
    duration = result["bytes"] / (rate * width * channels)
    assert 0.5 < duration < 30, f"{duration:.2f} s of audio\n{detail}"
    assert f"POST {base}/v1/audio/speech \"HTTP/1.1 200 OK\"" in bridge_log.read_text(errors="replace"), detail
