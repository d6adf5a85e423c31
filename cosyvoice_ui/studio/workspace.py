"""The script projects of one process, without Gradio: projects under `settings.projects_dir`, the voice of
each name, rendering (all lines, or one line again), locks, takes and exports. The Script tab drives it (and
the Audiobook tab shares its locks and voice memory, `books.py`); the CLI's `--script` shares its pieces that
do the same thing (`read_script_file`, `update_script`).

Every render is the process's speech jobs (`serving.jobs.SpeechJobs`, the one pipeline of every surface) in a
slot of its model queue (`ModelManager.job()`: the one queue, the idle-unload rule); the work itself is
`render_project`, `render_line` and `mixdown.export`. Errors are `InvalidRequest`s for the widget code to
translate; nothing here builds a widget.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import unicodedata
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..audio import DEFAULT_LUFS, PROMPT_LIMITS, read_audio
from ..errors import InvalidRequest
from ..files import write_atomic
from ..serving.jobs import JobOptions
from ..store_index import StoreIndex, check_room, entries_of
from ..types import ProgressCallback
from . import mixdown
from .project import PROJECT_FILE, Project, Take
from .render import RenderSummary, render_line, render_project
from .textclean import NotText, decode_document
from .voice_map import VoiceChoice, VoiceMemory

if TYPE_CHECKING:
    from ..serving.jobs import SpeechJobs

EXPORT_PARTS = ("mix", "stems_zip", "stems", "srt", "vtt")
MAX_SCRIPT_BYTES = 2 * 2**20  # the most script text a file may hold (`script.MAX_SCRIPT_CHARS` characters)
MAX_NAME_CHARS = 80
MAX_RECORD_BYTES = 32 * 2**20  # a project.json this big is listed by its folder name, not read
BUSY_WAIT_S = 2.0  # a quick edit waits this long for the project's lock before it is refused


@dataclass(frozen=True)
class VoiceRow:
    """One voice row's widget values: which kind of voice, and the value each kind reads."""

    kind: str = "default"
    saved: str = ""
    preset: str = ""
    sample: str | None = None  # a gr.Audio(type="filepath") value
    transcript: str = ""
    instruct: str = ""
    consent: bool = False  # the box beside a sample: its speaker agreed to be cloned


def read_script_file(path: str | Path | None) -> str:
    """A script file's text (UTF-8, UTF-16 with or without a BOM, GB18030), control characters dropped; a binary
    file is refused by looking at all of it. The Script tab's upload and the CLI's `--script`."""
    if not path:
        return ""
    try:
        with open(Path(path), "rb") as file:
            data = file.read(MAX_SCRIPT_BYTES + 1)
    except OSError as exc:
        raise InvalidRequest("file_unreadable", f"cannot read the script {Path(path).name!r} "
                             f"({exc.strerror or 'unreadable'}); check the path", file=Path(path).name) from None
    if len(data) > MAX_SCRIPT_BYTES:
        raise InvalidRequest("script_too_big", "the script file is over 2 MB; split it into several projects")
    try:
        return decode_document(data)
    except NotText:
        raise InvalidRequest("script_unreadable", "the script file is not text; save it as UTF-8 text and try "
                             "again") from None


def update_script(project: Project, script: str) -> int:
    """Give `project` the text `script` (lines that did not change keep their takes): how many lines are new
    or edited."""
    if script == project.script:
        return 0
    before = {line.id for line in project.lines}
    project.set_script(script)
    return sum(1 for line in project.lines if line.id not in before)


def folder_name(name: str) -> str:
    """A project's folder name from its display name (letters of any script kept; NFKC, so a full-width
    look-alike names the same folder; control characters dropped)."""
    text = "".join(ch for ch in unicodedata.normalize("NFKC", str(name or ""))
                   if unicodedata.category(ch) not in ("Cc", "Cf"))
    slug = re.sub(r"[^\w-]+", "-", " ".join(text.split()), flags=re.UNICODE).strip("-_")
    return slug[:60]


def _project_summary(folder: str, record: Path) -> dict | None:
    """What the project list shows of one project: its name and when it last changed."""
    try:
        modified = record.stat().st_mtime
        if record.stat().st_size > MAX_RECORD_BYTES:
            return {"name": folder, "modified": modified}
        data = json.loads(record.read_text(encoding="utf-8"))
        name = str(data.get("name") or folder) if isinstance(data, dict) else folder
    except (OSError, ValueError):
        return None
    return {"name": name, "modified": modified}


def clean_name(name: str) -> str:
    text = " ".join(str(name or "").split())
    if not folder_name(text):
        raise InvalidRequest("project_name_missing", "type a name for the new project (letters or digits)")
    if len(text) > MAX_NAME_CHARS:
        raise InvalidRequest("project_name_too_long", f"the project name has {len(text)} characters; keep it to "
                             f"{MAX_NAME_CHARS}", chars=len(text), limit=MAX_NAME_CHARS)
    return text


