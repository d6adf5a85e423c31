"""One speech job for every surface (issue 24): the same request through the UI's tab handler, `POST /tts`, the
public Gradio API (and MCP's) tool, and the CLI gives bit-identical audio and identical subtitle cues, and a
blocked word is refused by each of them with the same code. (A script line's and a book piece's takes against
the same job: tests/studio/; the UI tab in Chromium: tests/ui/test_browser.py.)

Each door renders the request itself: the REST service and the Gradio API door have their own result caches
(no hit can stand in for a render), and the CLI runs in its own process on one thread, like the test process.
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from cosyvoice_ui.api.service import ApiService
from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.types import Mode, SynthesisRequest
from cosyvoice_ui.ui.api_tools import Endpoints, build_functions
from cosyvoice_ui.ui.handlers import Handlers, OutputOptions
from cosyvoice_ui.web.server import create_app, create_manager
from tests.web_client import LOOPBACK

REPO = Path(__file__).resolve().parents[1]
TEXT = "Hello there. This is one request, spoken through every door."
SPEAKER = "英文女"
SEED = 20261202
BLOCKED = "forbidden"


@pytest.fixture(scope="module")
def doors(tiny_sft: Path, tmp_path_factory):
    """The app on the tiny SFT model (REST and the UI share its one speech job), a second service for the Gradio
    API door, and the work folder."""
    work = tmp_path_factory.mktemp("one-job")
    (work / "blocked.txt").write_text(f"{BLOCKED}\n", encoding="utf-8")
    settings = Settings(model_dir=tiny_sft, voices_dir=work / "voices", glossary_dir=work / "glossaries",
                        projects_dir=work / "projects", device="cpu", idle_unload_s=0, rate_limit_per_min=0,
                        blocked_words_file=work / "blocked.txt", extra={"output_dir": str(work / "out")})
    manager = create_manager(settings)
    app = create_app(settings, manager)
    with TestClient(app, base_url=LOOPBACK) as client:
        api_door = Endpoints(ApiService(manager, settings.with_(cache_entries=0)), work / "api")
        yield client, app, api_door, work, settings
    manager.shutdown()


def wav_of(data: bytes) -> np.ndarray:
    samples, _ = sf.read(io.BytesIO(data), dtype="float32")
    return samples


def rest(client: TestClient) -> tuple[np.ndarray, str]:
    response = client.post("/tts", json={"text": TEXT, "speaker": SPEAKER, "seed": SEED, "format": "wav",
                                         "subtitles": "srt"})
    assert response.status_code == 200, response.text
    body = response.json()
    return wav_of(base64.b64decode(body["audio"])), body["subtitles"]


def ui(app, work: Path) -> tuple[np.ndarray, str]:
    handlers = Handlers(app.state.manager, app.state.settings, work / "ui", speech=app.state.api.speech)
    request = SynthesisRequest(Mode.SFT, text=TEXT, speaker=SPEAKER, seed=SEED)
    *_, (_audio, path, subtitles, _info, _takes, _history) = handlers.generate(request, OutputOptions(fmt="wav"),
                                                                               [], None)
    srt = next(p for p in subtitles if p.endswith(".srt"))
    return wav_of(Path(path).read_bytes()), Path(srt).read_text(encoding="utf-8")


def gradio_api(api_door: Endpoints) -> np.ndarray:
    file, details = build_functions(api_door)["preset"](text=TEXT, speaker=SPEAKER, seed=SEED, format="wav")
    assert details["cached"] is False
    return wav_of(Path(file["path"]).read_bytes())


def cli(tiny_sft: Path, work: Path, *extra: str, text: str = TEXT) -> subprocess.CompletedProcess:
    out = work / "cli.wav"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "cosyvoice_ui", "synth", "--model-dir", str(tiny_sft), "--device",
                           "cpu", "--text", text, "--speaker", SPEAKER, "--seed", str(SEED), "--loudness", "-20",
                           "--voices-dir", str(work / "cli-voices"), "--out", str(out), "--srt", *extra],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_every_door_renders_the_same_audio_and_cues(doors, tiny_sft: Path) -> None:
    client, app, api_door, work, _ = doors
    rest_audio, rest_srt = rest(client)
    ui_audio, ui_srt = ui(app, work)
    api_audio = gradio_api(api_door)
    done = cli(tiny_sft, work)
    assert done.returncode == 0, done.stderr[-2000:]
    cli_audio = wav_of((work / "cli.wav").read_bytes())
    cli_srt = (work / "cli.srt").read_text(encoding="utf-8")
    assert len(rest_audio) > 0 and np.abs(rest_audio).max() > 0
    for name, audio in (("ui", ui_audio), ("gradio api", api_audio), ("cli", cli_audio)):
        assert audio.shape == rest_audio.shape, name
        assert np.array_equal(audio, rest_audio), f"{name} differs from REST by {np.abs(audio - rest_audio).max()}"
    assert ui_srt.strip() == rest_srt.strip() == cli_srt.strip()
    assert rest_srt.count("-->") >= 1 and "Hello there" in rest_srt


def test_a_blocked_word_is_refused_by_every_door(doors, tiny_sft: Path) -> None:
    client, app, api_door, work, settings = doors
    text = f"Say the {BLOCKED.upper()} word."
    refused = client.post("/tts", json={"text": text, "speaker": SPEAKER})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "blocked_words"
    speech = client.post("/v1/audio/speech", json={"input": text, "voice": SPEAKER})
    assert speech.json()["error"]["code"] == "blocked_words"
    handlers = Handlers(app.state.manager, settings, work / "ui", speech=app.state.api.speech)
    with pytest.raises(InvalidRequest) as by_ui:
        handlers.check(SynthesisRequest(Mode.SFT, text=text, speaker=SPEAKER, seed=1), OutputOptions())
    assert by_ui.value.code == "blocked_words"
    with pytest.raises(InvalidRequest) as by_api:
        build_functions(api_door)["preset"](text=text, speaker=SPEAKER, seed=1)
    assert by_api.value.code == "blocked_words"
    (work / "cli.wav").unlink(missing_ok=True)
    done = cli(tiny_sft, work, "--blocked-words", str(work / "blocked.txt"), text=text)
    assert done.returncode != 0 and "does not allow" in done.stderr, done.stderr[-500:]
    assert not (work / "cli.wav").exists()


def test_a_glossary_rewrites_what_is_spoken_but_not_the_subtitles(doors) -> None:
    """The one subtitle rule: readings the glossary put in are shown as the words the user wrote."""
    client, app, _, work, _ = doors
    body = {"text": "Meet Nguyen today. Then meet Nguyen again tomorrow.", "speaker": SPEAKER, "seed": SEED,
            "subtitles": "srt", "glossary": {"Nguyen": "Win"}}
    rest_srt = client.post("/tts", json=body).json()["subtitles"]
    handlers = Handlers(app.state.manager, app.state.settings, work / "ui-g", speech=app.state.api.speech)
    glossary = handlers.glossaries.save(handlers.speech.glossary({"Nguyen": "Win"}))
    request = SynthesisRequest(Mode.SFT, text=body["text"], speaker=SPEAKER, seed=SEED)
    *_, (_a, _p, subtitles, _i, _t, _h) = handlers.generate(request, OutputOptions(glossary=glossary.id), [], None)
    ui_srt = Path(next(p for p in subtitles if p.endswith(".srt"))).read_text(encoding="utf-8")
    assert "Nguyen" in rest_srt and "Win" not in rest_srt
    assert ui_srt.strip() == rest_srt.strip()
