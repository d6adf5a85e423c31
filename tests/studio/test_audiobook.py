"""The audiobook job on a fake engine: a 3-chapter EPUB → 3 chapter files, 3 SRTs and a chaptered M4B/MP3;
progress with an ETA; resumption after a crash or a cancel without re-rendering finished pieces; a changed book
or voice starts over. At the end, one run each on a tiny CosyVoice model and on the offline voice."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.audio import ensure_ffmpeg, integrated_loudness
from cosyvoice_ui.errors import Cancelled, InvalidRequest
from cosyvoice_ui.serving.jobs import JobOptions, SpeechJobs
from cosyvoice_ui.studio.audiobook import STATE_FILE, BookJob, BookSettings, format_eta, split_pieces
from cosyvoice_ui.studio.book import Book, Chapter, read_book
from cosyvoice_ui.studio.chapters import probe_duration, read_chapters
from cosyvoice_ui.serving.subtitles import parse
from cosyvoice_ui.studio.voice_map import VoiceChoice
from cosyvoice_ui.testing import ebooks
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.speech import speech_jobs
from cosyvoice_ui.types import ProgressEvent

pytestmark = pytest.mark.skipif(not ensure_ffmpeg(), reason="ffmpeg/ffprobe are not installed")

VOICE = VoiceChoice("preset", "A")
NO_RETRY = JobOptions(check_takes=False)  # one engine call per piece, so calls count pieces


class CrashingEngine(FakeEngine):
    """A fake engine that raises on its `crash_on`-th call (a model error or a killed process mid-book)."""

    def __init__(self, crash_on: int, **kw) -> None:
        super().__init__(sample_rate=24000, **kw)
        self.crash_on = crash_on

    def _synthesize(self, request, progress, cancel):
        if self.calls + 1 == self.crash_on:
            self.calls += 1
            raise RuntimeError("the model crashed")
        yield from super()._synthesize(request, progress, cancel)


@pytest.fixture()
def book(tmp_path: Path) -> Book:
    return read_book(ebooks.write_epub(tmp_path / "journey.epub"))


@pytest.fixture()
def speech(tmp_path: Path) -> SpeechJobs:
    """The speech jobs every piece runs through (the server's settings under `tmp_path/service`)."""
    return speech_jobs(tmp_path / "service")


def _engine() -> FakeEngine:
    return FakeEngine(sample_rate=24000)


def test_three_chapter_epub_gives_three_chapter_files_and_a_chaptered_m4b(book: Book, tmp_path: Path,
                                                                         speech: SpeechJobs) -> None:
    job = BookJob(tmp_path / "out", book, VOICE)
    engine = _engine()
    result = job.run(engine, speech, NO_RETRY)
    assert engine.calls == len(job.pieces()) == result.rendered and result.reused == 0
    assert [p.name for p in result.chapter_files] == ["01 The Harbour.flac", "02 The Road.flac", "03 The Town.flac"]
    assert [p.suffix for p in result.subtitle_files] == [".srt"] * 3
    assert result.book_file.name == "A Short Journey.m4b"
    marks = read_chapters(result.book_file)
    assert [m.title for m in marks] == [title for title, _ in ebooks.SAMPLE_CHAPTERS]
    lengths = [sf.info(str(p)).duration for p in result.chapter_files]
    assert [m.end - m.start for m in marks] == pytest.approx(lengths, abs=0.002)
    assert marks[0].start == 0.0 and marks[1].start == pytest.approx(marks[0].end)
    assert probe_duration(result.book_file) == pytest.approx(sum(lengths), abs=0.1)


def test_each_chapter_srt_covers_its_text_within_the_chapter(book: Book, tmp_path: Path, speech: SpeechJobs) -> None:
    result = BookJob(tmp_path / "out", book, VOICE).run(_engine(), speech, NO_RETRY)
    for chapter, srt, audio in zip(book.chapters, result.subtitle_files, result.chapter_files):
        cues = parse(srt.read_text(encoding="utf-8"))
        assert [c.text for c in cues] == [chapter.title, *chapter.paragraphs]
        assert cues[0].start == 0.0
        assert all(a.end <= b.start for a, b in zip(cues, cues[1:]))  # in order, pauses between
        assert cues[-1].end <= sf.info(str(audio)).duration


def test_mp3_book_carries_id3_chapters(book: Book, tmp_path: Path, speech: SpeechJobs) -> None:
    settings = BookSettings(book_format="mp3", chapter_format="mp3")
    result = BookJob(tmp_path / "out", book, VOICE, settings).run(_engine(), speech, NO_RETRY)
    assert result.book_file.suffix == ".mp3" and all(p.suffix == ".mp3" for p in result.chapter_files)
    marks = read_chapters(result.book_file)
    assert len(marks) == 3 and marks[2].title == "The Town"
    assert [m.end - m.start for m in marks] == pytest.approx([probe_duration(p) for p in result.chapter_files],
                                                             abs=0.01)


def test_the_book_is_loudness_normalised_with_one_gain(book: Book, tmp_path: Path, speech: SpeechJobs) -> None:
    settings = BookSettings(chapter_format="wav", target_lufs=-18.0)
    result = BookJob(tmp_path / "out", book, VOICE, settings).run(_engine(), speech, NO_RETRY)
    chapters = [sf.read(str(p), dtype="float32")[0] for p in result.chapter_files]
    assert integrated_loudness(np.concatenate(chapters), 24000) == pytest.approx(-18.0, abs=1.0)
    # the same engine noise level in every chapter stays the same after the one gain
    levels = [float(np.sqrt(np.mean(c[np.abs(c) > 0] ** 2))) for c in chapters]
    assert max(levels) / min(levels) == pytest.approx(1.0, abs=0.05)


def test_progress_says_chapter_piece_and_eta(book: Book, tmp_path: Path, speech: SpeechJobs) -> None:
    events: list[ProgressEvent] = []
    job = BookJob(tmp_path / "out", book, VOICE)
    job.run(_engine(), speech, NO_RETRY, progress=events.append)
    pieces = [e for e in events if e.stage == "book" and "piece" in e.message]
    assert len(pieces) == len(job.pieces())
    assert pieces[0].message == f"chapter 1/3 · piece 1/{len(job.plan[0])} · ETA …"  # nothing measured yet
    assert all(" · ETA " in e.message for e in pieces[1:]) and "ETA …" not in pieces[1].message
    assert pieces[len(job.plan[0])].message.startswith("chapter 2/3 · piece 1/")
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and events[-1].stage == "done" and events[-1].fraction == 1.0


def test_format_eta() -> None:
    assert format_eta(None) == "ETA …"
    assert format_eta(12) == "ETA <1 min"
    assert format_eta(75) == "ETA 1 min"
    assert format_eta(3 * 3600 + 5 * 60) == "ETA 3 h 05 min"


def test_a_crash_mid_book_resumes_without_re_rendering_finished_pieces(book: Book, tmp_path: Path,
                                                                       speech: SpeechJobs) -> None:
    out = tmp_path / "out"
    total = len(BookJob(out, book, VOICE).pieces())
    crashing = CrashingEngine(crash_on=5)
    with pytest.raises(RuntimeError):
        BookJob(out, book, VOICE).run(crashing, speech, NO_RETRY)
    state = json.loads((out / STATE_FILE).read_text(encoding="utf-8"))
    assert len(state["pieces"]) == 4  # saved piece by piece
    assert not (out / "chapters").exists()
    # a new job object, as after a restart of the program
    again = BookJob(out, book, VOICE)
    assert len(again.finished(crashing.info.name)) == 4
    engine = _engine()
    result = again.run(engine, speech, NO_RETRY)
    assert engine.calls == total - 4
    assert (result.rendered, result.reused) == (total - 4, 4)
    assert any("resuming" in note for note in result.notes)
    assert len(read_chapters(result.book_file)) == 3


def test_a_cancel_mid_book_resumes(book: Book, tmp_path: Path, speech: SpeechJobs) -> None:
    out = tmp_path / "out"
    cancel = threading.Event()
    engine = _engine()

    def stop_at_third_piece(event: ProgressEvent) -> None:
        if "piece 3/" in event.message:
            cancel.set()

    with pytest.raises(Cancelled):
        BookJob(out, book, VOICE).run(engine, speech, NO_RETRY, progress=stop_at_third_piece, cancel=cancel)
    assert engine.calls == 3  # the third piece started and was cancelled inside the engine
    again = _engine()
    result = BookJob(out, book, VOICE).run(again, speech, NO_RETRY)
    assert result.reused == 2 and again.calls == len(BookJob(out, book, VOICE).pieces()) - 2
    assert not [p for p in (out / "pieces").iterdir() if p.name.endswith(".tmp")]


def test_a_finished_book_run_again_renders_nothing(book: Book, tmp_path: Path, speech: SpeechJobs) -> None:
    BookJob(tmp_path / "out", book, VOICE).run(_engine(), speech, NO_RETRY)
    engine = _engine()
    result = BookJob(tmp_path / "out", book, VOICE, BookSettings(book_format="mp3")).run(engine, speech, NO_RETRY)
    assert engine.calls == 0 and result.book_file.suffix == ".mp3"  # the format is assembly only


@pytest.mark.parametrize("change", ["book", "voice", "settings"])
def test_a_changed_book_voice_or_setting_starts_over_with_a_note(book: Book, tmp_path: Path, change: str,
                                                                 speech: SpeechJobs) -> None:
    out = tmp_path / "out"
    BookJob(out, book, VOICE).run(_engine(), speech, NO_RETRY)
    other_book = replace(book, chapters=[*book.chapters[:2], Chapter("The End", "A new ending.")])
    job = {"book": BookJob(out, other_book, VOICE),
           "voice": BookJob(out, book, VoiceChoice("preset", "B")),
           "settings": BookJob(out, book, VOICE, BookSettings(speed=1.2))}[change]
    engine = _engine()
    result = job.run(engine, speech, NO_RETRY)
    assert engine.calls == len(job.pieces()) and result.reused == 0
    assert sorted(p.name for p in (out / "chapters").iterdir()) == sorted(
        p.name for p in result.chapter_files + result.subtitle_files)  # no leftovers of the first run
    assert len(result.notes) == 1 and "from the start" in result.notes[0] and change[:4] in result.notes[0]


def test_guarded_rendering_runs_with_the_default_retry_policy(book: Book, tmp_path: Path, speech: SpeechJobs) -> None:
    engine = _engine()
    job = BookJob(tmp_path / "out", book, VOICE)
    result = job.run(engine, speech)
    assert engine.calls >= len(job.pieces()) and len(result.chapter_files) == 3
    state = json.loads((tmp_path / "out" / STATE_FILE).read_text(encoding="utf-8"))
    assert all(entry["attempts"] >= 1 for entry in state["pieces"].values())


def test_pieces_split_long_paragraphs_at_sentences_and_turn_breaks_into_pauses() -> None:
    text = ("One short sentence here. Another one follows it! A third comes? And the last one ends it.\n\n"
            "* * *\n\nAfter the break.")
    book = Book("T", "", [Chapter("Start", text)])
    settings = BookSettings(piece_chars=50)
    [pieces] = split_pieces(book, settings)
    assert [p.text for p in pieces] == ["Start", "One short sentence here. Another one follows it!",
                                        "A third comes? And the last one ends it.", "After the break."]
    assert [p.pause_s for p in pieces] == [settings.title_pause_s, settings.sentence_pause_s,
                                           2 * settings.paragraph_pause_s, settings.paragraph_pause_s]
    [untitled] = split_pieces(book, BookSettings(speak_titles=False, piece_chars=400))
    assert untitled[0].text.startswith("One short") and len(untitled) == 2


def test_bad_settings_are_refused_before_any_work(book: Book, tmp_path: Path) -> None:
    for settings, code in [(BookSettings(book_format="ogg"), "bad_book_format"),
                           (BookSettings(chapter_format="opus"), "bad_format"),
                           (BookSettings(speed=3.0), "speed_out_of_range")]:
        with pytest.raises(InvalidRequest) as caught:
            BookJob(tmp_path / "out", book, VOICE, settings)
        assert caught.value.code == code


def test_a_voice_the_model_cannot_use_is_refused(book: Book, tmp_path: Path, speech: SpeechJobs) -> None:
    with pytest.raises(InvalidRequest) as caught:
        BookJob(tmp_path / "out", book, VoiceChoice("preset", "Nobody")).run(_engine(), speech, NO_RETRY)
    assert caught.value.code == "speaker_unknown"
    assert not (tmp_path / "out").exists()  # refused before any work


# --- real engines -----------------------------------------------------------------------------------------------

TINY_BOOK = Book("Tiny", "", [Chapter(f"Part {n}", f"Hello, this is part {n}.") for n in (1, 2, 3)])


def test_end_to_end_on_a_tiny_cosyvoice_model(tiny_sft: Path, tmp_path: Path) -> None:
    from cosyvoice_ui import load_engine

    engine = load_engine(tiny_sft, device="cpu")
    voice = VoiceChoice("preset", engine.info.speakers[0])
    result = BookJob(tmp_path / "out", TINY_BOOK, voice, BookSettings(speak_titles=False)).run(
        engine, speech_jobs(tmp_path), JobOptions(take_retries=1))
    marks = read_chapters(result.book_file)
    assert [m.title for m in marks] == ["Part 1", "Part 2", "Part 3"]
    assert all(sf.info(str(p)).samplerate == engine.info.sample_rate for p in result.chapter_files)
    assert all(parse(p.read_text(encoding="utf-8")) for p in result.subtitle_files)


def test_end_to_end_on_the_offline_voice_with_the_default_voice(tmp_path: Path) -> None:
    from tests.offline.conftest import require_offline

    require_offline()
    from cosyvoice_ui.offline import load_offline_engine

    engine = load_offline_engine(voices_dir=tmp_path / "voices")
    settings = BookSettings(book_format="mp3")
    result = BookJob(tmp_path / "out", TINY_BOOK, VoiceChoice("default"), settings).run(
        engine, speech_jobs(tmp_path), NO_RETRY)
    marks = read_chapters(result.book_file)
    assert [m.title for m in marks] == ["Part 1", "Part 2", "Part 3"]
    for srt, chapter in zip(result.subtitle_files, TINY_BOOK.chapters):
        assert [c.text for c in parse(srt.read_text(encoding="utf-8"))][0] == chapter.title
    speech = sf.read(str(result.chapter_files[0]), dtype="float32")[0]
    assert integrated_loudness(speech, engine.info.sample_rate) == pytest.approx(settings.target_lufs, abs=1.5)
