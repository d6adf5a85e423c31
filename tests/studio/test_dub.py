"""Dubbing (issue 28) on a fake engine: the CLI's dubbed MP4 (the video stream copied, two tagged audio tracks),
speech on cue within 50 ms or reported with its overrun, adjusted subtitles that match the dubbed track, stems that
add up to it, the modes and voices each cue gets, resuming after an interrupt, and the refusals. The same on the
offline voice and a tiny CosyVoice3 model is in test_dub_models.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.cli.main import main
from cosyvoice_ui.engine import raise_if_cancelled
from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.subtitles import parse
from cosyvoice_ui.studio.dub_cues import FitPolicy, fit, read_cues
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import AudioChunk, Mode

from .dub_media_kit import LINES, audio_track, make_video, offset, onset, srt_of, streams

RATE = 24000
TOLERANCE_S = 0.05
LONG = "好主意，我现在真的非常需要一杯很浓很浓的咖啡，不然我今天什么都做不了。"  # too long for cue 4 even at 1.2x


class DubFake(FakeEngine):
    """Speaks seeded noise for 0.2 s per character of the text (divided by the speed), records every request,
    raises KeyboardInterrupt on call `interrupt_at`, and holds each take while `release` is cleared."""

    def __init__(self, interrupt_at: int | None = None) -> None:
        super().__init__(name="dub-fake", speakers=("A", "B"), sample_rate=RATE, chunks=1)
        self.requests: list = []
        self.interrupt_at = interrupt_at

    def _synthesize(self, request, progress, cancel):
        self.requests.append(request)
        if len(self.requests) == self.interrupt_at:
            raise KeyboardInterrupt
        while not self.release.wait(0.05):  # cleared by a test: the take waits, a stop ends it
            raise_if_cancelled(cancel)
        count = int(0.2 * len(request.text) * RATE / request.speed)
        rng = np.random.default_rng(request.seed)
        yield AudioChunk((0.1 * rng.standard_normal(count)).astype(np.float32), RATE, 0, 1, True, request.text)


@pytest.fixture()
def fake(monkeypatch):
    import cosyvoice_ui.serving.backends as backends

    current = {}

    def install(**options) -> DubFake:
        current["engine"] = DubFake(**options)
        return current["engine"]

    monkeypatch.setattr(backends, "open_engine", lambda *args, **kwargs: current["engine"])
    install()
    return install


def source_track(seconds: float = 20.0) -> np.ndarray:
    """Two voices (220 and 120 Hz) under the cues' times, silence elsewhere."""
    track = np.zeros(int(seconds * RATE), np.float32)
    for start, end, speaker, _, _ in LINES:
        clip = voice_clip(end - start, RATE, 220.0 if speaker == "Alice" else 120.0).samples
        track[int(start * RATE):int(start * RATE) + len(clip)] = clip
    return track


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    return make_video(tmp_path_factory.mktemp("media") / "talk.mp4", source_track(), RATE)


def _dub(tmp_path: Path, video: Path, srt: str, *extra: str) -> int:
    cues = tmp_path / "talk.zh.srt"
    cues.write_text(srt, encoding="utf-8")
    return main(["dub", str(video), "--cues", str(cues), "--out", str(tmp_path / "out.mp4"), "--voices-dir",
                 str(tmp_path / "voices"), "--glossary-dir", str(tmp_path / "glossaries"), *extra])


