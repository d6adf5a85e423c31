"""Rendering: voices → requests on each kind of model, order and progress, resuming after a stop or a crash,
regenerating takes, the bad-take guard, and end to end on a tiny CosyVoice2 folder and the offline voice."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.errors import Cancelled, InvalidRequest
from cosyvoice_ui.studio.project import Project
from cosyvoice_ui.studio.render import first_seed, render_line, render_project
from cosyvoice_ui.studio.voice_map import VoiceChoice, parse_voice_map, request_for
from cosyvoice_ui.serving.jobs import SpeechJobs
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.testing.speech import speech_jobs
from cosyvoice_ui.types import AudioChunk, EngineInfo, Mode

SCRIPT = "Alice: Hello there, Bob.\nBob: Hi Alice, how are you?\nThe two walked on.\nAlice: Fine, thanks.\n"
SAMPLE = voice_clip(4.0, seed=1)
V1_SFT = EngineInfo("CosyVoice-300M-SFT", "v1", 22050, (Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL), ("中文女",))
V1_INSTRUCT = EngineInfo("CosyVoice-300M-Instruct", "v1", 22050, (Mode.SFT, Mode.INSTRUCT), ("中文女",))
V3 = EngineInfo("Fun-CosyVoice3-0.5B", "v3", 24000, (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC),
                instruct_voice=True)


@pytest.fixture()
def speech(tmp_path: Path) -> SpeechJobs:
    """The speech jobs every render runs through (the server's settings under `tmp_path/service`)."""
    return speech_jobs(tmp_path / "service")


def make_project(tmp_path: Path, script: str = SCRIPT) -> Project:
    project = Project.create(tmp_path / "p", "Demo", script)
    for name, preset in (("Alice", "A"), ("Bob", "B")):
        if name in project.speakers():
            project.set_voice(name, VoiceChoice("preset", preset))
    return project


# --- voices → requests ---------------------------------------------------------------------------


def test_each_voice_kind_chooses_its_mode() -> None:
    assert request_for("hi", VoiceChoice("preset", "中文女"), V1_SFT, 1).mode is Mode.SFT
    saved = request_for("hi", VoiceChoice("saved", "me"), V3, 1, saved_transcript="")
    assert (saved.mode, saved.speaker) == (Mode.CROSS_LINGUAL, "me")
    assert request_for("hi", VoiceChoice("saved", "me"), V3, 1, saved_transcript="words").mode is Mode.ZERO_SHOT
    typed = request_for("hi", VoiceChoice("saved", "me", "what is said"), V3, 1, saved_transcript="")
    assert (typed.mode, typed.prompt_text) == (Mode.ZERO_SHOT, "what is said")
    sample = request_for("hi", VoiceChoice("sample", "x.flac", "hello there"), V3, 2, SAMPLE)
    assert (sample.mode, sample.prompt_text, sample.seed) == (Mode.ZERO_SHOT, "hello there", 2)
    assert request_for("hi", VoiceChoice("sample", "x.flac"), V3, 2, SAMPLE).mode is Mode.CROSS_LINGUAL
    styled = request_for("hi", VoiceChoice("sample", "x.flac", "t", instruct="speak softly"), V3, 2, SAMPLE)
    assert (styled.mode, styled.instruct_text, styled.prompt_audio) == (Mode.INSTRUCT, "speak softly", SAMPLE)
    v1 = request_for("hi", VoiceChoice("preset", "中文女", instruct="happy"), V1_INSTRUCT, 1)
    assert (v1.mode, v1.speaker, v1.instruct_text) == (Mode.INSTRUCT, "中文女", "happy")
    assert request_for("hi", VoiceChoice(), V3, 1).speaker is None  # the resolver fills the default in


@pytest.mark.parametrize("choice, info, words", [
    (VoiceChoice("preset", "中文女"), V3, "no preset speakers"),
    (VoiceChoice("preset", "Nobody"), V1_SFT, "choose one of"),
    (VoiceChoice("saved", "me"), V1_INSTRUCT, "cannot clone"),
    (VoiceChoice("sample", "x.flac", instruct="calm"), V1_INSTRUCT, "only with a preset"),
    (VoiceChoice("preset", "中文女", instruct="calm"), V1_SFT, "cannot follow a style instruction"),
    (VoiceChoice("sample", "gone.flac"), V3, "missing"),
    (VoiceChoice("saved", ""), V3, "pick which saved voice"),
])
def test_a_voice_the_model_cannot_use_is_refused(choice: VoiceChoice, info: EngineInfo, words: str) -> None:
    with pytest.raises(InvalidRequest) as error:
        request_for("hello", choice, info, 1, None)
    assert words in error.value.message


def test_a_bad_voice_stops_the_render_before_any_work(tmp_path: Path, speech: SpeechJobs) -> None:
    clone_only = FakeEngine(modes=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL), speakers=())
    project = make_project(tmp_path)
    with pytest.raises(InvalidRequest) as error:
        render_project(project, clone_only, speech)
    assert error.value.params["speaker"] == "Alice" and "no preset speakers" in error.value.message
    assert clone_only.calls == 0 and all(not line.takes for line in Project.open(project.folder).lines)


