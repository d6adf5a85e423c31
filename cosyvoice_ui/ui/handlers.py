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
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import audio as audio_utils
from ..errors import Cancelled, CosyVoiceError, InvalidRequest
from ..files import sweep_stale_temp, write_atomic
from ..serving.audit import Caller
from ..serving.default_voice import VoiceResolver
from ..serving.glossary import Glossary, GlossaryStore
from ..serving.jobs import JobOptions, SpeechJob, SpeechJobs
from ..serving.manager import ModelManager
from ..serving.takes import SegmentReport
from ..settings import Settings
from ..serving.subtitles import SUBTITLE_FORMATS, Cue, render
from ..types import Mode, ProgressEvent, SynthesisRequest
from . import strings
from .audio_out import player_audio
from .events import event_text
from .markup import plain_html, refusal

log = logging.getLogger(__name__)

HISTORY_LIMIT = 20
CHECKED_KEPT = 64  # validated jobs waiting for their run (one per click in flight)
CLOSED_KEPT = 1024  # closed pages remembered (a job asked for just before its page closed must not start)
CLICKS_KEPT = 1024  # clicks remembered as stopped before their run, or as over (a late Stop changes nothing)
# A Generate click's id, made by the page (controls.py) and sent with the click and with its Stop; untrusted
_CLICK_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


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


def _click(click) -> str | None:
    """The page's id of one Generate click, or None (no id, or not one the page makes)."""
    return click if isinstance(click, str) and _CLICK_ID.fullmatch(click) else None


def _remember(kept: OrderedDict, key) -> None:
    kept[key] = None
    kept.move_to_end(key)
    while len(kept) > CLICKS_KEPT:
        kept.popitem(last=False)


def caller_of(request, surface: str = "ui") -> Caller:
    """Who uses the page (its login, or an API key's id; None without logins), for the audit trail."""
    return Caller(surface, getattr(request, "username", None) or None)


