"""A book read aloud as a long job that survives a crash: chapters → pieces → audio → chapter files → one book.

Each chapter is split into pieces (its title, then its paragraphs; a long paragraph at sentence ends), and the
piece is the unit of resumption: its audio is written atomically to `pieces/`, then the state file
(`book-state.json`, atomic) records it as finished. A second run of the same book, voice and settings skips every
finished piece; a changed book, voice (or model) or setting starts over and says so in `notes`.

When every piece is there, the chapters are assembled (pieces joined with pauses, one loudness gain for the whole
book), written as one audio file and one SRT per chapter in `chapters/`, and joined into one M4B or MP3 with
chapter markers (`studio/chapters.py`). Progress is "book" events with an ETA from the seconds per character
measured so far in this run.

Each piece is one speech job (`serving.jobs`), like a request from any other surface: `SpeechJobs.prepare`
applies the glossary, fills in the default voice, refuses blocked words, decides the take policy and runs the
one check (every missing piece is prepared before the first is rendered), and `render_on` runs it on the
engine (the bad-take guard, the segment clock, subtitles in the book's own words). Pieces are stored raw: the
whole book gets one loudness gain when it is assembled.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..audio import DEFAULT_LUFS, audio_hash, check_format, encode, integrated_loudness
from ..engine import Engine, raise_if_cancelled, report
from ..errors import InvalidRequest
from ..files import sweep_stale_temp, write_atomic
from ..serving.jobs import JobOptions, SpeechJob, render_on
from ..serving.subtitles import Cue, shift, to_srt
from ..types import Audio, ProgressCallback
from ..validation import check_speed
from .book import Book
from .chapters import ChapterMark, check_book_format, probe_duration, write_chaptered
from .voice_map import VoiceChoice, prepare

if TYPE_CHECKING:
    from ..serving.glossary import Glossary
    from ..serving.jobs import SpeechJobs

log = logging.getLogger(__name__)

STATE_FILE = "book-state.json"
STATE_VERSION = 1
CHAPTER_FORMATS = ("flac", "wav", "mp3")
# Codes about a piece's words rather than the voice: their errors say where the piece is.
TEXT_CODES = ("blocked_words", "text_empty", "text_too_long", "text_invalid")
# Linear: a match can only start right after a sentence mark, and its quote and space runs cannot overlap.
_SENTENCE_END = re.compile(r"(?<=[.!?…。！？；;])[\"'”’»)\]]*\s+|(?<=[。！？])")


@dataclass(frozen=True)
class BookSettings:
    """How the book is read and written. Those in `RENDER_KEYS` change the audio of the pieces (changing one
    re-renders the book); the rest only change the assembly, which every run redoes."""

    book_format: str = "m4b"  # "m4b" (AAC, chapter atoms) or "mp3" (ID3v2 CHAP frames)
    chapter_format: str = "flac"  # lossless per-chapter files by default: the book is encoded once from them
    speed: float = 1.0
    seed: int = 1986  # one seed for the whole book: the same voice throughout, reproducible runs
    speak_titles: bool = True  # read each chapter's title before its text
    piece_chars: int = 400  # a longer paragraph is split at sentence ends into pieces of about this size
    title_pause_s: float = 1.0
    paragraph_pause_s: float = 0.6
    sentence_pause_s: float = 0.2  # between the pieces of one split paragraph
    chapter_tail_s: float = 1.5  # silence that ends every chapter file
    target_lufs: float = DEFAULT_LUFS

    RENDER_KEYS = ("speed", "seed", "speak_titles", "piece_chars")

    def render_settings(self) -> dict:
        return {key: getattr(self, key) for key in self.RENDER_KEYS}

    def checked(self) -> BookSettings:
        check_book_format(self.book_format)
        if check_format(self.chapter_format) not in CHAPTER_FORMATS:
            raise InvalidRequest("bad_format", f"chapter files can be {', '.join(CHAPTER_FORMATS)}, not "
                                 f"{self.chapter_format}", format=self.chapter_format)
        check_speed(float(self.speed))
        if int(self.piece_chars) < 40:
            raise InvalidRequest("bad_piece_size", "pieces must be at least 40 characters long",
                                 piece_chars=self.piece_chars)
        return self


@dataclass(frozen=True)
class Piece:
    """The unit of work: one text rendered as one request, then `pause_s` of silence."""

    chapter: int  # 0-based
    index: int  # 0-based within its chapter
    text: str
    pause_s: float

    @property
    def key(self) -> str:
        return f"c{self.chapter + 1:03d}-p{self.index + 1:04d}"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16]


@dataclass
class BookResult:
    book_file: Path
    chapter_files: list[Path]
    subtitle_files: list[Path]
    chapters: list[ChapterMark]
    seconds: float
    rendered: int  # pieces rendered in this run
    reused: int  # pieces kept from an earlier run
    notes: list[str] = field(default_factory=list)


def split_pieces(book: Book, settings: BookSettings) -> list[list[Piece]]:
    """Every chapter's pieces in reading order (a text with nothing to say, like "* * *", becomes a pause)."""
    plan = []
    for number, chapter in enumerate(book.chapters):
        texts: list[tuple[str, float]] = []
        if settings.speak_titles and _speakable(chapter.title):
            texts.append((chapter.title, settings.title_pause_s))
        for paragraph in chapter.paragraphs:
            parts = _split_long(paragraph, settings.piece_chars)
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                texts.append((part, settings.paragraph_pause_s if last else settings.sentence_pause_s))
        pieces: list[Piece] = []
        for text, pause in texts:
            if _speakable(text):
                pieces.append(Piece(number, len(pieces), text, pause))
            elif pieces:  # a scene break: a longer pause after the previous piece
                pieces[-1] = Piece(number, pieces[-1].index, pieces[-1].text, pieces[-1].pause_s + pause)
        plan.append(pieces)
    return plan


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _split_long(paragraph: str, limit: int) -> list[str]:
    """A paragraph over `limit` characters as runs of whole sentences of at most `limit` (a longer sentence
    stays whole: the engine splits it further)."""
    if len(paragraph) <= limit:
        return [paragraph]
    sentences = [s.strip() for s in _SENTENCE_END.split(paragraph) if s and s.strip()]
    parts: list[str] = []
    for sentence in sentences:
        if parts and len(parts[-1]) + 1 + len(sentence) <= limit:
            joiner = "" if _is_wide(parts[-1][-1]) else " "
            parts[-1] = parts[-1] + joiner + sentence
        else:
            parts.append(sentence)
    return parts


