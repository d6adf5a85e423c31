"""REST API on FastAPI's TestClient: every route and error, auth, rate limit, upload cap, blocked words,
the result cache, streaming (incl. that audio leaves before synthesis ends) and the OpenAI client's shape.

Orchestration tests use a `FakeEngine` (instant, controllable); end-to-end ones the tiny SFT model.
"""

from __future__ import annotations

import base64
import io
import json
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui.api.routes import add_docs, add_routes
from cosyvoice_ui.api.security import RateLimiter
from cosyvoice_ui.engine import Engine
from cosyvoice_ui.errors import ConfigError
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.web.server import create_manager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.testing.fakes import FakeEngine, RecordingEngine
from cosyvoice_ui.types import Audio, Mode
from tests.web_client import LOOPBACK

TRANSCRIPT = "希望你以后能够做的比我还好呦。"


def wav_b64(audio: Audio) -> str:
    buffer = io.BytesIO()
    sf.write(buffer, audio.samples, audio.sample_rate, format="WAV")
    return base64.b64encode(buffer.getvalue()).decode()


PROMPT_B64 = wav_b64(voice_clip(4.0))


def api_engine(**options) -> FakeEngine:
    """The shared fake as these tests use it: presets alice and bob, 3 chunks of 0.1 s of seeded noise."""
    return FakeEngine(**{"name": "fake-model", "modes": (Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC),
                         "speakers": ("alice", "bob"), "chunks": 3, "chunk_samples": 1600, **options})


def fake_client(tmp_path: Path, engine: Engine | None = None, **settings) -> tuple[TestClient, ModelManager, Engine]:
    engine = engine or api_engine()
    options = {"voices_dir": tmp_path / "voices", "glossary_dir": tmp_path / "glossaries",
               "projects_dir": tmp_path / "projects", "idle_unload_s": 0, **settings}
    config = Settings(**options)
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    app = FastAPI(docs_url=None)
    add_routes(app, manager, config)
    add_docs(app)
    return TestClient(app, base_url=LOOPBACK), manager, engine


