"""One speech job for every surface: the UI tabs, the REST routes, the Gradio API and MCP tools, the CLI (one
text or a text file), the studio (script lines, book pieces) and the cluster's ingress all call this module, so
a rule written here holds everywhere.

    prepare(request, options) → SpeechJob     in one order: the glossary rewrites the text, the default voice
                                              fills in a voice the request does not name, the content policy
                                              (`--blocked-words`) reads the text as written and as rewritten,
                                              the retry policy is decided, the seed is fixed, and the one check
                                              runs against the model's description (no model is loaded yet)
    render(job) → Rendered                    a queue slot, the voice registered, the bad-take guard, the
                                              watermark on each chunk (`watermarking.py`; off only by the
                                              server's --no-watermark), the segment clock, the join, the
                                              loudness: samples, cues, take reports, whether it is marked
    start(job) → Live                         the same, streamed: chunks as they come, the whole result at the end
    render_on(engine, job, resolver) → Rendered   for a caller that already holds the engine (a script's lines,
    stream_on(engine, job, resolver) → Live       a book's pieces, the CLI), whole or chunk by chunk

Surfaces read their input into a `SynthesisRequest` and `JobOptions`, and show a `Rendered`; they hold no step
of the pipeline. No HTTP, no Gradio (a test checks it).
"""

from __future__ import annotations

import contextlib
import re
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from .. import audio as audio_utils
from ..errors import InvalidRequest
from ..types import AudioChunk, CheckedRequest, EngineInfo, Mode, ProgressCallback, SynthesisRequest
from ..validation import check_request
from .audit import Caller, audit_log_for, speech_entry, voice_entry
from .consent import Consent, ConsentPolicy
from .content_policy import check_blocked, load_blocked_words
from .default_voice import DEFAULT_NAME, VoiceRef, VoiceResolver
from .glossary import Glossary, GlossaryStore, resolve_glossary, with_glossary
from .subtitles import Cue, SegmentClock
from .takes import RetryPolicy, SegmentReport, guarded_synthesis, policy_from_settings
from .watermarking import shared as shared_watermark

if TYPE_CHECKING:
    from ..engine import Engine
    from ..settings import Settings
    from ..types import Audio
    from .audit import AuditLog
    from .manager import ModelManager
    from .voices import VoiceLibrary

MAX_TAKE_RETRIES = 5


@dataclass(frozen=True)
class JobOptions:
    """How a surface wants a request run, beside the request itself."""

    glossary: object = None  # a saved glossary id, an inline {word: reading}, a `Glossary`, or None
    check_takes: bool | None = None  # None: the server's setting (--no-take-check); else this request's
    take_retries: int | None = None  # None: the server's (--take-retries)
    loudness: float | None = audio_utils.DEFAULT_LUFS  # the whole result's loudness (LUFS); None: as rendered
    mode_given: bool = True  # False: the mode was only inferred, so a default voice may make it a clone
    consent: bool = False  # the caller confirms a new recording's speaker agreed (serving/consent.py)
    caller: Caller = Caller()  # who asks, through which surface (the audit trail: serving/audit.py)


@dataclass(frozen=True)
class SpeechJob:
    """A checked job: exactly what runs, and how its result is finished."""

    request: CheckedRequest  # the text as the model gets it (glossary applied), the seed set
    original_text: str  # the text as it was written (what subtitles show)
    glossary: Glossary | None
    policy: RetryPolicy | None  # None: takes are not checked
    voice: VoiceRef | None  # a saved or built-in voice to register with the engine first
    loudness: float | None
    seed_given: bool
    caller: Caller = Caller()
    audit: AuditLog | None = None  # where the job's line goes when it ends (None: no trail)
    watermark: bool = True  # mark every chunk (the server's `--no-watermark` only: never a request's)