def _is_wide(ch: str) -> bool:
    return ord(ch) > 0x2E80


def book_fingerprint(book: Book) -> str:
    data = json.dumps([book.title, book.author, [[c.title, c.text] for c in book.chapters]], ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def reading_print(glossary: Glossary | None) -> str:
    """What of a glossary changes the audio (its entries and case rule), as a short digest; "" for none."""
    if glossary is None or not glossary.entries:
        return ""
    data = json.dumps([glossary.case_sensitive, [entry.to_dict() for entry in glossary.entries]], ensure_ascii=False,
                      sort_keys=True)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]


def format_eta(seconds: float | None) -> str:
    """"ETA 3 min" style: under a minute → "<1 min", from an hour on → "1 h 05 min"; None → "ETA …"."""
    if seconds is None:
        return "ETA …"
    minutes = int(round(seconds / 60))
    if seconds < 60:
        return "ETA <1 min"
    if minutes < 60:
        return f"ETA {minutes} min"
    return f"ETA {minutes // 60} h {minutes % 60:02d} min"


class BookJob:
    """One book read by one voice into `out_dir`. `run` renders what is missing and writes the outputs; it can be
    called again after a crash, a cancel or a restart of the program, and continues where the last run stopped."""

    def __init__(self, out_dir: Path, book: Book, voice: VoiceChoice, settings: BookSettings | None = None,
                 sample_audio: Audio | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.book = book
        self.voice = voice
        self.settings = (settings or BookSettings()).checked()
        self.sample_audio = sample_audio
        self.plan = split_pieces(book, self.settings)
        self.notes: list[str] = []

    @property
    def state_path(self) -> Path:
        return self.out_dir / STATE_FILE

    @property
    def pieces_dir(self) -> Path:
        return self.out_dir / "pieces"

    def pieces(self) -> list[Piece]:
        return [piece for chapter in self.plan for piece in chapter]

    def finished(self, engine_name: str = "", glossary: Glossary | None = None) -> set[str]:
        """Keys of the pieces an earlier run finished for this book, voice, glossary and settings (for a resume
        prompt)."""
        state = self._load_state()
        if not state or self._mismatch(state, engine_name, reading_print(glossary)):
            return set()
        return {p.key for p in self.pieces() if self._is_done(state, p)}

    # --- running ----------------------------------------------------------------------------------------------

    def run(self, engine: Engine, speech: SpeechJobs, options: JobOptions | None = None,
            progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> BookResult:
        """Render every missing piece, then write the chapter files, their SRTs and the chaptered book.

        `speech`: the process's speech jobs; `options`: the glossary and the take switch and retries (pieces are
        kept raw whatever `options.loudness` says). Every missing piece is prepared, and the voice checked on
        the model, before anything is written."""
        self.notes = []
        options = replace(options or JobOptions(), loudness=None)
        glossary = speech.glossary(options.glossary)  # resolved once: an unknown one is refused before any work
        options = replace(options, glossary=glossary)
        reading = reading_print(glossary)
        loaded = self._load_state()
        kept = loaded is not None and not self._mismatch(loaded, engine.info.name, reading)
        todo = [p for p in self.pieces() if not (kept and self._is_done(loaded, p))]
        jobs = self._jobs(todo, engine, speech, options)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.pieces_dir.mkdir(exist_ok=True)
        sweep_stale_temp(self.pieces_dir)
        state = self._start_state(loaded, engine.info.name, reading)
        reused = len(self.pieces()) - len(todo)
        if reused:
            self.notes.append(f"resuming: {reused} of {len(self.pieces())} pieces were finished by an earlier run")
        total_chars = sum(len(p.text) for p in self.pieces()) or 1
        done_chars = total_chars - sum(len(p.text) for p in todo)
        spent_s, measured_chars = 0.0, 0
        for piece in todo:
            raise_if_cancelled(cancel)
            eta = (total_chars - done_chars) * spent_s / measured_chars if measured_chars else None
            report(progress, "book", 0.95 * done_chars / total_chars, self._where(piece) + " · " + format_eta(eta),
                   "book_piece", chapter=piece.chapter + 1, chapters=len(self.plan), piece=piece.index + 1,
                   pieces=len(self.plan[piece.chapter]), eta_s=eta)
            began = time.monotonic()
            entry = self._render_piece(piece, jobs[piece.key], engine, speech, cancel)
            entry["render_s"] = round(time.monotonic() - began, 3)
            state["pieces"][piece.key] = entry
            self._save_state(state)
            spent_s += entry["render_s"]
            measured_chars += len(piece.text)
            done_chars += len(piece.text)
        raise_if_cancelled(cancel)
        report(progress, "book", 0.95, "writing the chapters and the book")
        result = self._assemble(state, progress)
        result.rendered, result.reused, result.notes = len(todo), reused, list(self.notes)
        report(progress, "done", 1.0, f"{len(result.chapter_files)} chapters · {result.seconds / 60:.1f} min")
        return result

    def _where(self, piece: Piece) -> str:
        return (f"chapter {piece.chapter + 1}/{len(self.plan)} · piece {piece.index + 1}/"
                f"{len(self.plan[piece.chapter])}")

    def _jobs(self, pieces: list[Piece], engine: Engine, speech: SpeechJobs,
              options: JobOptions) -> dict[str, SpeechJob]:
        """The checked job of every piece (blocked words, lengths, the voice), and the voice checked on the model
        (registered first) once: a book that cannot be read to the end is refused before any work."""
        jobs = {}
        for piece in pieces:
            try:
                jobs[piece.key] = prepare(piece.text, self.voice, engine.info, speech, options, self.settings.seed,
                                          self.sample_audio, self.settings.speed)
            except InvalidRequest as exc:
                if exc.code not in TEXT_CODES:
                    raise
                raise InvalidRequest(exc.code, f"{self._where(piece)}: {exc.message}",
                                     **{**exc.params, "piece": piece.key}) from None
        if pieces:
            first = jobs[pieces[0].key]
            speech.resolver.ensure(engine, first.voice)
            engine.check(first.request)
        return jobs

    def _render_piece(self, piece: Piece, job: SpeechJob, engine: Engine, speech: SpeechJobs,
                      cancel: threading.Event | None) -> dict:
        rendered = render_on(engine, job, speech.resolver, None, cancel)
        if not len(rendered.samples):
            raise InvalidRequest("book_piece_silent", f"the voice produced no audio for {self._where(piece)}; "
                                 "edit that paragraph or pick another voice", piece=piece.key)
        rate = rendered.sample_rate
        write_atomic(self.pieces_dir / f"{piece.key}.flac", encode(rendered.samples, rate, "flac"))
        return {"digest": piece.digest, "samples": int(len(rendered.samples)), "rate": int(rate),
                "chars": len(piece.text), "attempts": sum(r.attempts for r in rendered.takes) or 1,
                "cues": [[round(c.start, 4), round(c.end, 4), c.text] for c in rendered.cues]}

    # --- state ------------------------------------------------------------------------------------------------

    def _voice_print(self, engine_name: str) -> dict:
        return {"choice": self.voice.identity(), "sample": audio_hash(self.sample_audio), "model": engine_name}

    def _mismatch(self, state: dict, engine_name: str, reading: str = "") -> str:
        """Why an existing state cannot be continued ("" when it can)."""
        if state.get("version") != STATE_VERSION:
            return "the progress file is from another version"
        if state.get("book") != book_fingerprint(self.book):
            return "the book changed since the last run"
        if state.get("voice") != self._voice_print(engine_name):
            return "the voice or the model changed since the last run"
        if state.get("reading", "") != reading:  # a state from before glossaries were recorded had none
            return "the pronunciation glossary changed since the last run"
        if state.get("settings") != self.settings.render_settings():
            return "the reading settings (speed, seed, titles, piece size) changed since the last run"
        return ""

    def _start_state(self, state: dict | None, engine_name: str, reading: str) -> dict:
        """`state` (as loaded) when it can be continued, else a fresh one (the old pieces removed, `notes` says
        why)."""
        if state is not None:
            why = self._mismatch(state, engine_name, reading)
            if not why:
                return state
            self.notes.append(f"{why}, so the book is read again from the start")
            for old in self.pieces_dir.glob("*.flac"):
                old.unlink(missing_ok=True)
        fresh = {"version": STATE_VERSION, "title": self.book.title, "book": book_fingerprint(self.book),
                 "voice": self._voice_print(engine_name), "settings": self.settings.render_settings(),
                 "reading": reading, "pieces": {}}
        self._save_state(fresh)
        return fresh

    def _load_state(self) -> dict | None:
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self.notes.append("the progress file could not be read, so the book is read again from the start")
            return None
        return state if isinstance(state, dict) and isinstance(state.get("pieces"), dict) else None

    def _save_state(self, state: dict) -> None:
        write_atomic(self.state_path, json.dumps(state, ensure_ascii=False, indent=1).encode("utf-8"))

    def _is_done(self, state: dict, piece: Piece) -> bool:
        entry = state.get("pieces", {}).get(piece.key)
        return bool(entry) and entry.get("digest") == piece.digest and (self.pieces_dir / f"{piece.key}.flac").is_file()

    # --- assembly ---------------------------------------------------------------------------------------------

    def _chapter_audio(self, state: dict, number: int) -> tuple[np.ndarray, int, list[Cue]]:
        """The chapter's pieces joined with their pauses (not yet loudness-normalised), and its cues."""
        import soundfile as sf

        parts, cues, offset, rate = [], [], 0, 0
        for piece in self.plan[number]:
            entry = state["pieces"][piece.key]
            samples, rate = sf.read(io.BytesIO((self.pieces_dir / f"{piece.key}.flac").read_bytes()),
                                    dtype="float32")
            cues += shift([Cue(s, e, t) for s, e, t in entry["cues"]], offset / rate)
            pause = np.zeros(int(round(piece.pause_s * rate)), np.float32)
            parts += [samples, pause]
            offset += len(samples) + len(pause)
        # A chapter with no pieces takes the rate of any other piece (the book has one); 16 kHz only if none.
        rate = rate or int(next(iter(state["pieces"].values()), {}).get("rate", 16000))
        parts.append(np.zeros(int(round(self.settings.chapter_tail_s * rate)), np.float32))
        return np.concatenate(parts).astype(np.float32), rate, cues

    def _book_gain(self, state: dict) -> float:
        """One gain for the whole book: the duration-weighted mean power of the chapters' integrated loudness,
        brought to `target_lufs`, never letting the loudest chapter's peak clip."""
        energy, seconds, peak = 0.0, 0.0, 0.0
        for number in range(len(self.plan)):
            samples, rate, _ = self._chapter_audio(state, number)
            loudness = integrated_loudness(samples, rate)
            length = len(samples) / rate
            if np.isfinite(loudness):
                energy += length * 10 ** (loudness / 10)
                seconds += length
            peak = max(peak, float(np.max(np.abs(samples))) if len(samples) else 0.0)
        if not seconds or not energy:
            return 1.0
        gain = 10 ** ((self.settings.target_lufs - 10 * np.log10(energy / seconds)) / 20)
        return float(min(gain, 0.99 / peak)) if peak else float(gain)

    def _assemble(self, state: dict, progress: ProgressCallback | None) -> BookResult:
        fmt = self.settings.chapter_format
        chapters_dir = self.out_dir / "chapters"
        chapters_dir.mkdir(exist_ok=True)
        gain = self._book_gain(state)
        files, subtitles, durations, titles = [], [], [], []
        for number, chapter in enumerate(self.book.chapters):
            report(progress, "book", 0.95 + 0.03 * number / len(self.plan),
                   f"writing chapter {number + 1}/{len(self.plan)}", "book_chapter", chapter=number + 1,
                   chapters=len(self.plan))
            samples, rate, cues = self._chapter_audio(state, number)
            samples = np.clip(samples * gain, -1.0, 1.0).astype(np.float32)
            stem = f"{number + 1:02d} {safe_name(chapter.title)}"
            path = chapters_dir / f"{stem}.{fmt}"
            write_atomic(path, encode(samples, rate, fmt))
            srt = chapters_dir / f"{stem}.srt"
            write_atomic(srt, to_srt(cues).encode("utf-8"))
            files.append(path)
            subtitles.append(srt)
            durations.append(len(samples) / rate)
            titles.append(chapter.title)
        _remove_stale_chapters(chapters_dir, files + subtitles)
        if fmt == "mp3":  # the encoder's delay and padding change the length: measure the files
            durations = [probe_duration(path) for path in files]
        book_fmt = self.settings.book_format
        report(progress, "book", 0.98, f"writing the {book_fmt} book", "book_writing", format=book_fmt)
        book_file = self.out_dir / f"{safe_name(self.book.title)}.{book_fmt}"
        marks = write_chaptered(files, titles, book_file, book_fmt, durations, self.book.title, self.book.author)
        return BookResult(book_file, files, subtitles, marks, sum(durations), 0, 0)


def _remove_stale_chapters(chapters_dir: Path, kept: list[Path]) -> None:
    """Chapter files of an earlier run that this one did not write (a retitled or removed chapter, another
    format) would be mistaken for part of the book: remove them."""
    keep = {path.name for path in kept}
    for path in chapters_dir.iterdir():
        if path.name not in keep and re.match(r"^\d{2,} ", path.name) and \
                path.suffix.lstrip(".") in (*CHAPTER_FORMATS, "srt"):
            path.unlink(missing_ok=True)


def safe_name(title: str, limit: int = 60) -> str:
    """A file name from a title: letters, digits (any script), spaces and - _ . kept, the rest dropped."""
    cleaned = re.sub(r"[^\w\s.-]", "", title, flags=re.UNICODE)
    cleaned = " ".join(cleaned.split()).strip(" .")[:limit].strip(" .")
    return cleaned or "book"


def state_summary(out_dir: Path) -> dict | None:
    """What an unfinished job in `out_dir` has done (title, finished pieces), for a "resume?" prompt."""
    try:
        state = json.loads((Path(out_dir) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    return {"title": state.get("title", ""), "finished": len(state.get("pieces") or {}),
            "settings": state.get("settings", {}), "voice": (state.get("voice") or {}).get("choice", {})}

