"""The process's watermark: every speech job marks what it outputs (`jobs.py`), and any recording can be checked.

The mark is Resemble AI's PerTh implicit watermark (`watermark/`, run by our code from the pinned package's
weights), loaded once per process on first use (`shared()`). Whether outputs are marked is the owner's choice
(`Settings.watermark`: `--no-watermark`, or COSYVOICE_WATERMARK=0), never a request's. When the weights are not
installed the app still runs: outputs go out unmarked, `/health` says so, and the log says why once.

No torch here at import: only marking or checking loads it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..audio_read import AudioLimits
from ..errors import CosyVoiceError, InvalidRequest
from ..types import Audio

if TYPE_CHECKING:
    from ..settings import Settings
    from ..watermark.perth import PerthMark

log = logging.getLogger(__name__)

CHECK_SECONDS = 600.0
# What the detector's doors (the CLI's `detect`, POST /v1/audio/detect, the UI's "Check a file") read of a file.
CHECK_LIMITS = AudioLimits(
    max_seconds=CHECK_SECONDS, allowed_seconds=CHECK_SECONDS, code="watermark_file_too_long",
    advice=f"the check reads at most {CHECK_SECONDS / 60:.0f} minutes, so cut an excerpt (a minute is plenty: "
           "the mark is in every second)")
CHECK_RATE = 24000  # what ffmpeg decodes other formats to: 10 minutes fill the door's sample budget (14.4 M)


class WatermarkUnavailable(CosyVoiceError):
    """The watermark's weights are not installed (or not usable) here, so nothing can be checked."""

    code = "watermark_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Verdict:
    """Whether a recording carries the mark: `score` is the detector's output (0-1; marked at 0.5 or more),
    `confidence` how sure it is of the verdict (0.5-1: the score, or 1 - score when unmarked)."""

    marked: bool
    confidence: float
    score: float
    seconds: float

    def to_dict(self) -> dict:
        return {"marked": self.marked, "confidence": round(self.confidence, 4), "score": round(self.score, 4),
                "seconds": round(self.seconds, 3)}


class Watermark:
    """The PerTh networks of this process, loaded on first use (thread-safe)."""

    def __init__(self, loader=None) -> None:
        self._loader = loader
        self._lock = threading.Lock()
        self._mark: PerthMark | None = None
        self._error: str | None = None  # the networks failed to load: why
        self._missing: str | None = None  # "" once the weights were found installed, else why not
        self._warned = False

    def problem(self) -> str | None:
        """Why outputs cannot be marked here (None: they can), found without loading the networks (the
        installation is looked at once per process)."""
        if self._mark is not None:
            return None
        if self._error is not None or self._loader is not None:
            return self._error
        if self._missing is None:
            from ..watermark.weights import locate

            self._missing = locate()[1]
        return self._missing or None

    def networks(self) -> PerthMark:
        """The loaded networks; `WatermarkUnavailable` saying why when they cannot be."""
        if self._mark is not None:
            return self._mark
        with self._lock:
            if self._mark is None and self._error is None:
                try:
                    self._mark = self._loader() if self._loader is not None else _load_perth()
                except CosyVoiceError as exc:
                    self._error = str(exc)
                    log.error("watermark: outputs are NOT marked: %s", self._error)
                    self._warned = True
        if self._mark is None:
            raise WatermarkUnavailable(f"the watermark is not available on this server: {self._error}")
        return self._mark

    def mark(self, samples: np.ndarray, sample_rate: int) -> np.ndarray | None:
        """`samples` with the mark; None when it cannot be put in (said once in the log)."""
        problem = self.problem()
        if problem is None:
            try:
                return self.networks().embed(samples, sample_rate)
            except WatermarkUnavailable:
                return None
        self.warn(problem)
        return None

    def warn(self, problem: str) -> None:
        """The log's one line saying outputs go out unmarked, and why (once per process)."""
        if not self._warned:
            self._warned = True
            log.warning("watermark: outputs are NOT marked: %s", problem)

    def check(self, audio: Audio) -> Verdict:
        """Whether `audio` carries the mark; `InvalidRequest` when it is too short or silent to tell,
        `WatermarkUnavailable` when this server cannot check."""
        problem = self.problem()
        if problem is not None:
            raise WatermarkUnavailable(f"the watermark detector is not available on this server: {problem}")
        from ..watermark.perth import MIN_SCORE_SECONDS

        try:
            score = self.networks().score(audio.samples, audio.sample_rate)
        except ValueError as exc:
            if str(exc) == "silent":
                raise InvalidRequest("watermark_silent", "the file holds no sound, so there is nothing to check for "
                                     "the mark") from None
            raise InvalidRequest("watermark_too_short", f"the file is {audio.duration:.2f} s long; the detector "
                                 f"needs at least {MIN_SCORE_SECONDS:g} s of sound", seconds=round(audio.duration, 2),
                                 min_seconds=MIN_SCORE_SECONDS) from None
        value = score.value
        return Verdict(score.marked, value if score.marked else 1.0 - value, value, score.seconds)


def check_file(source: str | Path | bytes, what: str = "file") -> Verdict:
    """Whether an audio or video file (a path, or its bytes) carries the mark: the one check of the CLI, the REST
    route and the UI. Read within `CHECK_LIMITS` (any format ffmpeg reads); errors as `check` raises them, and
    `InvalidRequest` for a file that cannot be read."""
    from ..media_read import read_media

    watermark = shared()
    problem = watermark.problem()
    if problem is not None:  # before reading anything
        raise WatermarkUnavailable(f"the watermark detector is not available on this server: {problem}")
    return watermark.check(read_media(source, what, CHECK_LIMITS, rate=CHECK_RATE))


def _load_perth() -> PerthMark:
    from ..watermark.perth import PerthMark

    return PerthMark.load()


_shared: Watermark | None = None
_shared_lock = threading.Lock()


def shared() -> Watermark:
    """The process's one `Watermark` (made on first use; the networks load when first needed)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Watermark()
        return _shared


def status(settings: Settings) -> dict:
    """What `/health` says about the mark: whether outputs are marked, and if not, why."""
    if not settings.watermark:
        return {"marked": False, "state": "off", "reason": "turned off by the server's owner (--no-watermark)"}
    problem = shared().problem()
    if problem is not None:
        return {"marked": False, "state": "unavailable", "reason": problem}
    return {"marked": True, "state": "on", "reason": None}


def announce(settings: Settings) -> None:
    """One warning at start when outputs will not be marked, and why (said once: not again at the first job)."""
    state = status(settings)
    if state["state"] == "off":
        log.warning("watermark: outputs are not marked (--no-watermark)")
    elif state["state"] == "unavailable":
        shared().warn(state["reason"])
