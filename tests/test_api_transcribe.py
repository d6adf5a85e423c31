"""REST transcription (issue 15): POST /v1/transcribe (JSON, base64), POST /v1/audio/transcriptions (OpenAI's
multipart shape, json or text), GET /v1/asr/models; the clear 422 when no recogniser here speaks a language, and
the audio error codes for bad recordings.

A fake recogniser for the orchestration; the real `Transcriber` where it refuses before loading anything; one
end-to-end run on the tiny Whisper (random weights: its words are noise, but real ones).
"""

from __future__ import annotations

import base64
import io
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.api.studio_service import StudioService
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.serving.transcription import POCKETSPHINX, AsrChoice, Transcript, shared_transcriber
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Audio
from tests.web_client import LOOPBACK

TINY = "tiny-whisper"


def wav_bytes(audio: Audio) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, audio.samples, audio.sample_rate, format="WAV")
    return buffer.getvalue()


CLIP = wav_bytes(voice_clip(2.0))


class FakeTranscriber:
    """Hears "hello world" in any recording; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[float, str | None, str | None]] = []

    def transcribe(self, audio: Audio, language=None, progress=None, backend=None) -> Transcript:
        self.asked.append((audio.duration, language, backend))
        return Transcript("hello world", language or "en", backend or "fake-whisper")

    def available(self) -> list[str]:
        return ["fake-whisper"]

    def choices(self) -> list[AsrChoice]:
        return [AsrChoice("fake-whisper", "a fake", 0.1, True), AsrChoice("whisper-small", "Whisper small", 1.0, False)]


def client_for(tmp_path: Path, **settings) -> TestClient:
    engine = FakeEngine()
    config = Settings(**{"voices_dir": tmp_path / "voices", "glossary_dir": tmp_path / "glossaries",
                         "models_dir": tmp_path / "models", "idle_unload_s": 0, **settings})
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    app = FastAPI(docs_url=None)
    add_routes(app, manager, config)
    return TestClient(app, base_url=LOOPBACK)


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeTranscriber:
    transcriber = FakeTranscriber()
    monkeypatch.setattr(StudioService, "transcriber", lambda self: transcriber)
    return transcriber


def error_of(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def test_json_route_transcribes_base64_audio(tmp_path: Path, fake: FakeTranscriber) -> None:
    client = client_for(tmp_path)
    response = client.post("/v1/transcribe", json={"audio": base64.b64encode(CLIP).decode(), "language": "en"})
    assert response.status_code == 200, response.text
    assert response.json() == {"text": "hello world", "language": "en", "backend": "fake-whisper", "rough": False,
                               "seconds": 2.0}
    assert fake.asked == [(2.0, "en", None)]
    data_url = "data:audio/wav;base64," + base64.b64encode(CLIP).decode()
    assert client.post("/v1/transcribe", json={"audio": data_url, "model": "whisper-small"}).status_code == 200
    assert fake.asked[-1] == (2.0, None, "whisper-small")
    # The offline recogniser's transcript is marked rough, on both routes, so a client can ask for a check.
    rough = client.post("/v1/transcribe", json={"audio": data_url, "model": POCKETSPHINX}).json()
    assert rough["backend"] == POCKETSPHINX and rough["rough"] is True
    files = {"file": ("sample.wav", CLIP, "audio/wav")}
    openai = client.post("/v1/audio/transcriptions", files=files, data={"model": POCKETSPHINX}).json()
    assert openai["backend"] == POCKETSPHINX and openai["rough"] is True


def test_openai_multipart_route_answers_json_or_text(tmp_path: Path, fake: FakeTranscriber) -> None:
    client = client_for(tmp_path)
    files = {"file": ("sample.wav", CLIP, "audio/wav")}
    response = client.post("/v1/audio/transcriptions", files=files, data={"model": "whisper-1", "language": "en"})
    assert response.status_code == 200, response.text
    assert response.json() == {"text": "hello world", "language": "en", "duration": 2.0, "backend": "fake-whisper",
                               "rough": False}
    assert fake.asked[-1] == (2.0, "en", None)  # whisper-1 means "the server's recogniser"
    text = client.post("/v1/audio/transcriptions", files=files, data={"response_format": "text"})
    assert text.status_code == 200 and text.text == "hello world"
    assert text.headers["content-type"].startswith("text/plain")


def test_server_setting_chooses_the_recogniser(tmp_path: Path, fake: FakeTranscriber) -> None:
    client = client_for(tmp_path, asr_model="whisper-base")
    client.post("/v1/audio/transcriptions", files={"file": ("a.wav", CLIP, "audio/wav")}, data={"model": "whisper-1"})
    assert fake.asked[-1][2] == "whisper-base"


def test_bad_requests_and_bad_audio_get_their_codes(tmp_path: Path, fake: FakeTranscriber) -> None:
    client = client_for(tmp_path)
    assert error_of(client.post("/v1/transcribe", json={"audio": "not base64!"})) == (422, "audio_not_base64")
    not_audio = base64.b64encode(b"this is not a sound file at all").decode()
    assert error_of(client.post("/v1/transcribe", json={"audio": not_audio})) == (422, "audio_unreadable")
    assert error_of(client.post("/v1/transcribe", json={"audio": ""})) == (422, "audio_missing")
    assert error_of(client.post("/v1/transcribe", json={})) == (422, "invalid_field")
    assert error_of(client.post("/v1/audio/transcriptions", json={"file": "x"})) == (415, "unsupported_media_type")
    assert error_of(client.post("/v1/audio/transcriptions", files={"other": ("a.wav", CLIP)})) == \
        (422, "audio_missing")
    assert error_of(client.post("/v1/audio/transcriptions", files={"file": ("a.wav", CLIP)},
                                data={"response_format": "srt"})) == (422, "bad_response_format")
    assert error_of(client.post("/v1/audio/transcriptions", files={"file": ("a.bin", b"\x00\x01garbage")})) == \
        (422, "audio_unreadable")
    assert fake.asked == []


def test_big_uploads_are_413(tmp_path: Path, fake: FakeTranscriber) -> None:
    client = client_for(tmp_path, max_upload_mb=0.05)
    big = wav_bytes(voice_clip(4.0))
    assert client.post("/v1/audio/transcriptions", files={"file": ("a.wav", big)}).status_code == 413
    assert client.post("/v1/transcribe", json={"audio": base64.b64encode(big).decode()}).status_code == 413


# --- the real Transcriber, nothing downloaded ------------------------------------------------------------------


def test_a_language_no_recogniser_here_speaks_names_the_download_command(tmp_path: Path) -> None:
    client = client_for(tmp_path)
    response = client.post("/v1/transcribe", json={"audio": base64.b64encode(CLIP).decode(), "language": "zh"})
    status, code = error_of(response)
    assert status == 422 and code in ("asr_language_unsupported", "asr_unavailable")
    assert "python -m cosyvoice_ui download whisper-small" in response.json()["error"]["message"]


def test_too_short_a_recording_is_refused_before_any_model_loads(tmp_path: Path) -> None:
    client = client_for(tmp_path)
    short = wav_bytes(voice_clip(0.1))
    assert error_of(client.post("/v1/audio/transcriptions", files={"file": ("a.wav", short)})) == \
        (422, "asr_audio_too_short")


def test_asr_models_lists_what_works_now_and_what_can_be_downloaded(tmp_path: Path) -> None:
    client = client_for(tmp_path)
    body = client.get("/v1/asr/models").json()
    by_id = {m["id"]: m for m in body["data"]}
    assert not by_id["whisper-small"]["ready"]
    assert by_id["whisper-small"]["download"] == "python -m cosyvoice_ui download whisper-small"
    assert set(body["available"]) <= {POCKETSPHINX}
    if POCKETSPHINX in body["available"]:
        assert by_id[POCKETSPHINX]["ready"] and by_id[POCKETSPHINX]["download"] is None


def test_tiny_whisper_end_to_end(tmp_path: Path) -> None:
    from cosyvoice_ui.testing.tiny_asr import write_tiny_whisper

    write_tiny_whisper(tmp_path / "models" / "asr" / TINY)
    client = client_for(tmp_path)
    transcriber = shared_transcriber(tmp_path / "models")
    try:
        assert client.get("/v1/asr/models").json()["available"][0] == TINY
        t = np.arange(int(1.5 * 16000)) / 16000
        buzz = Audio((0.2 * np.sin(2 * np.pi * 140 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)))
                     .astype(np.float32), 16000)
        response = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", wav_bytes(buzz))},
                               data={"language": "zh"})
        assert response.status_code == 200, response.text
        body = response.json()  # random weights: real tokens, words of no meaning
        assert body["backend"] == TINY and body["language"] == "zh" and body["text"] and body["duration"] == 1.5
        assert transcriber.loaded == [TINY]  # the API used the process's shared transcriber
    finally:
        transcriber.close()
        shutil.rmtree(tmp_path / "models", ignore_errors=True)