def choice_of_row(row: VoiceRow, stored: VoiceChoice | None) -> tuple[VoiceChoice, object]:
    """(choice, new sample audio or None) for a row. A sample row whose recording is the stored one (its file
    name, which Gradio keeps when it serves the file back) reuses it instead of storing it again."""
    kind = (row.kind or "default").strip()
    instruct = (row.instruct or "").strip()
    if kind == "saved":
        return VoiceChoice("saved", (row.saved or "").strip(), instruct=instruct), None
    if kind == "preset":
        return VoiceChoice("preset", (row.preset or "").strip(), instruct=instruct), None
    if kind == "sample":
        transcript = " ".join((row.transcript or "").split())
        if stored is not None and stored.kind == "sample" and stored.value and row.sample \
                and Path(row.sample).name == Path(stored.value).name:
            return VoiceChoice("sample", stored.value, transcript, instruct, bool(row.consent)), None
        audio = read_audio(Path(row.sample), "prompt audio", PROMPT_LIMITS) if row.sample else None
        if audio is None:
            raise InvalidRequest("voice_sample_missing", "give a sample recording for this name (upload or record "
                                 "one)", sample="")
        return VoiceChoice("sample", "", transcript, instruct, bool(row.consent)), audio
    return VoiceChoice("default", instruct=instruct), None