class Handlers:
    """State shared by every UI event of one app: the manager, settings, stop flags, output folder, and the
    speech jobs (`serving/jobs.py`) every tab runs through."""

    def __init__(self, manager: ModelManager, settings: Settings, output_dir: Path, voices=None,
                 speech: SpeechJobs | None = None) -> None:
        self.manager = manager
        self.settings = settings
        self.output_dir = output_dir
        self.output_dir.mkdir(parents=True, exist_ok=True)
        sweep_stale_temp(self.output_dir)  # what a killed process left half-written
        self.voices = voices  # optional saved-voice library (REST API issue); None = feature off
        if speech is None:
            resolver = VoiceResolver(voices, settings.default_voice,
                                     cache_root=None if voices is not None else settings.voices_dir)
            speech = SpeechJobs(manager, settings, voices, resolver,
                                GlossaryStore(settings.glossary_dir, settings.max_glossaries))
        self.speech = speech
        self.resolver = speech.resolver
        self.glossaries = speech.glossaries
        self._stops: dict[str, tuple[threading.Event, str | None]] = {}  # session → its run's flag and click
        self._closed: OrderedDict[str, None] = OrderedDict()  # sessions whose page was closed (newest last)
        # Stop before the run starts (its request can even overtake the click's on a busy server): the page names
        # the click its Stop is for (`clicks.py`), so that Stop waits for that click's run alone (Gradio's own cancel
        # would mark the outputs "Error"), and a Stop that comes after the click's run has ended (or its refusal)
        # changes nothing. Keys: (session, click id).
        self._stopped_clicks: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._ended_clicks: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._checked: OrderedDict[str, SpeechJob] = OrderedDict()  # the validator's jobs, for the run after it
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

    # --- the job --------------------------------------------------------------------------------------

    @staticmethod
    def job_options(options: OutputOptions | None, mode: Mode | None = None, consent: bool = False,
                    caller: Caller | None = None) -> JobOptions:
        """A tab's output options as the job's: the glossary, the browser's take switch (off only), loudness; the
        consent box beside its sample and who asks (`caller_of`)."""
        options = options or OutputOptions()
        return JobOptions(glossary=options.glossary or None, check_takes=None if options.check_takes else False,
                          loudness=audio_utils.DEFAULT_LUFS if options.normalize else None,
                          mode_given=mode is not Mode.SFT, consent=bool(consent), caller=caller or Caller("ui"))

    def prepare(self, request: SynthesisRequest, options: OutputOptions | None = None, consent: bool = False,
                caller: Caller | None = None) -> SpeechJob:
        """The checked job of a tab's request (`SpeechJobs.prepare`: glossary, default voice, blocked words,
        consent, take policy, the one check); InvalidRequest before any work, with no model loaded."""
        audio_utils.check_format((options or OutputOptions()).fmt)  # before the work, not when it is written
        return self.speech.prepare(request, self.job_options(options, request.mode, consent, caller))

    def check(self, request: SynthesisRequest, options: OutputOptions | None = None, key: str | None = None,
              http_request=None, consent: bool = False, click: str | None = None) -> None:
        """The validator's step: prepare the job (raises InvalidRequest); with `key` (the click's inputs), the job
        is kept for the run that follows, so one click checks its request once. `click`: the page's id of this
        click (`http_request` gives its page): a refused click has no run, so its Stop, pressed before or after
        the refusal, is for nothing."""
        try:
            job = self.prepare(request, options, consent, caller_of(http_request))
        except BaseException:
            click = _click(click)
            if http_request is not None and click is not None:
                with self._lock:
                    self._stopped_clicks.pop((_session(http_request), click), None)
                    _remember(self._ended_clicks, (_session(http_request), click))
            raise
        if key is not None:
            with self._lock:
                self._checked[key] = job
                while len(self._checked) > CHECKED_KEPT:
                    self._checked.popitem(last=False)

    def checked(self, key: str | None) -> SpeechJob | None:
        """The job the validator prepared for these inputs (taken: a second run prepares again)."""
        if key is None:
            return None
        with self._lock:
            return self._checked.pop(key, None)

    def glossary(self, glossary_id: str | None) -> Glossary | None:
        """The saved glossary `glossary_id` ("" or None: none); InvalidRequest when it no longer exists."""
        return self.speech.glossary((glossary_id or "").strip() or None)

    @staticmethod
    def lang(request) -> str:
        return _lang(request)

    # --- stop ---------------------------------------------------------------------------------------

    def stop_flag(self, session: str, click: str | None = None) -> threading.Event:
        """A fresh stop flag for the run of `session` (of its page's click `click`, when the page named it);
        already set when the page has closed or Stop was pressed for this run before it began."""
        click = _click(click)
        with self._lock:
            flag = threading.Event()
            stopped_early = click is not None and (session, click) in self._stopped_clicks
            if stopped_early:
                del self._stopped_clicks[(session, click)]
            if session in self._closed or stopped_early:
                flag.set()
            self._stops[session] = (flag, click)
            return flag

    def cancel_flag(self, request, click: str | None = None) -> threading.Event:
        """A fresh stop flag for the browser session of `request` (a gr.Request); Stop sets it."""
        return self.stop_flag(_session(request), click)

    def stop(self, request=None, click: str | None = None) -> bool:
        """Stop the running job of the session of `request`, or the run of the click `click` (the page's id of
        the click this Stop is for) when it begins: its request may still be on the way, checked or queued. False
        when there is nothing to stop (no run, or the click's run is over)."""
        session = _session(request)
        click = _click(click)
        with self._lock:
            flag, running = self._stops.get(session, (None, None))
            if flag is not None and not flag.is_set() and (click is None or running in (None, click)):
                flag.set()  # the run on screen (a run without an id is one the page started without a click)
                return True
            if click is None or (session, click) in self._ended_clicks:
                return False  # nothing named, or its run is over (or it was refused): the result on screen stays
            if running != click:
                _remember(self._stopped_clicks, (session, click))
            return True

    def forget_flag(self, request, flag: threading.Event) -> None:
        """The job that held `flag` has ended (a Stop for its click now changes nothing)."""
        session = _session(request)
        with self._lock:
            held, click = self._stops.get(session, (None, None))
            if held is flag:
                del self._stops[session]
                if click is not None:
                    _remember(self._ended_clicks, (session, click))

    def page_closed(self, request=None) -> None:
        """The browser page of `request` is gone: its job stops in whatever phase it is (queued, loading the
        model, rendering) and a job it had asked for but not yet started never runs."""
        session = _session(request)
        with self._lock:
            self._closed[session] = None
            while len(self._closed) > CLOSED_KEPT:
                self._closed.popitem(last=False)
        self.stop(request)

    # --- synthesis ---------------------------------------------------------------------------------------

    def run(self, request: SynthesisRequest, options: OutputOptions, history: list | None, http_request=None,
            progress=None, meta: dict | None = None, lang: str | None = None) -> Iterator[tuple]:
        """Yield (audio_update, file_path, info_markdown, history) tuples: `generate` without the subtitle
        files and the take line (for callers that show only the audio)."""
        for audio, path, _subtitles, info, _takes, past in self.generate(request, options, history, http_request,
                                                                         progress, meta, lang):
            yield audio, path, info, past

    def generate(self, request: SynthesisRequest, options: OutputOptions, history: list | None, http_request=None,
                 progress=None, meta: dict | None = None, lang: str | None = None,
                 job: SpeechJob | None = None, click: str | None = None) -> Iterator[tuple]:
        """Yield (audio_update, file_path, subtitle_paths, info_markdown, take_markdown, history) tuples; audio
        streams when asked. `job`: the validator's checked job for this request (else it is prepared here).
        `click`: the page's id of the click that asked for it (`stop` names it).

        The first five outputs are for the tab; `history` is this browser's list of past results.
        """
        import gradio as gr

        lang = lang or _lang(http_request)
        try:
            job = job or self.prepare(request, options, bool((meta or {}).get("consent")), caller_of(http_request))
        except InvalidRequest as exc:
            raise refusal(strings.message(exc, lang), exc) from None
        cancel = self.cancel_flag(http_request, click)
        try:
            first_reasons: dict[int, list[str]] = {}  # segment → why its first take was refused
            report = progress_adapter(progress, lang, first_reasons)
            started = time.perf_counter()
            gain: float | None = None
            skip = gr.skip()
            try:
                live = self.speech.start(job, progress=report, cancel=cancel)
                rate = live.sample_rate
                for chunk in live.chunks():
                    if job.request.stream:
                        if job.loudness is not None and gain is None:
                            gain = audio_utils.stream_gain(chunk.samples, rate)
                        out = chunk.samples * gain if gain else chunk.samples
                        yield player_audio(rate, out), skip, skip, skip, skip, skip
                result = live.result()
            except Cancelled:  # Stop (or the page closed): a state, not an error; the last result stays
                yield skip, skip, skip, plain_html(strings.label("stopped", lang)), "", skip
                return
            except CosyVoiceError as exc:
                raise refusal(failure_text(exc, lang), exc) from None
            wave = result.samples
            path = self._save(wave, rate, options.fmt)
            subtitles = [str(p) for p in write_subtitles(path, list(result.cues))] or None
            elapsed = time.perf_counter() - started
            info = (strings.label("result_info", lang).format(seconds=result.seconds, seed=result.seed, elapsed=elapsed)
                    + (strings.label("result_rtf", lang).format(rtf=elapsed / result.seconds) if result.seconds else ""))
            entry = {"id": uuid.uuid4().hex[:8], "time": time.strftime("%H:%M:%S"), "mode": request.mode.value,
                     "text": job.original_text[:200], "voice": (meta or {}).get("voice", request.speaker or ""),
                     "seed": result.seed, "speed": request.speed, "file": str(path), "subtitles": subtitles or [],
                     "request": (meta or {})}
            new_history = ([entry] + list(history or []))[:HISTORY_LIMIT]
            audio_out = skip if job.request.stream else player_audio(rate, wave)
            yield (audio_out, str(path), subtitles, info,
                   take_summary(list(result.takes), job.policy is not None, lang, first_reasons), new_history)
        finally:  # Stop now finds no running job in this session
            self.forget_flag(http_request, cancel)

    def _save(self, wave: np.ndarray, rate: int, fmt: str) -> Path:
        path = self.output_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}.{fmt}"
        write_atomic(path, audio_utils.encode(wave, rate, fmt))  # a kill never leaves half a result file
        return path


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
