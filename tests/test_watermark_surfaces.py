"""Every output carries the watermark (issue 27): each surface speaks a text, the file it hands out is checked with
the detector (`serving/watermarking.check_file`, the CLI's `detect` and REST's /v1/audio/detect), and the mark is
there: the UI tab's handler, POST /tts and /v1/audio/speech (whole and streamed), the Gradio API (and MCP's) tool,
the CLI, a script's takes and mix, an audiobook's chapters. Streams are marked chunk by chunk: each chunk, their
concatenation and an excerpt across chunk seams are all detected. No request field turns the mark off (a guest's
`watermark: false` is refused or ignored), and `/health` says whether outputs are marked, and why not.

The test suite runs with the mark off (tests/conftest.py); here the settings turn it on. The engines are the shared
fake (seeded noise, which the mark survives as speech does) and the tiny CosyVoice model for the CLI.
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import io
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.serving import watermarking
from cosyvoice_ui.serving.jobs import JobOptions
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode, SynthesisRequest
from tests.web_client import LOOPBACK

pytestmark = pytest.mark.skipif(watermarking.shared().problem() is not None,
                                reason="resemble-perth==1.0.1 is not installed (requirements-offline.txt)")

TEXT = "One request, spoken and marked through every door of the app."
CHUNK = 8000  # 0.5 s at 16 kHz: the fake speaks three of them


def marked(data: bytes | Path) -> bool:
    return watermarking.check_file(data).marked


def engine() -> FakeEngine:
    return FakeEngine(name="fake-model", modes=(Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL), speakers=("alice",),
                      chunks=3, chunk_samples=CHUNK)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """REST routes and the UI's handlers over one service, the mark on (as without --no-watermark)."""
    work = tmp_path_factory.mktemp("marked")
    settings = Settings(voices_dir=work / "voices", glossary_dir=work / "glossaries", projects_dir=work / "projects",
                        idle_unload_s=0, rate_limit_per_min=0, watermark=True)
    fake = engine()
    manager = ModelManager("fake", loader=lambda mid, options, progress: fake, idle_unload_s=0,
                           describe_model=lambda mid: fake.info)
    api = FastAPI(docs_url=None)
    service = add_routes(api, manager, settings)
    with TestClient(api, base_url=LOOPBACK) as client:
        yield client, service, settings, work
    manager.shutdown()


def test_rest_whole_and_streamed(app) -> None:
    client, *_ = app
    tts = client.post("/tts", json={"text": TEXT, "speaker": "alice", "seed": 1})
    assert tts.status_code == 200, tts.text
    assert marked(base64.b64decode(tts.json()["audio"]))
    for fmt in ("wav", "mp3", "opus"):  # the route's own encodings, lossy ones too
        speech = client.post("/v1/audio/speech", json={"input": TEXT, "voice": "alice", "response_format": fmt})
        assert speech.status_code == 200 and marked(speech.content), fmt
    streamed = client.post("/tts", json={"text": TEXT, "speaker": "alice", "seed": 2, "stream": True,
                                         "format": "wav"})
    assert streamed.status_code == 200 and marked(streamed.content)
    pcm = client.post("/v1/audio/speech", json={"input": TEXT, "voice": "alice", "response_format": "pcm",
                                                "stream_format": "audio"})
    samples = np.frombuffer(pcm.content, "<i2").astype(np.float32) / 32768
    assert pcm.status_code == 200 and marked(_wav(samples, 16000))