def error_of(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


# --- end to end on the tiny SFT model ----------------------------------------------------------------


@pytest.fixture(scope="module")
def sft(tiny_sft: Path, tmp_path_factory) -> tuple[TestClient, ModelManager]:
    settings = Settings(model_dir=tiny_sft, voices_dir=tmp_path_factory.mktemp("voices"), device="cpu",
                        idle_unload_s=0, rate_limit_per_min=0)
    manager = create_manager(settings)
    app = FastAPI()
    add_routes(app, manager, settings)
    return TestClient(app, base_url=LOOPBACK), manager


def test_tts_returns_base64_audio_with_seed_and_cache_headers(sft) -> None:
    client, _ = sft
    response = client.post("/tts", json={"text": "Hello world.", "mode": "sft", "speaker": "英文女", "seed": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    samples, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
    assert rate == body["sample_rate"] == 22050
    assert body["duration_s"] == pytest.approx(len(samples) / rate, abs=1e-3) and len(samples) > 0
    assert response.headers["x-seed"] == "3" and body["seed"] == 3
    assert response.headers["x-cache"] == "miss"


def test_unseeded_request_reports_a_seed_that_reproduces_it(sft) -> None:
    client, _ = sft
    request = {"text": "Reproduce me.", "speaker": "中文女"}
    first = client.post("/tts", json=request)
    seed = int(first.headers["x-seed"])
    again = client.post("/tts", json={**request, "seed": seed})
    assert first.headers["x-cache"] == "miss" and again.headers["x-cache"] == "miss"  # unseeded: never cached
    assert again.json()["audio"] == first.json()["audio"]


def test_repeated_seeded_request_is_served_from_cache_without_the_model(sft, monkeypatch) -> None:
    client, manager = sft
    request = {"text": "Press one for sales.", "speaker": "英文男", "seed": 5, "format": "flac"}
    first = client.post("/tts", json=request)
    assert first.headers["x-cache"] == "miss"

    def no_model(*args, **kwargs):
        raise AssertionError("a cache hit must not queue a job")

    monkeypatch.setattr(manager, "job", no_model)
    hit = client.post("/tts", json=request)
    assert hit.headers["x-cache"] == "hit" and hit.json()["audio"] == first.json()["audio"]
    other_format = client.post("/tts", json={**request, "format": "wav"})  # one entry serves every format
    assert other_format.headers["x-cache"] == "hit"


@pytest.mark.parametrize("fmt", ["wav", "mp3", "flac", "pcm"])
def test_every_format_decodes(sft, fmt: str) -> None:
    client, _ = sft
    body = client.post("/tts", json={"text": "Format test.", "speaker": "英文女", "seed": 9, "format": fmt}).json()
    data = base64.b64decode(body["audio"])
    if fmt == "pcm":
        n = len(data) // 2
    else:
        samples, rate = sf.read(io.BytesIO(data))
        assert rate == 22050
        n = len(samples)
    # mp3 pads with encoder delay, so only roughly the same length
    assert n == pytest.approx(body["duration_s"] * 22050, rel=0.05 if fmt == "mp3" else 1e-3)


@pytest.mark.parametrize("body, status, code", [
    ({"text": "", "speaker": "英文女"}, 422, "text_empty"),
    ({"text": "hi", "speaker": "nobody"}, 422, "speaker_unknown"),
    ({"text": "hi", "mode": "sft", "speaker": "nobody"}, 422, "speaker_unknown"),
    ({"text": "hi", "mode": "karaoke"}, 422, "mode_unknown"),
    ({"text": "hi", "speaker": "英文女", "speed": 3.0}, 422, "speed_out_of_range"),
    ({"text": "hi", "speaker": "英文女", "format": "ogg-vorbis"}, 422, "bad_format"),
    ({"text": "hi", "speaker": "英文女", "format": "mp3", "stream": True}, 422, "bad_format"),
    ({"text": "hi", "prompt_audio": "not base64!"}, 422, "audio_not_base64"),
    ({"text": "hi", "prompt_audio": base64.b64encode(b"RIFF....garbage").decode()}, 422, "audio_unreadable"),
    ({"text": "hi", "prompt_audio": wav_b64(voice_clip(1.0)), "prompt_text": "x"}, 422, "prompt_too_short"),
    ({"text": "hi", "mode": "zero_shot", "prompt_audio": PROMPT_B64}, 422, "transcript_missing"),
    ({"text": "hi", "mode": "instruct", "speaker": "英文女", "instruct_text": "calm"}, 422, "mode_unsupported"),
    ({"text": "hi", "voice_id": "no-such-voice"}, 422, "voice_unknown"),
    ({"text": "hi", "speaker": "英文女", "colour": "blue"}, 422, "invalid_field"),
    ({"text": "hi", "speaker": "英文女", "seed": -1}, 422, "invalid_field"),
    ({"text": "x" * 6000, "speaker": "英文女"}, 422, "text_too_long"),
])
def test_bad_requests_get_specific_4xx_errors(sft, body: dict, status: int, code: str) -> None:
    client, _ = sft
    response = client.post("/tts", json=body)
    assert error_of(response) == (status, code), response.text
    assert response.json()["error"]["message"]


def test_invalid_json_is_400(sft) -> None:
    client, _ = sft
    response = client.post("/tts", content=b"{not json", headers={"content-type": "application/json"})
    assert error_of(response) == (400, "bad_json")


def test_instruct_error_names_the_model_that_can(sft) -> None:
    client, _ = sft
    response = client.post("/v1/audio/speech", json={"input": "hi", "voice": "英文女", "instructions": "sad"})
    assert error_of(response) == (422, "mode_unsupported")
    assert "Instruct" in response.json()["error"]["message"]


def test_openai_python_client_request_shape(tiny_sft: Path, tmp_path: Path) -> None:
    """The request openai-python's `client.audio.speech.create(...)` sends (headers and JSON body)."""
    settings = Settings(model_dir=tiny_sft, voices_dir=tmp_path / "voices", device="cpu", idle_unload_s=0,
                        api_keys=("sk-test",))
    app = FastAPI()
    add_routes(app, create_manager(settings), settings)
    client = TestClient(app, base_url=LOOPBACK)
    headers = {"Authorization": "Bearer sk-test", "Accept": "application/octet-stream",
               "Content-Type": "application/json", "User-Agent": "OpenAI/Python 1.99.0",
               "X-Stainless-Lang": "python", "X-Stainless-Package-Version": "1.99.0", "X-Stainless-Retry-Count": "0"}
    body = {"input": "Hello there.", "model": "tts-1", "voice": "英文女", "response_format": "wav", "speed": 1.0}
    response = client.post("/v1/audio/speech", content=json.dumps(body), headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/wav"
    samples, rate = sf.read(io.BytesIO(response.content))
    assert rate == 22050 and len(samples) > 0
    default = client.post("/v1/audio/speech", json={"input": "Hi.", "model": "tts-1", "voice": "英文男"},
                          headers={"Authorization": "Bearer sk-test"})
    assert default.headers["content-type"] == "audio/mpeg"  # OpenAI's default format is mp3
    assert sf.read(io.BytesIO(default.content))[1] == 22050


def test_speech_unknown_voice_lists_the_voices(sft) -> None:
    client, _ = sft
    response = client.post("/v1/audio/speech", json={"model": "tts-1", "input": "hi", "voice": "nobody-here"})
    assert error_of(response) == (422, "voice_unknown")
    assert "英文女" in response.json()["error"]["message"]
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert response.json()["error"]["param"] == "voice"
    vorbis = client.post("/v1/audio/speech", json={"input": "hi", "voice": "英文女", "response_format": "vorbis"})
    assert error_of(vorbis) == (422, "bad_format") and "opus" in vorbis.json()["error"]["message"]


def test_speech_sse_events(sft) -> None:
    client, _ = sft
    response = client.post("/v1/audio/speech", json={"input": "Hello, events.", "voice": "英文女", "seed": 2,
                                                     "response_format": "pcm", "stream_format": "sse"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[len("data: "):]) for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1) and len(events) >= 2
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["input_tokens"] == len("Hello, events.")
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) % 2 == 0 and len(pcm) > 2 * 0.1 * 22050


def test_tiny_model_stream_is_a_readable_wav(sft) -> None:
    client, _ = sft
    with client.stream("POST", "/tts", json={"text": "Streaming, chunk by chunk.", "speaker": "英文女", "seed": 4,
                                             "stream": True}) as response:
        assert response.status_code == 200 and response.headers["x-seed"] == "4"
        data = b"".join(response.iter_bytes())
    assert data[:4] == b"RIFF" and data[4:8] == b"\xff\xff\xff\xff"  # length unknown while streaming
    samples, rate = sf.read(io.BytesIO(data))
    assert rate == 22050 and len(samples) == (len(data) - 44) // 2


def test_saved_voice_lifecycle(sft) -> None:
    client, manager = sft
    added = client.post("/v1/voices", json={"name": "Narrator", "transcript": TRANSCRIPT, "audio": PROMPT_B64})
    assert added.status_code == 201, added.text
    voice = added.json()
    assert voice["id"] == "narrator" and voice["features"] is True and voice["duration_s"] > 3.0
    folder = manager_voices_dir(client) / "narrator"
    assert (folder / "voice.json").is_file() and (folder / "prompt.wav").is_file()
    assert (folder / "features-v1.safetensors").is_file()  # computed once, at add time
    assert [v["id"] for v in client.get("/v1/voices").json()["data"]] == ["narrator"]
    assert "narrator" in client.get("/v1/models").json()["data"][0]["saved_voices"]

    tts = client.post("/tts", json={"text": "Cloned from a saved voice.", "voice_id": "narrator", "seed": 1})
    assert tts.status_code == 200, tts.text
    speech = client.post("/v1/audio/speech", json={"input": "Hello.", "voice": "narrator", "response_format": "wav"})
    assert speech.status_code == 200 and sf.read(io.BytesIO(speech.content))[1] == 22050
    as_sft = client.post("/tts", json={"text": "hi", "mode": "sft", "voice_id": "narrator"})
    assert error_of(as_sft) == (422, "voice_mode")
    with_instructions = client.post("/v1/audio/speech", json={"input": "hi", "voice": "narrator",
                                                              "instructions": "whisper"})
    assert error_of(with_instructions) == (422, "instructions_need_preset")

    second = client.post("/v1/voices", json={"name": "Narrator", "audio": PROMPT_B64})
    assert second.json()["id"] == "narrator-2"  # same name, new id
    assert client.delete("/v1/voices/narrator").json()["deleted"] is True
    assert "narrator" not in manager.loaded.info.saved_voices
    assert error_of(client.delete("/v1/voices/narrator")) == (404, "voice_not_found")
    assert error_of(client.post("/tts", json={"text": "hi", "voice_id": "narrator"})) == (422, "voice_unknown")
    client.delete("/v1/voices/narrator-2")


def manager_voices_dir(client: TestClient) -> Path:
    return client.app.state.api.library.root


def test_voice_upload_as_multipart_and_bad_audio_is_not_kept(sft) -> None:
    client, _ = sft
    wav = base64.b64decode(PROMPT_B64)
    added = client.post("/v1/voices", data={"name": "Form Voice"}, files={"audio": ("clip.wav", wav, "audio/wav")})
    assert added.status_code == 201, added.text
    assert added.json()["id"] == "form-voice" and added.json()["transcript"] == ""
    # without a transcript the OpenAI route clones it cross-lingually
    speech = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "form-voice", "response_format": "pcm"})
    assert speech.status_code == 200 and len(speech.content) > 0
    short = client.post("/v1/voices", json={"name": "Short", "audio": wav_b64(voice_clip(1.0))})
    assert error_of(short) == (422, "prompt_too_short")
    assert "short" not in [v["id"] for v in client.get("/v1/voices").json()["data"]]
    missing = client.post("/v1/voices", json={"name": "No audio"})
    assert error_of(missing) == (422, "invalid_field")
    client.delete("/v1/voices/form-voice")


def test_health_and_models(sft) -> None:
    client, manager = sft
    client.post("/tts", json={"text": "Load the model.", "speaker": "英文女", "seed": 1})
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"]["state"] == "loaded" and health["model"]["device"] == "cpu"
    assert health["memory"]["rss_mb"] > 0 and health["api_key_required"] is False
    model = client.get("/v1/models").json()["data"][0]
    assert model["family"] == "v1" and model["sample_rate"] == 22050 and model["loaded"] is True
    assert "sft" in model["modes"] and "英文女" in model["speakers"]


# --- orchestration with the fake engine ----------------------------------------------------------------


def test_health_reports_unloaded_before_first_use(tmp_path: Path) -> None:
    client, manager, _ = fake_client(tmp_path)
    assert client.get("/health").json()["model"]["state"] == "unloaded"
    assert client.post("/tts", json={"text": "hi", "speaker": "alice"}).status_code == 200
    assert client.get("/health").json()["model"]["state"] == "loaded"


def test_stream_starts_before_synthesis_ends(tmp_path: Path) -> None:
    gate = threading.Event()
    engine = api_engine(chunks=3, gate=gate)
    client, _, _ = fake_client(tmp_path, engine)
    with client.stream("POST", "/tts", json={"text": "hi", "speaker": "alice", "stream": True,
                                             "format": "pcm", "seed": 1}) as response:
        pieces = response.iter_bytes()
        first = next(pieces)
        # the first chunk arrived while the engine is still held before its second chunk
        assert len(first) == 2 * 1600 and not engine.finished.is_set()
        gate.set()
        rest = b"".join(pieces)
    assert engine.finished.is_set() and len(first) + len(rest) == 3 * 2 * 1600


def test_client_leaving_a_stream_frees_the_queue(tmp_path: Path) -> None:
    gate = threading.Event()
    engine = api_engine(chunks=3, gate=gate)
    client, manager, _ = fake_client(tmp_path, engine)
    with client.stream("POST", "/tts", json={"text": "hi", "speaker": "alice", "stream": True, "format": "pcm"}) as r:
        next(r.iter_bytes())
    gate.set()
    for _ in range(100):  # the slot is released by the server thread; wait until it is
        if not manager.busy:
            break
        time.sleep(0.05)
    assert not manager.busy
    engine.gate = None
    assert client.post("/tts", json={"text": "again", "speaker": "alice"}).status_code == 200


def test_api_keys_required_when_configured(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path, api_keys=("k1", "k2"))
    body = {"text": "hi", "speaker": "alice"}
    assert error_of(client.post("/tts", json=body)) == (401, "api_key_missing")
    assert error_of(client.post("/tts", json=body, headers={"Authorization": "Bearer nope"})) == (401, "api_key_invalid")
    assert client.post("/tts", json=body, headers={"Authorization": "Bearer k1"}).status_code == 200
    assert client.post("/tts", json=body, headers={"X-API-Key": "k2"}).status_code == 200
    assert error_of(client.get("/v1/voices")) == (401, "api_key_missing")
    assert client.get("/health").status_code == 200  # probes need no key
    # auth runs before the body is validated: no information for unauthenticated callers
    assert error_of(client.post("/tts", json={"bad": 1})) == (401, "api_key_missing")


def test_public_bind_without_keys_refuses_and_loopback_is_open(tmp_path: Path) -> None:
    public, _, _ = fake_client(tmp_path, host="0.0.0.0")
    response = public.post("/tts", json={"text": "hi", "speaker": "alice"})
    assert error_of(response) == (403, "api_key_required") and "--api-key" in response.json()["error"]["message"]
    shared, _, _ = fake_client(tmp_path, share=True, api_keys=("k",))
    assert shared.post("/tts", json={"text": "hi", "speaker": "alice"}, headers={"X-API-Key": "k"}).status_code == 200
    local, _, _ = fake_client(tmp_path)
    assert local.post("/tts", json={"text": "hi", "speaker": "alice"}).status_code == 200


def test_rate_limit_per_client(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path, rate_limit_per_min=2, api_keys=("a", "b"))
    body = {"text": "hi", "speaker": "alice"}
    for _ in range(2):
        assert client.post("/tts", json=body, headers={"X-API-Key": "a"}).status_code == 200
    limited = client.post("/tts", json=body, headers={"X-API-Key": "a"})
    assert error_of(limited) == (429, "rate_limited") and 1 <= int(limited.headers["retry-after"]) <= 60
    assert client.post("/tts", json=body, headers={"X-API-Key": "b"}).status_code == 200  # another client


def test_rate_limiter_window_slides() -> None:
    now = [0.0]
    limiter = RateLimiter(2, window_s=60.0, clock=lambda: now[0])
    assert limiter.hit("x") is None and limiter.hit("x") is None
    assert limiter.hit("x") == pytest.approx(60.0)
    now[0] = 30.0
    assert limiter.hit("x") == pytest.approx(30.0)
    now[0] = 60.5
    assert limiter.hit("x") is None
    assert RateLimiter(0).hit("x") is None  # 0 disables


def test_upload_cap(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path, max_upload_mb=0.05)
    big = {"text": "hi", "prompt_audio": "A" * 80_000, "prompt_text": "x"}
    assert error_of(client.post("/tts", json=big)) == (413, "payload_too_large")

    def chunked():  # no Content-Length: the cap still applies
        yield json.dumps(big).encode()

    response = client.post("/tts", content=chunked(), headers={"content-type": "application/json"})
    assert error_of(response) == (413, "payload_too_large")
    assert client.post("/tts", json={"text": "hi", "speaker": "alice"}).status_code == 200


def test_decoded_recording_over_the_cap_is_413(tmp_path: Path) -> None:
    """The service's own cap (the Gradio API has no upload middleware) answers like the middleware's."""
    client, _, _ = fake_client(tmp_path)
    client.app.state.api.max_upload_bytes = 1000
    response = client.post("/tts", json={"text": "hi", "prompt_audio": PROMPT_B64, "prompt_text": "x"})
    assert error_of(response) == (413, "payload_too_large") and "MB" in response.json()["error"]["message"]
    assert response.json()["error"]["type"] == "invalid_request_error" and response.json()["error"]["param"] is None


def test_blocked_words(tmp_path: Path) -> None:
    words = tmp_path / "blocked.txt"
    words.write_text("# comment\nForbidden Phrase\n\nbadword\n", encoding="utf-8")
    client, _, _ = fake_client(tmp_path, blocked_words_file=words)
    response = client.post("/tts", json={"text": "This has a FORBIDDEN phrase in it.", "speaker": "alice"})
    assert error_of(response) == (422, "blocked_words") and "forbidden" not in response.json()["error"]["message"]
    speech = client.post("/v1/audio/speech", json={"input": "A BadWord here", "voice": "alice"})
    assert error_of(speech) == (422, "blocked_words")
    assert client.post("/tts", json={"text": "Perfectly fine.", "speaker": "alice"}).status_code == 200


def test_queue_full_and_model_load_failure(tmp_path: Path) -> None:
    full, _, _ = fake_client(tmp_path, queue_size=0)
    busy = full.post("/tts", json={"text": "hi", "speaker": "alice"})
    assert error_of(busy) == (503, "queue_full") and busy.headers["retry-after"] == "5"
    assert busy.json()["error"]["type"] == "server_error"

    def broken(mid, options, progress):
        raise ConfigError("llm.pt is missing; download the model again")

    manager = ModelManager("fake", loader=broken, idle_unload_s=0, describe_model=lambda mid: api_engine().info)
    app = FastAPI()
    add_routes(app, manager, Settings(voices_dir=tmp_path / "v"))
    response = TestClient(app, base_url=LOOPBACK).post("/tts", json={"text": "hi", "speaker": "alice"})
    assert error_of(response) == (503, "model_unavailable") and "llm.pt" in response.json()["error"]["message"]


def test_saved_voice_on_a_backend_without_saved_voices(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path)
    added = client.post("/v1/voices", json={"name": "Kept", "transcript": "hello", "audio": PROMPT_B64})
    assert added.status_code == 201 and added.json()["features"] is False  # kept for a CosyVoice model
    response = client.post("/tts", json={"text": "hi", "voice_id": "kept"})
    assert error_of(response) == (422, "voices_unsupported") and "fake-model" in response.json()["error"]["message"]


def test_speech_stream_format_audio_streams_wav(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path)
    response = client.post("/v1/audio/speech", json={"input": "hi", "voice": "bob", "response_format": "wav",
                                                     "stream_format": "audio", "normalize": False, "seed": 3})
    assert response.status_code == 200 and response.content[4:8] == b"\xff\xff\xff\xff"
    samples, rate = sf.read(io.BytesIO(response.content), dtype="float32")
    expected = 0.1 * np.random.default_rng(3).standard_normal(1600)  # FakeEngine's first chunk for seed 3
    assert rate == 16000 and len(samples) == 3 * 1600
    np.testing.assert_allclose(samples[:1600], expected, atol=1 / 16000)


def test_openapi_schema_lists_every_route(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path)
    page = client.get("/docs")
    assert page.status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/tts", "/v1/audio/speech", "/v1/voices", "/v1/voices/{voice_id}", "/v1/models", "/health"} <= set(paths)
    assert "multipart/form-data" in paths["/v1/voices"]["post"]["requestBody"]["content"]


def test_docs_page_works_offline(tmp_path: Path) -> None:
    """/docs must not need a CDN: every script and style it names is served by the app itself."""
    client, _, _ = fake_client(tmp_path)
    page = client.get("/docs").text
    assets = re.findall(r"""(?:src|href)=['"]([^'"]+\.(?:js|css))['"]""", page)
    assert len(assets) >= 2, page
    for url in assets:
        assert url.startswith("/docs-assets/"), f"{url} is not served locally"
        response = client.get(url)
        assert response.status_code == 200 and len(response.content) > 10_000, url
    assert "openapi.json" in page


def test_ui_and_api_share_one_app(tiny_sft: Path, tmp_path: Path) -> None:
    from cosyvoice_ui.web.server import create_app

    settings = Settings(model_dir=tiny_sft, voices_dir=tmp_path / "voices", idle_unload_s=0,
                        extra={"output_dir": str(tmp_path / "outputs")})
    client = TestClient(create_app(settings), base_url=LOOPBACK)
    assert client.get("/health").json()["model"]["state"] == "unloaded"
    assert client.get("/").status_code == 200  # the Gradio UI
    assert "/docs-assets/swagger-ui-bundle.js" in client.get("/docs").text  # not shadowed by the UI at "/"
    assert client.get("/docs-assets/swagger-ui.css").status_code == 200
    assert client.app.state.manager is client.app.state.api.manager  # one manager (and queue) for both


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_is_checked_once(tmp_path: Path, monkeypatch, stream: bool) -> None:
    """The service checks against the model's description before queueing; the engine runs that checked
    request without repeating the shared checks."""
    import cosyvoice_ui.engine as engine_module
    import cosyvoice_ui.serving.jobs as service_module  # the one speech job checks every surface's request
    from cosyvoice_ui.types import CheckedRequest

    calls = {"service": 0, "engine": 0}

    def counting(where, check):
        def wrapper(*args, **kwargs):
            calls[where] += 1
            return check(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(service_module, "check_request", counting("service", service_module.check_request))
    monkeypatch.setattr(engine_module, "check_request", counting("engine", engine_module.check_request))
    engine = RecordingEngine(speakers=("alice", "bob"))
    client, _, _ = fake_client(tmp_path, engine)
    response = client.post("/tts", json={"text": "Once only.", "speaker": "alice", "stream": stream,
                                         "format": "pcm" if stream else "wav"})
    assert response.status_code == 200, response.text
    assert calls == {"service": 1, "engine": 0}
    [ran] = engine.received
    assert isinstance(ran, CheckedRequest) and ran.checked_against == engine.info
    assert ran.seed == int(response.headers["x-seed"])  # the seed is part of the request that was checked


def test_bad_request_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    client, manager, engine = fake_client(tmp_path)
    assert error_of(client.post("/tts", json={"text": "hi", "speaker": "alice", "speed": 9})) == \
        (422, "speed_out_of_range")
    assert manager.loaded is None and engine.calls == 0