class Workspace:
    """The script projects of one process, rendered through its speech jobs (`speech`: the model queue, the
    settings, the default and saved voices, the glossaries, the blocked words)."""

    def __init__(self, speech: SpeechJobs) -> None:
        self.speech = speech
        self.settings = speech.settings
        self.root = Path(self.settings.projects_dir)
        self.memory = VoiceMemory(self.root / "voices.json")
        self.index = StoreIndex(self.root, self._records, _project_summary)  # listings read changed files only
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    # --- projects ----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def busy(self, folder: str) -> Iterator[None]:
        """Hold the project's lock: one change at a time per project (two browsers, or an edit while it renders,
        are told to wait rather than left blocked)."""
        with self._guard:
            lock = self._locks.setdefault(folder, threading.Lock())
        if not lock.acquire(timeout=BUSY_WAIT_S):
            raise InvalidRequest("project_busy", "this project is busy (it is rendering); wait for it to finish or "
                                 "press Stop")
        try:
            yield
        finally:
            lock.release()

    def _records(self):
        for entry in entries_of(self.root):
            if entry.name == folder_name(entry.name) and entry.is_dir() and entry.name not in ("books", "dubs"):
                yield entry.name, Path(entry.path) / PROJECT_FILE

    def projects(self) -> list[tuple[str, str]]:
        """(display name, folder) of every project under the projects folder, newest first (from the index)."""
        found = [(summary["modified"], summary["name"], folder) for folder, summary in self.index.summaries().items()]
        return [(name, folder) for _, name, folder in sorted(found, reverse=True)]

    def path_of(self, folder: str) -> Path:
        name = Path(str(folder or "")).name
        if not name or name != folder_name(name):
            raise InvalidRequest("project_missing", "no project is open; create one or open an existing one")
        return self.root / name

    def open(self, folder: str) -> Project:
        path = self.path_of(folder)
        if not (path / PROJECT_FILE).is_file():
            raise InvalidRequest("project_unknown", f"there is no project called “{path.name}”; pick one from the "
                                 "list, or create it", project=path.name)
        return Project.open(path)

    def create(self, name: str, script: str) -> Project:
        """A new project named `name` with `script`; names the voice memory knows get their voice back."""
        name = clean_name(name)
        folder = self.root / folder_name(name)
        if (folder / PROJECT_FILE).exists():
            raise InvalidRequest("project_exists", f"a project called “{name}” already exists; open it from the list, "
                                 "or choose another name", project=name)
        with self._guard:
            check_room(len(self.index.summaries()), self.settings.max_projects, "project", "--max-projects")
            return Project.create(folder, name, script, memory=self.memory)

    def remembered(self, name: str) -> tuple[VoiceChoice | None, Path | None]:
        """The voice the memory keeps for `name` and its sample file (a sample voice whose file is gone: none)."""
        choice = self.memory.get(name)
        if choice is None or choice.kind != "sample":
            return choice, None
        path = self.memory.samples_dir / Path(choice.value).name
        return (choice, path) if choice.value and path.is_file() else (None, None)

    def new_name(self) -> str:
        """A free default name for a project made without one."""
        base = time.strftime("Script %Y-%m-%d %H%M")
        name, number = base, 2
        while (self.root / folder_name(name)).exists():
            name, number = f"{base} ({number})", number + 1
        return name

    def save(self, folder: str, name: str, script: str, rows: dict[str, VoiceRow], gap_s: float | None = None) \
            -> Project:
        """Apply the tab to a project: the script (lines that did not change keep their takes), the voice rows
        (remembered per name for later projects), the gap between lines. Without an open project one is
        created (named `name`, else a dated name)."""
        if not folder:
            for speaker, row in rows.items():  # a bad row must not leave a new, half-made project behind
                choice, audio = choice_of_row(row, None)
                if choice.kind == "sample" and choice.transcript:
                    _check_fits(speaker, choice.transcript, audio)
            project = self.create((name or "").strip() or self.new_name(), script)
            folder = project.folder.name
        with self.busy(folder):
            project = self.open(folder)
            update_script(project, script)
            for speaker in project.speakers():
                row = rows.get(speaker)
                if row is None:
                    remembered = self.memory.get(speaker)
                    sample = self.memory.sample(speaker)
                    if speaker not in project.voices and remembered is not None and \
                            (remembered.kind != "sample" or sample is not None):
                        project.set_voice(speaker, remembered, sample)
                    continue
                stored = project.voices.get(speaker)
                choice, audio = choice_of_row(row, stored)
                if choice != (stored or VoiceChoice()) or audio is not None:
                    if choice.kind == "sample" and choice.transcript:
                        _check_fits(speaker, choice.transcript, audio or project.sample_audio(speaker))
                    project.set_voice(speaker, choice, audio, memory=self.memory)
            if gap_s is not None and float(gap_s) != project.settings.gap_s:
                project.settings = replace(project.settings, gap_s=float(gap_s))  # checked on construction
            project.save()
            return project

    # --- rendering ---------------------------------------------------------------------------------------

    def options(self, options: JobOptions | None) -> JobOptions:
        """`options` with its glossary resolved (a saved id, an inline table): one whose glossary was deleted since
        is refused (`glossary_unknown`) before the model queue is joined."""
        options = options or JobOptions()
        return replace(options, glossary=self.speech.glossary(options.glossary))

    def render_all(self, folder: str, options: JobOptions | None = None, progress: ProgressCallback | None = None,
                   cancel: threading.Event | None = None) -> RenderSummary:
        """Render every line without an up-to-date take, in order (a stopped render resumes here: each line is
        saved when it is done). `options`: the glossary, the take switch and retries (see `render_project`)."""
        options = self.options(options)
        with self.busy(folder):
            project = self.open(folder)
            with self.model_job(progress, cancel) as engine:
                return render_project(project, engine, self.speech, options, progress, cancel, only_missing=True)

    def regenerate(self, folder: str, line_id: str, text: str | None = None, options: JobOptions | None = None,
                   progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> Take:
        """A new take of one line with a new seed; with `text`, the line's words are changed first."""
        options = self.options(options)
        with self.busy(folder):
            project = self.open(folder)
            line = project.line(line_id)
            if text is not None and " ".join(text.split()) != line.text:
                project.edit_line(line_id, text)
                project.save()
            with self.model_job(progress, cancel) as engine:
                return render_line(project, line_id, engine, self.speech, options, progress=progress, cancel=cancel)

    def set_lock(self, folder: str, line_id: str, on: bool) -> Project:
        with self.busy(folder):
            project = self.open(folder)
            project.lock(line_id, on)
            project.save()
            return project

    def choose(self, folder: str, line_id: str, take: int) -> Project:
        with self.busy(folder):
            project = self.open(folder)
            project.choose(line_id, int(take))
            project.save()
            return project

    def model_job(self, progress: ProgressCallback | None, cancel: threading.Event | None):
        """A slot of the model queue (holds the model so idle unload waits), reporting the queue."""
        return self.speech.manager.job(progress=progress, cancel=cancel)

    # --- export ------------------------------------------------------------------------------------------

    def export(self, folder: str, fmt: str = "wav", parts: tuple[str, ...] = EXPORT_PARTS,
               normalize: bool = True) -> list[Path]:
        """The downloads: the mix, the stems (a zip and/or one file each), SRT and VTT, in `exports/`."""
        wanted = [part for part in parts if part in EXPORT_PARTS]
        if not wanted:
            raise InvalidRequest("export_nothing", "tick at least one thing to export (the mix, stems or subtitles)")
        subtitles = tuple(kind for kind in ("srt", "vtt") if kind in wanted)
        with self.busy(folder):
            project = self.open(folder)
            stems = "stems" in wanted or "stems_zip" in wanted
            written = mixdown.export(project, fmt=fmt, subtitles=subtitles, include_stems=stems,
                                     loudness=DEFAULT_LUFS if normalize else None)
        base = written[0]
        stem_files = [p for p in written[1:] if p.suffix == base.suffix]
        out = [base] if "mix" in wanted else []
        if "stems_zip" in wanted and stem_files:
            archive = base.with_name(f"{base.stem}.stems.zip")
            out.append(_zip(archive, stem_files))
        if "stems" in wanted:
            out += stem_files
        out += [p for p in written if p.suffix.lstrip(".") in subtitles]
        if "mix" not in wanted:
            base.unlink(missing_ok=True)
        return out


def _check_fits(speaker: str, transcript: str, sample) -> None:
    """A sample's transcript must fit its length (a wrong one breaks the clone): checked before any work."""
    if sample is None:
        return
    from ..serving.transcription import check_transcript_fits

    try:
        check_transcript_fits(transcript, sample.duration)
    except InvalidRequest as exc:
        raise InvalidRequest(exc.code, f"{speaker}'s sample: {exc.message}", **{**exc.params, "speaker": speaker}) \
            from None


def _zip(path: Path, files: list[Path]) -> Path:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for file in files:
            archive.write(file, file.name)
    write_atomic(path, buffer.getvalue())
    return path
