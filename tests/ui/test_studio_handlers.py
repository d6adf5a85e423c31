"""The Script and Audiobook tabs' handlers without a browser (a fake engine behind a real ModelManager): projects
are created, saved and reopened exactly, voices are remembered per name, rendering goes in order and resumes,
a line is regenerated with a new seed, edited, locked; exports; the glossary reaches the engine's text; books
run, stop and resume; errors come out translated."""

from __future__ import annotations

import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.errors import Cancelled, InvalidRequest
from cosyvoice_ui.serving import subtitles
from cosyvoice_ui.serving.default_voice import VoiceResolver
from cosyvoice_ui.serving.jobs import JobOptions, SpeechJobs
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.studio.books import Bookshelf
from cosyvoice_ui.studio.workspace import VoiceRow, Workspace, folder_name
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import ProgressEvent
from cosyvoice_ui.ui import strings
from cosyvoice_ui.ui.studio.events import status_text

SCRIPT = "Alice: Hello there Bob.\n[Bob] Hi Alice, how are you?\nThe room went quiet.\nAlice: Fine, thanks."


class RecordingEngine(FakeEngine):
    """The fake engine, remembering the text of every request it speaks."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.texts: list[str] = []

    def _synthesize(self, request, progress, cancel):
        self.texts.append(request.text)
        yield from super()._synthesize(request, progress, cancel)


@pytest.fixture()
def engine() -> RecordingEngine:
    return RecordingEngine(speakers=("A", "B", "C"))


def workspace_of(engine: FakeEngine, tmp_path: Path, **settings) -> Workspace:
    """A workspace over the speech jobs of a real model queue holding `engine` (`settings`: the server's)."""
    manager = ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda model_id: engine.info)
    chosen = Settings(projects_dir=tmp_path / "projects", glossary_dir=tmp_path / "glossaries", **settings)
    return Workspace(SpeechJobs(manager, chosen, resolver=VoiceResolver(cache_root=tmp_path / "voices")))


@pytest.fixture()
def studio(engine: RecordingEngine, tmp_path: Path) -> Workspace:
    return workspace_of(engine, tmp_path)


def sample_wav(folder: Path, name: str = "sample.wav", seconds: float = 4.0) -> str:
    clip = voice_clip(seconds, 16000)
    path = folder / name
    sf.write(path, clip.samples, clip.sample_rate)
    return str(path)


def test_a_project_is_created_saved_and_reopened_exactly(studio: Workspace) -> None:
    project = studio.save("", "Radio play", SCRIPT, {"Alice": VoiceRow("preset", preset="B")}, gap_s=0.6)
    assert project.folder.name == folder_name("Radio play") and project.name == "Radio play"
    assert project.speakers() == ["Alice", "Bob", "Narrator"]
    assert ("Radio play", project.folder.name) in studio.projects()
    again = studio.open(project.folder.name)
    assert again.to_dict() == project.to_dict()
    assert again.voice_for("Alice").kind == "preset" and again.voice_for("Alice").value == "B"
    assert again.settings.gap_s == 0.6


def test_voices_are_remembered_per_name_for_new_projects(studio: Workspace) -> None:
    studio.save("", "First", SCRIPT, {"Bob": VoiceRow("preset", preset="C", instruct="")})
    second = studio.create("Second", "bob: Remember me?\nAlice: Of course.")
    assert second.voice_for("bob").kind == "preset" and second.voice_for("bob").value == "C"


def test_a_sample_voice_is_stored_once_and_kept_when_shown_back(studio: Workspace, tmp_path: Path) -> None:
    wav = sample_wav(tmp_path)
    with pytest.raises(InvalidRequest) as wrong:  # 4 s of speech cannot be one word
        studio.save("", "Samples", SCRIPT, {"Bob": VoiceRow("sample", sample=wav, transcript="hello")})
    assert wrong.value.code == "transcript_mismatch" and wrong.value.message.startswith("Bob's sample")
    assert studio.projects() == []  # nothing half-made is left
    said = "This is a short recording of my voice."
    project = studio.save("", "Samples", SCRIPT, {"Bob": VoiceRow("sample", sample=wav, transcript=said)})
    stored = project.voice_for("Bob")
    assert stored.kind == "sample" and (project.voices_dir / stored.value).is_file()
    # Gradio serves the stored file back under its own name: saving again keeps the same choice and file.
    shown = str(tmp_path / "gradio-cache" / stored.value)
    again = studio.save(project.folder.name, "", SCRIPT, {"Bob": VoiceRow("sample", sample=shown, transcript=said)})
    assert again.voice_for("Bob") == stored
    assert sorted(p.name for p in project.voices_dir.iterdir()) == [stored.value]