@dataclass(frozen=True)
class Rendered:
    """A whole result: its samples (loudness applied), rate, seed, subtitle cues, take reports, and whether every
    chunk of it carries the watermark."""

    samples: np.ndarray
    sample_rate: int
    seed: int
    cues: tuple[Cue, ...] = ()
    takes: tuple[SegmentReport, ...] = ()
    watermarked: bool = False

    @property
    def retries(self) -> int:
        return sum(max(0, t.attempts - 1) for t in self.takes)

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.sample_rate if self.sample_rate else 0.0


# --- the policies ------------------------------------------------------------------------------------------


def request_policy(settings: Settings, take_retries: int | None = None,
                   check_takes: bool | None = None) -> RetryPolicy | None:
    """The take policy of one request: the server's (`--take-retries`, `--no-take-check`) with the request's
    overrides. None: takes are not checked."""
    policy = policy_from_settings(settings)
    if check_takes is not None:  # the request's word wins (the UI's switch sends False only, when off)
        policy = replace(policy, enabled=bool(check_takes))
    if not policy.enabled:
        return None
    if take_retries is not None:
        if not 0 <= int(take_retries) <= MAX_TAKE_RETRIES:
            raise InvalidRequest("bad_take_retries", f"take_retries must be 0-{MAX_TAKE_RETRIES}, not {take_retries}",
                                 param="take_retries")
        policy = replace(policy, retries=int(take_retries))
    return policy


def instruct_takes_voice(info: EngineInfo | None) -> bool:
    """Whether the model's instruct mode speaks in a given voice (a recording or saved voice, instruct2)
    rather than with a preset speaker."""
    return bool(info and info.instruct_voice and Mode.INSTRUCT in info.modes)


# --- the one job ---------------------------------------------------------------------------------------------


