"""Thin-client mode: a second instance served by uvicorn on a loopback port does the synthesis."""

from __future__ import annotations

import base64
import io
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui import CosyVoiceError, InvalidRequest, Mode, SynthesisRequest, load_engine
from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.serving.remote import RemoteEngine, RemoteError
from cosyvoice_ui.web.server import create_manager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.serving.voices import VoiceLibrary
from tests.web_client import LOOPBACK, free_port

KEY = "gpu-box-key"
TRANSCRIPT = "希望你以后能够做的比我还好呦。"


@pytest.fixture(scope="module")
def remote(tiny_sft: Path, tmp_path_factory):
    """The "GPU box": the API of a full instance on its own port, with an API key."""
    import uvicorn

    # Stock: its audio is compared with `local_engine` (load_engine's default, stock), not the app's CPU default
    settings = Settings(model_dir=tiny_sft, voices_dir=tmp_path_factory.mktemp("remote-voices"), device="cpu",
                        precision="stock", idle_unload_s=0, api_keys=(KEY,), rate_limit_per_min=0)
    manager = create_manager(settings)
    app = FastAPI()
    add_routes(app, manager, settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="remote-instance", daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    assert server.started, "the second instance did not start"
    yield f"http://127.0.0.1:{port}", app
    server.should_exit = True
    thread.join(10)
    manager.shutdown()


def thin_client(url: str, tmp_path: Path, key: str = KEY) -> TestClient:
    """The "Raspberry Pi": no local model, same API, everything sent to `url`."""
    settings = Settings(engine_url=url, api_keys=(key,), voices_dir=tmp_path / "pi-voices", idle_unload_s=0)
    app = FastAPI()
    add_routes(app, create_manager(settings), settings)
    return TestClient(app, headers={"Authorization": f"Bearer {key}"}, base_url=LOOPBACK)


@pytest.fixture(scope="module")
def local_engine(tiny_sft: Path):
    return load_engine(tiny_sft, device="cpu")


def local_audio(engine, request: SynthesisRequest) -> np.ndarray:
    return np.concatenate([c.samples for c in engine.synthesize(request)])


def test_thin_client_synthesis_equals_local(remote, local_engine, tmp_path: Path) -> None:
    url, _ = remote
    client = thin_client(url, tmp_path)
    response = client.post("/tts", json={"text": "Hello from the GPU box.", "speaker": "英文女", "seed": 3,
                                         "format": "wav", "normalize": False})
    assert response.status_code == 200, response.text
    got, rate = sf.read(io.BytesIO(base64.b64decode(response.json()["audio"])), dtype="float32")
    expected = local_audio(local_engine, SynthesisRequest(Mode.SFT, text="Hello from the GPU box.", speaker="英文女",
                                                          seed=3))
    assert rate == 22050 and len(got) == len(expected)
    np.testing.assert_allclose(got, expected, atol=2 / 32767)  # two 16-bit hops (remote → thin → client)
    health = client.get("/health").json()
    assert health["engine_url"] == url and health["model"]["state"] == "loaded"
    assert health["model"]["device"].startswith("remote")
    models = client.get("/v1/models").json()["data"][0]
    assert models["family"] == "v1" and "英文女" in models["speakers"]


def test_thin_client_streams(remote, local_engine, tmp_path: Path) -> None:
    url, _ = remote
    engine = RemoteEngine(url, api_key=KEY)
    request = SynthesisRequest(Mode.SFT, text="Streaming through two machines.", speaker="中文女", seed=8, stream=True)
    chunks = list(engine.synthesize(request))
    assert chunks[-1].final and not any(c.final for c in chunks[:-1])
    got = np.concatenate([c.samples for c in chunks])
    expected = local_audio(local_engine, request)
    np.testing.assert_allclose(got, expected, atol=1 / 32767)
    engine.close()


def test_thin_client_saved_voice_travels_with_the_request(remote, local_engine, tmp_path: Path) -> None:
    url, _ = remote
    client = thin_client(url, tmp_path)
    wav = io.BytesIO()
    sf.write(wav, voice_clip(4.0).samples, 16000, format="WAV")
    added = client.post("/v1/voices", json={"name": "Pi Voice", "transcript": TRANSCRIPT,
                                            "audio": base64.b64encode(wav.getvalue()).decode()})
    assert added.status_code == 201 and added.json()["features"] is True
    response = client.post("/tts", json={"text": "A voice saved on the small device.", "voice_id": "pi-voice",
                                         "seed": 2, "normalize": False, "format": "pcm"})
    assert response.status_code == 200, response.text
    got = np.frombuffer(base64.b64decode(response.json()["audio"]), "<i2").astype(np.float32) / 32767
    prompt = VoiceLibrary(tmp_path / "pi-voices").audio("pi-voice")
    expected = local_audio(local_engine, SynthesisRequest(Mode.ZERO_SHOT, text="A voice saved on the small device.",
                                                          prompt_audio=prompt, prompt_text=TRANSCRIPT, seed=2))
    np.testing.assert_allclose(got, expected, atol=2 / 32767)


def test_voice_saved_on_the_remote_is_usable_by_id(remote, tmp_path: Path) -> None:
    url, app = remote
    voice = app.state.api.library.add("Server Voice", voice_clip(4.0, pitch=180.0, seed=3), TRANSCRIPT)
    engine = RemoteEngine(url, api_key=KEY)
    chunks = list(engine.synthesize(SynthesisRequest(Mode.ZERO_SHOT, text="Hi.", speaker=voice.id, seed=1)))
    assert sum(len(c.samples) for c in chunks) > 0
    engine.close()


def test_remote_refusals_keep_their_code(remote) -> None:
    url, _ = remote
    engine = RemoteEngine(url, api_key=KEY, max_text_chars=10_000)  # the remote's own limit is 5000
    with pytest.raises(InvalidRequest) as refused:
        list(engine.synthesize(SynthesisRequest(Mode.SFT, text="x" * 6000, speaker="英文女")))
    assert refused.value.code == "text_too_long"
    engine.close()


def test_wrong_key_is_a_clear_error(remote, tmp_path: Path) -> None:
    url, _ = remote
    with pytest.raises(RemoteError) as refused:
        RemoteEngine(url, api_key="wrong")
    assert url in str(refused.value) and "--api-key" in str(refused.value)
    response = thin_client(url, tmp_path, key="wrong").post("/tts", json={"text": "hi", "speaker": "英文女"})
    assert response.status_code == 502 and response.json()["error"]["code"] == "remote_auth_failed"


def test_remote_down_is_a_clear_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client = thin_client(url, tmp_path)
    response = client.post("/tts", json={"text": "hi", "speaker": "英文女"})
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "engine_unreachable" and url in error["message"]
    assert client.get("/health").json()["status"] == "error"
    with pytest.raises(CosyVoiceError):
        RemoteEngine(url)


def test_cli_synth_on_a_remote_instance(remote, local_engine, tmp_path: Path) -> None:
    from cosyvoice_ui.cli.main import main

    url, _ = remote
    out = tmp_path / "remote.wav"
    assert main(["synth", "--engine-url", url, "--api-key", KEY, "--speaker", "英文男", "--seed", "6",
                 "--text", "Made on the GPU box.", "--out", str(out)]) == 0
    got, rate = sf.read(out, dtype="float32")
    expected = local_audio(local_engine, SynthesisRequest(Mode.SFT, text="Made on the GPU box.", speaker="英文男",
                                                          seed=6))
    assert rate == 22050
    np.testing.assert_allclose(got, expected, atol=2 / 32767)


def test_server_keeps_serving_concurrent_requests(remote, local_engine) -> None:
    """Parallel clients on the real server: every good request gets its own seed's audio (no state leaks
    between jobs in the queue), bad ones get their 4xx, and /health answers throughout."""
    import httpx

    url, _ = remote
    headers = {"Authorization": f"Bearer {KEY}"}
    texts = {seed: f"Concurrent request number {seed}." for seed in range(1, 6)}
    bad = [({"text": "", "speaker": "英文女"}, "text_empty"), ({"text": "Hi.", "speaker": "nobody"}, "speaker_unknown")]
    results: dict[str, httpx.Response] = {}
    health_codes: list[int] = []
    done = threading.Event()

    def post(name: str, body: dict) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
            results[name] = client.post("/tts", json=body)

    def poll_health() -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            while not done.is_set():
                health_codes.append(client.get("/health").status_code)
                time.sleep(0.05)

    workers = [threading.Thread(target=post, args=(f"seed{seed}", {"text": text, "speaker": "英文女", "seed": seed,
                                                                  "format": "wav", "normalize": False}))
               for seed, text in texts.items()]
    workers += [threading.Thread(target=post, args=(f"bad{i}", body)) for i, (body, _) in enumerate(bad)]
    poller = threading.Thread(target=poll_health)
    poller.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(180)
    done.set()
    poller.join(10)

    for seed, text in texts.items():
        response = results[f"seed{seed}"]
        assert response.status_code == 200, response.text
        got, _ = sf.read(io.BytesIO(base64.b64decode(response.json()["audio"])), dtype="float32")
        expected = local_audio(local_engine, SynthesisRequest(Mode.SFT, text=text, speaker="英文女", seed=seed))
        assert len(got) == len(expected)
        np.testing.assert_allclose(got, expected, atol=1 / 32767)
    for i, (_, code) in enumerate(bad):
        response = results[f"bad{i}"]
        assert 400 <= response.status_code < 500 and response.json()["error"]["code"] == code, response.text
    assert health_codes and set(health_codes) == {200}


def test_thin_client_reads_the_family_facts_of_a_v3_instance(tiny_v3: Path, tmp_path: Path) -> None:
    """A thin client in front of a CosyVoice3 box offers the same instruction list, tag chips, pronunciation
    hints and Japanese caveat as a local v3 model, and knows instruct takes a voice there."""
    from cosyvoice_ui.serving.remote import info_from_models

    settings = Settings(model_dir=tiny_v3, voices_dir=tmp_path / "v3-voices", device="cpu", idle_unload_s=0)
    manager = create_manager(settings)
    app = FastAPI()
    add_routes(app, manager, settings)
    try:
        payload = TestClient(app, base_url=LOOPBACK).get("/v1/models").json()
        local = load_engine(tiny_v3, device="cpu").info
        remote_info = info_from_models(payload, "http://gpu-box:7860")
    finally:
        manager.shutdown()
    assert remote_info.instructions == local.instructions and len(local.instructions) > 10
    assert {i.category for i in remote_info.instructions} >= {"dialect", "emotion"}
    assert remote_info.text_tags == local.text_tags and "[breath]" in remote_info.text_tags
    assert remote_info.pronunciation == local.pronunciation and remote_info.text_caveats == ("ja_kanji",)
    assert remote_info.instruct_voice is True and Mode.INSTRUCT in remote_info.modes
    # An older instance without these fields still describes itself (empty pickers).
    older = {"data": [{k: v for k, v in payload["data"][0].items()
                       if k not in ("instructions", "text_tags", "pronunciation", "text_caveats", "instruct_needs")}]}
    bare = info_from_models(older, "http://old-box:7860")
    assert bare.instructions == () and bare.text_tags == () and bare.instruct_voice is False


def test_audio_a_marking_remote_sent_is_not_marked_twice(tmp_path: Path, monkeypatch) -> None:
    from cosyvoice_ui.serving import jobs as jobs_module
    from cosyvoice_ui.testing.fakes import FakeEngine
    from cosyvoice_ui.testing.speech import speech_jobs

    class Marker:
        calls = 0

        def mark(self, samples, rate):
            Marker.calls += 1
            return samples * 0.5

    monkeypatch.setattr(jobs_module, "shared_watermark", lambda: Marker())
    speech = speech_jobs(tmp_path, watermark=True)
    request = SynthesisRequest(Mode.SFT, text="Marked over there.", speaker="A")
    for remote_marks, calls in ((False, 1), (True, 0)):
        engine = FakeEngine()
        engine.marks_output = remote_marks
        Marker.calls = 0
        rendered = jobs_module.render_on(engine, speech.prepare(request, info=engine.info))
        assert rendered.watermarked is True
        assert (Marker.calls > 0) is bool(calls)


def test_the_thin_client_reads_whether_its_remote_marks(remote) -> None:
    import httpx

    url, _ = remote
    health = httpx.get(f"{url}/health", headers={"Authorization": f"Bearer {KEY}"}).json()
    engine = RemoteEngine(url, api_key=KEY)
    assert isinstance(health["watermark"]["marked"], bool)
    assert engine.marks_output is health["watermark"]["marked"]