def test_render_all_goes_in_order_reports_each_line_and_resumes(studio: Workspace) -> None:
    project = studio.save("", "Resume", SCRIPT, {})
    folder = project.folder.name
    cancel = threading.Event()
    events: list[ProgressEvent] = []

    def progress(event: ProgressEvent) -> None:
        events.append(event)
        if event.stage == "line" and event.message.startswith("line 3/"):
            cancel.set()  # a Stop while line 3 starts: lines 1 and 2 are kept

    with pytest.raises(Cancelled):
        studio.render_all(folder, progress=progress, cancel=cancel)
    assert [e.message for e in events if e.stage == "line"][:2] == ["line 1/4 · Alice", "line 2/4 · Bob"]
    done = [line.take is not None for line in studio.open(folder).lines]
    assert done[:2] == [True, True] and not any(done[2:])
    summary = studio.render_all(folder)
    assert len(summary.rendered) == 2 and len(summary.skipped) == 2
    assert all(line.take is not None for line in studio.open(folder).lines)
    assert not studio.render_all(folder).rendered  # nothing left to do


def test_regenerate_edit_lock_and_choose(studio: Workspace) -> None:
    folder = studio.save("", "Takes", SCRIPT, {}).folder.name
    studio.render_all(folder)
    line = studio.open(folder).lines[1]
    first = line.take
    second = studio.regenerate(folder, line.id)
    assert second.number == 2 and second.seed != first.seed
    edited = studio.regenerate(folder, line.id, text="Hi Alice, all good?")
    reopened = studio.open(folder)
    assert edited.text == "Hi Alice, all good?" == reopened.line(line.id).text
    assert "Bob: Hi Alice, all good?" in reopened.script
    studio.choose(folder, line.id, 2)
    studio.set_lock(folder, line.id, True)
    assert studio.open(folder).line(line.id).take.number == 2
    with pytest.raises(InvalidRequest) as locked:
        studio.regenerate(folder, line.id)
    assert locked.value.code == "line_locked"
    assert strings.message(locked.value, "zh").startswith("这一句已锁定")
    assert not studio.render_all(folder).rendered  # the locked line keeps its take
    studio.set_lock(folder, line.id, False)
    assert studio.regenerate(folder, line.id).number == 4


def test_export_writes_the_mix_stems_and_subtitles(studio: Workspace) -> None:
    folder = studio.save("", "Export", SCRIPT, {}).folder.name
    with pytest.raises(InvalidRequest) as early:
        studio.export(folder)
    assert early.value.code == "lines_missing" and "还有" in strings.message(early.value, "zh")
    studio.render_all(folder)
    paths = studio.export(folder, "wav")
    names = [p.name for p in paths]
    assert names[0] == "Export.wav" and "Export.stems.zip" in names
    assert {"Export.Alice.wav", "Export.Bob.wav", "Export.Narrator.wav", "Export.srt", "Export.vtt"} <= set(names)
    with zipfile.ZipFile(paths[names.index("Export.stems.zip")]) as archive:
        assert sorted(archive.namelist()) == ["Export.Alice.wav", "Export.Bob.wav", "Export.Narrator.wav"]
    mix, rate = sf.read(paths[0])
    cues = subtitles.parse(paths[names.index("Export.srt")].read_text(encoding="utf-8"))
    assert len(cues) == 4 and abs(cues[-1].end - len(mix) / rate) < 0.05
    only = studio.export(folder, "wav", ("srt",))
    assert [p.suffix for p in only] == [".srt"]


def test_the_glossary_changes_what_the_engine_is_asked_to_say(studio: Workspace,
                                                               engine: RecordingEngine) -> None:
    from cosyvoice_ui.serving.glossary import GlossaryStore, make_glossary

    saved = GlossaryStore(studio.settings.glossary_dir).save(make_glossary("Names", {"Bob": "Robert"}))
    folder = studio.save("", "Glossary", "Alice: Hello Bob.\nBob: Hi.", {}).folder.name
    studio.render_all(folder, JobOptions(glossary=saved.id))  # the id the output options' dropdown gives
    assert any("Robert" in text for text in engine.texts) and not any("Bob" in text for text in engine.texts)
    line = studio.open(folder).lines[0]
    assert line.text == "Hello Bob." and line.take.text == "Hello Bob."  # the script keeps its words
    engine.texts.clear()
    studio.regenerate(folder, line.id, options=JobOptions(glossary={"Hello": "Hullo"}))
    assert engine.texts and all("Hullo" in text for text in engine.texts)


