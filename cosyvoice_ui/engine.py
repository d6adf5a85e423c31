"""The interface every synthesis backend implements (CosyVoice families and the offline default).

The UI, REST API and CLI talk only to this interface. Nothing here imports torch.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

from .errors import Cancelled, InvalidRequest
from .types import Audio, AudioChunk, EngineInfo, ProgressCallback, ProgressEvent, SynthesisRequest


class Engine(ABC):
    """A loaded model that turns `SynthesisRequest`s into audio.

    Responsibilities: validate requests (`check`), synthesise (`synthesize`), report progress,
    honour cancellation, release memory (`close`). Not responsible for: queueing, idle unloading,
    loudness or file formats (see `manager` and `audio`).
    """

    @property
    @abstractmethod
    def info(self) -> EngineInfo:
        """What this backend can do (modes, speakers, sample rate, device)."""

    @abstractmethod
    def check(self, request: SynthesisRequest) -> None:
        """Raise `InvalidRequest` with an actionable message if `request` cannot be served."""

    @abstractmethod
    def synthesize(
        self,
        request: SynthesisRequest,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[AudioChunk]:
        """Yield the audio of `request` in playback order (several chunks when streaming).

        Calls `check` first. Raises `Cancelled` soon after `cancel` is set.
        """

    def close(self) -> None:
        """Release model memory. The engine must not be used afterwards."""

    def register_voice(self, voice_id: str, audio: Audio, transcript: str, cache_dir: Path) -> None:
        """Make a saved voice usable as `speaker` in zero_shot, cross_lingual and vc requests.

        `audio` is the stored (checked, trimmed) prompt and `cache_dir` the voice's folder, where a backend
        keeps the features it computed so the next load reads them instead. Registered ids are listed in
        `info.saved_voices`. Backends that cannot use saved voices keep this default, which raises
        `InvalidRequest("voices_unsupported")`.
        """
        raise InvalidRequest("voices_unsupported", f"{self.info.name} cannot use saved voices; load a CosyVoice "
                             "model (e.g. CosyVoice-300M) to use them", model=self.info.name)

    def unregister_voice(self, voice_id: str) -> None:
        """Forget a saved voice; unknown ids (and backends without saved voices) are ignored."""


def report(progress: ProgressCallback | None, stage: str, fraction: float, message: str = "") -> None:
    """Send one progress event if anyone listens; clamps the fraction to [0, 1]."""
    if progress is not None:
        progress(ProgressEvent(stage=stage, fraction=min(1.0, max(0.0, fraction)), message=message))


def raise_if_cancelled(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("the job was stopped")