# --- order, progress, resuming ---------------------------------------------------------------------


def test_lines_render_in_order_with_per_line_progress(tmp_path: Path, speech: SpeechJobs) -> None:
    project, events = make_project(tmp_path), []
    summary = render_project(project, FakeEngine(), speech, progress=events.append)
    assert summary.rendered == ["L0001", "L0002", "L0003", "L0004"]
    starts = [e.message for e in events if e.stage == "line" and e.message.startswith("line ")]
    assert starts == ["line 1/4 · Alice", "line 2/4 · Bob", "line 3/4 · Narrator", "line 4/4 · Alice"]
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert all(line.take is not None and line.take.seed == first_seed(project, line) for line in project.lines)


def test_a_stopped_render_resumes_with_only_what_is_missing(tmp_path: Path, speech: SpeechJobs) -> None:
    project, engine, cancel = make_project(tmp_path), FakeEngine(), threading.Event()

    def stop_after_second_line(event) -> None:
        if event.message == "line 3/4 · Narrator":
            cancel.set()

    with pytest.raises(Cancelled):
        render_project(project, engine, speech, progress=stop_after_second_line, cancel=cancel)
    saved = Project.open(project.folder)
    assert [line.take is not None for line in saved.lines] == [True, True, False, False]
    before = engine.calls
    summary = render_project(saved, engine, speech)
    assert summary.rendered == ["L0003", "L0004"] and summary.skipped == ["L0001", "L0002"]
    assert engine.calls - before == 2
    assert render_project(saved, engine, speech).rendered == []  # nothing left to do
    saved.take_path(saved.line("L0002").take).unlink()  # a take file lost on disk is rendered again
    events = []
    assert render_project(saved, engine, speech, progress=events.append).rendered == ["L0002"]
    assert events[0].message == "line 2/4 · Bob"  # its place in the script


class CrashingEngine(FakeEngine):
    """Fails on its `fail_on`-th synthesis, like a model running out of memory half-way through."""

    def __init__(self, fail_on: int) -> None:
        super().__init__()
        self.fail_on = fail_on

    def _synthesize(self, request, progress, cancel):
        if self.calls + 1 == self.fail_on:
            self.calls += 1
            raise RuntimeError("out of memory")
        yield from super()._synthesize(request, progress, cancel)


def test_a_crash_mid_way_keeps_the_lines_before_it(tmp_path: Path, speech: SpeechJobs) -> None:
    project = make_project(tmp_path)
    with pytest.raises(RuntimeError):
        render_project(project, CrashingEngine(fail_on=3), speech)
    reopened = Project.open(project.folder)
    assert [line.take is not None for line in reopened.lines] == [True, True, False, False]
    first_takes = [line.take for line in reopened.lines[:2]]
    engine = FakeEngine()
    assert render_project(reopened, engine, speech).rendered == ["L0003", "L0004"] and engine.calls == 2
    assert [line.take for line in reopened.lines[:2]] == first_takes


def test_a_new_voice_re_renders_only_that_speakers_lines(tmp_path: Path, speech: SpeechJobs) -> None:
    project, engine = make_project(tmp_path), FakeEngine()
    render_project(project, engine, speech)
    project.set_voice("Alice", VoiceChoice("preset", "B"))
    assert render_project(project, engine, speech).rendered == ["L0001", "L0004"]


def test_voice_maps_from_json() -> None:
    info = EngineInfo("m", "v1", 22050, (Mode.SFT, Mode.ZERO_SHOT), ("中文女",))
    voices = parse_voice_map({"Ann": "中文女", "Ben": "mine", "Cy": "default", "Di": {"kind": "sample",
                              "value": "di.wav", "transcript": "hi"}, "Ed": "saved:other"}, info, saved=("mine",))
    assert voices == {"Ann": VoiceChoice("preset", "中文女"), "Ben": VoiceChoice("saved", "mine"), "Cy": VoiceChoice(),
                      "Di": VoiceChoice("sample", "di.wav", "hi"), "Ed": VoiceChoice("saved", "other")}
    for bad, code in (({"Ann": "nobody"}, "voice_unknown"), ({"Ann": {"kind": "robot"}}, "voice_kind_unknown"),
                      (["Ann"], "voice_map_invalid")):
        with pytest.raises(InvalidRequest) as error:
            parse_voice_map(bad, info)
        assert error.value.code == code


# --- takes -------------------------------------------------------------------------------------------


