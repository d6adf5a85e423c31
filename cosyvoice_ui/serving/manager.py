"""ModelManager: one per process. Lazy loading with progress, a FIFO job queue, unload-on-idle and
model switching. Which backend loads a model id is `backends`' job; memory figures are `memory`'s.

Unloading never happens while a job runs or waits: a job holds the model from the moment it is
queued until its last chunk is delivered.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from ..engine import Engine, report
from ..errors import Cancelled, ConfigError, CosyVoiceError
from ..openmp import release_threads
from ..settings import LoadOptions
from ..types import EngineInfo, ProgressCallback, ProgressEvent
from .backends import ModelChoice, describe, load_any, model_choices, name_key, resolve_load_options
from .memory import release_memory, rss_mb

log = logging.getLogger(__name__)

Loader = Callable[[str, LoadOptions, ProgressCallback | None], Engine]  # (model id, options, progress)
SHUTDOWN_RETRY_S = 10  # what a refused client is told: the restarted server answers by then
SHUTDOWN_WAIT_S = 60.0  # how long shutdown() lets running jobs finish before it releases the model


class ShuttingDown(CosyVoiceError):
    """The process is stopping: running jobs finish, new and queued ones are refused (retry elsewhere/later)."""

    code = "shutting_down"

    def __init__(self, message: str = "the server is shutting down; retry in a few seconds",
                 retry_after_s: int = SHUTDOWN_RETRY_S) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class ManagerStatus:
    """What the UI's model panel and /health show about the model and the queue."""

    state: str  # unloaded | loading | loaded | error
    model_id: str
    model: str  # display name
    model_key: str  # the UI's string-table key of a localised name ("" = show `model`)
    device: str | None
    error: str
    load_fraction: float
    load_message: str
    running: int
    queued: int
    rss_mb: float
    baseline_rss_mb: float
    idle_unload_s: float
    idle_for_s: float


