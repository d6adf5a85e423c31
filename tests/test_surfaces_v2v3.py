"""CosyVoice2 and CosyVoice3 tiny folders through the CLI and the REST API (the engine side is
test_engine_v2v3.py): every mode, `instructions` with a saved voice, /v1/models' instruction list, and a typed
`<|endofprompt|>` in the text."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.cli.main import main
from cosyvoice_ui.testing.signals import voice_clip
from tests.web_client import LOOPBACK

TEXT = "Hello world, this is a short test."
TRANSCRIPT = "hello there, how are you today"
TYPED_MARKER = "Hello <|endofprompt|> world, a typed marker."


@pytest.fixture(params=["v2", "v3"])
def model_dir(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(f"tiny_{request.param}")


def family_of(model_dir: Path):
    from cosyvoice_ui.cosyvoice.families import detect

    return detect(model_dir).family


@pytest.fixture(scope="module")
def wavs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("surface_wavs")
    paths = {}
    for name, seconds, pitch in (("prompt", 4.0, 140.0), ("source", 2.0, 210.0)):
        clip = voice_clip(seconds, 16000, pitch=pitch)
        paths[name] = folder / f"{name}.wav"
        sf.write(paths[name], clip.samples, clip.sample_rate)
    return paths


def decoded(data: bytes, rate: int | None = None) -> float:
    samples, got = sf.read(io.BytesIO(data))
    assert np.isfinite(samples).all() and np.abs(samples).max() > 0
    if rate is not None:
        assert got == rate
    return len(samples) / got


# --- the command line --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["zero_shot", "cross_lingual", "instruct", "vc"])
def test_cli_every_mode(model_dir: Path, mode: str, wavs, tmp_path: Path) -> None:
    out = tmp_path / f"{mode}.wav"
    args = ["synth", "--model-dir", str(model_dir), "--device", "cpu", "--mode", mode, "--seed", "1",
            "--prompt-wav", str(wavs["prompt"]), "--out", str(out)]
    if mode != "vc":
        args += ["--text", TEXT]
    if mode == "zero_shot":
        args += ["--prompt-text", TRANSCRIPT]
    if mode == "instruct":
        args += ["--instruct", "用四川话说这句话"]
    if mode == "vc":
        args += ["--source-wav", str(wavs["source"])]
    assert main(args) == 0
    seconds = decoded(out.read_bytes(), 24000)
    if mode == "vc":
        assert abs(seconds - 2.0) < 0.1
    else:
        assert 0.1 < seconds < 20.0


@pytest.mark.parametrize("mode", ["zero_shot", "cross_lingual", "instruct"])
def test_cli_typed_endofprompt(model_dir: Path, mode: str, wavs, tmp_path: Path) -> None:
    out = tmp_path / "marker.wav"
    args = ["synth", "--model-dir", str(model_dir), "--device", "cpu", "--mode", mode, "--seed", "2",
            "--prompt-wav", str(wavs["prompt"]), "--text", TYPED_MARKER, "--out", str(out)]
    if mode == "zero_shot":
        args += ["--prompt-text", TRANSCRIPT + "<|endofprompt|>"]
    if mode == "instruct":
        args += ["--instruct", "speak slowly<|endofprompt|>"]
    assert main(args) == 0
    assert 0.1 < decoded(out.read_bytes(), 24000) < 20.0


# --- the REST API ------------------------------------------------------------------------------------


@pytest.fixture
def api(model_dir: Path, tmp_path: Path):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from cosyvoice_ui.api.routes import add_routes
    from cosyvoice_ui.settings import Settings
    from cosyvoice_ui.web.server import create_manager

    settings = Settings(model_dir=model_dir, voices_dir=tmp_path / "voices", device="cpu", idle_unload_s=0,
                        rate_limit_per_min=0)
    manager = create_manager(settings)
    app = FastAPI()
    add_routes(app, manager, settings)
    try:
        yield TestClient(app, base_url=LOOPBACK)
    finally:
        manager.shutdown()


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_api_every_mode_speech_and_models(api, model_dir: Path, wavs) -> None:
    client = api
    [model] = client.get("/v1/models").json()["data"]
    family = family_of(model_dir)
    assert model["family"] == family.name
    assert [(i["category"], i["label_en"], i["text"]) for i in model["instructions"]] == [
        (i.category, i.en, i.text) for i in family.instructions]
    rate = model["sample_rate"]
    assert rate == 24000
    assert {"zero_shot", "cross_lingual", "instruct", "vc"} <= set(model["modes"])
    assert model["instruct_needs"] == "voice"
    assert model["instructions"] and all(i["text"] and i["category"] for i in model["instructions"])
    assert any(i["category"] == "dialect" for i in model["instructions"])

    prompt = b64(wavs["prompt"])
    bodies = {
        "zero_shot": {"text": TEXT, "prompt_audio": prompt, "prompt_text": TRANSCRIPT},
        "cross_lingual": {"text": TEXT, "prompt_audio": prompt},
        "instruct": {"text": TEXT, "prompt_audio": prompt, "instruct_text": model["instructions"][0]["text"]},
        "vc": {"prompt_audio": prompt, "source_audio": b64(wavs["source"])},
        "marker": {"text": TYPED_MARKER, "prompt_audio": prompt, "mode": "instruct",
                   "instruct_text": "speak slowly<|endofprompt|>"},
    }
    for mode, body in bodies.items():
        body = {"mode": mode, **body, "seed": 3} if mode != "marker" else {**body, "seed": 3}
        response = client.post("/tts", json=body)
        assert response.status_code == 200, (mode, response.text)
        result = response.json()
        assert result["sample_rate"] == rate
        seconds = decoded(base64.b64decode(result["audio"]), rate)
        if mode == "vc":
            assert abs(seconds - 2.0) < 0.1
        else:
            assert 0.1 < seconds < 20.0, mode

    added = client.post("/v1/voices", json={"name": "Narrator", "transcript": TRANSCRIPT, "audio": prompt})
    assert added.status_code == 201, added.text
    voice = added.json()["id"]
    assert voice in client.get("/v1/models").json()["data"][0]["saved_voices"]
    for instructions in (model["instructions"][0]["text"], ""):
        speech = client.post("/v1/audio/speech", json={"input": TEXT, "voice": voice, "instructions": instructions,
                                                       "response_format": "wav", "seed": 4})
        assert speech.status_code == 200, speech.text
        assert 0.1 < decoded(speech.content, rate) < 20.0
    marker = client.post("/v1/audio/speech", json={"input": TYPED_MARKER, "voice": voice, "response_format": "wav",
                                                   "instructions": "speak slowly<|endofprompt|>", "seed": 5})
    assert marker.status_code == 200, marker.text
    assert 0.1 < decoded(marker.content, rate) < 20.0