def test_the_cli_dubs_a_video_on_cue(fake, video: Path, tmp_path: Path, capsys) -> None:
    lines = list(LINES)
    lines[3] = (*lines[3][:4], LONG)  # cue 4 cannot fit: reported with its overrun
    code = _dub(tmp_path, video, srt_of(lines), "--srt", "--vtt", "--stems", str(tmp_path / "stems"),
                "--source-lang", "en")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    source, dubbed = streams(video), streams(tmp_path / "out.mp4")
    assert [(s["codec_type"], s["codec_name"]) for s in dubbed] == [("video", "h264"), ("audio", "aac"),
                                                                      ("audio", "aac")]
    assert (dubbed[0]["width"], dubbed[0]["height"]) == (source[0]["width"], source[0]["height"])
    assert [s["tags"]["language"] for s in dubbed[1:]] == ["chi", "eng"]

    state = json.loads((tmp_path / "out.mp4.dub" / "dub.json").read_text(encoding="utf-8"))
    assert [c["speaker"] for c in state["cues"]] == ["Alice", "Bob", "Alice", "Bob", "Alice"]
    overruns = [c["fit_result"]["overrun"] for c in state["cues"]]
    assert overruns[3] > 0 and overruns[:3] == [0, 0, 0] and overruns[4] == 0
    assert "cue   4 Bob" in captured.out and "OVERRUN" in captured.out and "4 fit, 1 overrun" in captured.out
    track, rate = sf.read(tmp_path / "out.mp4.dub" / "exports" / "dub.wav", dtype="float32")
    spoken = parse((tmp_path / "out.srt").read_text(encoding="utf-8"))
    assert [c.text.split(":")[0] for c in spoken] == ["Alice", "Bob", "Alice", "Bob", "Alice"]
    assert [c.speaker for c in parse((tmp_path / "out.vtt").read_text(encoding="utf-8"))] == [
        "Alice", "Bob", "Alice", "Bob", "Alice"]
    stems = {p.stem: sf.read(p, dtype="float32")[0] for p in (tmp_path / "stems").iterdir()}
    assert set(stems) == {"Alice", "Bob"}
    np.testing.assert_allclose(stems["Alice"] + stems["Bob"], track, atol=3 / 32767)  # they add up to the track
    for (start, _, speaker, *_), cue, state_cue in zip(lines, spoken, state["cues"]):
        heard = onset(stems[speaker], rate, start - 0.5, start + 1.0)  # (its own stem: cue 4 runs into cue 5)
        assert heard is not None and abs(heard - start) <= TOLERANCE_S  # on cue (cue 4 too: it overruns its end)
        assert abs(cue.start - heard) <= TOLERANCE_S  # the adjusted SRT says when it is heard ...
        stopped = offset(stems[speaker], rate, start, cue.end + 1.0)
        assert abs(cue.end - stopped) <= TOLERANCE_S  # ... and until when
        assert abs(cue.end - cue.start - state_cue["fit_result"]["seconds"]) <= 0.002
    assert spoken[3].end == pytest.approx(lines[4][0], abs=0.002)  # the overrun is cut at the next cue's start

    # Exported again with the original sound replaced (nothing is rendered again): the MP4's first audio track is
    # the dub alone, on cue; its second is the original, as it was.
    assert _dub(tmp_path, video, srt_of(lines), "--original", "replace") == 0
    assert "5 of 5 cues are rendered already" in capsys.readouterr().err
    first, second = audio_track(tmp_path / "out.mp4", 0, rate), audio_track(tmp_path / "out.mp4", 1, rate)
    for start, *_ in lines[:4]:
        assert abs(onset(first, rate, start - 0.5, start + 1.0) - start) <= TOLERANCE_S
    original = source_track()
    assert abs(onset(second, rate, 0.0, 2.0) - onset(original, rate, 0.0, 2.0)) <= TOLERANCE_S


def test_modes_and_voices_per_cue(fake, video: Path, tmp_path: Path) -> None:
    engine = fake()
    assert _dub(tmp_path, video, srt_of(), "--source-lang", "en", "--lang", "zh") == 0
    assert [r.mode for r in engine.requests] == [Mode.CROSS_LINGUAL] * 5
    voices = {r.prompt_audio.duration for r in engine.requests}
    assert len(voices) == 2 and all(3.0 <= seconds <= 10.0 for seconds in voices)  # one cut per speaker

    # the same language: zero-shot with the cut's own words; a preset for Bob from the voice map
    engine = fake()
    (tmp_path / "map.json").write_text(json.dumps({"Bob": "B"}), encoding="utf-8")
    same = tmp_path / "same"
    same.mkdir()
    assert _dub(same, video, srt_of(target=False), "--source-lang", "en", "--lang", "en", "--voices",
                str(tmp_path / "map.json")) == 0
    alice = [r for r in engine.requests if r.prompt_audio is not None]
    assert [r.mode for r in alice] == [Mode.ZERO_SHOT] * 3
    assert alice[0].prompt_text.startswith(LINES[0][3])
    assert [r.speaker for r in engine.requests if r.prompt_audio is None] == ["B", "B"]


def test_an_interrupted_dub_resumes_with_only_the_missing_cues(fake, video: Path, tmp_path: Path, capsys) -> None:
    fake(interrupt_at=3)
    assert _dub(tmp_path, video, srt_of()) == 130
    assert "2 of 5 cues are rendered and saved" in capsys.readouterr().err
    engine = fake()
    assert _dub(tmp_path, video, srt_of()) == 0
    assert "resuming" in capsys.readouterr().err
    assert [r.text for r in engine.requests] == [line[4] for line in LINES[2:]]
    engine = fake()
    lines = list(LINES)
    lines[1] = (*lines[1][:4], "不太好。")  # one cue edited: only it is rendered again
    assert _dub(tmp_path, video, srt_of(lines)) == 0
    assert [r.text for r in engine.requests] == ["不太好。"]
    assert len(list((tmp_path / "out.mp4.dub" / "takes").iterdir())) == 6