def test_errors_are_translated_codes(studio: Workspace) -> None:
    with pytest.raises(InvalidRequest) as empty:
        studio.save("", "Empty", "  \n# only a comment\n", {})
    assert empty.value.code == "script_empty" and strings.message(empty.value, "zh").startswith("剧本里没有")
    with pytest.raises(InvalidRequest) as missing:
        studio.open("")
    assert missing.value.code == "project_missing"
    studio.create("Twice", SCRIPT)
    with pytest.raises(InvalidRequest) as twice:
        studio.create("Twice", SCRIPT)
    assert twice.value.code == "project_exists" and strings.message(twice.value, "zh").startswith("已有同名项目")
    with pytest.raises(InvalidRequest) as unusable:
        folder = studio.save("", "Bad voice", SCRIPT, {"Alice": VoiceRow("preset", preset="Nobody")}).folder.name
        studio.render_all(folder)
    assert unusable.value.code == "speaker_unknown"
    assert "/" not in strings.message(unusable.value, "en")


def test_status_line_in_english_and_chinese() -> None:
    """The status line reads the event's code and parameters (no pattern over its English)."""
    retry = {"stage": "segment", "code": "take_retry", "message": "segment 1/2: retry 1/2 (too long for its text)",
             "params": {"segment": 1, "total": 2, "attempt": 1, "retries": 2, "reasons": ["too_long"]}}
    event = ProgressEvent("segment", 0.5, "line 3/12 · Bob: segment 1/2: retry 1/2 (too long for its text)", "line",
                          {"line": 3, "lines": 12, "speaker": "Bob", "then": retry})
    assert status_text(event, "en") == "line 3/12 · Bob · segment 1/2: retry 1/2 (too long for its text)"
    assert status_text(event, "zh") == "第 3/12 句 · Bob · 第 1/2 段：第 1/2 次重试（与文字相比太长）"
    where = {"chapter": 2, "chapters": 3, "piece": 5, "pieces": 20}
    book = ProgressEvent("book", 0.3, "chapter 2/3 · piece 5/20 · ETA 4 min", "book_piece", {**where, "eta_s": 240})
    assert status_text(book, "zh") == "第 2/3 章 · 第 5/20 段 · 预计剩余 4 分钟"
    assert status_text(book, "en") == "chapter 2/3 · piece 5/20 · ETA 4 min"
    unknown = ProgressEvent("book", 0.0, "chapter 1/3 · piece 1/20 · ETA …", "book_piece", {**where, "eta_s": None})
    assert status_text(unknown, "zh").endswith("预计剩余 …")


def test_a_book_runs_stops_and_resumes(studio: Workspace, tmp_path: Path) -> None:
    from cosyvoice_ui.audio import ffmpeg_path

    if not ffmpeg_path():
        pytest.skip("ffmpeg is needed for the chaptered book")
    from cosyvoice_ui.testing.ebooks import sample_markdown

    books = Bookshelf(studio)
    source = tmp_path / "tale.md"
    source.write_text(sample_markdown(), encoding="utf-8")
    chapters = books.read(str(source)).chapters
    cancel = threading.Event()
    seen: list[str] = []

    def progress(event: ProgressEvent) -> None:
        seen.append(event.message)
        if event.stage == "book" and "piece 2/" in event.message:
            cancel.set()

    with pytest.raises(Cancelled):
        books.start(str(source), VoiceRow("preset", preset="A"), "m4b", progress=progress, cancel=cancel)
    unfinished = books.unfinished()
    assert len(unfinished) == 1 and unfinished[0].finished >= 1
    result = books.resume(unfinished[0].folder)
    assert result.reused >= 1 and len(result.chapter_files) == len(chapters)
    assert result.book_file.suffix == ".m4b" and result.book_file.is_file()
    assert len(result.subtitle_files) == len(chapters) and books.unfinished() == []
    assert any("ETA" in message for message in seen)


def test_an_uploaded_script_is_read_as_text(tmp_path: Path) -> None:
    from cosyvoice_ui.studio.workspace import read_script_file

    utf16 = tmp_path / "a.txt"
    utf16.write_bytes("Alice: 你好\n".encode("utf-16"))
    gbk = tmp_path / "b.txt"
    gbk.write_bytes("Bob: 你好\n".encode("gb18030"))
    assert read_script_file(str(utf16)) == "Alice: 你好\n" and read_script_file(str(gbk)) == "Bob: 你好\n"
    assert read_script_file(None) == ""
    binary = tmp_path / "c.txt"
    binary.write_bytes(np.arange(256, dtype=np.uint8).tobytes() * 4)
    with pytest.raises(InvalidRequest):
        read_script_file(str(binary))