def test_regenerate_makes_a_new_take_with_a_new_seed(tmp_path: Path, speech: SpeechJobs) -> None:
    project, engine = make_project(tmp_path), FakeEngine()
    render_project(project, engine, speech)
    take = render_line(project, "L0001", engine, speech)
    line = project.line("L0001")
    assert take.number == 2 and line.chosen == 2 and take.seed != line.takes[0].seed
    first, second = (project.take_audio(t).samples for t in line.takes)
    assert len(first) == len(second) and not np.allclose(first, second)
    again = render_line(project, "L0001", engine, speech, seed=line.takes[0].seed)  # the same seed, the same audio
    assert np.array_equal(project.take_audio(again).samples, first)
    project.lock("L0001")
    with pytest.raises(InvalidRequest) as error:
        render_line(project, "L0001", engine, speech)
    assert error.value.code == "line_locked"
    with pytest.raises(InvalidRequest) as error:
        render_line(project, "nope", engine, speech)
    assert error.value.code == "line_unknown"
    assert render_project(project, engine, speech, only_missing=False).rendered == ["L0002", "L0003", "L0004"]


class LongFirstTakeEngine(FakeEngine):
    """Its first take of every text runs far too long for the words (a model stuck repeating)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def _synthesize(self, request, progress, cancel):
        if request.text not in self.seen:
            self.seen.add(request.text)
            self.calls += 1
            yield AudioChunk(np.full(16000 * 30, 0.05, np.float32), 16000, 0, 1, True, request.text)
            return
        yield from super()._synthesize(request, progress, cancel)


def test_bad_takes_are_retried_and_the_check_is_kept(tmp_path: Path) -> None:
    project = make_project(tmp_path, "Alice: Hello there, Bob, how are you?\n")
    render_project(project, LongFirstTakeEngine(), speech_jobs(tmp_path, take_retries=2))
    take = project.line("L0001").take
    assert take.attempts == 2 and take.check["ok"] and take.seconds < 5
    assert Project.open(project.folder).line("L0001").take.check == take.check


# --- end to end on real engines ---------------------------------------------------------------------


def test_end_to_end_on_a_tiny_cosyvoice2(tmp_path: Path, tiny_v2: Path) -> None:
    from cosyvoice_ui import load_engine
    from cosyvoice_ui.serving.voices import VoiceLibrary
    from cosyvoice_ui.studio.mixdown import export
    from cosyvoice_ui.serving.subtitles import parse

    engine = load_engine(tiny_v2, device="cpu")
    preset = engine.info.speakers[0]
    library = VoiceLibrary(tmp_path / "voices")
    saved = library.add("Cleo", voice_clip(3.5, pitch=200.0, seed=4), "hello there, how are you today")
    project = Project.create(tmp_path / "v2", "Tiny", "Ann: Good morning.\nBen: Hello Ann.\nCleo: Hi all.\n"
                             "The end.\n")
    project.set_voice("Ann", VoiceChoice("preset", preset))
    project.set_voice("Cleo", VoiceChoice("saved", saved.id))
    project.set_voice("Ben", VoiceChoice("sample", transcript="hello there, how are you today",
                                         instruct="speak slowly"), sample_audio=SAMPLE)
    project.set_voice("Narrator", VoiceChoice(instruct="speak like a storyteller"))  # an instruction alone
    render_project(project, engine, speech_jobs(tmp_path, library))
    assert [line.take.voice["kind"] for line in project.lines] == ["preset", "sample", "saved", "default"]
    assert saved.id in engine.info.saved_voices  # registered with the engine on first use
    assert all(line.take.seconds > 0 and line.take.cues for line in project.lines)
    paths = export(project, fmt="wav", subtitles=("srt", "vtt"))
    import soundfile as sf

    mixed, rate = sf.read(str(paths[0]))
    cues = parse(paths[-2].read_text(encoding="utf-8"))
    assert [c.text.split(":")[0] for c in cues] == ["Ann", "Ben", "Cleo", "Narrator"]
    assert abs(cues[-1].end - len(mixed) / rate) <= 0.05


def test_end_to_end_on_the_offline_voice(tmp_path: Path, speech: SpeechJobs) -> None:
    from cosyvoice_ui.offline.assets import offline_available

    ok, reason = offline_available()
    if not ok:
        pytest.skip(reason)
    from cosyvoice_ui.offline import load_offline_engine
    from cosyvoice_ui.studio.mixdown import mix

    engine = load_offline_engine(voices_dir=tmp_path / "offline_voices")
    first, second = engine.info.speakers[:2]
    project = Project.create(tmp_path / "off", "Offline", "Ann: Good morning to you.\nBen: And to you, Ann.\n")
    project.set_voice("Ann", VoiceChoice("preset", first))
    project.set_voice("Ben", VoiceChoice("preset", second))
    render_project(project, engine, speech)
    samples, rate, cues = mix(project)
    assert [c.speaker for c in cues] == ["Ann", "Ben"] and abs(cues[-1].end - len(samples) / rate) < 0.05
    assert all(line.take.check.get("ok") for line in project.lines)  # real speech passes the bad-take check
