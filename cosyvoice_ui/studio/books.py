"""The audiobook jobs of one process, without Gradio: read an uploaded book, start or resume its job under
`projects_dir/books/<name>` (`audiobook.BookJob`), and list the jobs a restart left unfinished. The Audiobook
tab drives it; the CLI's `--book` runs the same `BookJob` in a folder of its own.

Each job folder keeps what a resume needs besides `BookJob`'s own state: a copy of the book (`source.<ext>`), the
voice and its sample (`voice.flac`), the book format and the glossary (`ui-job.json`). The pieces are the
process's speech jobs (`serving.jobs`) in a slot of its model queue, like every other job.
"""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from ..audio import encode, read_audio
from ..errors import InvalidRequest
from ..files import write_atomic
from ..serving.jobs import JobOptions
from ..store_index import check_room, entries_of
from ..types import ProgressCallback
from .audiobook import BookJob, BookResult, BookSettings, state_summary
from .book import BOOK_EXTENSIONS, Book, read_book
from .voice_map import VoiceChoice
from .workspace import VoiceRow, Workspace, choice_of_row, folder_name

JOB_FILE = "ui-job.json"
SAMPLE_FILE = "voice.flac"


@dataclass(frozen=True)
class Unfinished:
    folder: str
    title: str
    finished: int  # pieces done


class Bookshelf:
    """The audiobook jobs of one process, beside its script projects (`workspace`: their locks, settings and
    speech jobs)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.root = workspace.root / "books"

    def read(self, path: str | None) -> Book:
        if not path:
            raise InvalidRequest("bad_book", "upload a book first (EPUB, TXT or Markdown)", name="")
        return read_book(Path(path))

    def folder_of(self, book: Book, path: str) -> Path:
        name = folder_name(book.title) or folder_name(Path(path).stem) or "book"
        return self.root / name

    def unfinished(self) -> list[Unfinished]:
        """Jobs with a state file that never finished (a crash, Stop or a restart), newest first."""
        found = []
        if self.root.is_dir():
            for folder in self.root.iterdir():
                job = _read_job(folder)
                summary = state_summary(folder)
                if job is None or summary is None or job.get("done"):
                    continue
                found.append((folder.stat().st_mtime, Unfinished(folder.name, summary["title"] or folder.name,
                                                                  int(summary["finished"]))))
        return [item for _, item in sorted(found, key=lambda pair: pair[0], reverse=True)]

    def start(self, path: str | None, row: VoiceRow, book_format: str = "m4b", options: JobOptions | None = None,
              progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> BookResult:
        """Read the uploaded book and run its job (a second start of the same book continues where it stopped).
        `options`: the glossary (a saved one is kept for a resume), the take switch and retries."""
        options = self.workspace.options(options)  # an unknown glossary is refused before any files are made
        book = self.read(path)
        folder = self.folder_of(book, path)
        if not folder.is_dir():  # a new job (a second start of the same book continues the old one)
            jobs = sum(1 for entry in entries_of(self.root) if entry.is_dir())
            check_room(jobs, self.workspace.settings.max_projects, "audiobook", "--max-projects")
        folder.mkdir(parents=True, exist_ok=True)
        source = folder / f"source{Path(path).suffix.lower()}"
        if Path(path).resolve() != source.resolve():
            shutil.copyfile(path, source)
        choice, audio = choice_of_row(row, None)
        if audio is not None:  # stored and read back, so a resume sees the very same samples
            write_atomic(folder / SAMPLE_FILE, encode(audio.samples, audio.sample_rate, "flac"))
            choice = replace(choice, value=SAMPLE_FILE)
        glossary_id = options.glossary.id if options.glossary is not None else ""  # an inline one has no id
        _write_job(folder, {"source": source.name, "voice": choice.to_dict(), "format": book_format,
                            "glossary": glossary_id, "done": False})
        return self._run(folder, options, progress, cancel)

    def resume(self, folder: str, options: JobOptions | None = None, progress: ProgressCallback | None = None,
               cancel: threading.Event | None = None) -> BookResult:
        """Continue an unfinished job (after Stop, a crash or a restart): finished pieces are kept. The job's own
        saved glossary, when it had one, wins over `options.glossary`."""
        path = self.root / Path(str(folder or "")).name
        if not folder or _read_job(path) is None:
            raise InvalidRequest("book_missing", "this unfinished audiobook's files are gone; upload the book again")
        return self._run(path, options or JobOptions(), progress, cancel)

    def _run(self, folder: Path, options: JobOptions, progress: ProgressCallback | None,
             cancel: threading.Event | None) -> BookResult:
        job_data = _read_job(folder) or {}
        source = folder / str(job_data.get("source", ""))
        if not source.is_file() or source.suffix.lower() not in BOOK_EXTENSIONS:
            raise InvalidRequest("book_missing", "this unfinished audiobook's book file is gone; upload the book "
                                 "again")
        book = read_book(source)
        options = self.workspace.options(replace(options, glossary=job_data.get("glossary") or options.glossary))
        choice = VoiceChoice.from_dict(job_data.get("voice"))
        sample = read_audio(folder / SAMPLE_FILE, what="sample recording") \
            if choice.kind == "sample" and (folder / SAMPLE_FILE).is_file() else None
        settings = BookSettings(book_format=str(job_data.get("format") or "m4b"))
        with self.workspace.busy(f"books/{folder.name}"):
            with self.workspace.model_job(progress, cancel) as engine:
                job = BookJob(folder, book, choice, settings, sample_audio=sample)
                result = job.run(engine, self.workspace.speech, options, progress, cancel)
        _write_job(folder, {**job_data, "done": True})
        return result


def chapter_rows(book: Book) -> list[tuple[int, str, int]]:
    """(number, title, characters) of each chapter, for the "chapters found" list."""
    return [(number, chapter.title, len(chapter.text)) for number, chapter in enumerate(book.chapters, start=1)]


def _read_job(folder: Path) -> dict | None:
    try:
        data = json.loads((Path(folder) / JOB_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_job(folder: Path, data: dict) -> None:
    write_atomic(Path(folder) / JOB_FILE, json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8"))
