"""UI event handlers: widgets → `SynthesisRequest` → manager/engine → outputs.

No model math and no torch here: handlers talk to the `ModelManager` and the `Engine` interface,
translate errors into the user's language, and keep per-browser history entries.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .. import audio as audio_utils
from ..errors import Cancelled, CosyVoiceError, InvalidRequest
from ..files import sweep_stale_temp, write_atomic
from ..serving.default_voice import VoiceResolver
from ..serving.glossary import Glossary, GlossaryStore, apply_glossary, resolve_glossary, with_glossary
from ..serving.manager import ModelManager
from ..serving.takes import RetryPolicy, SegmentReport, guarded_synthesis
from ..settings import Settings
from ..serving.subtitles import SUBTITLE_FORMATS, Cue, SegmentClock, render
from ..types import EngineInfo, Mode, ProgressEvent, SynthesisRequest
from ..validation import check_request, mode_hint
from . import strings
from .events import event_text
from .markup import plain_html

log = logging.getLogger(__name__)

HISTORY_LIMIT = 20


@dataclass(frozen=True)
class OutputOptions:
    """What the output options say for one job: loudness, file format, the saved glossary to apply ("" =
    none) and whether bad takes are checked and retried (this browser's switch; the server's policy still
    decides when it is on)."""

    normalize: bool = True
    fmt: str = "wav"
    glossary: str = ""
    check_takes: bool = True


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
        self.glossaries = GlossaryStore(settings.glossary_dir, settings.max_glossaries)
        self._stops: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    # --- transcription --------------------------------------------------------------------------------

    def transcriber(self):
        """The process's one `Transcriber` (shared with the REST route and the CLI)."""
        from ..serving.transcription import shared_transcriber

        return shared_transcriber(self.settings.models_dir)

    def asr_backend(self) -> str | None:
        """The recogniser the settings name (None: "auto", the best one available)."""
        from ..serving.transcription import backend_for

        return backend_for(self.settings.asr_model)

    # --- validation -------------------------------------------------------------------------------

    def with_default_voice(self, request: SynthesisRequest):
        """(request, voice to register): the default voice fills in where a tab names none; the preset
        tab of a model without presets then speaks with the built-in voice."""
        return self.resolver.apply(request, self.manager.info(), mode_given=request.mode is not Mode.SFT)

    def check(self, request: SynthesisRequest, options: OutputOptions | None = None) -> None:
        """Raise InvalidRequest for a bad request; needs no loaded model (runs before any work). With
        `options`, the chosen glossary is applied first (the text is checked as the model will get it)."""
        self._check(self.prepare(request, options))

    def _check(self, request: SynthesisRequest) -> None:
        given = request
        request, _ = self.with_default_voice(request)
        saved = (tuple(self.voices.ids()) if self.voices is not None else ()) + self.resolver.usable_ids()
        check_request(request, self.manager.info(), self.settings.max_text_chars, saved_voices=saved,
                      needs=_needs(request.mode))
        if given.mode is Mode.ZERO_SHOT and given.prompt_audio is not None:  # a recording with its transcript
            from ..serving.transcription import check_transcript_fits

            check_transcript_fits(given.prompt_text, given.prompt_audio.duration)

    # --- glossary and take checks -----------------------------------------------------------------------

    def glossary(self, glossary_id: str | None) -> Glossary | None:
        """The saved glossary `glossary_id` ("" or None: none); InvalidRequest when it no longer exists."""
        return resolve_glossary(self.glossaries, (glossary_id or "").strip() or None)

    def prepare(self, request: SynthesisRequest, options: OutputOptions | None) -> SynthesisRequest:
        """`request` with the options' glossary applied to its text (what the check and the engine see)."""
        if options is None or not options.glossary:
            return request
        return with_glossary(request, self.glossary(options.glossary), self.manager.info())

    def text_filter(self, glossary_id: str | None, info: EngineInfo | None = None):
        """`text -> text` applying the saved glossary `glossary_id` for the model `info` (default: the current
        one), or None when no glossary is chosen: the Script and Audiobook tabs give it to the renderers."""
        glossary = self.glossary(glossary_id)
        if glossary is None or not glossary.entries:
            return None
        target = info if info is not None else self.manager.info()
        return lambda text: apply_glossary(text, glossary, target)

    def policy(self, options: OutputOptions | None = None) -> RetryPolicy:
        """The bad-take policy of the settings (`--take-retries`, `--no-take-check`), off when this browser
        switched checks off."""
        from ..serving import takes

        make = getattr(takes, "policy_from_settings", None)
        policy = make(self.settings) if make is not None else \
            RetryPolicy(enabled=self.settings.check_takes, retries=self.settings.take_retries)
        if options is not None and not options.check_takes:
            policy = replace(policy, enabled=False)
        return policy

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
        """Yield (audio_update, file_path, info_markdown, history) tuples: `generate` without the subtitle
        files and the take line (for callers that show only the audio)."""
        for audio, path, _subtitles, info, _takes, past in self.generate(request, options, history, http_request,
                                                                         progress, meta, lang):
            yield audio, path, info, past

    def generate(self, request: SynthesisRequest, options: OutputOptions, history: list | None, http_request=None,
                 progress=None, meta: dict | None = None, lang: str | None = None) -> Iterator[tuple]:
        """Yield (audio_update, file_path, subtitle_paths, info_markdown, take_markdown, history) tuples; audio
        streams when asked. The glossary is applied before the check, synthesis runs through the bad-take
        guard, and the result's subtitles (SRT, VTT) are timed from its chunks.

        The first five outputs are for the tab; `history` is this browser's list of past results.
        """
        import gradio as gr

        lang = lang or _lang(http_request)
        original = request.text
        try:
            request = self.prepare(request, options)
            self._check(request)
            audio_utils.check_format(options.fmt)  # before the work, not when the result is written
            request, ref = self.with_default_voice(request)
        except InvalidRequest as exc:
            raise gr.Error(plain_html(strings.message(exc, lang))) from None
        cancel = self.cancel_flag(http_request)
        first_reasons: dict[int, list[str]] = {}  # segment → why its first take was refused
        report = progress_adapter(progress, lang, first_reasons)
        policy = self.policy(options)
        takes: list[SegmentReport] = []
        clock = SegmentClock()
        started = time.perf_counter()
        pieces: list[np.ndarray] = []
        gain: float | None = None
        rate = 0
        skip = gr.skip()
        try:
            with self.manager.job(progress=report, cancel=cancel) as engine:  # it reports the queue position too
                self.resolver.ensure(engine, ref)
                rate = engine.info.sample_rate
                for chunk in guarded_synthesis(engine, request, policy, report, cancel, report=takes):
                    pieces.append(chunk.samples)
                    clock.feed(chunk)
                    if request.stream:
                        if options.normalize and gain is None:
                            gain = audio_utils.stream_gain(chunk.samples, rate)
                        out = chunk.samples * gain if gain else chunk.samples
                        yield (rate, np.clip(out, -1, 1)), skip, skip, skip, skip, skip
        except CosyVoiceError as exc:
            raise gr.Error(plain_html(failure_text(exc, lang))) from None
        wave = audio_utils.join_chunks(pieces)
        if options.normalize:
            wave = audio_utils.normalize_loudness(wave, rate)
        path = self._save(wave, rate, options.fmt)
        cues = self._cues(clock, request, options, original)
        subtitles = [str(p) for p in write_subtitles(path, cues)] or None
        seconds = len(wave) / rate if rate else 0.0
        elapsed = time.perf_counter() - started
        info = (strings.label("result_info", lang).format(seconds=seconds, seed=request.seed, elapsed=elapsed)
                + (strings.label("result_rtf", lang).format(rtf=elapsed / seconds) if seconds else ""))
        entry = {"id": uuid.uuid4().hex[:8], "time": time.strftime("%H:%M:%S"), "mode": request.mode.value,
                 "text": original[:200], "voice": (meta or {}).get("voice", request.speaker or ""),
                 "seed": request.seed, "speed": request.speed, "file": str(path), "subtitles": subtitles or [],
                 "request": (meta or {})}
        new_history = ([entry] + list(history or []))[:HISTORY_LIMIT]
        audio_out = skip if request.stream else (rate, wave)
        yield (audio_out, str(path), subtitles, info, take_summary(takes, policy.enabled, lang, first_reasons),
               new_history)

    def _cues(self, clock: SegmentClock, request: SynthesisRequest, options: OutputOptions,
              original: str) -> list[Cue]:
        """The result's cues, their text as the user wrote it (a glossary's readings turned back into words)."""
        cues = clock.cues(fallback_text=request.text if request.mode is not Mode.VC else "")
        glossary = self.glossary(options.glossary) if options.glossary else None
        if glossary is None:
            return cues
        info = self.manager.info()
        return [replace(cue, text=unglossed(cue.text, glossary, info, original)) for cue in cues]

    def _save(self, wave: np.ndarray, rate: int, fmt: str) -> Path:
        path = self.output_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}.{fmt}"
        write_atomic(path, audio_utils.encode(wave, rate, fmt))  # a kill never leaves half a result file
        return path


