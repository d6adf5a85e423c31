"""What the REST routes do, without HTTP: turn API bodies into checked requests, run them through
the shared `ModelManager` queue, serve repeats from the result cache, manage saved voices.

The routes (`routes.py`) only parse, call one method here and shape the response. Failures are domain
errors (below, and `InvalidRequest`); `errors.py` maps them to status codes. Nothing here imports
FastAPI or Starlette (a test checks it), so the Gradio API runs the same service.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import audio as audio_utils
from .stream import STREAM_FORMATS
from .studio_service import NotesCache, RunNotes, StudioService, glossary_tag, policy_tag, subtitle_choice
from ..serving.audit import Caller
from ..serving.default_voice import DEFAULT_NAME, VoiceRef, VoiceResolver
from ..errors import CosyVoiceError, InvalidRequest
from ..known_models import models_for, name_list
from ..serving.glossary import Glossary, GlossaryStore
from ..serving.jobs import JobOptions, Live, SpeechJob, SpeechJobs, instruct_takes_voice
from ..serving.manager import ModelManager
from ..serving.result_cache import CachedResult, ResultCache, request_key
from ..studio.dub_jobs import DubJobs
from ..serving.takes import RetryPolicy
from ..settings import Settings
from ..types import Audio, CheckedRequest, EngineInfo, Mode, SynthesisRequest
from ..validation import infer_mode, mode_hint
from ..serving.voice_aliases import GENERIC_MODELS, OPENAI_MODELS, VoiceAliases
from ..serving.voice_service import delete_voice
from ..serving.voices import SavedVoice, VoiceLibrary

log = logging.getLogger(__name__)

VOICE_MODES = (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC)
QUEUE_RETRY_S = 5


# --- domain errors: what went wrong, in the service's words (`errors.py` gives each its status) ----------


class PayloadTooLarge(InvalidRequest):
    """A recording is over the upload limit."""

    def __init__(self, message: str, **params: object) -> None:
        super().__init__("payload_too_large", message, **params)


class VoiceNotFound(InvalidRequest):
    """A saved voice named in the path does not exist (a voice named in a body is `voice_unknown`)."""

    def __init__(self, message: str, **params: object) -> None:
        super().__init__("voice_not_found", message, **params)


class ModelNotFound(InvalidRequest):
    """The `model` a request names is not one this server accepts."""

    def __init__(self, message: str, **params: object) -> None:
        super().__init__("model_not_found", message, **params)


class QueueFull(CosyVoiceError):
    """Too many jobs are waiting; the client should retry after `retry_after_s` seconds."""

    code = "queue_full"

    def __init__(self, message: str, retry_after_s: int = QUEUE_RETRY_S) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class ModelUnavailable(CosyVoiceError):
    """The model cannot be described or loaded (missing files, bad folder)."""

    code = "model_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Prepared:
    """A checked speech job (`serving/jobs.py`) and how the API delivers it: the file format and subtitles."""

    job: SpeechJob
    fmt: str
    subtitles: str | None = None  # "srt" | "vtt": the result carries subtitles

    @property
    def request(self) -> CheckedRequest:
        return self.job.request

    @property
    def normalize(self) -> bool:
        return self.job.loudness is not None

    @property
    def glossary(self) -> Glossary | None:
        return self.job.glossary

    @property
    def policy(self) -> RetryPolicy | None:
        return self.job.policy


@dataclass(frozen=True)
class Finished:
    """A whole result: post-processed samples, their rate and seed, and whether it came from the cache."""

    samples: np.ndarray
    sample_rate: int
    seed: int
    cached: bool
    notes: RunNotes = RunNotes()  # subtitle cues and take reports


def _base64_audio(text: str, what: str) -> bytes:
    """A base64 string, or a data: URL (`data:audio/wav;base64,...`), → the file's bytes."""
    if text[:5].lower() == "data:":
        head, comma, text = text.partition(",")
        if not comma or not head.lower().endswith(";base64"):  # no payload, or percent-encoded text
            raise InvalidRequest("audio_not_base64", f"{what} is a data: URL but not a base64 one; send "
                                 "data:audio/wav;base64,<the file in base64>, or the base64 text alone",
                                 what=what)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("audio_not_base64", f"{what} must be a base64-encoded audio file (wav, flac, "
                             "mp3 or ogg)", what=what) from None


