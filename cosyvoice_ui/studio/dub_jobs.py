"""The dubbing jobs of one process, without HTTP: the REST routes (`api/routes_dub.py`) start a job with the
uploaded media and subtitles, read its progress and fetch its files.

Each job is a `DubProject` in `root/<id>` (an unguessable id), rendered in a background thread that waits for a
slot of the model queue (`ModelManager.job()`, like every speech job) and holds it while its cues render, then
exports `dubbed.<ext>`, `dubbed.srt` and `dubbed.vtt` beside the project. What the upload is refused for (media
ffmpeg cannot read, no sound, cues outside it or overlapping) is raised by `start` before any thread runs.
Each job's status is also kept in `root/<id>/job.json` (written when it changes), so after a restart a job that
was queued or running reads back as "interrupted" (code `dub_interrupted`, with how many cues are rendered of how
many), a stopped, failed or finished one as it was; `resume` then renders only the missing cues. Like an
unfinished audiobook (`books.Bookshelf`), an interrupted job waits for its owner to resume it: the restarted
server does not start model work nobody asked it for.

Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import Cancelled, CosyVoiceError, InvalidRequest
from ..files import write_atomic
from ..store_index import check_room, entries_of
from ..types import ProgressEvent
from .dub import DubProject, DubSettings
from .dub_cues import DubCue, check_mode, guess_language, own_fit, read_cues
from .textclean import clean_text

if TYPE_CHECKING:
    from ..serving.jobs import JobOptions, SpeechJobs

log = logging.getLogger(__name__)

MEDIA_SUFFIXES = (".mp4", ".mkv", ".mov", ".m4a", ".mp3", ".wav", ".flac", ".ogg", ".webm", ".avi")
OUTPUT_SUFFIX = {".mkv": ".mkv", ".mov": ".mov", ".m4a": ".m4a", ".mp3": ".m4a", ".wav": ".m4a", ".flac": ".m4a",
                 ".ogg": ".m4a", ".webm": ".mkv", ".avi": ".mkv"}  # the dub's container: one that holds the copied
# video (Matroska holds what WebM and AVI files carry) and AAC
FILES = ("video", "srt", "vtt", "track")
_ID = re.compile(r"^[0-9a-f]{16}$")
JOB_FILE = "job.json"  # the job's last status (see the module)


@dataclass
class DubJobState:
    """Where one job is: "queued", "running", "done", "failed", "stopped" or "interrupted" (by a restart of the
    server), its share done, the last message (and its event's code and parameters), and the error that ended
    it."""

    id: str
    status: str = "queued"
    fraction: float = 0.0
    message: str = ""
    code: str = ""
    params: dict = field(default_factory=dict)
    error: dict | None = None


class DubJobs:
    """Background dubbing jobs under `root` (see the module), over the process's speech jobs."""

    def __init__(self, speech: SpeechJobs, root: Path, max_jobs: int = 0) -> None:
        self.speech = speech
        self.root = Path(root)
        self.max_jobs = int(max_jobs)
        self._states: dict[str, DubJobState] = {}
        self._cancels: dict[str, threading.Event] = {}
        self._editing: set[str] = set()
        self._lock = threading.Lock()

    def start(self, media: bytes, media_name: str, cues_text: str, settings: DubSettings,
              options: JobOptions) -> DubJobState:
        """Store the upload as a new project and start rendering it. Refusals are raised here: every speaker
        speaks in a voice cut from the upload, a new recording, so a server that requires consent asks for it now
        (each cue's speech job checks it again)."""
        if self.speech.consent.required and not options.consent:
            from ..serving.consent import ConsentRequired

            raise ConsentRequired("voices cut from the media")
        suffix = Path(str(media_name or "")).suffix.lower()
        if suffix not in MEDIA_SUFFIXES:
            suffix = ".mp4"
        if self.max_jobs:
            check_room(sum(1 for entry in entries_of(self.root) if entry.is_dir()), self.max_jobs, "dubbing job",
                       "--max-projects")
        job_id = secrets.token_hex(8)
        folder = self.root / job_id
        folder.mkdir(parents=True, exist_ok=True)
        source = folder / f"source{suffix}"
        write_atomic(source, bytes(media))
        try:
            cues = read_cues(cues_text)
            if not settings.target_lang:
                settings = replace(settings, target_lang=guess_language([cue.text for cue in cues]))
            DubProject.create(folder / "project", source, cues, settings)
        except BaseException:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            raise
        return self._run(job_id, options)

    def resume(self, job_id: str, options: JobOptions) -> DubJobState:
        """Run a job again: a stopped or failed one, or one whose cues were edited. Only the cues without a
        finished take render; then the dub is exported again."""
        state = self.status(job_id)
        if state.status in ("queued", "running"):
            return state
        return self._run(job_id, options)

    def status(self, job_id: str) -> DubJobState:
        folder = self._folder(job_id)
        with self._lock:
            state = self._states.get(job_id)
        if state is not None:
            return replace(state)
        return self._saved_status(job_id, folder)  # a job of an earlier run of the process

    def _saved_status(self, job_id: str, folder: Path) -> DubJobState:
        """A job this process has not run: its status as `job.json` kept it, a queued or running one read as
        interrupted (the process that ran it is gone)."""
        project = DubProject.open(folder / "project")
        counts = _counts(project)
        done, total = counts["rendered"], counts["cues"]
        fraction = 0.95 * done / max(1, total)
        saved = _read_job(folder)
        status = str(saved.get("status") or "")
        finished = self._output(folder, project).is_file()
        if status in ("queued", "running") or (not status and not finished):
            return DubJobState(job_id, "interrupted", fraction, f"the server stopped while this job was running: "
                               f"{done} of {total} cues are rendered and kept; resume it (POST /v1/dubs/{job_id}/"
                               f"resume) to render the other {total - done} and export the dub",
                               code="dub_interrupted", params=counts)
        if status == "failed":
            return DubJobState(job_id, "failed", fraction, error=saved.get("error") if isinstance(
                saved.get("error"), dict) else {"code": "dub_failed", "message": "the dubbing job failed; resume it, "
                                               "or start it again"})
        if status == "stopped" or not finished:
            return DubJobState(job_id, "stopped", fraction, _stopped_message(done, total), code="dub_stopped",
                               params=counts)
        flagged = sum(1 for cue in project.cues if (cue.fit_result or {}).get("overrun", 0) > 0)
        return DubJobState(job_id, "done", 1.0, f"{total} cues dubbed, {flagged} overrun", code="dub_finished",
                           params={"cues": total, "overrun": flagged})

    def project(self, job_id: str) -> DubProject:
        return DubProject.open(self._folder(job_id) / "project")

    def file(self, job_id: str, name: str) -> Path:
        """One of the job's results: "video" (the dubbed media), "srt", "vtt" or "track" (the speech alone)."""
        folder = self._folder(job_id)
        if name not in FILES:
            raise InvalidRequest("dub_file_unknown", f"there is no file {name!r}; ask for one of: {', '.join(FILES)}",
                                 file=name)
        project = DubProject.open(folder / "project")
        path = {"video": self._output(folder, project), "srt": folder / "dubbed.srt", "vtt": folder / "dubbed.vtt",
                "track": folder / "dubbed.wav"}[name]
        if not path.is_file():
            raise InvalidRequest("dub_not_ready", f"the dub is not finished yet ({self.status(job_id).status}); ask "
                                 "again when its status is done", job=job_id)
        return path

    def edit(self, job_id: str, number: int, changes: dict) -> None:
        """Change cue `number` (1-based) of a job that is not running: `text`, `locked`, `take` (pick an earlier
        take), `mode`, `instruct`, `fit` (its own policy, or None for the project's). `resume` renders what the
        edit left without a take and exports again."""
        with self._busy(job_id) as project:
            cue = _cue(project, number)
            if "text" in changes:
                text = clean_text(str(changes["text"] or "")).strip()
                if not text:
                    raise InvalidRequest("dub_cue_text_empty", f"cue {number} needs words to speak", cue=number)
                cue.text = text
            if "mode" in changes:
                cue.mode = check_mode(str(changes["mode"] or "auto"))
            if "instruct" in changes:
                cue.instruct = clean_text(str(changes["instruct"] or "")).strip()
            if "fit" in changes:  # merged into the cue's own fit; None: the project's again
                cue.fit = own_fit(project.settings.policy, cue.fit, changes["fit"], number)
            if changes.get("take") is not None:
                project.choose(cue.id, int(changes["take"]))
            if "locked" in changes:
                project.lock(cue.id, bool(changes["locked"]))
            project.save()

    def regenerate(self, job_id: str, number: int, options: JobOptions) -> None:
        """A new take of cue `number` (a new seed), chosen, in a slot of the model queue; a locked cue refuses."""
        from .dub_render import render_cue

        with self._busy(job_id) as project:
            cue = _cue(project, number)
            with self.speech.manager.job() as engine:
                render_cue(project, cue.id, engine, self.speech, options)

    @contextlib.contextmanager
    def _busy(self, job_id: str):
        folder = self._folder(job_id)
        with self._lock:
            state = self._states.get(job_id)
            if (state is not None and state.status in ("queued", "running")) or job_id in self._editing:
                raise InvalidRequest("dub_busy", "the job is rendering now; stop it (DELETE) or wait until it is "
                                     "done before changing its cues", job=job_id)
            self._editing.add(job_id)
        try:
            yield DubProject.open(folder / "project")
        finally:
            with self._lock:
                self._editing.discard(job_id)

    def stop(self, job_id: str) -> DubJobState:
        self._folder(job_id)
        with self._lock:
            cancel = self._cancels.get(job_id)
        if cancel is not None:
            cancel.set()
        return self.status(job_id)

    def _folder(self, job_id: str) -> Path:
        folder = self.root / str(job_id)
        if not _ID.match(str(job_id)) or not (folder / "project").is_dir():
            raise InvalidRequest("dub_job_unknown", f"there is no dubbing job {str(job_id)[:40]!r}; start one with "
                                 "POST /v1/dubs", job=str(job_id)[:40])
        return folder

    @staticmethod
    def _output(folder: Path, project: DubProject) -> Path:
        return folder / f"dubbed{OUTPUT_SUFFIX.get(Path(project.media['name']).suffix.lower(), '.mp4')}"

    def _run(self, job_id: str, options: JobOptions) -> DubJobState:
        state = DubJobState(job_id)
        cancel = threading.Event()
        with self._lock:
            if job_id in self._editing:
                raise InvalidRequest("dub_busy", "a cue of this job is being changed or rendered; try again when "
                                     "that is done", job=job_id)
            self._states[job_id] = state
            self._cancels[job_id] = cancel
            self._keep(job_id, state)
        threading.Thread(target=self._work, args=(job_id, options, cancel), name=f"dub-{job_id}",
                         daemon=True).start()
        return replace(state)

    def _update(self, job_id: str, **changes) -> None:
        with self._lock:
            state = self._states[job_id]
            before = state.status
            for key, value in changes.items():
                setattr(state, key, value)
            if state.status != before:
                self._keep(job_id, state)

    def _keep(self, job_id: str, state: DubJobState) -> None:
        """Write the job's status to its `job.json` (see the module); a job whose file cannot be written still
        runs (after a restart it then reads as interrupted)."""
        data = {"status": state.status, "error": state.error}
        try:
            write_atomic(self.root / job_id / JOB_FILE, json.dumps(data, ensure_ascii=False).encode("utf-8"))
        except OSError as exc:
            log.warning("the dubbing job's status could not be kept: %s", type(exc).__name__)

    def _work(self, job_id: str, options: JobOptions, cancel: threading.Event) -> None:
        from .dub_render import export, render_dub

        folder = self.root / job_id

        def progress(event: ProgressEvent) -> None:
            running = event.stage == "dub" or event.code == "queue_position"
            self._update(job_id, status="running" if running else self._states[job_id].status,
                         fraction=0.95 * event.fraction if event.stage == "dub" else self._states[job_id].fraction,
                         message=event.message, code=event.code, params=dict(event.params))

        try:
            project = DubProject.open(folder / "project")
            with self.speech.manager.job(progress=progress, cancel=cancel) as engine:
                self._update(job_id, status="running")
                render_dub(project, engine, self.speech, options, progress, cancel)
            self._update(job_id, message="mixing and writing the video", code="dub_export", fraction=0.95)
            export(project, self._output(folder, project), folder / "dubbed.srt", folder / "dubbed.vtt",
                   track=folder / "dubbed.wav")
            flagged = [cue.id for cue in project.cues if (cue.fit_result or {}).get("overrun", 0) > 0]
            self._update(job_id, status="done", fraction=1.0, message=f"{len(project.cues)} cues dubbed, "
                         f"{len(flagged)} overrun", code="dub_finished",
                         params={"cues": len(project.cues), "overrun": len(flagged)})
        except Cancelled:
            counts = _counts(DubProject.open(folder / "project"))
            self._update(job_id, status="stopped", message=_stopped_message(counts["rendered"], counts["cues"]),
                         code="dub_stopped", params=counts)
        except CosyVoiceError as exc:
            self._update(job_id, error={"code": getattr(exc, "code", "dub_failed"), "message": str(exc)},
                         status="failed")
        except Exception as exc:  # a bug: logged whole, the caller gets one line
            log.exception("dubbing job %s failed", job_id)
            self._update(job_id, error={"code": "dub_failed", "message": "the dubbing job failed "
                                        f"({type(exc).__name__}); resume it, or start it again"}, status="failed")
        finally:
            with self._lock:
                self._cancels.pop(job_id, None)


def _stopped_message(done: int, total: int) -> str:
    return f"stopped: {done} of {total} cues are rendered and kept; resume it to render the rest"


def _counts(project: DubProject) -> dict:
    """How many cues have a take of their words (or are locked as they are), of how many."""
    rendered = sum(1 for cue in project.cues if cue.locked or (cue.take is not None and cue.take.text == cue.text))
    return {"rendered": rendered, "cues": len(project.cues)}


def _read_job(folder: Path) -> dict:
    try:
        data = json.loads((folder / JOB_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cue(project: DubProject, number: int) -> DubCue:
    if not 1 <= int(number) <= len(project.cues):
        raise InvalidRequest("dub_cue_unknown", f"there is no cue {number}; the cues are numbered 1-"
                             f"{len(project.cues)}", cue=number)
    return project.cues[int(number) - 1]


def dub_here(workspace, media_path: Path, cues_path: Path, settings: DubSettings, options: JobOptions,
             progress=None, cancel: threading.Event | None = None):
    """The Dubbing tab's one run, in the caller's thread: the project `projects_dir/dubs/<media name>` (a second run
    with the same media continues it: only new or edited cues render), rendered in a slot of the model queue and
    exported as `dubbed.<ext>`, `dubbed.srt`, `dubbed.vtt` and `dubbed.wav` beside it. Returns (the export's
    result, the dubbed file)."""
    import shutil

    from .dub_render import export, render_dub
    from .workspace import folder_name

    media_path, name = Path(media_path), folder_name(Path(media_path).stem) or "video"
    suffix = media_path.suffix.lower() if media_path.suffix.lower() in MEDIA_SUFFIXES else ".mp4"
    folder = workspace.root / "dubs" / name
    cues = read_cues(_read_cues_file(cues_path))
    if not settings.target_lang:
        settings = replace(settings, target_lang=guess_language([cue.text for cue in cues]))
    with workspace.busy(f"dubs/{name}"):
        source = folder / f"source{suffix}"
        if DubProject.exists(folder / "project") and source.is_file() and \
                source.stat().st_size == media_path.stat().st_size:
            project = DubProject.open(folder / "project")
            project.update_cues(cues)
            project.settings = settings
        else:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(media_path, source)
            project = DubProject.create(folder / "project", source, cues, settings)
        project.save()
        with workspace.model_job(progress, cancel) as engine:
            render_dub(project, engine, workspace.speech, options, progress, cancel)
        out = DubJobs._output(folder, project)
        result = export(project, out, folder / "dubbed.srt", folder / "dubbed.vtt", track=folder / "dubbed.wav")
    return result, out


def _read_cues_file(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError):
        raise InvalidRequest("dub_cues_unreadable", "the subtitle file cannot be read as UTF-8 text; save the SRT or "
                             "WebVTT file as UTF-8") from None


def dub_cue_here(workspace, name: str, number: int, action: str, take: int | None, options: JobOptions,
                 progress=None, cancel: threading.Event | None = None, text: str | None = None,
                 fit: dict | None = None):
    """The Dubbing tab's per-cue actions on the project of the video `name` (a folder under `projects_dir/dubs`):
    "regenerate" (a new take with a new seed, in a slot of the model queue), "text" (new words for the cue, e.g.
    its translation fixed, then a new take of them), "take" (pick take `take`), "lock", "unlock", "fit" (the cue's
    own fit policy: `fit`, some of min_speed, max_speed and overflow) or "fit_clear" (the project's fit again);
    then the dub is exported again. A fit change renders nothing: the export fits the cue's take anew. Returns
    what `dub_here` returns."""
    from .dub_render import export, render_cue
    from .workspace import folder_name

    folder = workspace.root / "dubs" / folder_name(str(name or ""))
    if not name or not DubProject.exists(folder / "project"):
        raise InvalidRequest("dub_project_missing", "dub a video first; the cue actions work on its cues")
    with workspace.busy(f"dubs/{folder.name}"):
        project = DubProject.open(folder / "project")
        cue = _cue(project, int(number or 0))
        if action == "text":
            words = clean_text(str(text or "")).strip()
            if not words:
                raise InvalidRequest("dub_cue_text_empty", f"cue {number} needs words to speak: type its new text",
                                     cue=number)
            if cue.locked:
                raise InvalidRequest("cue_locked", f"cue {number} is locked; unlock it to change its words",
                                     cue=number)
            cue.text = words
            action = "regenerate"
        if action == "regenerate":
            with workspace.model_job(progress, cancel) as engine:
                render_cue(project, cue.id, engine, workspace.speech, options, progress=progress, cancel=cancel)
        elif action == "take":
            project.choose(cue.id, int(take or 0))
        elif action in ("lock", "unlock"):
            project.lock(cue.id, action == "lock")
        elif action in ("fit", "fit_clear"):
            cue.fit = own_fit(project.settings.policy, None, fit if action == "fit" else None, int(number))
        project.save()
        out = DubJobs._output(folder, project)
        result = export(project, out, folder / "dubbed.srt", folder / "dubbed.vtt", track=folder / "dubbed.wav")
    return result, out
