"""The interface every synthesis backend implements (CosyVoice families and the offline default).

The UI, REST API and CLI talk only to this interface. Nothing here imports torch.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from .errors import Cancelled, InvalidRequest
from .openmp import release_threads
from .types import (Audio, AudioChunk, CheckedRequest, EngineInfo, Mode, ProgressCallback, ProgressEvent,
                    SpeakerEmbedder, SynthesisRequest)
from .validation import DEFAULT_MAX_TEXT_CHARS, check_request, mode_hint

log = logging.getLogger(__name__)


class Engine(ABC):
    """A loaded model that turns `SynthesisRequest`s into audio.

    The base class owns the request's way through: `check` (once), `synthesize` (a fresh seed when none
    is given, timing, the "done" progress event and one log line with the real-time factor). A backend
    implements `info`, `_synthesize` and, for checks that need its model, `_check_model`.
    Not responsible for: queueing, idle unloading, loudness or file formats (`serving.manager`, `audio`).
    """

    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS

    @property
    @abstractmethod
    def info(self) -> EngineInfo:
        """What this backend can do (modes, speakers, sample rate, device)."""

    def check(self, request: SynthesisRequest) -> CheckedRequest:
        """The request, validated once: the shared checks against `info` (skipped for a `CheckedRequest`
        made against this same `info`), then this backend's own. Raises `InvalidRequest`."""
        info = self.info
        if isinstance(request, CheckedRequest) and request.checked_against == info:
            checked = request
        else:
            checked = check_request(request, info, self.max_text_chars, saved_voices=self.usable_voices())
        self._check_model(checked)
        return checked

    def usable_voices(self) -> tuple[str, ...]:
        """Voice ids a clone-mode request may name as `speaker` (default: the registered saved voices)."""
        return self.info.saved_voices

    def _check_model(self, request: CheckedRequest) -> None:
        """Checks only this backend can make (e.g. a language it cannot read); raise `InvalidRequest`."""

    def synthesize(self, request: SynthesisRequest, progress: ProgressCallback | None = None,
                   cancel: threading.Event | None = None) -> Iterator[AudioChunk]:
        """Yield the audio of `request` in playback order (several chunks when streaming).

        Checks it first (unless this engine checked it already). Raises `Cancelled` soon after `cancel`
        is set.
        """
        checked = self.check(request)
        if checked.seed is None:
            checked = replace(checked, seed=secrets.randbits(31))
        started = time.perf_counter()
        produced, rate = 0, self.info.sample_rate
        try:
            for chunk in self._synthesize(checked, progress, cancel):
                produced += len(chunk.samples)
                rate = chunk.sample_rate
                yield chunk
        finally:
            release_threads()  # this thread's OpenMP workers, so the next request's thread runs unthrottled
        seconds = produced / rate if rate else 0.0
        elapsed = time.perf_counter() - started
        report(progress, "done", 1.0, f"{seconds:.1f} s of audio")
        log.info("synthesized %s mode=%s chars=%d audio=%.2fs rtf=%.3f seed=%d", self.info.name, checked.mode.value,
                 len(checked.text), seconds, elapsed / seconds if seconds else float("nan"), checked.seed)

    @abstractmethod
    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        """The backend's synthesis of a checked request whose seed is set."""

    def close(self) -> None:
        """Release model memory. The engine must not be used afterwards."""

    def register_voice(self, voice_id: str, audio: Audio, transcript: str, cache_dir: Path) -> None:
        """Make a saved voice usable as `speaker` in zero_shot, cross_lingual and vc requests.

        `audio` is the stored (checked, trimmed) prompt and `cache_dir` the voice's folder, where a backend
        keeps the features it computed so the next load reads them instead. Registered ids are listed in
        `info.saved_voices`. Backends that cannot use saved voices keep this default, which raises
        `InvalidRequest("voices_unsupported")`.
        """
        raise InvalidRequest("voices_unsupported", f"{self.info.name} cannot use saved voices; load a model that "
                             f"clones voices ({mode_hint(Mode.ZERO_SHOT)}) to use them", model=self.info.name)

    def unregister_voice(self, voice_id: str) -> None:
        """Forget a saved voice; unknown ids (and backends without saved voices) are ignored."""

    def speaker_embedder(self) -> SpeakerEmbedder | None:
        """The backend's speaker network, lent to tell the voices of a recording apart (a dub's transcribed
        cues); None (this default) when it has none, and the caller uses its own weightless statistics."""
        return None

    def reading(self, text: str) -> list[str]:
        """How this engine will read `text`: the segments it renders, after its own normalisation and split
        (for previews; a pronunciation glossary is applied by the caller). Default: the stripped text."""
        text = text.strip()
        return [text] if text else []


def report(progress: ProgressCallback | None, stage: str, fraction: float, message: str = "", code: str = "",
           **params: object) -> None:
    """Send one progress event if anyone listens; clamps the fraction to [0, 1]. `code` and `params` say what
    happened for a translation (see `ProgressEvent`); `message` says it in English."""
    if progress is not None:
        progress(ProgressEvent(stage=stage, fraction=min(1.0, max(0.0, fraction)), message=message, code=code,
                               params=params))


def raise_if_cancelled(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("the job was stopped")
