"""Projects as folders: exact reopening, script changes that keep takes, edits, locks, choices, voices, and
the voice memory across projects."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.jobs import SpeechJobs
from cosyvoice_ui.studio.project import PROJECT_FILE, Project, Settings
from cosyvoice_ui.studio.render import render_line, render_project
from cosyvoice_ui.studio.voice_map import VoiceChoice, VoiceMemory
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.speech import speech_jobs
from cosyvoice_ui.testing.signals import voice_clip

SCRIPT = "Alice: Hello there, Bob.\nBob: Hi Alice, how are you?\nThe two walked on.\nAlice: Fine, thanks.\n"


@pytest.fixture()
def speech(tmp_path: Path) -> SpeechJobs:
    """The speech jobs every render runs through (the server's settings under `tmp_path/service`)."""
    return speech_jobs(tmp_path / "service")


@pytest.fixture()
def project(tmp_path: Path) -> Project:
    project = Project.create(tmp_path / "demo", "Demo", SCRIPT, Settings(gap_s=0.25, retries=1, format="flac"))
    project.set_voice("Alice", VoiceChoice("preset", "A"))
    project.set_voice("Bob", VoiceChoice("preset", "B", instruct=""))
    return project


def test_a_new_project_is_a_folder(project: Project) -> None:
    assert (project.folder / PROJECT_FILE).is_file()
    assert [(x.id, x.speaker) for x in project.lines] == [("L0001", "Alice"), ("L0002", "Bob"),
                                                          ("L0003", "Narrator"), ("L0004", "Alice")]
    with pytest.raises(InvalidRequest) as error:
        Project.create(project.folder, "Again", SCRIPT)
    assert error.value.code == "project_exists"


def test_round_trip_reopens_exactly(project: Project, speech: SpeechJobs) -> None:
    engine = FakeEngine()
    render_project(project, engine, speech)
    render_line(project, "L0002", engine, speech, seed=77)
    project.choose("L0002", 1)
    project.lock("L0002")
    project.set_voice("Narrator", VoiceChoice("sample", transcript="hello there", instruct="calm"),
                      sample_audio=voice_clip(3.5, seed=2))
    project.save()
    again = Project.open(project.folder)
    assert again.to_dict() == project.to_dict()
    line = again.line("L0002")
    assert [t.seed for t in line.takes][1] == 77 and line.chosen == 1 and line.locked
    assert line.take.cues and line.take.cues[0].speaker == "Bob"
    assert again.voices["Narrator"].instruct == "calm" and again.sample_audio("Narrator") is not None
    assert again.settings == Settings(gap_s=0.25, retries=1, format="flac")
    # The take files hold what was rendered: same samples after reopening.
    first = again.take_audio(again.line("L0001").take)
    assert first.sample_rate == 16000 and abs(first.duration - again.line("L0001").take.seconds) < 1e-9


def test_set_script_keeps_takes_of_unchanged_lines(project: Project, speech: SpeechJobs) -> None:
    render_project(project, FakeEngine(), speech)
    takes = {line.id: line.takes for line in project.lines}
    project.set_script("Alice: Hello there, Bob.\nBob: Hi Alice, how are you doing?\nThe two walked on.\n"
                       "Carol: Wait for me!\nAlice: Fine, thanks.\n")
    ids = [x.id for x in project.lines]
    assert ids[0] == "L0001" and ids[2] == "L0003" and ids[4] == "L0004"
    assert ids[1] not in takes and ids[3] not in takes  # the changed line and the new one are new lines
    assert project.line("L0001").takes == takes["L0001"] and project.line(ids[1]).takes == []
    assert project.speakers() == ["Alice", "Bob", "Narrator", "Carol"]


def test_locked_lines_never_lose_their_take(project: Project, speech: SpeechJobs) -> None:
    render_project(project, FakeEngine(), speech)
    locked = project.lock("L0002")
    take = locked.take
    project.set_script(SCRIPT.replace("how are you?", "how have you been?"))
    line = project.line("L0002")
    assert line.locked and line.take == take and line.text == "Hi Alice, how have you been?"
    assert not project.needs_render(line)


def test_edit_line_updates_the_script_and_needs_a_new_take(project: Project, speech: SpeechJobs) -> None:
    engine = FakeEngine()
    render_project(project, engine, speech)
    project.edit_line("L0003", "They walked on in silence.")
    assert "They walked on in silence." in project.script
    assert [x.text for x in project.lines][2] == "They walked on in silence."
    assert project.needs_render(project.line("L0003")) and len(project.line("L0003").takes) == 1
    summary = render_project(project, engine, speech)
    assert summary.rendered == ["L0003"] and project.line("L0003").take.text == "They walked on in silence."
    reopened = Project.open(project.folder)
    assert [x.text for x in reopened.lines] == [x.text for x in project.lines]


def test_bad_requests_are_refused_with_clear_messages(project: Project, speech: SpeechJobs) -> None:
    cases = [
        (lambda: project.line("L9999"), "line_unknown"),
        (lambda: project.edit_line("L0001", "  "), "text_empty"),
        (lambda: project.lock("L0001"), "nothing_to_lock"),
        (lambda: project.choose("L0001", 3), "take_unknown"),
        (lambda: project.set_voice("Zed", VoiceChoice()), "speaker_unknown"),
        (lambda: project.set_voice("Bob", VoiceChoice("sample")), "voice_sample_missing"),
        (lambda: project.set_script("# nothing"), "script_empty"),
        (lambda: VoiceChoice("robot"), "voice_kind_unknown"),
        (lambda: Settings(gap_s=-1), "gap_out_of_range"),
        (lambda: Settings(retries=9), "retries_out_of_range"),
        (lambda: Settings(format="doc"), "bad_format"),
    ]
    for call, code in cases:
        with pytest.raises(InvalidRequest) as error:
            call()
        assert error.value.code == code, code
        assert error.value.message and "Traceback" not in error.value.message and "/" not in error.value.message[:1]
    render_project(project, FakeEngine(), speech)
    project.lock("L0001")
    for call in (lambda: project.edit_line("L0001", "new"), lambda: project.choose("L0001", 1)):
        with pytest.raises(InvalidRequest) as error:
            call()
        assert error.value.code == "line_locked" and "unlock" in error.value.message


def test_damaged_or_missing_project_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as error:
        Project.open(tmp_path)
    assert error.value.code == "project_missing"
    (tmp_path / PROJECT_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidRequest) as error:
        Project.open(tmp_path)
    assert error.value.code == "project_unreadable"
    (tmp_path / PROJECT_FILE).write_text(json.dumps({"version": 99}), encoding="utf-8")
    with pytest.raises(InvalidRequest) as error:
        Project.open(tmp_path)
    assert error.value.code == "project_version"


def test_voice_memory_carries_voices_to_the_next_project(tmp_path: Path) -> None:
    memory = VoiceMemory(tmp_path / "memory" / "voices.json")
    first = Project.create(tmp_path / "one", "One", SCRIPT)
    sample = voice_clip(3.2, seed=5)
    first.set_voice("Alice", VoiceChoice("preset", "B", instruct="cheerful"), memory=memory)
    first.set_voice("Bob", VoiceChoice("sample", transcript="a few words"), sample_audio=sample, memory=memory)
    assert memory.get("alice") == VoiceChoice("preset", "B", instruct="cheerful")  # names match case-insensitively
    second = Project.create(tmp_path / "two", "Two", "Bob: Again.\nAlice: Yes.\nDan: Who?", memory=memory)
    assert second.voices["Alice"] == VoiceChoice("preset", "B", instruct="cheerful")
    assert second.voices["Bob"].kind == "sample" and second.voices["Bob"].transcript == "a few words"
    assert "Dan" not in second.voices
    stored = second.sample_audio("Bob")
    assert stored is not None and stored.sample_rate == sample.sample_rate
    assert np.max(np.abs(stored.samples - sample.samples)) < 1e-3  # 16-bit FLAC copy of the recording
    memory.forget("Bob")
    assert memory.get("Bob") is None and set(memory.all()) == {"Alice"}


def test_an_unreadable_voice_memory_counts_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "voices.json"
    path.write_text("[broken", encoding="utf-8")
    memory = VoiceMemory(path)
    assert memory.all() == {} and memory.get("Alice") is None
    memory.remember("Alice", VoiceChoice("saved", "alice-voice"))
    assert VoiceMemory(path).get("ALICE") == VoiceChoice("saved", "alice-voice")
