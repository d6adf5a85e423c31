"""REST studio features (issue 15): subtitles on /tts timed from the segments, pronunciation glossaries (inline and
saved, on /tts and /v1/audio/speech, and their routes), bad-take checks with retries on every synthesis, and the
result cache keeping results of another glossary or policy apart.

Fakes for the orchestration (a segmenting engine whose segments are tones of distinct loudness, so cue times can
be checked on the decoded audio), one end-to-end /tts on the tiny CosyVoice-300M-SFT model.
"""

from __future__ import annotations

import base64
import io
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui.api.routes import add_docs, add_routes
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.serving.subtitles import parse
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import AudioChunk, CheckedRequest, Mode, ProgressCallback
from cosyvoice_ui.web.server import create_manager
from tests.web_client import LOOPBACK

LEVELS = (0.05, 0.2, 0.5, 0.1)  # the amplitude of segment 0, 1, 2, 3 (a 300 Hz tone)
SECONDS_PER_CHAR = 0.06  # plausible speech: inside every take-check band for English
THREE = "The first sentence is here. Then comes a second one. And a third closes it."


class SegmentingEngine(FakeEngine):
    """Splits the text at sentence ends and renders each sentence as its own segment (two chunks): a tone of
    that segment's level, 0.06 s per character. A sentence with "loop" in it comes out far too long the first
    time that text is rendered (a runaway take), normal on a re-render."""

    def __init__(self, **options) -> None:
        super().__init__(**{"name": "seg-model", "modes": (Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC),
                            "speakers": ("alice", "bob"), **options})
        self.received: list[CheckedRequest] = []
        self.rendered: dict[str, int] = {}
        self._lock = threading.Lock()

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        self.calls += 1
        self.received.append(request)
        rate = self.info.sample_rate
        sentences = [s.strip() for s in re.findall(r"[^.!?]+[.!?]?", request.text) if s.strip()]
        for index, sentence in enumerate(sentences):
            with self._lock:
                seen = self.rendered.get(sentence, 0)
                self.rendered[sentence] = seen + 1
            seconds = SECONDS_PER_CHAR * len(sentence) / request.speed
            if "loop" in sentence.lower() and seen == 0:
                seconds *= 8
            n = int(seconds * rate)
            tone = LEVELS[index % len(LEVELS)] * np.sin(2 * np.pi * 300 * np.arange(n) / rate)
            halves = np.array_split(tone.astype(np.float32), 2)
            for half_index, half in enumerate(halves):
                final = index == len(sentences) - 1 and half_index == 1
                yield AudioChunk(half, rate, index, len(sentences), final, sentence)


def client_for(tmp_path: Path, engine: FakeEngine | None = None, **settings) -> tuple[TestClient, FakeEngine,
                                                                                   ModelManager]:
    engine = engine or SegmentingEngine()
    config = Settings(**{"voices_dir": tmp_path / "voices", "glossary_dir": tmp_path / "glossaries",
                         "idle_unload_s": 0, "take_retries": 2, **settings})  # two retries (default 1)
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    app = FastAPI(docs_url=None)
    add_routes(app, manager, config)
    add_docs(app)
    return TestClient(app, base_url=LOOPBACK), engine, manager


def error_of(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def decoded(body: dict) -> tuple[np.ndarray, int]:
    samples, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="float32")
    return samples, rate


def level_changes(samples: np.ndarray, rate: int, frame_s: float = 0.01) -> list[float]:
    """Seconds where the tone's loudness steps from one segment's level to the next (decoded audio)."""
    frame = int(rate * frame_s)
    rms = np.array([np.sqrt(np.mean(samples[i:i + frame] ** 2)) for i in range(0, len(samples) - frame, frame)])
    # the first frames set the scale (normalisation scales every level alike)
    scale = rms[:5].mean() / (LEVELS[0] / np.sqrt(2))
    levels = np.array(LEVELS) / np.sqrt(2) * scale
    labels = np.argmin(np.abs(rms[:, None] - levels[None, :]), axis=1)
    return [i * frame_s for i in range(1, len(labels)) if labels[i] != labels[i - 1]]