class SpeechJobs:
    """The speech jobs of one model: `prepare` a request, then `render` or `start` it (see the module)."""

    def __init__(self, manager: ModelManager, settings: Settings, library: VoiceLibrary | None = None,
                 resolver: VoiceResolver | None = None, glossaries: GlossaryStore | None = None) -> None:
        self.manager = manager
        self.settings = settings
        self.library = library
        self.resolver = resolver or VoiceResolver(library, settings.default_voice)
        self.glossaries = glossaries if glossaries is not None else GlossaryStore(settings.glossary_dir,
                                                                                  settings.max_glossaries)
        self.blocked = load_blocked_words(settings.blocked_words_file)
        self.consent = ConsentPolicy.from_settings(settings)
        self.audit = audit_log_for(settings)

    def glossary(self, value: object) -> Glossary | None:
        """The glossary a request names (a saved id, inline entries, a `Glossary`); `glossary_unknown` else."""
        return resolve_glossary(self.glossaries, value)

    def saved_ids(self) -> tuple[str, ...]:
        return (tuple(self.library.ids()) if self.library is not None else ()) + self.resolver.usable_ids()

    def prepare(self, request: SynthesisRequest, options: JobOptions = JobOptions(),
                info: EngineInfo | None = None) -> SpeechJob:  # noqa: B008 (a frozen record: a safe default)
        """The checked job of `request` (see the module for the order). Raises `InvalidRequest` naming the first
        problem, before any model is loaded."""
        info = info if info is not None else self.manager.info()  # None: unreadable; its load will say why
        glossary = self.glossary(options.glossary)
        written = request.text
        request = with_glossary(request, glossary, info)  # the rewritten text is what the check and model see
        request, voice = self.resolver.apply(request, info, mode_given=options.mode_given)
        self.consent.check_request(request, options.consent)
        check_blocked((written, request.text, request.instruct_text), self.blocked)
        policy = request_policy(self.settings, options.take_retries, options.check_takes)
        voice = voice or self._saved_voice(request.speaker)
        self._check_voice_fits(request, info, voice)
        seed_given = request.seed is not None
        if not seed_given:  # fixed before the check, so the checked request is exactly the one that runs
            request = replace(request, seed=secrets.randbits(31))
        checked = check_request(request, info, self.settings.max_text_chars, saved_voices=self.saved_ids())
        if checked.mode is Mode.ZERO_SHOT and request.prompt_audio is not None:  # a recording and its transcript
            from .transcription import check_transcript_fits

            check_transcript_fits(request.prompt_text, request.prompt_audio.duration)
        return SpeechJob(checked, written, glossary, policy, voice, options.loudness, seed_given, options.caller,
                         self.audit, watermark=self.settings.watermark)

    def _saved_voice(self, speaker: str | None) -> VoiceRef | None:
        """The saved or built-in voice a request names as its speaker (registered with the engine first)."""
        ref = self.resolver.lookup(speaker, None) if speaker and speaker != DEFAULT_NAME else None
        return ref if ref is not None and not ref.is_preset else None

    @staticmethod
    def _check_voice_fits(request: SynthesisRequest, info: EngineInfo | None, voice: VoiceRef | None) -> None:
        preset_mode = request.mode is Mode.SFT or (request.mode is Mode.INSTRUCT and not instruct_takes_voice(info))
        if preset_mode and not request.speaker and info is not None and info.speakers:
            raise InvalidRequest("speaker_missing", f"{request.mode.value} needs a preset speaker: set `speaker` to "
                                 f"one of {', '.join(info.speakers)} (or send a voice to clone: voice_id or "
                                 "prompt_audio)", what="speaker")
        if voice is not None and voice.kind == "saved" and request.mode is Mode.ZERO_SHOT \
                and request.prompt_audio is None and not (request.prompt_text.strip() or voice.transcript):
            raise InvalidRequest("transcript_missing", f"saved voice {voice.id!r} has no transcript; use "
                                 "cross_lingual mode, or pass prompt_text")

    def save_voice(self, name: str, audio: Audio, transcript: str, consent: bool = False, caller: Caller = Caller(),
                   library: VoiceLibrary | None = None):  # noqa: B008 (a frozen record)
        """The one way every surface saves a voice: the consent rule, `voice_service.save_voice` (the record keeps
        the consent), the audit line. Returns (voice, features ready)."""
        from .voice_service import save_voice

        self.consent.check_saving(audio, consent)
        record = Consent(consent, caller.who).record()
        voice, ready = save_voice(self.manager, library or self.library, name, audio, transcript, consent=record)
        if self.audit is not None:
            self.audit.write(voice_entry(caller, voice.id, audio, record))
        return voice, ready

    def replayed(self, job: SpeechJob, seconds: float, marked: bool | None) -> None:
        """A recent result served again from a cache (no job ran): the audit line still says who got it."""
        if job.audit is not None:
            model = getattr(self.manager.info(), "name", "") if self.manager is not None else ""
            job.audit.write(speech_entry(job.caller, model, job.request, job.original_text, _voice_id(job),
                                         seconds, marked, cached=True))

    def render(self, job: SpeechJob, progress: ProgressCallback | None = None,
               cancel: threading.Event | None = None) -> Rendered:
        """The whole result of `job`, rendered in a queue slot."""
        with self.manager.job(progress=progress, cancel=cancel) as engine:
            return render_on(engine, job, self.resolver, progress, cancel)

    def start(self, job: SpeechJob, progress: ProgressCallback | None = None,
              cancel: threading.Event | None = None) -> Live:
        """Queue the job and wait for its first chunk; the `Live` holds the slot while it streams. Anything wrong
        before the first audio (a bad prompt, a model that cannot load) raises here."""
        cancel = cancel or threading.Event()
        stack = contextlib.ExitStack()
        try:
            engine = stack.enter_context(self.manager.job(progress=progress, cancel=cancel))
            return Live(engine, job, self.resolver, stack, cancel, progress)
        except BaseException:
            stack.close()
            raise