def _needs(mode: Mode) -> str:
    return mode_hint(mode)


def write_subtitles(audio_path: Path, cues: list[Cue]) -> list[Path]:
    """SRT and VTT files beside `audio_path` (same name) for `cues`; none when there is nothing to show."""
    if not cues:
        return []
    written = []
    for fmt in SUBTITLE_FORMATS:
        target = audio_path.with_suffix(f".{fmt}")
        write_atomic(target, render(cues, fmt).encode("utf-8"))
        written.append(target)
    return written


def unglossed(text: str, glossary: Glossary, info: EngineInfo | None, original: str = "") -> str:
    """`text` with the readings a glossary put in turned back into its words (subtitles show the words). A
    respelling that the user's own `original` text also holds is left as it is (it may be theirs)."""
    hints = tuple(info.pronunciation) if info is not None else ()
    pairs = {}
    for entry in glossary.entries:
        reading = entry.reading_for(hints)
        if reading and reading != entry.word:
            pattern = _whole(reading)
            is_hint = entry.kind != "respell" and entry.kind in hints
            if not is_hint and pattern.search(original):
                continue
            pairs[reading] = (pattern, entry.word)
    for reading in sorted(pairs, key=len, reverse=True):
        pattern, word = pairs[reading]
        text = pattern.sub(lambda _match, word=word: word, text)
    return text