# --- subtitles ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_tts_subtitles_are_timed_on_the_returned_audio(tmp_path: Path, fmt: str) -> None:
    client, _, _ = client_for(tmp_path)
    response = client.post("/tts", json={"text": THREE, "speaker": "alice", "seed": 1, "subtitles": fmt})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["subtitle_format"] == fmt
    assert body["subtitles"].startswith("WEBVTT" if fmt == "vtt" else "1\n")
    cues = parse(body["subtitles"])
    assert [c.text for c in cues] == ["The first sentence is here.", "Then comes a second one.",
                                      "And a third closes it."]
    samples, rate = decoded(body)
    seconds = len(samples) / rate
    # every cue boundary is where the decoded audio steps to the next segment's loudness (within 50 ms)
    changes = level_changes(samples, rate)
    assert len(changes) == 2
    for boundary, (before, after) in zip(changes, zip(cues, cues[1:])):
        assert abs(before.end - boundary) <= 0.05 and abs(after.start - boundary) <= 0.05
    assert cues[0].start == pytest.approx(0.0, abs=0.05) and cues[-1].end == pytest.approx(seconds, abs=0.05)


def test_subtitles_are_refused_with_stream_and_in_unknown_formats(tmp_path: Path) -> None:
    client, engine, _ = client_for(tmp_path)
    streamed = client.post("/tts", json={"text": THREE, "speaker": "alice", "stream": True, "subtitles": "srt"})
    assert error_of(streamed) == (422, "subtitles_need_whole_result")
    assert "stream" in streamed.json()["error"]["message"] and streamed.json()["error"]["param"] == "subtitles"
    assert error_of(client.post("/tts", json={"text": "Hi there.", "speaker": "alice", "subtitles": "ass"})) == \
        (422, "bad_subtitle_format")
    assert engine.calls == 0
    plain = client.post("/tts", json={"text": "Hi there you.", "speaker": "alice"}).json()
    assert plain["subtitles"] is None and plain["subtitle_format"] is None


# --- glossaries on synthesis -----------------------------------------------------------------------------


def test_inline_glossary_rewrites_the_text_and_subtitles_keep_the_written_words(tmp_path: Path) -> None:
    client, engine, _ = client_for(tmp_path)
    text = "We met Nguyen at noon. Then Nguyen left for home."
    response = client.post("/tts", json={"text": text, "speaker": "alice", "seed": 2, "subtitles": "srt",
                                         "glossary": {"Nguyen": "Win"}})
    assert response.status_code == 200, response.text
    assert engine.received[-1].text == "We met Win at noon. Then Win left for home."
    body = response.json()
    assert body["glossary"] == "inline"
    assert [c.text for c in parse(body["subtitles"])] == ["We met Nguyen at noon.", "Then Nguyen left for home."]


def test_saved_glossary_applies_on_the_openai_route_and_hints_reach_a_model_that_reads_them(tmp_path: Path) -> None:
    client, engine, _ = client_for(tmp_path, SegmentingEngine(pronunciation=("cmu",)))
    created = client.post("/v1/glossaries", json={"name": "Brands", "entries": [
        {"word": "GIF", "cmu": "[JH][IH1][F]", "respell": "jif"}]})
    assert created.status_code == 201, created.text
    glossary_id = created.json()["id"]
    speech = client.post("/v1/audio/speech", json={"input": "Send me a GIF today.", "voice": "alice",
                                                   "response_format": "wav", "glossary": glossary_id})
    assert speech.status_code == 200, speech.text
    assert engine.received[-1].text == "Send me a [JH][IH1][F] today."
    assert speech.headers["x-take-retries"] == "0"


@pytest.mark.parametrize("glossary, code", [
    ({"Xi'an": "[x][zz9]"}, "glossary_bad_hint"),
    ({"": "nothing"}, "glossary_empty_word"),
    ({"word": ""}, "glossary_missing_pronunciation"),
    ("no-such-glossary", "glossary_unknown"),
    (42, "invalid_field"),
])
def test_bad_glossaries_are_422_with_their_code(tmp_path: Path, glossary, code: str) -> None:
    client, engine, _ = client_for(tmp_path)
    for route, body in (("/tts", {"text": "Hello there you.", "speaker": "alice"}),
                        ("/v1/audio/speech", {"input": "Hello there you.", "voice": "alice"})):
        response = client.post(route, json={**body, "glossary": glossary})
        assert error_of(response) == (422, code), response.text
        assert response.json()["error"]["message"]
    assert engine.calls == 0