def render_on(engine: Engine, job: SpeechJob, resolver: VoiceResolver | None = None,
              progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> Rendered:
    """`job` on an engine the caller holds: the voice registered, the engine's own check (what needs the model),
    the take guard, the clock, the join and the loudness."""
    run = _Run(engine, job, resolver, progress, cancel)
    for _ in run.chunks():
        pass
    return run.result()


def stream_on(engine: Engine, job: SpeechJob, resolver: VoiceResolver | None = None,
              progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> Live:
    """`render_on`, chunk by chunk (the CLI's `--stream`): a `Live` that holds no queue slot."""
    return Live(engine, job, resolver, contextlib.ExitStack(), cancel or threading.Event(), progress)


class _Run:
    """One job's chunks on an engine, and its result once they are all out."""

    def __init__(self, engine: Engine, job: SpeechJob, resolver: VoiceResolver | None,
                 progress: ProgressCallback | None, cancel: threading.Event | None) -> None:
        if resolver is not None:
            resolver.ensure(engine, job.voice)
        self.engine = engine
        self.job = job
        self.info = engine.info
        self.request = engine.check(job.request)
        self.clock = SegmentClock()
        self.pieces: list[np.ndarray] = []
        self.reports: list[SegmentReport] = []
        self.stream = synthesize(engine, self.request, job.policy, progress, cancel, self.reports)
        # A thin client's engine (serving/remote.py) may bring audio its own server has marked already: marking
        # it again would only add a second layer of the same mark.
        marked_before = bool(getattr(engine, "marks_output", False))
        self.marker = shared_watermark() if job.watermark and not marked_before else None
        self.marked = self.marker is not None or marked_before  # until a chunk could not be marked
        self.rendered: Rendered | None = None
        self.audited = False

    def chunks(self) -> Iterator[AudioChunk]:
        for chunk in self.stream:
            chunk = self._marked(chunk)
            self.clock.feed(chunk)
            self.pieces.append(chunk.samples)
            yield chunk

    def result(self) -> Rendered:
        if self.rendered is None:  # once: the job's end (its audit line) is one event
            self.rendered = self._finish()
            self.audit(getattr(self.rendered, "watermarked", False), self.rendered.seconds)
        return self.rendered

    def audit(self, marked: bool | None, seconds: float, complete: bool = True) -> None:
        """The job's line in the audit trail, once (serving/audit.py)."""
        if self.audited or self.job.audit is None:
            return
        self.audited = True
        self.job.audit.write(speech_entry(self.job.caller, self.info.name, self.request, self.job.original_text,
                                          _voice_id(self.job), seconds, marked, complete=complete))

    def _marked(self, chunk: AudioChunk) -> AudioChunk:
        """The chunk with the watermark: each chunk is marked on its own, as it comes (streamed or not), so a
        stream, any run of its chunks and the whole result all carry it (tests/test_watermark_surfaces.py)."""
        if self.marker is None or not len(chunk.samples):
            return chunk
        samples = self.marker.mark(chunk.samples, chunk.sample_rate)
        if samples is None:  # the weights are not installed: the output goes unmarked, /health says so
            self.marked = False
            return chunk
        return replace(chunk, samples=samples)

    def _finish(self) -> Rendered:
        rate = self.info.sample_rate
        samples = audio_utils.join_chunks(self.pieces)
        if self.job.loudness is not None:
            samples = audio_utils.normalize_loudness(samples, rate, self.job.loudness)
        fallback = self.request.text if self.request.mode is not Mode.VC else ""
        cues = readable_cues(self.clock.cues(fallback_text=fallback), self.job.glossary, self.info,
                             self.job.original_text)
        return Rendered(samples, rate, int(self.request.seed), cues, tuple(self.reports),
                        watermarked=self.marked and bool(len(samples)))


class Live:
    """A running job that owns a queue slot: its chunks as they come (`chunks`), its whole result at the end
    (`result`), and `release` (idempotent: a client that leaves cancels the engine and frees the slot)."""

    def __init__(self, engine: Engine, job: SpeechJob, resolver: VoiceResolver | None, stack: contextlib.ExitStack,
                 cancel: threading.Event, progress: ProgressCallback | None = None) -> None:
        self.sample_rate = engine.info.sample_rate
        self.cancel = cancel
        self.stack = stack
        self.complete = False
        self._released = False
        self._lock = threading.Lock()
        self._run = _Run(engine, job, resolver, progress, cancel)
        self._chunks = self._run.chunks()
        self.first = next(self._chunks, None)  # errors before any audio surface here, with their status

    def chunks(self) -> Iterator[AudioChunk]:
        """Every chunk in order; the slot is released when this ends or is closed."""
        try:
            if self.first is not None:
                yield self.first
            yield from self._chunks
            self.complete = True
            self._run.result()  # the job's end: its whole result (and audit line), also for a caller that streams
        finally:
            self.release()

    def result(self) -> Rendered:
        """The whole result (after `chunks` ended)."""
        return self._run.result()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        if not self.complete:
            self.cancel.set()
            if self._run.pieces:  # audio went out: a stopped stream is logged too, with what went out
                self._run.audit(getattr(self._run, "marked", None),
                                sum(len(p) for p in self._run.pieces) / max(1, self.sample_rate), False)
        try:
            self._chunks.close()
            close = getattr(self._run.stream, "close", None)  # the engine's generator: its own finally runs now
            if close is not None:
                close()
        except ValueError:  # running in another thread right now: it stops at the cancel flag
            pass
        finally:
            self.stack.close()


# --- the pieces the job is made of --------------------------------------------------------------------------


def synthesize(engine: Engine, request: CheckedRequest, policy: RetryPolicy | None,
               progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
               report: list[SegmentReport] | None = None) -> Iterator[AudioChunk]:
    """The request's chunks: through the bad-take guard when takes are checked (a streamed request is checked,
    not retried), else straight from the engine. A remote engine's own server checks and retries its takes:
    here they are only checked (never retried twice)."""
    if policy is None:
        return engine.synthesize(request, progress, cancel)
    if getattr(engine, "retries_takes", False):
        policy = RetryPolicy(enabled=False, retries=0)
    return guarded_synthesis(engine, request, policy, progress, cancel, report=report)


def _voice_id(job: SpeechJob) -> str | None:
    """The voice a job spoke in, as the audit trail names it: a saved, built-in or preset voice (a new recording is
    named by its hash instead)."""
    if job.voice is not None:
        return job.voice.id
    return job.request.speaker or None


def readable_cues(cues: list[Cue], glossary: Glossary | None, info: EngineInfo | None,
                  original: str) -> tuple[Cue, ...]:
    """Cues that show the words the user wrote, not the glossary's respellings or hints the model read: one cue
    is the original text; several get each reading turned back into its word where the original text holds the
    word and not the reading itself (a respelling the user typed stays theirs)."""
    if glossary is None or not glossary.entries or not original.strip() or not cues:
        return tuple(cues)
    if len(cues) == 1:
        return (replace(cues[0], text=" ".join(original.split())),)
    hints = tuple(info.pronunciation) if info is not None else ()
    folded = original.casefold()
    back = sorted(((reading, entry.word) for entry in glossary.entries
                   if (reading := entry.reading_for(hints)) and reading.casefold() not in folded
                   and entry.word.casefold() in folded), key=lambda pair: len(pair[0]), reverse=True)
    if not back:
        return tuple(cues)
    pattern = re.compile("|".join(_whole(reading) for reading, _ in back), re.IGNORECASE)
    words = {reading.casefold(): word for reading, word in back}
    return tuple(replace(cue, text=pattern.sub(lambda m: words[m.group(0).casefold()], cue.text)) for cue in cues)


def _whole(reading: str) -> str:
    """`reading` as a pattern matching it only as a whole word where it starts or ends with a letter."""
    before = r"(?<!\w)" if reading[:1].isalnum() else ""
    after = r"(?!\w)" if reading[-1:].isalnum() else ""
    return before + re.escape(reading) + after
