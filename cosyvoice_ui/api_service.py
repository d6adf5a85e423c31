"""What the REST routes do, without HTTP: turn API bodies into `SynthesisRequest`s, run them through
the shared `ModelManager` queue, serve repeats from the result cache, manage saved voices.

The routes in `api.py` only parse, call one method here and shape the response.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import secrets
import threading
from dataclasses import dataclass, replace

import numpy as np

from . import audio as audio_utils
from .api_security import ApiError, check_blocked, load_blocked_words
from .api_stream import STREAM_FORMATS, LiveJob
from .errors import CosyVoiceError, InvalidRequest
from .families import model_that_can
from .manager import ModelManager
from .result_cache import CachedResult, ResultCache, request_key
from .settings import Settings
from .types import Audio, EngineInfo, Mode, SynthesisRequest
from .validation import check_request, infer_mode
from .voices import SavedVoice, VoiceLibrary, delete_voice, save_voice

log = logging.getLogger(__name__)

VOICE_MODES = (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC)
OPENAI_ONLY_FORMATS = ("opus", "aac")


@dataclass(frozen=True)
class Prepared:
    """A validated request, ready to run: the engine request (seed always set) and how to deliver it."""

    request: SynthesisRequest
    voice: SavedVoice | None
    fmt: str
    normalize: bool
    seed_given: bool


@dataclass(frozen=True)
class Finished:
    """A whole result: post-processed samples, their rate and seed, and whether it came from the cache."""

    samples: np.ndarray
    sample_rate: int
    seed: int
    cached: bool


class ApiService:
    """Request building, validation, queueing, caching and saved voices for the REST API.

    Not responsible for HTTP details (routes, status codes, streaming bodies: `api.py`, `api_stream.py`).
    """

    def __init__(self, manager: ModelManager, settings: Settings, library: VoiceLibrary | None = None,
                 cache: ResultCache | None = None) -> None:
        self.manager = manager
        self.settings = settings
        self.library = library or VoiceLibrary(settings.voices_dir)
        self.cache = cache if cache is not None else ResultCache(settings.cache_entries)
        self.blocked = load_blocked_words(settings.blocked_words_file)
        self.max_upload_bytes = int(settings.max_upload_mb * 2**20)

    # --- building requests ----------------------------------------------------------------------------

    def decode_audio(self, data: str | bytes | None, what: str) -> Audio | None:
        """Base64 (optionally a data: URL) or raw bytes → Audio; size-capped like uploads."""
        if data is None or data == "":
            return None
        if isinstance(data, str):
            text = data.split(",", 1)[1] if data.startswith("data:") else data
            try:
                data = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidRequest("audio_not_base64", f"{what} must be a base64-encoded audio file (wav, flac, "
                                     "mp3 or ogg)", what=what) from None
        if len(data) > self.max_upload_bytes:
            raise ApiError(413, "payload_too_large", f"the {what} is {len(data) / 2**20:.1f} MB; the limit is "
                           f"{self.settings.max_upload_mb:g} MB (--max-upload-mb)")
        return audio_utils.read_audio(data, what=what)

    def saved_voice(self, voice_id: str, mode: Mode) -> SavedVoice:
        voice = self.library.require(voice_id)
        if mode not in VOICE_MODES:
            raise InvalidRequest("voice_mode", f"saved voices work in zero_shot, cross_lingual and vc modes, not "
                                 f"{mode.value}; for {mode.value} choose a preset speaker (GET /v1/models)",
                                 mode=mode.value)
        return voice

    def tts_request(self, body) -> Prepared:
        """`POST /tts` body → a checked request."""
        info = self.manager.info()
        presets = info.speakers if info else ()
        saved_id = body.voice_id or (body.speaker if body.speaker and body.speaker not in presets
                                     and self.library.get(body.speaker) else None)
        voice = self.library.require(saved_id) if saved_id else None
        if body.mode:
            try:
                mode = Mode.parse(body.mode)
            except ValueError as exc:
                raise InvalidRequest("mode_unknown", str(exc), mode=body.mode) from None
        else:
            mode = infer_mode(source=bool(body.source_audio), voice=voice is not None or bool(body.prompt_audio),
                              transcript=bool(body.prompt_text.strip() or (voice and voice.transcript)),
                              instruct=bool(body.instruct_text.strip()))
        if voice is not None:
            self.saved_voice(voice.id, mode)
        request = SynthesisRequest(
            mode=mode, text=body.text, prompt_audio=self.decode_audio(body.prompt_audio, "prompt_audio"),
            prompt_text=body.prompt_text, instruct_text=body.instruct_text,
            speaker=voice.id if voice else body.speaker,
            source_audio=self.decode_audio(body.source_audio, "source_audio"), speed=body.speed, seed=body.seed,
            stream=body.stream, text_frontend=body.text_frontend, voice_match=body.voice_match)
        fmt = self.output_format(body.format, streamed=body.stream)
        return self._finish(request, voice, fmt, body.normalize, info)

    def speech_request(self, body) -> tuple[Prepared, str | None]:
        """`POST /v1/audio/speech` body → (checked request, how to stream: None | "audio" | "sse")."""
        info = self.manager.info()
        voice_name = body.voice.get("id") if isinstance(body.voice, dict) else body.voice
        voice_name = str(voice_name or "").strip()
        presets = info.speakers if info else ()
        instructions = body.instructions.strip()
        voice = None
        if voice_name in presets:
            mode = Mode.INSTRUCT if instructions else Mode.SFT
        elif self.library.get(voice_name) is not None:
            if instructions:
                raise InvalidRequest("instructions_need_preset", "instructions work with a preset speaker of an "
                                     f"instruct model ({model_that_can(Mode.INSTRUCT)}), not with a saved voice; "
                                     "drop `instructions` or choose a preset voice")
            voice = self.library.require(voice_name)
            mode = Mode.ZERO_SHOT if voice.transcript else Mode.CROSS_LINGUAL
        else:
            known = ", ".join(list(presets) + list(self.library.ids())) or "none (save one with POST /v1/voices)"
            raise InvalidRequest("voice_unknown", f"unknown voice {voice_name!r}; this server's voices: {known}",
                                 voice=voice_name)
        stream = (body.stream_format or "").strip().lower() or None
        if stream not in (None, "audio", "sse"):
            raise InvalidRequest("bad_stream_format", f"unknown stream_format {body.stream_format!r}; choose audio "
                                 "or sse")
        fmt = body.response_format.strip().lower()
        if stream == "sse":
            fmt = self.output_format(fmt, streamed=True)
        elif stream == "audio" and fmt not in STREAM_FORMATS:
            stream = None  # mp3/flac cannot be cut into independent pieces: sent whole when done
        request = SynthesisRequest(mode=mode, text=body.input, instruct_text=instructions,
                                   speaker=voice.id if voice else voice_name, speed=body.speed, seed=body.seed,
                                   stream=stream is not None)
        fmt = self.output_format(fmt, streamed=stream is not None)
        return self._finish(request, voice, fmt, body.normalize, info), stream

    def output_format(self, fmt: str, streamed: bool) -> str:
        fmt = (fmt or "wav").strip().lower()
        supported = STREAM_FORMATS if streamed else audio_utils.FORMATS
        if fmt not in supported:
            extra = " (opus and aac are not available)" if fmt in OPENAI_ONLY_FORMATS else ""
            raise InvalidRequest("bad_format", f"unsupported audio format {fmt!r}{extra}; "
                                 f"{'streaming supports' if streamed else 'choose one of'} {', '.join(supported)}",
                                 format=fmt)
        return fmt

    def _finish(self, request: SynthesisRequest, voice: SavedVoice | None, fmt: str, normalize: bool,
                info: EngineInfo | None) -> Prepared:
        check_blocked((request.text, request.instruct_text), self.blocked)
        if request.mode in (Mode.SFT, Mode.INSTRUCT) and not request.speaker and info is not None and info.speakers:
            raise InvalidRequest("speaker_missing", f"{request.mode.value} needs a preset speaker: set `speaker` to "
                                 f"one of {', '.join(info.speakers)} (or send a voice to clone: voice_id or "
                                 "prompt_audio)")
        check_request(request, info, self.settings.max_text_chars, saved_voices=self.library.ids(),
                      needs=model_that_can(request.mode))
        if voice is not None and request.mode is Mode.ZERO_SHOT and request.prompt_audio is None \
                and not (request.prompt_text.strip() or voice.transcript):
            raise InvalidRequest("transcript_missing", f"saved voice {voice.id!r} has no transcript; use "
                                 "cross_lingual mode, or pass prompt_text")
        seed_given = request.seed is not None
        if not seed_given:
            request = replace(request, seed=secrets.randbits(31))
        return Prepared(request, voice, fmt, normalize, seed_given)

    # --- running --------------------------------------------------------------------------------------

    def cache_key(self, job: Prepared) -> str | None:
        if not job.seed_given:
            return None
        tag = f"{job.voice.id}@{job.voice.created}" if job.voice else ""
        return request_key(self._model_tag(), job.request, tag, normalize=job.normalize)

    def cached(self, job: Prepared) -> CachedResult | None:
        return self.cache.get(self.cache_key(job))

    def run(self, job: Prepared) -> Finished:
        """The whole result (from the cache when the same seeded request ran recently)."""
        key = self.cache_key(job)
        hit = self.cache.get(key)
        if hit is not None:
            return Finished(hit.samples, hit.sample_rate, hit.seed, True)
        self._check_queue()
        with self.manager.job() as engine:
            self._ensure_voice(engine, job.voice)
            engine.check(job.request)
            rate = engine.info.sample_rate
            pieces = [chunk.samples for chunk in engine.synthesize(job.request)]
        samples = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        if job.normalize:
            samples = audio_utils.normalize_loudness(samples, rate)
        self.cache.put(key, samples, rate, job.request.seed)
        return Finished(samples, rate, int(job.request.seed), False)

    def start(self, job: Prepared) -> LiveJob:
        """Queue the job and wait for its first chunk; the returned job holds the slot while it streams.

        Anything wrong before the first audio (bad prompt, model load failure) raises here, so the client
        still gets a proper error status.
        """
        self._check_queue()
        stack = contextlib.ExitStack()
        cancel = threading.Event()
        try:
            engine = stack.enter_context(self.manager.job(cancel=cancel))
            self._ensure_voice(engine, job.voice)
            engine.check(job.request)
            chunks = engine.synthesize(job.request, cancel=cancel)
            first = next(chunks, None)
            return LiveJob(engine.info.sample_rate, first, chunks, stack, cancel)
        except BaseException:
            stack.close()
            raise

    def remember(self, job: Prepared, samples: np.ndarray, sample_rate: int) -> None:
        self.cache.put(self.cache_key(job), samples, sample_rate, int(job.request.seed))

    def _check_queue(self) -> None:
        queued = self.manager.status()["queued"]
        if queued >= self.settings.queue_size:
            raise ApiError(503, "queue_full", f"{queued} jobs are waiting already; retry shortly",
                           {"Retry-After": "5"})

    def _ensure_voice(self, engine, voice: SavedVoice | None) -> None:
        if voice is None or voice.id in engine.info.extras.get("saved_voices", ()):
            return
        engine.register_voice(voice.id, self.library.audio(voice.id), voice.transcript, self.library.path(voice.id))

    def _model_tag(self) -> str:
        info = self.manager.info()
        return f"{self.manager.model_id}|{info.name if info else ''}"

    # --- saved voices -------------------------------------------------------------------------------------

    def add_voice(self, name: str, data: bytes | str, transcript: str) -> tuple[SavedVoice, bool]:
        """Store a voice sent as file bytes/base64 (see `voices.save_voice`)."""
        audio = self.decode_audio(data, "voice audio")
        if audio is None:
            raise InvalidRequest("prompt_missing", "no audio was sent: add the recording of the voice (3-30 s)")
        return save_voice(self.manager, self.library, name, audio, transcript)

    def remove_voice(self, voice_id: str) -> bool:
        return delete_voice(self.manager, self.library, voice_id)

    def features_ready(self, voice_id: str) -> bool:
        engine = self.manager.loaded
        if engine is None:  # registered again from the stored features on the next load
            return any(self.library.path(voice_id).glob("features-*"))
        return voice_id in engine.info.extras.get("saved_voices", ())
