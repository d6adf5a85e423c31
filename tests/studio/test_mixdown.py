"""The mix, stems and subtitles: takes in order with silence between, cues where the audio really is (SRT
within 50 ms of the mixed audio), stems that add up to the mix, and the export files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.jobs import SpeechJobs
from cosyvoice_ui.studio.mixdown import export, mix, stems
from cosyvoice_ui.studio.project import Project, Settings
from cosyvoice_ui.studio.render import render_project
from cosyvoice_ui.serving.subtitles import parse
from cosyvoice_ui.studio.voice_map import VoiceChoice
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.speech import speech_jobs

SCRIPT = "Alice: Hello there, Bob.\nBob: Hi Alice, how are you today?\nThe two walked on.\nAlice: Fine, thanks.\n"
GAP = 0.3


@pytest.fixture()
def speech(tmp_path: Path) -> SpeechJobs:
    """The speech jobs every render runs through (the server's settings under `tmp_path/service`)."""
    return speech_jobs(tmp_path / "service")


@pytest.fixture()
def project(tmp_path: Path, speech: SpeechJobs) -> Project:
    project = Project.create(tmp_path / "mix", "Walk in the park", SCRIPT, Settings(gap_s=GAP))
    project.set_voice("Alice", VoiceChoice("preset", "A"))
    project.set_voice("Bob", VoiceChoice("preset", "B"))
    render_project(project, FakeEngine(), speech)
    return project


def sounding_spans(samples: np.ndarray, rate: int) -> list[tuple[float, float]]:
    """Where the mix sounds: runs of non-zero samples, joined across silences shorter than 50 ms (the fake
    engine's noise stored as 16-bit FLAC is zero now and then; the gaps between lines are 300 ms of zeros)."""
    loud = np.concatenate([[False], samples != 0, [False]])
    edges = np.flatnonzero(np.diff(loud.astype(np.int8)))
    spans: list[list[int]] = []
    for start, end in zip(edges[::2], edges[1::2]):
        if spans and start - spans[-1][1] < 0.05 * rate:
            spans[-1][1] = end
        else:
            spans.append([start, end])
    return [(start / rate, end / rate) for start, end in spans]


def test_the_mix_is_the_takes_in_order_with_gaps(project: Project) -> None:
    samples, rate, cues = mix(project)
    seconds = [line.take.seconds for line in project.lines]
    assert len(samples) == round((sum(seconds) + GAP * 3) * rate)
    spans = sounding_spans(samples, rate)
    assert len(spans) == 4
    assert [c.speaker for c in cues] == ["Alice", "Bob", "Narrator", "Alice"]
    for cue, (start, end), length in zip(cues, spans, seconds):
        assert cue.start == pytest.approx(start, abs=1e-9) and cue.end == pytest.approx(end, abs=1e-9)
        assert end - start == pytest.approx(length, abs=1e-9)
    assert [c.text for c in cues] == [line.text for line in project.lines]


def test_subtitle_times_match_the_mixed_file(project: Project, tmp_path: Path) -> None:
    paths = export(project, tmp_path / "out", fmt="flac", subtitles=("srt", "vtt"))
    mixed, rate = sf.read(str(paths[0]), dtype="float32")
    spans = sounding_spans(mixed, rate)
    srt = parse((tmp_path / "out" / "Walk_in_the_park.srt").read_text(encoding="utf-8"))
    vtt = parse((tmp_path / "out" / "Walk_in_the_park.vtt").read_text(encoding="utf-8"))
    assert [c.text for c in srt] == ["Alice: Hello there, Bob.", "Bob: Hi Alice, how are you today?",
                                     "Narrator: The two walked on.", "Alice: Fine, thanks."]
    assert [c.speaker for c in vtt] == ["Alice", "Bob", "Narrator", "Alice"]
    assert len(spans) == len(srt) == 4
    for cue, (start, end) in zip(srt, spans):
        assert abs(cue.start - start) <= 0.05 and abs(cue.end - end) <= 0.05
    assert abs(srt[-1].end - len(mixed) / rate) <= 0.05


def test_stems_are_full_length_and_add_up_to_the_mix(project: Project) -> None:
    samples, rate, cues = mix(project)
    tracks = stems(project)
    assert list(tracks) == ["Alice", "Bob", "Narrator"]
    assert all(len(track) == len(samples) for track in tracks.values())
    assert np.array_equal(sum(tracks.values()), samples)
    bob = tracks["Bob"]
    for cue in cues:
        part = bob[int(round(cue.start * rate)):int(round(cue.end * rate))]
        assert bool(np.any(part)) == (cue.speaker == "Bob")


def test_export_writes_mix_stems_and_subtitles(project: Project) -> None:
    paths = export(project)  # the project's format (wav) into its exports folder
    names = [p.name for p in paths]
    assert names == ["Walk_in_the_park.wav", "Walk_in_the_park.Alice.wav", "Walk_in_the_park.Bob.wav",
                     "Walk_in_the_park.Narrator.wav", "Walk_in_the_park.srt"]
    assert all(p.parent == project.exports_dir and p.stat().st_size > 0 for p in paths)
    info = sf.info(str(paths[1]))
    assert info.samplerate == 16000 and info.frames == len(mix(project)[0])
    assert [p.name for p in export(project, include_stems=False, subtitles=())] == ["Walk_in_the_park.wav"]


def test_takes_at_another_rate_are_resampled(project: Project, speech: SpeechJobs) -> None:
    other = FakeEngine(sample_rate=24000)
    from cosyvoice_ui.studio.render import render_line

    render_line(project, "L0003", other, speech)
    samples, rate, cues = mix(project)
    assert rate == 16000
    assert cues[2].end - cues[2].start == pytest.approx(project.line("L0003").take.seconds, abs=1e-3)
    assert len(sounding_spans(samples, rate)) == 4


def test_mixing_refuses_what_it_cannot_do(project: Project, tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as error:
        export(project, fmt="xyz")
    assert error.value.code == "bad_format"
    with pytest.raises(InvalidRequest) as error:
        export(project, subtitles=("ass",))
    assert error.value.code == "bad_subtitle_format"
    project.set_script(SCRIPT + "Bob: One more line.\n")
    with pytest.raises(InvalidRequest) as error:
        mix(project)
    assert error.value.code == "lines_missing" and "render the project" in error.value.message
