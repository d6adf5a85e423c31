"""The audit trail of a shared server: one JSON line per speech job and per saved voice, written at the end of the
one speech job (`serving/jobs.py`), so every surface is logged the same way.

`--audit-log FILE` turns it on (`--no-audit-log` off); a public server (a non-loopback bind or `--share`) keeps
one by default at `DEFAULT_AUDIT_LOG` (`Settings.audit_path`). A line holds who asked (a login or API key id,
never a secret), through which surface, with which model and voice (a saved voice's or preset's id, or the
sha256 of a new recording: `audio.audio_hash`), the sha256 and length of the text, and whether the output
carries the watermark. No audio and no text is stored.

    {"time": "2026-01-02T03:04:05.678Z", "event": "speech", "who": "studio", "surface": "ui", "model": "...",
     "mode": "zero_shot", "voice": null, "recording": "<sha256>", "source_recording": null,
     "text_sha256": "<sha256>", "text_chars": 42, "seconds": 3.2, "marked": true, "cached": false,
     "complete": true}

Requests never wait for the disk: a line goes into a bounded queue that one writer thread drains. When the queue
is full the line is dropped and counted, one warning is logged, and the next line written is preceded by a
`{"event": "dropped", "count": N}` line, so the trail shows the gap. The file is rotated by size
(`MAX_BYTES`, keeping `BACKUPS` older files: FILE.1 … FILE.5) and created readable by its owner only.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import queue
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from ..audio import audio_hash

if TYPE_CHECKING:
    from ..settings import Settings
    from ..types import Audio, CheckedRequest

log = logging.getLogger(__name__)

SURFACES = ("ui", "rest", "openai", "gradio_api", "mcp", "cli", "script", "book", "cluster")
MAX_BYTES = 10 * 2**20  # a file is rotated once it is this big
BACKUPS = 5  # rotated files kept (FILE.1 is the newest)
QUEUE_SIZE = 4096  # lines waiting for the writer at most; more are dropped and counted
FLUSH_WAIT_S = 5.0


@dataclass(frozen=True)
class Caller:
    """Who asks for a job, and through which surface (`SURFACES`). `who`: a login or an API key id (`key-1`),
    never a secret; None on a server without logins (loopback, `--no-auth`) and on the command line."""

    surface: str = "unknown"
    who: str | None = None


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def text_sha256(text: str) -> str | None:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest() if text else None


def speech_entry(caller: Caller, model: str, request: CheckedRequest, text: str, voice: str | None,
                 seconds: float, marked: bool | None, cached: bool = False, complete: bool = True) -> dict:
    """The line of one speech job. `text`: as the caller wrote it (only its hash and length are kept);
    `marked`: whether the output carries the watermark (None: not known, e.g. a stream stopped midway)."""
    return {"time": now_utc(), "event": "speech", "who": caller.who, "surface": caller.surface, "model": model,
            "mode": request.mode.value, "voice": voice, "recording": audio_hash(request.prompt_audio) or None,
            "source_recording": audio_hash(request.source_audio) or None, "text_sha256": text_sha256(text),
            "text_chars": len(text), "seconds": round(float(seconds), 3), "marked": marked, "cached": cached,
            "complete": complete}


def voice_entry(caller: Caller, voice_id: str, audio: Audio, consent: dict | None) -> dict:
    """The line of a saved voice: its id, its recording's hash and the consent it was saved with."""
    return {"time": now_utc(), "event": "voice_saved", "who": caller.who, "surface": caller.surface,
            "voice": voice_id, "recording": audio_hash(audio) or None, "consent": bool(consent)}


class AuditLog:
    """JSON lines appended to `path` by one writer thread, rotated by size (see the module)."""

    def __init__(self, path: str | Path, max_bytes: int = MAX_BYTES, backups: int = BACKUPS,
                 queue_size: int = QUEUE_SIZE) -> None:
        self.path = Path(path)
        self.max_bytes = max(1, int(max_bytes))
        self.backups = max(0, int(backups))
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, int(queue_size)))
        self._lock = threading.Lock()
        self.dropped = 0  # lines lost to a full queue or an unwritable file, in all
        self._reported = 0  # of those, the ones a "dropped" line already names
        self._warned = False
        self._file = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="audit-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def write(self, entry: dict) -> None:
        """Queue one line; never waits (a full queue drops it, counted)."""
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self._lost("the audit log's queue is full (the disk is slower than the requests)")

    def flush(self, timeout: float = FLUSH_WAIT_S) -> bool:
        """Wait until every line queued so far is on disk (False: not within `timeout`)."""
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self) -> None:
        """Write what is queued and stop the writer (at exit, and in tests)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._queue.put(None, timeout=FLUSH_WAIT_S)
        except queue.Full:
            pass
        self._thread.join(FLUSH_WAIT_S)

    # --- the writer thread ----------------------------------------------------------------------------

    def _lost(self, why: str, count: int = 1) -> None:
        with self._lock:
            self.dropped += count
            first, self._warned = not self._warned, True
        if first:  # once: a flood of warnings would be a second flood
            log.warning("%s: audit lines are being dropped and counted; the trail marks the gap", why)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            batch: list[str] = []
            stop = False
            while True:
                if item is None:
                    stop = True
                elif isinstance(item, threading.Event):
                    self._write(batch)
                    batch = []
                    item.set()
                else:
                    batch.append(item)
                if stop or len(batch) >= 256:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write(batch)
            if stop:
                self._close_file()
                return

    def _write(self, lines: list[str]) -> None:
        with self._lock:
            gap = self.dropped - self._reported
        if gap:
            lines = [json.dumps({"time": now_utc(), "event": "dropped", "count": gap})] + lines
        if not lines:
            return
        written = 0
        try:
            for line in lines:  # rotated between lines, so a file passes the size by one line at most
                handle = self._open()
                handle.write((line + "\n").encode("utf-8", "surrogatepass"))
                written += 1
                if gap and written == 1:  # the gap is on record
                    with self._lock:
                        self._reported += gap
                if handle.tell() >= self.max_bytes:
                    self._rotate()
            if self._file is not None:
                self._file.flush()
        except OSError as exc:
            self._close_file()
            self._lost(f"the audit log cannot be written ({exc.strerror or type(exc).__name__})",
                       len(lines) - max(written, 1 if gap else 0))

    def _open(self):
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._file = os.fdopen(fd, "ab")
        return self._file

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    def rotated(self, index: int) -> Path:
        """The `index`-th older file (1: the newest)."""
        return self.path.with_name(f"{self.path.name}.{index}")

    def _rotate(self) -> None:
        self._close_file()
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
            return
        for index in range(self.backups - 1, 0, -1):
            if self.rotated(index).exists():
                os.replace(self.rotated(index), self.rotated(index + 1))
        os.replace(self.path, self.rotated(1))


_LOGS: dict[Path, AuditLog] = {}
_LOGS_LOCK = threading.Lock()


def audit_log_for(settings: Settings) -> AuditLog | None:
    """The process's one `AuditLog` for the settings' file (None: no trail); every service of the process that
    names the same file shares it, so one writer rotates it."""
    path = settings.audit_path
    if path is None:
        return None
    key = Path(path).expanduser().resolve()
    with _LOGS_LOCK:
        found = _LOGS.get(key)
        if found is None or found._closed:
            found = _LOGS[key] = AuditLog(key)
        return found