def test_a_locked_cue_keeps_its_take(fake, video: Path, tmp_path: Path) -> None:
    from cosyvoice_ui.studio.dub import DubProject

    assert _dub(tmp_path, video, srt_of()) == 0
    project = DubProject.open(tmp_path / "out.mp4.dub")
    project.lock("c0002")
    project.save()
    engine = fake()
    lines = list(LINES)
    lines[1] = (*lines[1][:4], "不太好。")
    assert _dub(tmp_path, video, srt_of(lines)) == 0
    assert engine.requests == []


def test_a_cue_gets_its_own_fit_and_is_fitted_anew_without_a_new_take(fake, video: Path, tmp_path: Path,
                                                                      capsys) -> None:
    """Cue 4 overruns at the project's 0.85-1.2; its own range up to 2x fits it into its gap, then without the gap it
    overruns again by what the gap held, and cleared it follows the project's fit: each time only the export runs
    (no request reaches the engine, no take is added) and the placement changes."""
    lines = list(LINES)
    lines[3] = (*lines[3][:4], LONG)  # a 7.0 s take for a 3.2 s cue with 0.6 s of gap after it
    srt = srt_of(lines)
    assert _dub(tmp_path, video, srt, "--srt") == 0
    state = tmp_path / "out.mp4.dub" / "dub.json"

    def cue4() -> tuple[dict, float]:
        cue = json.loads(state.read_text(encoding="utf-8"))["cues"][3]
        assert len(cue["takes"]) == 1
        spoken = parse((tmp_path / "out.srt").read_text(encoding="utf-8"))[3]
        return cue, spoken.end

    before, end = cue4()
    assert before["fit"] is None and before["fit_result"]["speed"] == 1.2
    assert before["fit_result"]["overrun"] == pytest.approx(7.0 / 1.2 - 3.8, abs=0.002)
    assert end == pytest.approx(16.8, abs=0.002)  # cut at cue 5's start
    capsys.readouterr()
    for flags, own, speed, overrun, heard in (
            (["--fit", "4", "--fit-speed", "0.85-2"], {"min_speed": 0.85, "max_speed": 2.0}, 2.0, 0.0, 16.5),
            (["--fit", "4", "--fit-overflow", "off"], {"min_speed": 0.85, "max_speed": 2.0, "overflow": False}, 2.0,
             0.3, 16.2),
            (["--fit-clear", "4"], None, 1.2, before["fit_result"]["overrun"], 16.8)):
        engine = fake()
        assert _dub(tmp_path, video, srt, "--srt", *flags) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        cue, end = cue4()
        assert engine.requests == []  # fitted anew, not rendered again
        assert cue["fit"] == own
        assert cue["fit_result"]["speed"] == speed and cue["fit_result"]["overrun"] == pytest.approx(overrun,
                                                                                                    abs=0.002)
        assert end == pytest.approx(heard, abs=0.002)
        assert ("its own fit" in out) == (own is not None)
    assert [c["fit"] for c in json.loads(state.read_text(encoding="utf-8"))["cues"]] == [None] * 5


@pytest.mark.parametrize("flags, message", [
    (["--fit-speed", "0.9-1.3"], "--fit-speed and --fit-overflow need the cues they apply to: add --fit N[,N]"),
    (["--fit", "4"], "--fit 4 needs what to change: --fit-speed MIN-MAX"),
    (["--fit", "4", "--fit-speed", "fast"], "--fit-speed 'fast': write the range as MIN-MAX, e.g. --fit-speed 0.9-1.3"),
    (["--fit", "4", "--fit-speed", "0.9-2.5"], "cue 4: the speed range 0.9-2.5 is not allowed"),
    (["--fit", "9", "--fit-overflow", "off"], "--fit '9': the cues are numbered 1-5"),
])
def test_a_cue_fit_flag_is_refused_saying_how_to_write_it(fake, video: Path, tmp_path: Path, capsys, flags,
                                                         message) -> None:
    assert _dub(tmp_path, video, srt_of(), *flags) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