class ApiService:
    """Request building, validation, queueing, caching and saved voices for the REST API.

    Not responsible for HTTP details (routes, status codes, streaming bodies: `routes.py`, `errors.py`,
    `stream.py`).
    """

    def __init__(self, manager: ModelManager, settings: Settings, library: VoiceLibrary | None = None,
                 cache: ResultCache | None = None) -> None:
        self.manager = manager
        self.settings = settings
        self.library = library or VoiceLibrary(settings.voices_dir, settings.max_voices)
        self.voices = VoiceResolver(self.library, settings.default_voice)
        self.aliases = VoiceAliases.from_file(settings.voice_aliases_file)
        self.cache = cache if cache is not None else ResultCache(settings.cache_entries)
        self.max_upload_bytes = int(settings.max_upload_mb * 2**20)
        self.glossaries = GlossaryStore(settings.glossary_dir, settings.max_glossaries)
        self.speech = SpeechJobs(manager, settings, self.library, self.voices, self.glossaries)
        self.notes = NotesCache(settings.cache_entries)
        self.studio = StudioService(manager, settings, self.glossaries, self.decode_audio)
        self.dubs = DubJobs(self.speech, settings.projects_dir / "dubs", settings.max_projects)  # routes_dub.py
        self.peer_models: tuple[str, ...] = ()  # the other models an app serving several accepts by name

    # --- building requests ----------------------------------------------------------------------------

    def decode_audio(self, data: str | bytes | None, what: str,
                     limits: audio_utils.AudioLimits = audio_utils.PROMPT_LIMITS) -> Audio | None:
        """Base64 (optionally a data: URL) or raw bytes → Audio; size-capped like uploads, decoded within the
        door's `limits` (a voice prompt by default)."""
        if data is None or data == "":
            return None
        if isinstance(data, str):
            data = _base64_audio(data, what)
        if len(data) > self.max_upload_bytes:
            raise PayloadTooLarge(f"the {what} is {len(data) / 2**20:.1f} MB; the limit is "
                                  f"{self.settings.max_upload_mb:g} MB (--max-upload-mb)",
                                  size_mb=round(len(data) / 2**20, 1), limit_mb=self.settings.max_upload_mb)
        return audio_utils.read_audio(data, what=what, limits=limits)

    def saved_voice(self, voice_id: str, mode: Mode, info: EngineInfo | None = None) -> SavedVoice:
        voice = self.library.require(voice_id)
        if mode not in VOICE_MODES and not (mode is Mode.INSTRUCT and instruct_takes_voice(info)):
            raise InvalidRequest("voice_mode", f"saved voices work in zero_shot, cross_lingual and vc modes, not "
                                 f"{mode.value}; for {mode.value} choose a preset speaker (GET /v1/models)",
                                 mode=mode.value)
        return voice

    def tts_request(self, body, caller: Caller = Caller("rest")) -> Prepared:  # noqa: B008 (a frozen record)
        """`POST /tts` body → a checked request; `caller`: who asks, through which surface (the audit trail)."""
        info = self.manager.require_info()  # an unreadable model says why, not "unknown voice"
        self.check_model(body.model or "", info)
        presets = info.speakers if info else ()
        speaker = (body.speaker or "").strip() or None
        saved_id = body.voice_id or (speaker if speaker and speaker not in presets
                                     and self.library.get(speaker) else None)
        voice = self.library.require(saved_id) if saved_id else None
        if body.mode:
            try:
                mode = Mode.parse(body.mode)
            except ValueError as exc:
                raise InvalidRequest("mode_unknown", str(exc), mode=body.mode) from None
        else:
            cloned = voice is not None or bool(body.prompt_audio)
            mode = infer_mode(source=bool(body.source_audio), voice=cloned,
                              transcript=bool(body.prompt_text.strip() or (voice and voice.transcript)),
                              instruct=bool(body.instruct_text.strip()))
            if cloned and body.instruct_text.strip() and instruct_takes_voice(info) and not body.source_audio:
                mode = Mode.INSTRUCT  # instruct2: the style text, spoken in the given voice
        if voice is not None:
            self.saved_voice(voice.id, mode, info)
        prompt = self.decode_audio(body.prompt_audio, "prompt_audio")
        source = self.decode_audio(body.source_audio, "source_audio", audio_utils.SOURCE_LIMITS)
        request = SynthesisRequest(
            mode=mode, text=body.text, prompt_audio=prompt,
            prompt_text=body.prompt_text, instruct_text=body.instruct_text,
            speaker=voice.id if voice else speaker, source_audio=source, speed=body.speed, seed=body.seed,
            stream=body.stream, text_frontend=body.text_frontend, voice_match=body.voice_match)
        fmt = self.output_format(body.format, streamed=body.stream)
        subtitles = subtitle_choice(body.subtitles, body.stream)
        options = JobOptions(glossary=body.glossary, check_takes=body.check_takes, take_retries=body.take_retries,
                             loudness=audio_utils.DEFAULT_LUFS if body.normalize else None,
                             mode_given=bool(body.mode), consent=bool(getattr(body, "consent", False)), caller=caller)
        return Prepared(self.speech.prepare(request, options, info), fmt, subtitles)

    def speech_request(self, body, caller: Caller = Caller("openai")) -> tuple[Prepared, str | None]:  # noqa: B008
        """`POST /v1/audio/speech` body → (checked request, how to stream: None | "audio" | "sse")."""
        info = self.manager.require_info()  # an unreadable model says why, not "unknown voice"
        self.check_model(body.model, info)
        voice_name = body.voice.get("id") if isinstance(body.voice, dict) else body.voice
        voice_name = str(voice_name or "").strip()
        instructions = body.instructions.strip()
        ref = self.resolve_voice(voice_name, info)
        voice = None
        if ref.is_preset:
            if instructions and instruct_takes_voice(info):
                raise InvalidRequest("instructions_need_voice", f"instructions on {info.name} are spoken in a cloned "
                                     "voice, not by a preset speaker; choose a saved voice (GET /v1/audio/voices) "
                                     "or drop `instructions`", what="instructions")
            mode = Mode.INSTRUCT if instructions else Mode.SFT
        else:
            if instructions and not instruct_takes_voice(info):
                with_voice = name_list(models_for(Mode.INSTRUCT, instruct_voice=True))
                raise InvalidRequest("instructions_need_preset", "instructions work with a preset speaker of an "
                                     f"instruct model ({mode_hint(Mode.INSTRUCT)}) or with any voice on "
                                     f"{with_voice}, not with a cloned voice on this model; drop `instructions` "
                                     "or choose a preset voice", what="instructions")
            voice = self.library.require(ref.id) if ref.kind == "saved" else None
            if instructions:  # instruct2: the instructions, spoken in this voice
                mode = Mode.INSTRUCT
            else:
                mode = Mode.ZERO_SHOT if ref.transcript else Mode.CROSS_LINGUAL
        stream = (body.stream_format or "").strip().lower() or None
        if stream not in (None, "audio", "sse"):
            raise InvalidRequest("bad_stream_format", f"unknown stream_format {body.stream_format!r}; choose audio "
                                 "or sse")
        fmt = body.response_format.strip().lower()
        if stream == "sse":
            fmt = self.output_format(fmt, streamed=True)
        elif stream == "audio" and fmt not in STREAM_FORMATS:
            stream = None  # mp3/flac cannot be cut into independent pieces: sent whole when done
        request = SynthesisRequest(mode=mode, text=body.input, instruct_text=instructions, speaker=ref.id,
                                   speed=body.speed, seed=body.seed, stream=stream is not None)
        fmt = self.output_format(fmt, streamed=stream is not None)
        options = JobOptions(glossary=body.glossary, loudness=audio_utils.DEFAULT_LUFS if body.normalize else None,
                             caller=caller)
        return Prepared(self.speech.prepare(request, options, info), fmt), stream

    # --- voices and models by name ------------------------------------------------------------------

    def default_voice(self, info: EngineInfo | None = None) -> VoiceRef | None:
        return self.voices.default(info if info is not None else self.manager.info())

    def alias_map(self, info: EngineInfo | None) -> dict[str, str]:
        """OpenAI voice name → this backend's voice (follows the loaded model)."""
        default = self.voices.default(info)
        return self.aliases.mapping(info, DEFAULT_NAME if default else None,
                                    exists=lambda name: self.voices.lookup(name, info) is not None)

    def resolve_voice(self, name: str, info: EngineInfo | None) -> VoiceRef:
        """A voice by preset name, saved id, "default" (or nothing), or OpenAI alias; else `voice_unknown`."""
        ref = self.voices.lookup(name, info)
        if ref is None and name:
            target = self.alias_map(info).get(name.lower())
            ref = self.voices.lookup(target, info) if target else None
        if ref is not None:
            return ref
        presets = info.speakers if info else ()
        if not name:
            raise InvalidRequest("voice_missing", "this model has no default voice: name a preset or a saved voice "
                                 "in `voice` (GET /v1/audio/voices lists them)", what="voice")
        known = ", ".join(list(presets) + list(self.library.ids())) or "none (save one with POST /v1/voices)"
        raise InvalidRequest("voice_unknown", f"unknown voice {name!r}; this server's voices: {known} (and the "
                             "OpenAI names, see GET /v1/audio/voices)", voice=name, what="voice")

    def require_info(self) -> EngineInfo:
        """The model's description (read without loading it); `ModelUnavailable` when it cannot be read."""
        info = self.manager.info()
        if info is None:
            raise ModelUnavailable(f"the model cannot be read: {self.manager.status().error}")
        return info

    def model_names(self, info: EngineInfo | None) -> tuple[str, ...]:
        """The `model` values /v1/audio/speech accepts: OpenAI's TTS models and this server's model."""
        names = list(OPENAI_MODELS + GENERIC_MODELS)
        if info is not None:
            names += [info.name, info.family]
        names.append(Path(self.manager.model_id).name)
        names += self.peer_models
        return tuple(dict.fromkeys(n for n in names if n))

    def check_model(self, model: str, info: EngineInfo | None) -> None:
        model = (model or "").strip()
        if model and model not in self.model_names(info) and model.lower() not in OPENAI_MODELS:
            raise ModelNotFound(f"unknown model {model!r}; this server accepts "
                                f"{', '.join(self.model_names(info))}", param="model")

    def voice_listing(self) -> dict:
        """Every name `voice` accepts now: presets, saved voices, the default and the OpenAI aliases."""
        info = self.manager.info()
        default = self.voices.default(info)
        # Presets alone: the offline backend also takes saved voices as speakers, and those are listed as saved.
        entries = [{"id": name, "name": name, "kind": "preset"} for name in (info.presets if info else ())]
        entries += [{"id": v.id, "name": v.name, "kind": "saved"} for v in self.library.list()]
        if default is not None and default.kind == "builtin":
            entries.append({"id": default.id, "name": "Built-in example voice", "kind": "builtin"})
        aliases = self.alias_map(info)
        entries += [{"id": alias, "name": alias, "kind": "alias", "target": target} for alias, target in aliases.items()]
        return {"object": "list", "data": entries, "voices": entries,
                "default": default.to_dict() if default else None, "aliases": aliases}

    def output_format(self, fmt: str, streamed: bool) -> str:
        fmt = (fmt or "wav").strip().lower()
        supported = STREAM_FORMATS if streamed else audio_utils.FORMATS
        if fmt not in supported:
            extra = " (a streamed body is wav or pcm; others are sent whole)" if fmt in audio_utils.FORMATS else ""
            raise InvalidRequest("bad_format", f"unsupported audio format {fmt!r}{extra}; "
                                 f"{'streaming supports' if streamed else 'choose one of'} {', '.join(supported)}",
                                 format=fmt)
        return fmt

    # --- running --------------------------------------------------------------------------------------

    def cache_key(self, job: Prepared) -> str | None:
        if not job.job.seed_given:
            return None
        voice = job.job.voice
        saved = self.library.get(voice.id) if voice is not None and voice.kind == "saved" else None
        tag = f"{saved.id}@{saved.created}" if saved is not None else (voice.id if voice is not None else "")
        return request_key(self._model_tag(), job.request, tag, normalize=job.normalize,
                           takes=policy_tag(job.policy), glossary=glossary_tag(job.glossary))

    def cached(self, job: Prepared) -> CachedResult | None:
        """A recent identical result (its replay is logged like a job: the audit trail)."""
        key = self.cache_key(job)
        hit = self.cache.get(key)
        if hit is not None:
            notes = self.notes.get(key)
            self.speech.replayed(job.job, len(hit.samples) / hit.sample_rate if hit.sample_rate else 0.0,
                                 notes.marked if notes is not None else None)
        return hit

    def run(self, job: Prepared) -> Finished:
        """The whole result (from the cache when the same seeded request ran recently)."""
        key = self.cache_key(job)
        notes = self.notes.get(key)
        hit = self.cache.get(key) if notes is not None else None  # a hit needs its cues and takes too
        if hit is not None:
            self.speech.replayed(job.job, len(hit.samples) / hit.sample_rate if hit.sample_rate else 0.0, notes.marked)
            return Finished(hit.samples, hit.sample_rate, hit.seed, True, notes)
        self._check_queue()
        rendered = self.speech.render(job.job)
        notes = RunNotes(rendered.cues, rendered.takes, bool(getattr(rendered, "watermarked", False)))
        self.cache.put(key, rendered.samples, rendered.sample_rate, rendered.seed)
        self.notes.put(key, notes)
        return Finished(rendered.samples, rendered.sample_rate, rendered.seed, False, notes)

    def start(self, job: Prepared) -> Live:
        """Queue the job and wait for its first chunk; the returned job holds the slot while it streams.

        Anything wrong before the first audio (bad prompt, model load failure) raises here, so the client
        still gets a proper error status.
        """
        self._check_queue()
        return self.speech.start(job.job)

    def remember(self, job: Prepared, samples: np.ndarray, sample_rate: int) -> None:
        self.cache.put(self.cache_key(job), samples, sample_rate, int(job.request.seed))

    def _check_queue(self) -> None:
        queued = self.manager.status().queued
        if queued >= self.settings.queue_size:
            raise QueueFull(f"{queued} jobs are waiting already; retry shortly")

    def _model_tag(self) -> str:
        info = self.manager.info()
        return f"{self.manager.model_id}|{info.name if info else ''}"

    # --- saved voices -------------------------------------------------------------------------------------

    def add_voice(self, name: str, data: bytes | str, transcript: str, consent: bool = False,
                  caller: Caller = Caller("rest")) -> tuple[SavedVoice, bool]:  # noqa: B008 (a frozen record)
        """Store a voice sent as file bytes/base64 (`SpeechJobs.save_voice`: the consent rule, the audit trail)."""
        audio = self.decode_audio(data, "voice audio")
        if audio is None:
            raise InvalidRequest("prompt_missing", "no audio was sent: add the recording of the voice (3-30 s)")
        self.speech.consent.check_saving(audio, consent)  # before waiting in the queue
        self._check_queue()  # its features are computed by a queued job, so it counts against the same limit
        return self.speech.save_voice(name, audio, transcript, consent, caller, self.library)

    def remove_voice(self, voice_id: str) -> None:
        """Forget a saved voice (its recording, features and registration); `VoiceNotFound` if unknown."""
        if not delete_voice(self.manager, self.library, voice_id):
            raise self._voice_not_found(voice_id)

    def require_voice(self, voice_id: str) -> SavedVoice:
        """The saved voice a path names; `VoiceNotFound` (param `voice_id`) if there is none."""
        voice = self.library.get(voice_id)
        if voice is None:
            raise self._voice_not_found(voice_id, param="voice_id")
        return voice

    def set_default_voice(self, voice_id: str, on: bool) -> None:
        """Make a saved voice the default (`on`), or stop it being the default if it is."""
        self.require_voice(voice_id)
        if on:
            self.library.set_default(voice_id)
        elif self.library.default_id() == voice_id:
            self.library.set_default(None)

    def _voice_not_found(self, voice_id: str, **params: object) -> VoiceNotFound:
        return VoiceNotFound(f"there is no saved voice {voice_id!r}; saved voices: "
                             f"{', '.join(self.library.ids()) or 'none'}", voice=voice_id, **params)

    def features_ready(self, voice_id: str) -> bool:
        engine = self.manager.loaded
        if engine is None:  # registered again from the stored features on the next load
            return any(self.library.path(voice_id).glob("features-*"))
        return voice_id in engine.info.saved_voices