def _whole(reading: str) -> re.Pattern[str]:
    """`reading` as a pattern that matches it only as a whole word where it starts or ends with a letter."""
    before = r"(?<!\w)" if reading[:1].isalnum() else ""
    after = r"(?!\w)" if reading[-1:].isalnum() else ""
    return re.compile(before + re.escape(reading) + after)


def take_summary(takes: list[SegmentReport], enabled: bool, lang: str,
                 first_reasons: dict[int, list[str]] | None = None) -> str:
    """The small line under the audio: how the take checks went (re-rendered segments, takes still off).
    `first_reasons`: segment → why its first take was refused (a re-rendered good take has no reasons)."""
    if not enabled:
        return strings.label("takes_off", lang)
    takes = [take for take in takes if take.check.chars]  # voice conversion has no text to check against
    if not takes:
        return ""
    total = len(takes)
    notes = []
    for take in takes:
        reasons = take.check.reasons or (first_reasons or {}).get(take.segment, ())
        why = strings.take_reasons(reasons, lang)
        where = dict(segment=take.segment + 1, total=total, why=why, attempts=take.attempts)
        if take.attempts > 1:
            key = "takes_retried" if take.check.ok else "takes_kept_best"
            notes.append(strings.label(key, lang).format(**where))
        elif not take.check.ok:
            notes.append(strings.label("takes_not_retried", lang).format(**where))
    if not notes:
        return strings.label("takes_ok", lang).format(total=total)
    return " · ".join(notes)


def failure_text(exc: CosyVoiceError, lang: str) -> str:
    """What the user reads when a job fails: stopped, a bad request, or the engine's own (English)
    explanation, introduced in the user's language."""
    if isinstance(exc, Cancelled):
        return strings.label("stopped", lang)
    if isinstance(exc, InvalidRequest):
        return strings.message(exc, lang)
    return str(exc) if lang != "zh" else strings.prefixed("generation_failed", exc, lang)


def progress_adapter(progress, lang: str, refused: dict[int, list[str]] | None = None):
    """Engine/manager progress events → a gr.Progress bar with a short label in the user's language.
    `refused`, when given, collects segment → reasons of the takes the bad-take guard refused."""

    def report(event: ProgressEvent) -> None:
        if refused is not None and event.code == "take_will_retry":
            refused.setdefault(int(event.params["segment"]) - 1, list(event.params.get("reasons") or ()))
        if progress is None:
            return
        try:
            progress(event.fraction, desc=event_text(event, lang))
        except Exception:  # progress is cosmetic; never let it break a job
            log.debug("progress update failed", exc_info=True)

    return report