# --- the refusals ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def silent_video(tmp_path_factory) -> Path:
    return make_video(tmp_path_factory.mktemp("mute") / "mute.mp4", np.zeros(1), RATE, audio=False)


@pytest.mark.parametrize("case, message", [
    ("not_media", "could not be read as a video or audio file"),
    ("no_audio", "has no audio stream"),
    ("outside", "is outside the media, which is 20.00 s long"),
    ("overlap", "cue 3 starts at 00:00:08,000, before cue 2 ends at 00:00:08,800"),
    ("empty", "the subtitle file has no cues"),
    ("speed", "the speed range 1.1-1.2 is not allowed"),
    ("no_speech", "no speech was found in 'quiet.mp4' to transcribe into cues"),
    ("out_format", "cannot write the dub as 'out.webm'; name it .mp4, .mkv or .mov"),
])
def test_refusals_say_what_is_wrong_in_one_line(fake, video: Path, silent_video: Path, tmp_path: Path, capsys, case,
                                                message) -> None:
    media, srt, extra = video, srt_of(), []
    if case == "not_media":
        media = tmp_path / "notes.mp4"
        media.write_text("not a video", encoding="utf-8")
    elif case == "no_audio":
        media = silent_video
    elif case == "outside":
        srt = srt_of([*LINES[:4], (16.8, 21.5, "Alice", "", "走吧。")])
    elif case == "overlap":
        srt = srt_of([*LINES[:2], (8.0, 12.4, "Alice", "", "那我们先去喝杯咖啡吧。"), *LINES[3:]])
    elif case == "empty":
        srt = "nothing timed here\n"
    elif case == "speed":
        extra = ["--min-speed", "1.1"]
    if case == "out_format":
        code = main(["dub", str(media), "--cues", str(tmp_path / "none.srt"), "--out", str(tmp_path / "out.webm")])
    elif case == "no_speech":
        quiet = make_video(tmp_path / "quiet.mp4", np.zeros(RATE), RATE, seconds=3.0)
        code = main(["dub", str(quiet), "--out", str(tmp_path / "out.mp4")])
    else:
        code = _dub(tmp_path, media, srt, *extra)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err and err.count("\n") == 1
    assert str(tmp_path) not in err  # names files, never paths


def test_a_speaker_with_too_little_source_audio_needs_a_voice(fake, video: Path, tmp_path: Path, capsys) -> None:
    lines = [*LINES[:4], (16.8, 18.8, "Carol", "", "走吧。")]
    assert _dub(tmp_path, video, srt_of(lines)) == 2
    err = capsys.readouterr().err
    assert "Carol speaks for only" in err and "give Carol a saved voice, a preset or a sample recording" in err


# --- the parts ------------------------------------------------------------------------------------------------

def test_the_fit_policy_in_order() -> None:
    policy = FitPolicy()
    assert fit(3.0, 3.0, 4.0, policy).speed == 1.0  # fits as it is
    slow = fit(2.0, 3.0, 4.0, policy)  # short: slowed to 0.85, then padded
    assert slow.speed == 0.85 and slow.seconds == pytest.approx(2.0 / 0.85) and not slow.flagged
    fast = fit(3.3, 3.0, 4.0, policy)  # long: sped up within the range
    assert fast.speed == pytest.approx(1.1) and fast.seconds == pytest.approx(3.0)
    over = fit(4.2, 3.0, 4.0, policy)  # 1.2x is not enough: into the gap
    assert over.speed == 1.2 and over.overflow == pytest.approx(0.5) and not over.flagged
    flagged = fit(6.0, 3.0, 4.0, policy)  # not even the gap: flagged with its overrun
    assert flagged.overrun == pytest.approx(1.0) and flagged.flagged
    assert fit(4.2, 3.0, 4.0, FitPolicy(overflow=False)).overrun == pytest.approx(0.5)


def test_cues_read_speaker_labels_as_scripts_do() -> None:
    cues = read_cues(srt_of(labels="brackets"))
    assert [c.speaker for c in cues] == ["Alice", "Bob", "Alice", "Bob", "Alice"]
    assert cues[0].text == LINES[0][4] and cues[0].start == 1.0 and cues[0].end == 4.6
    vtt = "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\n<v Dan>Hello there.\n"
    assert [(c.speaker, c.text) for c in read_cues(vtt)] == [("Dan", "Hello there.")]
    plain = read_cues("1\n00:00:01,000 --> 00:00:02,000\nJust words.\n")
    assert plain[0].speaker == "Narrator"
    with pytest.raises(InvalidRequest, match="speed range"):
        FitPolicy(0.9, 0.95)


