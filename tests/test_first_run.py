"""A newcomer's first tries on a fresh clone with no model folder (the offline default voice speaks):
`synth --text … --out …`, `curl /tts -d '{"text": …}'`, and the official `openai` client with
`voice="alloy"` in mp3 and opus, plain and streaming. The app runs as a real process on loopback.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import soundfile as sf

from .offline.conftest import require_offline
from tests.web_client import free_port

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "COSYVOICE_API_KEYS": ""}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    require_offline()
    work = tmp_path_factory.mktemp("fresh")  # no pretrained_models/ here: a fresh clone
    port = free_port()
    log = open(work / "app.log", "w")
    proc = subprocess.Popen([sys.executable, str(REPO / "app.py"), "--port", str(port), "--idle-unload", "0"],
                            cwd=work, stdout=log, stderr=subprocess.STDOUT, env=_env())
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the app did not start: " + (work / "app.log").read_text()[-2000:])
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _seconds(data: bytes, suffix: str, tmp_path: Path) -> float:
    """Duration of an encoded file, decoded by ffmpeg."""
    from cosyvoice_ui.audio import ffmpeg_path

    path = tmp_path / f"audio{suffix}"
    path.write_bytes(data)
    wav = tmp_path / f"decoded-{suffix.strip('.')}.wav"
    subprocess.run([ffmpeg_path(), "-loglevel", "error", "-y", "-i", str(path), str(wav)], check=True)
    samples, rate = sf.read(wav)
    return len(samples) / rate


def test_cli_synth_with_only_text_and_out(tmp_path: Path) -> None:
    require_offline()
    done = subprocess.run([sys.executable, "-m", "cosyvoice_ui", "synth", "--text", "Hello there", "--out", "a.wav"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    samples, rate = sf.read(tmp_path / "a.wav")
    assert rate == 24000 and 0.4 < len(samples) / rate < 5.0


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_tts_with_only_text(server: str) -> None:
    # Exactly the seed service's call: curl's -d labels the JSON as a form, and that must not matter.
    done = subprocess.run(["curl", "-s", "-S", "--max-time", "120", f"{server}/tts", "-d", '{"text": "Hello there"}'],
                          capture_output=True, timeout=150)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    samples, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
    assert rate == 24000 and len(samples) / rate > 0.4
    assert body["voice"] == "jf_gongitsune" and body["format"] == "wav"


@pytest.mark.parametrize("fmt, suffix, magic", [("mp3", ".mp3", None), ("opus", ".opus", b"OggS")])
def test_openai_client_with_alloy(server: str, tmp_path: Path, fmt: str, suffix: str, magic: bytes | None) -> None:
    openai = pytest.importorskip("openai", reason="the openai package is not installed (requirements-dev.txt)")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="not-needed-on-loopback", max_retries=0, timeout=120)
    response = client.audio.speech.create(model="tts-1", voice="alloy", input="Hello from an OpenAI client.",
                                          response_format=fmt)
    data = response.read()
    if magic:
        assert data.startswith(magic)
    assert 0.8 < _seconds(data, suffix, tmp_path) < 10.0
    # the streaming helper reads the same audio in pieces
    with client.audio.speech.with_streaming_response.create(model="gpt-4o-mini-tts", voice="onyx", input="Streaming.",
                                                            response_format=fmt) as streamed:
        assert streamed.headers["content-type"] in ("audio/mpeg", "audio/ogg")
        pieces = list(streamed.iter_bytes(4096))
    assert sum(map(len, pieces)) > 1000
    assert 0.3 < _seconds(b"".join(pieces), suffix, tmp_path) < 10.0


def test_openai_client_errors_are_openai_exceptions(server: str) -> None:
    openai = pytest.importorskip("openai", reason="the openai package is not installed (requirements-dev.txt)")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="x", max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError) as missing:
        client.audio.speech.create(model="dall-e-3", voice="alloy", input="hi")
    assert missing.value.code == "model_not_found" and "tts-1" in str(missing.value)
    with pytest.raises(openai.UnprocessableEntityError) as bad_voice:
        client.audio.speech.create(model="tts-1", voice="no-such-voice", input="hi")
    assert bad_voice.value.body["param"] == "voice" and bad_voice.value.body["type"] == "invalid_request_error"


def test_voices_endpoint_lists_presets_and_aliases(server: str) -> None:
    with urllib.request.urlopen(f"{server}/v1/audio/voices", timeout=30) as response:
        listing = json.load(response)
    kinds = {entry["kind"] for entry in listing["data"]}
    assert {"preset", "alias"} <= kinds
    assert listing["default"] == {"id": "jf_gongitsune", "kind": "preset"}
    assert listing["aliases"]["onyx"] == "jm_kumo"
