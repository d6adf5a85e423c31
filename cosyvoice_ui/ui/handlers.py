"""UI event handlers: widgets → `SynthesisRequest` → manager/engine → outputs.

No model math and no torch here: handlers talk to the `ModelManager` and the `Engine` interface,
translate errors into the user's language, and keep per-browser history entries.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import audio as audio_utils
from ..serving.default_voice import VoiceResolver
from ..errors import Cancelled, CosyVoiceError, InvalidRequest
from ..files import sweep_stale_temp, write_atomic
from ..serving.manager import ModelManager
from ..settings import Settings
from ..types import Mode, ProgressEvent, SynthesisRequest
from ..validation import check_request, mode_hint
from . import strings

log = logging.getLogger(__name__)

HISTORY_LIMIT = 20


@dataclass(frozen=True)
class OutputOptions:
    normalize: bool = True
    fmt: str = "wav"


def _lang(request) -> str:
    headers = getattr(request, "headers", None) or {}
    return strings.language_of(headers.get("accept-language"))


def _session(request) -> str:
    return getattr(request, "session_hash", None) or "default"


class Handlers:
    """State shared by every UI event of one app: the manager, settings, stop flags, output folder."""

    def __init__(self, manager: ModelManager, settings: Settings, output_dir: Path, voices=None) -> None:
        self.manager = manager
        self.settings = settings
        self.output_dir = output_dir
        self.output_dir.mkdir(parents=True, exist_ok=True)
        sweep_stale_temp(self.output_dir)  # what a killed process left half-written
        self.voices = voices  # optional saved-voice library (REST API issue); None = feature off
        self.resolver = VoiceResolver(voices, settings.default_voice,
                                      cache_root=None if voices is not None else settings.voices_dir)
        self._stops: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    # --- validation -------------------------------------------------------------------------------

    def with_default_voice(self, request: SynthesisRequest):
        """(request, voice to register): the default voice fills in where a tab names none; the preset
        tab of a model without presets then speaks with the built-in voice."""
        return self.resolver.apply(request, self.manager.info(), mode_given=request.mode is not Mode.SFT)

    def check(self, request: SynthesisRequest) -> None:
        """Raise InvalidRequest for a bad request; needs no loaded model (runs before any work)."""
        request, _ = self.with_default_voice(request)
        saved = (tuple(self.voices.ids()) if self.voices is not None else ()) + self.resolver.usable_ids()
        check_request(request, self.manager.info(), self.settings.max_text_chars, saved_voices=saved,
                      needs=_needs(request.mode))

    @staticmethod
    def lang(request) -> str:
        return _lang(request)

    # --- stop ---------------------------------------------------------------------------------------

    def stop_flag(self, session: str) -> threading.Event:
        with self._lock:
            flag = threading.Event()
            self._stops[session] = flag
            return flag

    def cancel_flag(self, request) -> threading.Event:
        """A fresh stop flag for the browser session of `request` (a gr.Request); Stop sets it."""
        return self.stop_flag(_session(request))

    def stop(self, request=None) -> None:
        with self._lock:
            flag = self._stops.get(_session(request))
        if flag is not None:
            flag.set()

    # --- synthesis ---------------------------------------------------------------------------------------

    def run(self, request: SynthesisRequest, options: OutputOptions, history: list | None, http_request=None,
            progress=None, meta: dict | None = None, lang: str | None = None) -> Iterator[tuple]:
        """Yield (audio_update, file_path, info_markdown, history) tuples; audio streams when asked.

        The first three outputs are for the tab; `history` is this browser's list of past results.
        """
        import gradio as gr

        lang = lang or _lang(http_request)
        try:
            self.check(request)
            audio_utils.check_format(options.fmt)  # before the work, not when the result is written
            request, ref = self.with_default_voice(request)
        except InvalidRequest as exc:
            raise gr.Error(strings.message(exc, lang)) from None
        cancel = self.cancel_flag(http_request)
        report = progress_adapter(progress, lang)
        started = time.perf_counter()
        pieces: list[np.ndarray] = []
        gain: float | None = None
        rate = 0
        try:
            with self.manager.job(progress=report, cancel=cancel,
                                  on_queue=lambda pos: report(ProgressEvent("queue", 0.0, f"queue position {pos}"))
                                  ) as engine:
                self.resolver.ensure(engine, ref)
                rate = engine.info.sample_rate
                for chunk in engine.synthesize(request, progress=report, cancel=cancel):
                    pieces.append(chunk.samples)
                    if request.stream:
                        if options.normalize and gain is None:
                            gain = audio_utils.stream_gain(chunk.samples, rate)
                        out = chunk.samples * gain if gain else chunk.samples
                        yield (rate, np.clip(out, -1, 1)), gr.skip(), gr.skip(), gr.skip()
        except CosyVoiceError as exc:
            raise gr.Error(failure_text(exc, lang)) from None
        wave = audio_utils.join_chunks(pieces)
        if options.normalize:
            wave = audio_utils.normalize_loudness(wave, rate)
        path = self._save(wave, rate, options.fmt)
        seconds = len(wave) / rate if rate else 0.0
        elapsed = time.perf_counter() - started
        info = (strings.label("result_info", lang).format(seconds=seconds, seed=request.seed, elapsed=elapsed)
                + (strings.label("result_rtf", lang).format(rtf=elapsed / seconds) if seconds else ""))
        entry = {"id": uuid.uuid4().hex[:8], "time": time.strftime("%H:%M:%S"), "mode": request.mode.value,
                 "text": request.text[:200], "voice": (meta or {}).get("voice", request.speaker or ""),
                 "seed": request.seed, "speed": request.speed, "file": str(path), "request": (meta or {})}
        new_history = ([entry] + list(history or []))[:HISTORY_LIMIT]
        audio_out = gr.skip() if request.stream else (rate, wave)
        yield audio_out, str(path), info, new_history

    def _save(self, wave: np.ndarray, rate: int, fmt: str) -> Path:
        path = self.output_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}.{fmt}"
        write_atomic(path, audio_utils.encode(wave, rate, fmt))  # a kill never leaves half a result file
        return path


def _needs(mode: Mode) -> str:
    return mode_hint(mode)


def failure_text(exc: CosyVoiceError, lang: str) -> str:
    """What the user reads when a job fails: stopped, a bad request, or the engine's own (English)
    explanation, introduced in the user's language."""
    if isinstance(exc, Cancelled):
        return strings.label("stopped", lang)
    if isinstance(exc, InvalidRequest):
        return strings.message(exc, lang)
    return str(exc) if lang != "zh" else strings.prefixed("generation_failed", exc, lang)


def progress_adapter(progress, lang: str):
    """Engine/manager progress events → a gr.Progress bar with a short label in the user's language."""

    def report(event: ProgressEvent) -> None:
        if progress is None:
            return
        try:
            progress(event.fraction, desc=strings.progress_text(event, lang))
        except Exception:  # progress is cosmetic; never let it break a job
            log.debug("progress update failed", exc_info=True)

    return report