def test_a_stretch_is_exact_and_keeps_the_pitch() -> None:
    from cosyvoice_ui.studio.dub_media import stretch

    tone = np.sin(2 * np.pi * 200 * np.arange(RATE * 2) / RATE).astype(np.float32) * 0.5
    for factor in (0.85, 1.2):
        out = stretch(tone, RATE, factor)
        assert len(out) == int(round(len(tone) / factor))
        spectrum = np.abs(np.fft.rfft(out[RATE // 4:RATE // 4 + RATE]))
        assert abs(np.argmax(spectrum) - 200) <= 2  # 1 Hz bins: still 200 Hz


def test_voices_cut_from_the_video_need_consent_where_the_server_asks_for_it(video: Path, tmp_path: Path) -> None:
    """A voice cut from the source is a new recording: a server that requires consent refuses to clone it unless the
    caller confirms it, as for any sample; a preset needs none."""
    from cosyvoice_ui.serving.jobs import JobOptions
    from cosyvoice_ui.studio.dub import DubProject
    from cosyvoice_ui.studio.dub_render import render_dub
    from cosyvoice_ui.studio.voice_map import VoiceChoice
    from cosyvoice_ui.testing.speech import speech_jobs

    speech = speech_jobs(tmp_path, require_consent=True)
    project = DubProject.create(tmp_path / "dub", video, read_cues(srt_of()))
    engine = DubFake()
    with pytest.raises(InvalidRequest) as refused:
        render_dub(project, engine, speech, JobOptions())
    assert refused.value.code == "consent_required" and engine.requests == []
    assert len(render_dub(project, engine, speech, JobOptions(consent=True))) == 5
    project = DubProject.create(tmp_path / "presets", video, read_cues(srt_of()))
    for speaker in ("Alice", "Bob"):
        project.set_voice(speaker, VoiceChoice("preset", "A"))
    assert len(render_dub(project, engine, speech, JobOptions())) == 5


class StubTranscriber:
    """Hears "Line N of the talk." in the Nth stretch it is given (English)."""

    def __init__(self) -> None:
        self.heard: list[float] = []

    def transcribe(self, audio, language=None, progress=None, backend=None):
        from cosyvoice_ui.serving.transcription import Transcript

        self.heard.append(audio.duration)
        return Transcript(f"Line {len(self.heard)} of the talk.", "en", "stub")


def test_without_cues_the_speech_is_transcribed_into_cues(fake, video: Path, tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    """No subtitles: the speech is found by its loudness, each stretch transcribed, the cues written to the project's
    cues.srt and dubbed as heard (the same language: zero-shot with the cut's own words); the translated file given
    back renders every cue again, cross-lingually."""
    import cosyvoice_ui.serving.transcription as transcription

    stub = StubTranscriber()
    monkeypatch.setattr(transcription, "shared_transcriber", lambda *args, **kwargs: stub)
    engine = fake()
    out = tmp_path / "out.mp4"
    base = ["dub", str(video), "--out", str(out), "--voices-dir", str(tmp_path / "voices")]
    assert main(base) == 0, capsys.readouterr().err
    written = tmp_path / "out.mp4.dub" / "cues.srt"
    assert f"into {written}" in capsys.readouterr().err
    cues = parse(written.read_text(encoding="utf-8"))
    voices = ["Speaker 1", "Speaker 2", "Speaker 1", "Speaker 2", "Speaker 1"]  # told apart (220 and 120 Hz)
    assert [c.text for c in cues] == [f"{who}: Line {n} of the talk." for n, who in enumerate(voices, start=1)]
    for cue, (start, end, *_) in zip(cues, LINES):
        assert abs(cue.start - start) <= 0.15 and abs(cue.end - end) <= 0.15
    assert [r.mode for r in engine.requests] == [Mode.ZERO_SHOT] * 5
    assert engine.requests[0].prompt_text == "Line 1 of the talk. Line 3 of the talk."  # Speaker 1's longest two
    assert streams(out)[1]["tags"]["language"] == "eng"

    translated = tmp_path / "translated.srt"
    translated.write_text(written.read_text(encoding="utf-8").replace("of the talk.", "次谈话。"), encoding="utf-8")
    engine = fake()
    assert main([*base, "--cues", str(translated), "--lang", "zh"]) == 0
    assert [r.mode for r in engine.requests] == [Mode.CROSS_LINGUAL] * 5
    assert [s["tags"]["language"] for s in streams(out)[1:]] == ["chi", "eng"]
    assert len(stub.heard) == 5  # transcribed once


def test_regenerate_pick_and_lock_a_cue_then_export_again(video: Path, tmp_path: Path) -> None:
    """The cue table as the studio offers it: a new take of one cue (a new seed), an earlier take picked back, a lock
    that refuses a new take, an edited text rendered alone; each export fits what is chosen now."""
    from cosyvoice_ui.serving.jobs import JobOptions
    from cosyvoice_ui.studio.dub import DubProject
    from cosyvoice_ui.studio.dub_render import export, render_cue, render_dub
    from cosyvoice_ui.testing.speech import speech_jobs

    speech = speech_jobs(tmp_path)
    engine = DubFake()
    project = DubProject.create(tmp_path / "dub", video, read_cues(srt_of()))
    render_dub(project, engine, speech, JobOptions())
    first = project.cue("c0002").take
    render_cue(project, "c0002", engine, speech)
    cue = project.cue("c0002")
    assert [t.number for t in cue.takes] == [1, 2] and cue.chosen == 2 and cue.takes[1].seed != first.seed
    project.choose("c0002", 1)
    project.lock("c0002")
    with pytest.raises(InvalidRequest, match="locked"):
        render_cue(project, "c0002", engine, speech)
    project.cue("c0003").text = "好。"
    assert render_dub(project, engine, speech) == ["c0003"]  # only the edited cue
    result = export(project, srt=tmp_path / "out.srt")
    reopened = DubProject.open(tmp_path / "dub")
    assert reopened.cue("c0002").chosen == 1 and reopened.cue("c0002").locked
    spoken = parse((tmp_path / "out.srt").read_text(encoding="utf-8"))
    assert spoken[1].end - spoken[1].start == pytest.approx(first.seconds / 0.85, abs=0.002)
    assert spoken[2].text.endswith("好。") and len(result.placed) == 5


@pytest.mark.slow
def test_the_cli_regenerates_picks_and_locks_cues(fake, video: Path, tmp_path: Path, capsys) -> None:
    assert _dub(tmp_path, video, srt_of()) == 0
    engine = fake()
    assert _dub(tmp_path, video, srt_of(), "--regenerate", "2", "--lock", "4") == 0
    assert [r.text for r in engine.requests] == [LINES[1][4]]
    state = json.loads((tmp_path / "out.mp4.dub" / "dub.json").read_text(encoding="utf-8"))
    assert [len(c["takes"]) for c in state["cues"]] == [1, 2, 1, 1, 1] and state["cues"][1]["chosen"] == 2
    assert state["cues"][3]["locked"] and capsys.readouterr()
    engine = fake()
    assert _dub(tmp_path, video, srt_of(), "--take", "2=1", "--regenerate", "4") == 2
    assert "cue 4 is locked" in capsys.readouterr().err and engine.requests == []
    assert _dub(tmp_path, video, srt_of(), "--take", "2=1", "--unlock", "4") == 0
    state = json.loads((tmp_path / "out.mp4.dub" / "dub.json").read_text(encoding="utf-8"))
    assert state["cues"][1]["chosen"] == 1 and not state["cues"][3]["locked"]
    assert _dub(tmp_path, video, srt_of(), "--lock", "9") == 2
    assert "--lock '9': the cues are numbered 1-5" in capsys.readouterr().err


def test_an_instruct_cue_speaks_with_its_instruction(video: Path, tmp_path: Path) -> None:
    from cosyvoice_ui.studio.dub import DubProject
    from cosyvoice_ui.studio.dub_render import render_dub
    from cosyvoice_ui.studio.voice_map import VoiceChoice
    from cosyvoice_ui.testing.speech import speech_jobs

    project = DubProject.create(tmp_path / "dub", video, read_cues(srt_of()))
    for speaker in ("Alice", "Bob"):
        project.set_voice(speaker, VoiceChoice("preset", "A"))
    project.cue("c0002").mode = "instruct"
    with pytest.raises(InvalidRequest, match="cue 2 is in instruct mode without an instruction"):
        render_dub(project, DubFake(), speech_jobs(tmp_path))
    project.cue("c0002").instruct = "Speak softly."
    engine = DubFake()
    render_dub(project, engine, speech_jobs(tmp_path))
    assert [(r.mode, r.instruct_text) for r in engine.requests][:2] == [(Mode.SFT, ""), (Mode.INSTRUCT,
                                                                                          "Speak softly.")]
