"""The studio runs on the one speech job (issue 24): a script line's take is exactly `render_on` of the same
request (same engine, seed and voice; raw samples; the same cues), a `--blocked-words` word in a script line or
in a book is refused before anything is rendered (by the renderers, the tabs' workspace and bookshelf alike),
and the project's own retry setting caps the server's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.audio import encode
from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.jobs import JobOptions, SpeechJobs, render_on
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.studio.audiobook import BookJob
from cosyvoice_ui.studio.book import Book, Chapter
from cosyvoice_ui.studio.books import Bookshelf
from cosyvoice_ui.studio.project import TAKE_FORMAT, Project, Settings
from cosyvoice_ui.studio.render import first_seed, line_options, render_line, render_project
from cosyvoice_ui.studio.voice_map import VoiceChoice
from cosyvoice_ui.studio.workspace import VoiceRow, Workspace
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.speech import speech_jobs
from cosyvoice_ui.types import Mode, SynthesisRequest

BLOCKED = "forbidden"
GLOSSARY = {"Nguyen": "Win"}
LINE = "Hello Nguyen. How was the trip? Tell me everything, Nguyen."


def blocked_speech(root: Path) -> SpeechJobs:
    (root / "blocked.txt").parent.mkdir(parents=True, exist_ok=True)
    (root / "blocked.txt").write_text(f"# words this server refuses\n{BLOCKED}\n", encoding="utf-8")
    return speech_jobs(root, blocked_words_file=root / "blocked.txt")


# --- a take is the job ------------------------------------------------------------------------------------------

def _engine(kind: str, tiny_sft: Path | None):
    if kind == "fake":
        return FakeEngine(chunks=3)
    from cosyvoice_ui import load_engine

    return load_engine(tiny_sft, device="cpu")


@pytest.mark.parametrize("kind", ["fake", pytest.param("tiny", marks=pytest.mark.slow)])
def test_a_line_take_is_its_job_rendered_on_the_engine_bit_for_bit(kind: str, tmp_path: Path, request) -> None:
    engine = _engine(kind, request.getfixturevalue("tiny_sft") if kind == "tiny" else None)
    speaker = engine.info.speakers[0]
    speech = speech_jobs(tmp_path / "service")
    project = Project.create(tmp_path / "p", "Same", f"Alice: {LINE}\n")
    project.set_voice("Alice", VoiceChoice("preset", speaker))
    options = JobOptions(glossary=GLOSSARY)
    take = render_line(project, "L0001", engine, speech, options)
    assert take.seed == first_seed(project, project.line("L0001"))

    direct = SynthesisRequest(Mode.SFT, text=LINE, speaker=speaker, seed=take.seed)
    job = speech.prepare(direct, replace(options, loudness=None), engine.info)
    rendered = render_on(engine, job, speech.resolver)
    assert len(rendered.samples) and rendered.seed == take.seed
    assert project.take_path(take).read_bytes() == encode(rendered.samples, rendered.sample_rate, TAKE_FORMAT)
    stored, rate = sf.read(str(project.take_path(take)), dtype="float32")
    assert rate == rendered.sample_rate and len(stored) == len(rendered.samples)
    assert take.cues == [replace(cue, speaker="Alice") for cue in rendered.cues]
    assert take.cues and all("Win" not in cue.text for cue in take.cues)  # the words the user wrote


def test_a_take_is_stored_raw_and_the_mix_sets_the_loudness(tmp_path: Path) -> None:
    engine, speech = FakeEngine(), speech_jobs(tmp_path / "service")
    project = Project.create(tmp_path / "p", "Raw", "Alice: Hello there, how are you?\n")
    project.set_voice("Alice", VoiceChoice("preset", "A"))
    take = render_line(project, "L0001", engine, speech, JobOptions(loudness=-14.0))  # ignored for a take
    job = speech.prepare(SynthesisRequest(Mode.SFT, text="Hello there, how are you?", speaker="A", seed=take.seed),
                         JobOptions(loudness=None), engine.info)
    raw = render_on(engine, job, speech.resolver).samples
    assert np.abs(project.take_audio(take).samples - raw).max() < 1e-4  # 16-bit FLAC of the raw samples


# --- blocked words ----------------------------------------------------------------------------------------------

SCRIPT = f"Alice: Hello there.\nBob: Say the {BLOCKED.upper()} word.\nAlice: Bye.\n"


def test_a_blocked_word_in_a_script_line_stops_the_render_before_any_work(tmp_path: Path) -> None:
    engine, speech = FakeEngine(), blocked_speech(tmp_path / "service")
    project = Project.create(tmp_path / "p", "Blocked", SCRIPT)
    with pytest.raises(InvalidRequest) as refused:
        render_project(project, engine, speech)
    assert refused.value.code == "blocked_words" and refused.value.params["speaker"] == "Bob"
    assert refused.value.message.startswith("line 2 (Bob): ") and BLOCKED not in refused.value.message.casefold()
    assert engine.calls == 0 and all(not line.takes for line in Project.open(project.folder).lines)
    with pytest.raises(InvalidRequest) as one_line:
        render_line(project, "L0002", engine, speech)
    assert one_line.value.code == "blocked_words" and engine.calls == 0
    render_line(project, "L0001", engine, speech)  # the other lines are fine on their own
    assert engine.calls == 1


def test_a_glossary_reading_cannot_smuggle_a_blocked_word_into_a_line(tmp_path: Path) -> None:
    engine, speech = FakeEngine(), blocked_speech(tmp_path / "service")
    project = Project.create(tmp_path / "p", "Smuggled", "Alice: Say the magic word.\n")
    with pytest.raises(InvalidRequest) as refused:
        render_project(project, engine, speech, JobOptions(glossary={"magic": BLOCKED}))
    assert refused.value.code == "blocked_words" and engine.calls == 0


BOOK = Book("Words", "", [Chapter("One", "A calm first paragraph."),
                          Chapter("Two", f"Then came the {BLOCKED} part.\n\nAnd the end.")])


def test_a_blocked_word_in_a_book_stops_it_before_any_work(tmp_path: Path) -> None:
    engine, speech = FakeEngine(), blocked_speech(tmp_path / "service")
    with pytest.raises(InvalidRequest) as refused:
        BookJob(tmp_path / "out", BOOK, VoiceChoice("preset", "A")).run(engine, speech)
    assert refused.value.code == "blocked_words" and refused.value.message.startswith("chapter 2/2 · piece 2/3: ")
    assert engine.calls == 0 and not (tmp_path / "out").exists()


def _manager(engine: FakeEngine) -> ModelManager:
    return ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                        describe_model=lambda model_id: engine.info)


def test_the_tabs_workspace_and_bookshelf_refuse_blocked_words_too(tmp_path: Path) -> None:
    engine = FakeEngine()
    service = blocked_speech(tmp_path / "service")
    workspace = Workspace(SpeechJobs(_manager(engine), service.settings))
    folder = workspace.save("", "Tab", SCRIPT, {"Bob": VoiceRow("preset", preset="B")}).folder.name
    with pytest.raises(InvalidRequest) as script:
        workspace.render_all(folder)
    assert script.value.code == "blocked_words"
    source = tmp_path / "book.txt"
    source.write_text(f"Words\n\nA line with the {BLOCKED} in it.\n", encoding="utf-8")
    with pytest.raises(InvalidRequest) as book:
        Bookshelf(workspace).start(str(source), VoiceRow("preset", preset="A"))
    assert book.value.code == "blocked_words" and engine.calls == 0


# --- the project's retries and the server's ----------------------------------------------------------------------

@pytest.mark.parametrize("server, own, switch, expected", [
    (2, None, None, 2),  # a project without its own setting follows the server
    (2, 1, None, 1),  # the project may ask for fewer retries
    (1, 4, None, 1),  # but not for more than the server allows
    (3, 0, None, 0),  # 0: checked, never retried
    (2, 2, False, None),  # a browser's switch (or --no-take-check) turns checks off whatever the project says
])
def test_the_projects_retries_cap_the_servers(server: int, own: int | None, switch: bool | None,
                                               expected: int | None, tmp_path: Path) -> None:
    speech = speech_jobs(tmp_path, take_retries=server)
    project = Project.create(tmp_path / "p", "Retries", "Alice: Hi.\n", Settings(retries=own))
    options = line_options(project, speech, JobOptions(check_takes=switch))
    job = speech.prepare(SynthesisRequest(Mode.SFT, text="Hi.", speaker="A", seed=1), options, FakeEngine().info)
    assert (job.policy.retries if job.policy is not None else None) == expected
