"""What the Script tab does, without Gradio: projects under `settings.projects_dir`, the voice of each name,
rendering (all lines, or one line again), locks, takes and exports.

Every model job goes through `ModelManager.job()` (the one queue, the idle-unload rule); the work itself is
`studio/` (`render_project`, `render_line`, `mixdown.export`). Errors are `InvalidRequest`s for the widget code to
translate; nothing here builds a widget.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import unicodedata
import weakref
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from ..audio import DEFAULT_LUFS
from ..errors import InvalidRequest
from ..files import write_atomic
from ..serving.glossary import Glossary, GlossaryStore, apply_glossary, resolve_glossary
from ..serving.takes import RetryPolicy
from ..settings import Settings
from ..store_index import StoreIndex, check_room, entries_of
from ..studio import mixdown
from ..studio.project import PROJECT_FILE, Project, Take
from ..studio.render import RenderSummary, render_line, render_project
from ..studio.voice_map import VoiceChoice, VoiceMemory
from ..types import ProgressEvent
from .requests import prompt_from_file

EXPORT_PARTS = ("mix", "stems_zip", "stems", "srt", "vtt")
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


def retry_policy(settings: Settings) -> RetryPolicy:
    """The settings' bad-take policy (`--take-retries`, `--no-take-check`)."""
    try:
        from ..serving.takes import policy_from_settings  # the shared helper, once serving/takes.py has it
    except ImportError:
        return RetryPolicy(enabled=bool(settings.check_takes), retries=max(0, int(settings.take_retries)))
    return policy_from_settings(settings)


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
            return VoiceChoice("sample", stored.value, transcript, instruct), None
        audio = prompt_from_file(row.sample, "prompt audio")
        if audio is None:
            raise InvalidRequest("voice_sample_missing", "give a sample recording for this name (upload or record "
                                 "one)", sample="")
        return VoiceChoice("sample", "", transcript, instruct), audio
    return VoiceChoice("default", instruct=instruct), None


class StudioHandlers:
    """The Script tab's work for one app: `manager` (the model queue), `settings`, the `VoiceResolver` the other
    tabs use (default voice, saved voices)."""

    def __init__(self, manager, settings: Settings, resolver=None) -> None:
        self.manager = manager
        self.settings = settings
        self.resolver = resolver
        self.root = Path(settings.projects_dir)
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
            if entry.name == folder_name(entry.name) and entry.is_dir() and entry.name != "books":
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
            if script != project.script:
                project.set_script(script)
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

    def glossary_of(self, value) -> Glossary | None:
        """The chosen glossary (a saved id, an inline table, None) — see `serving.glossary.resolve_glossary`;
        an id whose glossary was deleted since is refused (`glossary_unknown`)."""
        if value in (None, "", {}):
            return None
        store = GlossaryStore(Path(self.settings.glossary_dir), self.settings.max_glossaries)
        return resolve_glossary(store, value)

    def render_all(self, folder: str, glossary=None, progress: Callable[[ProgressEvent], None] | None = None,
                   cancel: threading.Event | None = None, policy: RetryPolicy | None = None) -> RenderSummary:
        """Render every line without an up-to-date take, in order (a stopped render resumes here: each line is
        saved when it is done)."""
        chosen = self.glossary_of(glossary)
        with self.busy(folder):
            project = self.open(folder)
            with self.model_job(progress, cancel) as engine:
                return render_project(project, engine, self.resolver, policy or retry_policy(self.settings), progress,
                                      cancel, only_missing=True, text_filter=_filter(chosen, engine.info))

    def regenerate(self, folder: str, line_id: str, text: str | None = None, glossary=None,
                   progress: Callable[[ProgressEvent], None] | None = None,
                   cancel: threading.Event | None = None, policy: RetryPolicy | None = None) -> Take:
        """A new take of one line with a new seed; with `text`, the line's words are changed first."""
        chosen = self.glossary_of(glossary)
        with self.busy(folder):
            project = self.open(folder)
            line = project.line(line_id)
            if text is not None and " ".join(text.split()) != line.text:
                project.edit_line(line_id, text)
                project.save()
            with self.model_job(progress, cancel) as engine:
                return render_line(project, line_id, engine, self.resolver, policy or retry_policy(self.settings),
                                   progress=progress, cancel=cancel, text_filter=_filter(chosen, engine.info))

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

    def model_job(self, progress, cancel):
        """The manager's job (the one model queue; holds the model so idle unload waits), reporting the queue."""
        return self.manager.job(progress=progress, cancel=cancel)

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


_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def studio_for(page) -> StudioHandlers:
    """The app's one `StudioHandlers` (the Script and Audiobook tabs share its project locks and voice memory)."""
    found = _SHARED.get(page.handlers)
    if found is None:
        found = _SHARED[page.handlers] = StudioHandlers(page.manager, page.settings, page.handlers.resolver)
    return found


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


def _filter(glossary: Glossary | None, info) -> Callable[[str], str] | None:
    """render's `text_filter`: the glossary applied to each line before it is spoken."""
    if glossary is None:
        return None
    return lambda text: apply_glossary(text, glossary, info)


def _zip(path: Path, files: list[Path]) -> Path:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for file in files:
            archive.write(file, file.name)
    write_atomic(path, buffer.getvalue())
    return path


def stream_work(work: Callable[[Callable[[ProgressEvent], None]], object], cancel: threading.Event) \
        -> Iterator[ProgressEvent | tuple[str, object]]:
    """Run `work(progress)` on a worker thread and yield its progress events as they come, then ("done",
    result); an exception is raised here. Leaving early (the browser stopped the event) sets `cancel`."""
    import queue

    events: queue.Queue = queue.Queue()
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["result"] = work(events.put)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc
        finally:
            events.put(None)

    thread = threading.Thread(target=target, name="studio-job", daemon=True)
    thread.start()
    finished = False
    try:
        while True:
            event = events.get()
            if event is None:
                finished = True
                break
            yield event
    finally:
        if not finished:
            cancel.set()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    yield "done", outcome.get("result")