def test_a_stream_is_marked_chunk_by_chunk_and_whole(app) -> None:
    """Each chunk is marked on its own: every chunk, the chunks joined, an excerpt across two seams, and the
    whole result (`Rendered.watermarked`) all carry the mark."""
    _, service, *_ = app
    job = service.speech.prepare(SynthesisRequest(Mode.SFT, text=TEXT, speaker="alice", seed=3, stream=True),
                                 JobOptions(loudness=None))
    live = service.speech.start(job)
    chunks = [chunk.samples for chunk in live.chunks()]
    result = live.result()
    assert len(chunks) == 3 and all(marked(_wav(c, 16000)) for c in chunks)
    joined = np.concatenate(chunks)
    assert marked(_wav(joined, 16000)) and marked(_wav(joined[CHUNK // 2:-CHUNK // 2], 16000))
    assert result.watermarked and np.array_equal(result.samples, joined)


def test_the_ui_tab_and_the_gradio_api(app) -> None:
    from cosyvoice_ui.ui.api_tools import Endpoints, build_functions
    from cosyvoice_ui.ui.handlers import Handlers, OutputOptions

    _, service, settings, work = app
    handlers = Handlers(service.manager, settings, work / "ui", speech=service.speech)
    for stream in (False, True):
        request = SynthesisRequest(Mode.SFT, text=TEXT, speaker="alice", seed=4, stream=stream)
        outputs = list(handlers.generate(request, OutputOptions(fmt="wav"), [], None))
        assert marked(Path(outputs[-1][1])), f"stream={stream}"
        if stream:  # what the player got, chunk by chunk
            played = np.concatenate([o[0][1] for o in outputs[:-1]]).astype(np.float32) / 32768
            assert marked(_wav(played, 16000))
    file, _ = build_functions(Endpoints(service, work / "api"))["preset"](text=TEXT, speaker="alice", seed=5)
    assert marked(Path(file["path"]))


def test_a_script_and_a_book(app, tmp_path: Path) -> None:
    from cosyvoice_ui.studio.audiobook import BookJob
    from cosyvoice_ui.studio.book import read_book
    from cosyvoice_ui.studio.mixdown import mix
    from cosyvoice_ui.studio.project import Project
    from cosyvoice_ui.studio.render import render_project
    from cosyvoice_ui.studio.voice_map import VoiceChoice
    from cosyvoice_ui.testing import ebooks
    from cosyvoice_ui.testing.speech import speech_jobs

    speech = speech_jobs(tmp_path / "service", watermark=True)
    project = Project.create(tmp_path / "p", "Demo", "[Alice] Hello there, Bob.\nThe two walked on.\n")
    project.set_voice("Alice", VoiceChoice("preset", "alice"))
    render_project(project, engine(), speech, JobOptions(check_takes=False))
    assert all(marked(project.take_path(line.take)) for line in project.lines)
    samples, rate, _ = mix(project)
    assert marked(_wav(samples, rate))
    book = read_book(ebooks.write_epub(tmp_path / "book.epub"))
    result = BookJob(tmp_path / "book", book, VoiceChoice("preset", "alice")).run(engine(), speech,
                                                                                 JobOptions(check_takes=False))
    assert result.chapter_files and all(marked(path) for path in result.chapter_files)


@pytest.mark.slow  # loads the tiny CosyVoice model in this process
def test_the_cli_synth_and_detect(tiny_sft: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    from cosyvoice_ui.cli.main import main

    monkeypatch.setenv("COSYVOICE_WATERMARK", "1")  # as the CLI runs outside the test suite
    out = tmp_path / "cli.wav"
    args = ["synth", "--model-dir", str(tiny_sft), "--device", "cpu", "--text", TEXT, "--speaker", "英文女",
            "--seed", "6", "--voices-dir", str(tmp_path / "voices")]
    assert main([*args, "--out", str(out)]) == 0
    assert main([*args, "--no-watermark", "--out", str(tmp_path / "plain.wav")]) == 0
    capsys.readouterr()
    assert main(["detect", str(out)]) == 0
    assert "cli.wav: marked" in capsys.readouterr().out
    assert main(["detect", str(out), str(tmp_path / "plain.wav")]) == 1
    assert "plain.wav: not marked" in capsys.readouterr().out
    (tmp_path / "junk.wav").write_bytes(b"not audio")
    assert main(["detect", "-q", str(out), str(tmp_path / "junk.wav")]) == 2
    assert capsys.readouterr() == ("", "")


# --- who can turn it off ---------------------------------------------------------------------------------------


def test_no_request_field_turns_the_mark_off(app) -> None:
    """A guest of a shared server (a public bind, an API key) asks for unmarked audio every way a body can."""
    _, service, settings, work = app
    fake = engine()
    manager = ModelManager("fake", loader=lambda mid, options, progress: fake, idle_unload_s=0,
                           describe_model=lambda mid: fake.info)
    api = FastAPI(docs_url=None)
    add_routes(api, manager, settings.with_(host="0.0.0.0", api_keys=("guest-key",), rate_limit_per_min=0))
    guest = TestClient(api, base_url=LOOPBACK, headers={"Authorization": "Bearer guest-key"})
    refused = guest.post("/tts", json={"text": TEXT, "speaker": "alice", "watermark": False})
    assert refused.status_code == 422 and "watermark" in refused.text  # /tts names the field it does not take
    for extra in ({"watermark": False}, {"no_watermark": True}, {"extra_body": {"watermark": False}}):
        speech = guest.post("/v1/audio/speech", json={"input": TEXT, "voice": "alice", **extra})
        assert speech.status_code == 200 and marked(speech.content), extra  # OpenAI's extra fields are ignored
    manager.shutdown()
    assert not any("mark" in field.name for field in dataclasses.fields(JobOptions))
    from cosyvoice_ui.ui.api_tools import Endpoints, build_functions

    functions = build_functions(Endpoints(service, work / "api-off"))
    assert not [name for name, function in functions.items()
                for param in inspect.signature(function).parameters if "mark" in param]
    with pytest.raises(TypeError):
        functions["preset"](text=TEXT, speaker="alice", watermark=False)


def test_health_says_whether_outputs_are_marked(app, tmp_path: Path) -> None:
    client, *_ = app
    assert client.get("/health").json()["watermark"] == {"marked": True, "state": "on", "reason": None}
    off = Settings(voices_dir=tmp_path / "v", watermark=False)
    assert watermarking.status(off)["state"] == "off" and not watermarking.status(off)["marked"]


def test_without_the_weights_the_app_runs_unmarked_and_says_so(app, monkeypatch, caplog) -> None:
    """The package not installed: outputs go out unmarked (`Rendered.watermarked` False), /health says why, the
    log says it once, and the detector answers 503 with the reason."""
    import cosyvoice_ui.watermark.weights as weights

    client, service, *_ = app
    monkeypatch.setattr(weights, "locate", lambda: (None, "the watermark's weights are not installed "
                                                          "(resemble-perth==1.0.1; pip install ...)"))
    monkeypatch.setattr(watermarking, "_shared", watermarking.Watermark())
    health = client.get("/health").json()["watermark"]
    assert health["marked"] is False and health["state"] == "unavailable" and "not installed" in health["reason"]
    with caplog.at_level(logging.WARNING, logger="cosyvoice_ui.serving.watermarking"):
        for seed in (7, 8):
            job = service.speech.prepare(SynthesisRequest(Mode.SFT, text=TEXT, speaker="alice", seed=seed),
                                         JobOptions(loudness=None))
            result = service.speech.render(job)
            assert not result.watermarked
    assert [r.getMessage() for r in caplog.records].count(
        "watermark: outputs are NOT marked: " + health["reason"]) == 1
    assert not _detector_says(result.samples)
    refused = client.post("/v1/audio/detect", files={"file": ("a.wav", _wav(result.samples, 16000))})
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "watermark_unavailable"


def _detector_says(samples: np.ndarray) -> bool:
    """The real detector (the module-level one was swapped out by the test)."""
    from cosyvoice_ui.watermark.perth import PerthMark

    return PerthMark.load().score(samples, 16000).marked


def _wav(samples: np.ndarray, rate: int) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue()