class ModelManager:
    """Owns the loaded engine of this process and serialises jobs on it.

    Not responsible for synthesis itself (the Engine) or for presenting state (UI/API).
    """

    def __init__(self, model_id: str, loader: Loader | None = None, idle_unload_s: float = 600.0,
                 concurrency: int = 1, models_dir: Path | None = None,
                 on_load: Callable[[Engine], None] | None = None,
                 describe_model: Callable[[str], EngineInfo] | None = None,
                 load_options: LoadOptions | None = None) -> None:
        """`loader(model_id, options, progress)` builds an engine (default: `backends.load_any`);
        `on_load(engine)` runs after each load, before any job uses the engine (e.g. to register saved
        voices); `describe_model(model_id)` replaces the default description of an unloaded model;
        `load_options` go to the loader, replaced by `set_load_options`."""
        self._loader = loader or load_any
        self._describe = describe_model or describe
        self._options = load_options or LoadOptions()
        self._on_load = on_load
        self.model_id = model_id
        self.models_dir = models_dir
        self.idle_unload_s = idle_unload_s
        self._engine: Engine | None = None
        self._state = "unloaded"
        self._error = ""
        self._load_progress = ProgressEvent("load", 0.0, "")
        self._load_lock = threading.Lock()
        self._cond = threading.Condition()
        self._concurrency = max(1, concurrency)
        self._running = 0
        self._next_ticket = 0
        self._waiting: list[int] = []
        self._last_used = time.monotonic()
        self.baseline_rss_mb = rss_mb()
        self._stop = threading.Event()
        self._closing = False  # set by begin_shutdown(): no job starts any more
        self._watcher: threading.Thread | None = None
        if idle_unload_s > 0:
            self._watcher = threading.Thread(target=self._watch_idle, name="idle-unload", daemon=True)
            self._watcher.start()

    # --- state ------------------------------------------------------------------------------------

    @property
    def load_options(self) -> LoadOptions:
        """The options the next load uses, precision "auto" resolved for the device (fast on a CPU, stock on a
        GPU): the UI's radio and /health show the mode in effect, never "auto". Resolved on first use, not in
        the constructor: it may import torch, which building a manager does not need."""
        if self._options.precision == "auto":
            self._options = resolve_load_options(self._options)
        return self._options

    @property
    def state(self) -> str:
        """unloaded | loading | loaded | error"""
        return self._state

    @property
    def loaded(self) -> Engine | None:
        """The engine if one is loaded now (never loads)."""
        return self._engine

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._running > 0 or bool(self._waiting)

    def status(self) -> ManagerStatus:
        engine = self._engine
        info = engine.info if engine is not None else None
        with self._cond:
            queued = len(self._waiting)
            running = self._running
        return ManagerStatus(
            state=self._state, model_id=self.model_id, model=info.name if info else Path(self.model_id).name,
            model_key="" if info else name_key(self.model_id),
            device=info.device if info else None, error=self._error, load_fraction=self._load_progress.fraction,
            load_message=self._load_progress.message, running=running, queued=queued, rss_mb=round(rss_mb(), 1),
            baseline_rss_mb=round(self.baseline_rss_mb, 1), idle_unload_s=self.idle_unload_s,
            idle_for_s=round(time.monotonic() - self._last_used, 1))

    def info(self) -> EngineInfo | None:
        """The loaded engine's info, else the model's static description (None if unreadable)."""
        try:
            return self.require_info()
        except CosyVoiceError:
            return None

    def require_info(self) -> EngineInfo:
        """Like `info`, but an unreadable model raises its reason (e.g. the missing file, the remote down)."""
        engine = self._engine
        if engine is not None:
            return engine.info
        try:
            return self._describe(self.model_id)
        except CosyVoiceError as exc:
            self._error = str(exc)
            if self._state != "loading":  # /health says so before any job tried to load it
                self._state = "error"
            raise

    def choices(self) -> list[ModelChoice]:
        return model_choices(self.models_dir, self.model_id)

    # --- loading ------------------------------------------------------------------------------------

    def engine(self, progress: ProgressCallback | None = None) -> Engine:
        """The loaded engine, loading it first if needed (progress reported to `progress`)."""
        if self._engine is not None:
            return self._engine
        with self._load_lock:
            if self._engine is not None:
                return self._engine
            self._state = "loading"
            self._error = ""

            def forward(event: ProgressEvent) -> None:
                self._load_progress = event
                if progress is not None:
                    progress(event)

            try:
                engine = self._loader(self.model_id, self.load_options, forward)
            except CosyVoiceError as exc:
                self._state, self._error = "error", str(exc)
                raise
            except Exception as exc:
                self._state, self._error = "error", f"{type(exc).__name__}: {exc}"
                log.exception("loading %s failed", self.model_id)
                raise ConfigError(f"loading {Path(self.model_id).name} failed: {exc}") from exc
            if self._on_load is not None:
                try:
                    self._on_load(engine)
                except Exception:  # a hook must never make a loaded model unusable
                    log.exception("the on-load hook failed for %s", self.model_id)
            self._engine = engine
            self._state = "loaded"
            self._last_used = time.monotonic()
            return engine

    def select(self, model_id: str) -> None:
        """Switch to another model; the current one is released now (waits for running jobs)."""
        if model_id == self.model_id and self._state != "error":
            return
        with self._cond:
            while self._running or self._waiting:
                self._cond.wait(0.5)
            self._unload_locked()
            self.model_id = model_id
            self._state, self._error = "unloaded", ""

    def set_load_options(self, **changes: object) -> bool:
        """Change load options (e.g. precision="fast"). The model is released after running jobs finish and
        reloaded with the new options on the next request. Returns True if anything changed."""
        wanted = resolve_load_options(replace(self.load_options, **changes))
        if wanted == self.load_options:
            return False
        with self._cond:
            while self._running or self._waiting:
                self._cond.wait(0.5)
            self._options = wanted
            self._unload_locked()
        return True

    def unload(self) -> bool:
        """Release the model now unless a job runs or waits. Returns True if something was released."""
        with self._cond:
            if self._running or self._waiting or self._engine is None:
                return False
            self._unload_locked()
            return True

    def _unload_locked(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
            del engine
            self._state = "unloaded"
            release_memory()
            log.info("model %s unloaded; rss %.0f MB", Path(self.model_id).name, rss_mb())

    def _watch_idle(self) -> None:
        while not self._stop.wait(min(5.0, max(0.2, self.idle_unload_s / 4))):
            if self.idle_unload_s <= 0 or self._engine is None:
                continue
            with self._cond:
                idle = time.monotonic() - self._last_used
                if self._running or self._waiting or idle < self.idle_unload_s:
                    continue
                log.info("idle for %.0f s: unloading", idle)
                self._unload_locked()

    def begin_shutdown(self) -> None:
        """Refuse new and queued jobs from now on (`ShuttingDown`); running jobs carry on to their end."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def shutdown(self, wait_s: float = SHUTDOWN_WAIT_S) -> None:
        """Stop: refuse new jobs, let running ones finish (up to `wait_s`), then release the model."""
        self.begin_shutdown()
        self._stop.set()
        deadline = time.monotonic() + wait_s
        with self._cond:
            while self._running and time.monotonic() < deadline:
                self._cond.wait(0.2)
            if self._running:
                log.warning("%d jobs still running after %.0f s; releasing the model anyway", self._running, wait_s)
            self._unload_locked()

    # --- jobs -----------------------------------------------------------------------------------------

    def queue_position(self, ticket: int) -> int:
        """0 when running, else how many jobs are ahead of it."""
        with self._cond:
            return self._waiting.index(ticket) if ticket in self._waiting else 0

    @contextlib.contextmanager
    def job(self, progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
            on_queue: Callable[[int], None] | None = None) -> Iterator[Engine]:
        """Wait for a free slot (FIFO), make sure the model is loaded, and hold it for the job.

        `on_queue(position)` is called while waiting (without it, `progress` gets a "queue_position" event);
        setting `cancel` leaves the queue with `Cancelled`.
        """
        if on_queue is None and progress is not None:
            def on_queue(position: int) -> None:
                report(progress, "queue", 0.0, f"queue position {position}", "queue_position", n=position)

        with self._cond:
            if self._closing:
                raise ShuttingDown()
            ticket = self._next_ticket
            self._next_ticket += 1
            self._waiting.append(ticket)
            self._last_used = time.monotonic()
            try:
                while self._running >= self._concurrency or self._waiting[0] != ticket:
                    if cancel is not None and cancel.is_set():
                        raise Cancelled("the job was stopped while waiting in the queue")
                    if self._closing:
                        raise ShuttingDown()
                    if on_queue is not None:
                        on_queue(self._waiting.index(ticket))
                    self._cond.wait(0.2)
            except BaseException:
                self._waiting.remove(ticket)
                self._cond.notify_all()
                raise
            self._waiting.remove(ticket)
            self._running += 1
            self._cond.notify_all()
        try:
            engine = self.engine(progress)
            # a job whose client left while it waited or while the model loaded gives its slot back now
            if cancel is not None and cancel.is_set():
                raise Cancelled("the job was stopped before it started")
            yield engine
        finally:
            # This worker thread's OpenMP team (a watermark, a loudness pass, a load ran torch here too): a team
            # left behind throttles the next job's thread (openmp.py).
            release_threads()
            with self._cond:
                self._running -= 1
                self._last_used = time.monotonic()
                self._cond.notify_all()