# --- bad takes ---------------------------------------------------------------------------------------------


def test_a_runaway_segment_is_re_rendered_and_reported(tmp_path: Path) -> None:
    client, engine, _ = client_for(tmp_path)
    text = "This one is fine. But this one will loop. The last one is fine."
    response = client.post("/tts", json={"text": text, "speaker": "alice", "seed": 4, "subtitles": "srt"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert response.headers["x-take-retries"] == "1" and body["take_retries"] == 1
    assert [(t["segment"], t["attempts"], t["ok"]) for t in body["takes"]] == [(0, 1, True), (1, 2, True),
                                                                               (2, 1, True)]
    assert engine.received[-1].text == "But this one will loop." and engine.received[-1].seed != 4
    samples, rate = decoded(body)
    expected = SECONDS_PER_CHAR * sum(len(s) for s in ("This one is fine.", "But this one will loop.",
                                                       "The last one is fine."))
    assert len(samples) / rate == pytest.approx(expected, abs=0.01)  # the runaway take is gone
    cues = parse(body["subtitles"])
    assert cues[-1].end == pytest.approx(len(samples) / rate, abs=0.05)
    speech = client.post("/v1/audio/speech", json={"input": "Speech may loop too.", "voice": "alice",
                                                   "response_format": "wav"})
    assert speech.status_code == 200 and speech.headers["x-take-retries"] == "1"  # the server's policy there
    assert sf.info(io.BytesIO(speech.content)).duration == pytest.approx(
        SECONDS_PER_CHAR * len("Speech may loop too."), abs=0.01)


def test_take_retries_zero_reports_without_retrying_and_check_takes_false_skips_the_check(tmp_path: Path) -> None:
    client, engine, _ = client_for(tmp_path)
    reported = client.post("/tts", json={"text": "It will loop here.", "speaker": "alice", "seed": 1,
                                         "take_retries": 0})
    assert reported.status_code == 200 and engine.calls == 1
    [take] = reported.json()["takes"]
    assert take["attempts"] == 1 and not take["ok"] and take["reasons"] == ["too_long"]
    assert reported.headers["x-take-retries"] == "0"
    unchecked = client.post("/tts", json={"text": "Another will loop now.", "speaker": "alice", "seed": 1,
                                          "check_takes": False})
    assert unchecked.status_code == 200 and engine.calls == 2 and unchecked.json()["takes"] == []
    assert error_of(client.post("/tts", json={"text": "Hi there.", "speaker": "alice", "take_retries": 6})) == \
        (422, "invalid_field")


def test_server_settings_set_the_policy(tmp_path: Path) -> None:
    client, engine, _ = client_for(tmp_path, check_takes=False)
    body = client.post("/tts", json={"text": "It will loop here.", "speaker": "alice"}).json()
    assert body["takes"] == [] and engine.calls == 1
    body = client.post("/tts", json={"text": "Now it will loop.", "speaker": "alice", "check_takes": True}).json()
    assert engine.calls == 3 and body["takes"][0]["attempts"] == 2  # the server's 2 retries; the first was good


def test_streamed_requests_are_checked_but_never_retried(tmp_path: Path) -> None:
    client, engine, _ = client_for(tmp_path)
    with client.stream("POST", "/tts", json={"text": "Streams may loop.", "speaker": "alice", "stream": True,
                                             "format": "pcm"}) as response:
        assert response.status_code == 200 and response.headers["x-take-retries"] == "0"
        data = b"".join(response.iter_bytes())
    assert engine.calls == 1
    assert len(data) // 2 == int(8 * SECONDS_PER_CHAR * len("Streams may loop.") * 16000)  # the runaway take as is


# --- the cache -------------------------------------------------------------------------------------------


def test_the_cache_never_replays_a_result_of_another_glossary_or_policy(tmp_path: Path) -> None:
    client, engine, _ = client_for(tmp_path)
    request = {"text": "Meet Nguyen soon.", "speaker": "alice", "seed": 9, "subtitles": "vtt"}
    first = client.post("/tts", json=request)
    again = client.post("/tts", json=request)
    assert (first.headers["x-cache"], again.headers["x-cache"]) == ("miss", "hit") and engine.calls == 1
    assert again.json()["subtitles"] == first.json()["subtitles"] and again.json()["takes"] == first.json()["takes"]
    variants = [{"glossary": {"Nguyen": "Win"}}, {"glossary": {"Nguyen": "Nwen"}}, {"take_retries": 0},
                {"check_takes": False}]
    for variant in variants:
        response = client.post("/tts", json={**request, **variant})
        assert response.headers["x-cache"] == "miss", variant
    assert engine.calls == 1 + len(variants)
    srt = client.post("/tts", json={**request, "subtitles": "srt"})  # one entry serves every subtitle format
    assert srt.headers["x-cache"] == "hit" and parse(srt.json()["subtitles"]) == parse(first.json()["subtitles"])


# --- glossary routes -----------------------------------------------------------------------------------


def test_glossary_routes_create_list_get_replace_delete(tmp_path: Path) -> None:
    client, _, _ = client_for(tmp_path)
    assert client.get("/v1/glossaries").json() == {"object": "list", "data": []}
    created = client.post("/v1/glossaries", json={"name": "Place names", "entries": {"Xi'an": "[xi1][an1]"}})
    assert created.status_code == 201, created.text
    record = created.json()
    assert record["id"] == "place-names" and record["object"] == "glossary"
    assert record["entries"] == [{"word": "Xi'an", "pinyin": "[x][ī][ān]", "cmu": None, "respell": None}]
    second = client.post("/v1/glossaries", json={"name": "Place names", "entries": {"Nguyen": "Win"}})
    assert second.json()["id"] == "place-names-2"  # POST never replaces
    assert [g["id"] for g in client.get("/v1/glossaries").json()["data"]] == ["place-names", "place-names-2"]
    assert client.get("/v1/glossaries/place-names").json() == record
    replaced = client.put("/v1/glossaries/place-names", json={"name": "Places", "entries": {"Nguyen": "Win"}})
    assert replaced.status_code == 200 and replaced.json()["name"] == "Places"
    made = client.put("/v1/glossaries/brands", json={"entries": [{"word": "GIF", "respell": "jif"}]})
    assert made.status_code == 201 and made.json()["id"] == "brands"
    assert client.delete("/v1/glossaries/brands").json() == {"id": "brands", "object": "glossary", "deleted": True}
    assert error_of(client.get("/v1/glossaries/brands")) == (404, "glossary_not_found")
    assert error_of(client.delete("/v1/glossaries/brands")) == (404, "glossary_not_found")
    assert error_of(client.get("/v1/glossaries/bad%20id%21")) == (404, "glossary_not_found")
    assert error_of(client.post("/v1/glossaries", json={"name": "x", "entries": {"a": "[zz9]"}})) == \
        (422, "glossary_bad_hint")
    assert error_of(client.post("/v1/glossaries", json={"name": "x", "entries": [["A", "a"], ["a", "b"]]})) == \
        (422, "glossary_duplicate")
    assert error_of(client.patch("/v1/glossaries/place-names", json={})) == (405, "method_not_allowed")


def test_an_unwritable_glossary_folder_is_409(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the folder should be")
    client, _, _ = client_for(tmp_path, glossary_dir=blocker)
    response = client.post("/v1/glossaries", json={"name": "x", "entries": {"Nguyen": "Win"}})
    assert error_of(response) == (409, "glossary_store_unwritable")
    assert str(tmp_path) not in response.text


def test_preview_shows_the_reading_and_which_entries_took_part(tmp_path: Path) -> None:
    client, _, manager = client_for(tmp_path)
    client.post("/v1/glossaries", json={"name": "mixed", "entries": [
        {"word": "Nguyen", "respell": "Win"}, {"word": "GIF", "cmu": "[JH][IH1][F]"}]})
    body = {"text": "Nguyen sent a GIF.", "glossary": "mixed"}
    unloaded = client.post("/v1/glossaries/preview", json=body)
    assert unloaded.status_code == 200, unloaded.text
    result = unloaded.json()
    assert result["text"] == "Win sent a GIF." and result["segments"] == ["Win sent a GIF."]
    assert result["used"] == [{"word": "Nguyen", "respell": "Win", "pinyin": None, "cmu": None}]
    assert [s["word"] for s in result["skipped"]] == ["GIF"] and "cmu" in result["skipped"][0]["reason"]
    assert result["model_loaded"] is False and manager.loaded is None  # a preview never loads the model
    with manager.job():
        pass
    assert client.post("/v1/glossaries/preview", json=body).json()["model_loaded"] is True
    inline = client.post("/v1/glossaries/preview", json={"text": "A GIF.", "glossary": {"GIF": "jif"}}).json()
    assert inline["text"] == "A jif."
    assert error_of(client.post("/v1/glossaries/preview", json={"text": " ", "glossary": "mixed"})) == \
        (422, "text_empty")


# --- guard and schema ------------------------------------------------------------------------------------


def test_new_routes_need_the_api_key(tmp_path: Path) -> None:
    client, _, _ = client_for(tmp_path, api_keys=("k1",))
    for method, path in (("get", "/v1/glossaries"), ("post", "/v1/glossaries/preview"), ("get", "/v1/asr/models"),
                         ("post", "/v1/transcribe"), ("post", "/v1/audio/transcriptions"),
                         ("delete", "/v1/glossaries/x")):
        assert client.request(method.upper(), path).status_code == 401, path
    assert client.get("/v1/glossaries", headers={"Authorization": "Bearer k1"}).status_code == 200


def test_the_schema_declares_the_new_fields_routes_and_errors(tmp_path: Path) -> None:
    client, _, _ = client_for(tmp_path)
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    tts = schema["components"]["schemas"]["TTSBody"]["properties"]
    assert {"subtitles", "glossary", "take_retries", "check_takes"} <= set(tts)
    assert "glossary" in schema["components"]["schemas"]["SpeechBody"]["properties"]
    assert "subtitles" not in schema["components"]["schemas"]["SpeechBody"]["properties"]
    assert "X-Take-Retries" in paths["/tts"]["post"]["responses"]["200"]["headers"]
    expected = {("/v1/glossaries", "get"), ("/v1/glossaries", "post"), ("/v1/glossaries/preview", "post"),
                ("/v1/glossaries/{glossary_id}", "get"), ("/v1/glossaries/{glossary_id}", "put"),
                ("/v1/glossaries/{glossary_id}", "delete"), ("/v1/transcribe", "post"),
                ("/v1/audio/transcriptions", "post"), ("/v1/asr/models", "get")}
    for path, method in expected:
        responses = paths[path][method]["responses"]
        assert {"401", "403", "413", "429"} <= set(responses), (path, method)
        ok = responses.get("200") or responses["201"]
        assert "$ref" in str(ok["content"]["application/json"]["schema"]), (path, method)
    assert "multipart/form-data" in paths["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]
    assert "404" in paths["/v1/glossaries/{glossary_id}"]["get"]["responses"]


# --- end to end on the tiny SFT model ---------------------------------------------------------------------


def test_tts_with_subtitles_and_a_glossary_on_the_tiny_model(tiny_sft: Path, tmp_path: Path) -> None:
    settings = Settings(model_dir=tiny_sft, voices_dir=tmp_path / "voices", glossary_dir=tmp_path / "glossaries",
                        device="cpu", idle_unload_s=0, rate_limit_per_min=0)
    manager = create_manager(settings)
    app = FastAPI()
    add_routes(app, manager, settings)
    client = TestClient(app, base_url=LOOPBACK)
    try:
        response = client.post("/tts", json={"text": "Nguyen said hello.", "speaker": "英文女", "seed": 3,
                                             "subtitles": "srt", "glossary": {"Nguyen": "Win"}, "take_retries": 1})
        assert response.status_code == 200, response.text
        body = response.json()
        samples, rate = decoded(body)
        cues = parse(body["subtitles"])
        assert len(cues) == len(body["takes"]) >= 1
        assert cues[0].text == "Nguyen said hello."  # the words written, not the respelling the model read
        assert cues[0].start == pytest.approx(0.0, abs=0.05)
        assert cues[-1].end == pytest.approx(len(samples) / rate, abs=0.05)
        assert body["glossary"] == "inline" and 1 <= body["takes"][0]["attempts"] <= 2
        assert int(response.headers["x-take-retries"]) == body["take_retries"]
    finally:
        manager.shutdown()
