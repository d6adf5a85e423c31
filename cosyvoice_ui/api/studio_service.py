"""The studio parts of the REST service, without HTTP: what a result carries beside its audio (subtitles, take
reports), pronunciation glossaries (stored, previewed) and transcription. The speech job itself (takes checked,
cues timed) is `serving/jobs.py`.

`ApiService` (service.py) calls the take and subtitle helpers when it shapes a result; the glossary and
transcription routes (`routes_studio.py`) call `StudioService`. Failures are `InvalidRequest`s (422 unless
`errors.py` says otherwise); nothing here imports FastAPI.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..audio import TRANSCRIPTION_LIMITS
from ..errors import InvalidRequest
from ..serving.glossary import Glossary, GlossaryStore, applied, make_glossary, preview, resolve_glossary, to_json
from ..serving.takes import RetryPolicy, SegmentReport
from ..serving.transcription import POCKETSPHINX, Transcriber, backend_for, shared_transcriber
from ..settings import Settings
from ..serving.subtitles import Cue, check_subtitle_format, render
from ..types import Audio

if TYPE_CHECKING:
    from ..serving.manager import ModelManager

# `model` values of OpenAI's transcription API: they mean "the server's recogniser", not a name of ours.
OPENAI_ASR_MODELS = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")
TRANSCRIPT_FORMATS = ("json", "text")


class GlossaryNotFound(InvalidRequest):
    """A saved glossary named in the path does not exist (one named in a body is `glossary_unknown`, 422)."""

    def __init__(self, message: str, **params: object) -> None:
        super().__init__("glossary_not_found", message, **params)


# --- takes ---------------------------------------------------------------------------------------------


def policy_tag(policy: RetryPolicy | None) -> str:
    """What the result cache keys on: results made under another policy are other results."""
    if policy is None:
        return "off"
    return f"retries={policy.retries};verify={policy.verify is not None};recall={policy.min_recall}"


@dataclass(frozen=True)
class RunNotes:
    """What a whole result comes with beside its audio: subtitle cues and the take reports."""

    cues: tuple[Cue, ...] = ()
    takes: tuple[SegmentReport, ...] = ()
    marked: bool | None = None  # the result carries the watermark (None: not known), for the audit trail's replays

    @property
    def retries(self) -> int:
        return sum(max(0, t.attempts - 1) for t in self.takes)


def take_records(takes: tuple[SegmentReport, ...]) -> list[dict]:
    """The `takes` field of a /tts result."""
    return [{"segment": t.segment, "text": t.text, "attempts": t.attempts, "ok": t.check.ok,
             "reasons": list(t.check.reasons), "seconds": round(t.check.seconds, 3), "seed": t.seed,
             "detail": t.check.detail} for t in takes]


class NotesCache:
    """The notes of the results in the result cache, by the same key (a hit needs its cues and takes too; a key
    missing here is treated as a miss). Bounded, thread-safe."""

    def __init__(self, entries: int) -> None:
        self.entries = max(0, entries)
        self._items: OrderedDict[str, RunNotes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str | None) -> RunNotes | None:
        if key is None:
            return None
        with self._lock:
            notes = self._items.get(key)
            if notes is not None:
                self._items.move_to_end(key)
            return notes

    def put(self, key: str | None, notes: RunNotes) -> None:
        if key is None or self.entries == 0:
            return
        with self._lock:
            self._items[key] = notes
            self._items.move_to_end(key)
            while len(self._items) > self.entries:
                self._items.popitem(last=False)


# --- subtitles -------------------------------------------------------------------------------------------


def subtitle_choice(value: str | None, stream: bool) -> str | None:
    """The subtitle format a /tts body asks for (None: none); refused with `stream`, which cannot carry them."""
    if value is None or str(value).strip() == "":
        return None
    fmt = check_subtitle_format(value)
    if stream:
        raise InvalidRequest("subtitles_need_whole_result", "subtitles come with the whole result, not with a "
                             "streamed body (its timing is only known at the end): set `stream` to false to get "
                             "the audio and its subtitles in one JSON reply", param="subtitles")
    return fmt


def subtitle_text(notes: RunNotes, fmt: str | None) -> str | None:
    return render(notes.cues, fmt) if fmt else None


# --- glossaries ------------------------------------------------------------------------------------------


def glossary_tag(glossary: Glossary | None) -> str:
    """The cache's view of a glossary: its entries' fingerprint ("" for none)."""
    if glossary is None or not glossary.entries:
        return ""
    return hashlib.sha256(to_json(glossary).encode()).hexdigest()[:16]


def glossary_label(glossary: Glossary | None) -> str | None:
    """How a result names its glossary: the saved id, "inline", or None."""
    if glossary is None:
        return None
    return glossary.id or "inline"


def glossary_record(glossary: Glossary) -> dict:
    data = glossary.to_dict()
    data.pop("version", None)
    return {**data, "object": "glossary"}


class StudioService:
    """Saved glossaries, their preview, and transcription, for the REST routes.

    Not responsible for synthesis (the glossary of a synthesis request is applied by `ApiService`).
    """

    def __init__(self, manager: ModelManager, settings: Settings, store: GlossaryStore,
                 decode_audio=None) -> None:
        self.manager = manager
        self.settings = settings
        self.store = store
        self._decode_audio = decode_audio  # ApiService.decode_audio: base64/bytes → Audio, size-capped

    # --- glossaries --------------------------------------------------------------------------------

    def glossaries(self) -> list[dict]:
        return [glossary_record(g) for g in self.store.list()]

    def glossary(self, glossary_id: str) -> dict:
        return glossary_record(self.require(glossary_id))

    def require(self, glossary_id: str) -> Glossary:
        glossary = self.store.get(glossary_id)
        if glossary is None:
            raise GlossaryNotFound(f"there is no saved glossary {glossary_id!r}; saved glossaries: "
                                   f"{', '.join(self.store.ids()) or 'none'} (POST /v1/glossaries adds one)",
                                   glossary=str(glossary_id), param="glossary_id")
        return glossary

    def create(self, name: str, entries: object, case_sensitive: bool = False) -> dict:
        """A new saved glossary; its id is made from the name (never replaces another)."""
        checked = make_glossary(name, entries, case_sensitive)
        return glossary_record(self.store.save(checked))

    def put(self, glossary_id: str, name: str, entries: object, case_sensitive: bool = False) -> tuple[dict, bool]:
        """Create or replace the glossary `glossary_id`; (its record, True when it is new)."""
        checked = make_glossary(name or glossary_id, entries, case_sensitive)
        new = self.store.get(glossary_id) is None
        stored = self.store.save(Glossary(glossary_id, checked.name, checked.entries, checked.case_sensitive))
        return glossary_record(stored), new

    def delete(self, glossary_id: str) -> None:
        try:
            removed = self.store.remove(glossary_id)
        except OSError as exc:
            raise InvalidRequest("glossary_store_unwritable", "the glossary could not be deleted "
                                 f"({exc.strerror or 'error'}); check that the glossary folder is writable") from None
        if not removed:
            self.require(glossary_id)  # raises GlossaryNotFound

    def preview(self, text: str, value: object) -> dict:
        """How `text` will be read with the glossary `value` (saved id or inline): the rewritten text, the
        loaded model's segments, and which entries were used or skipped. Never loads a model."""
        stripped = (text or "").strip()
        if not stripped:
            raise InvalidRequest("text_empty", "the text to preview is empty; type a sentence", param="text")
        if len(stripped) > self.settings.max_text_chars:
            raise InvalidRequest("text_too_long", f"the text has {len(stripped)} characters; the limit is "
                                 f"{self.settings.max_text_chars}", param="text",
                                 chars=len(stripped), limit=self.settings.max_text_chars)
        glossary = resolve_glossary(self.store, value)
        engine = self.manager.loaded
        info = engine.info if engine is not None else self.manager.info()
        result = applied(text, glossary, info)
        return {"text": result.text, "segments": preview(engine, text, glossary, info),
                "used": [e.to_dict() for e in result.used],
                "skipped": [{"word": e.word, "reason": reason} for e, reason in result.skipped],
                "model_loaded": engine is not None}

    # --- transcription -------------------------------------------------------------------------------

    def transcriber(self) -> Transcriber:
        """The process's one Transcriber (shared with the UI and the CLI), made on first use."""
        return shared_transcriber(self.settings.models_dir)

    def backend_for(self, model: str | None) -> str | None:
        """The recogniser a request names: None for the best available; OpenAI's model names and "auto" mean
        the server's choice (`--asr-model`)."""
        name = (model or "").strip()
        if not name or name.lower() in OPENAI_ASR_MODELS or name.lower() == "auto":
            return backend_for(self.settings.asr_model)
        return name

    def transcribe(self, data: str | bytes | None, language: str | None = None, model: str | None = None) -> dict:
        """The words said in a recording (base64 or file bytes) → {text, language, backend, rough, seconds}."""
        audio: Audio | None = (self._decode_audio(data, "audio", TRANSCRIPTION_LIMITS) if self._decode_audio
                               else None)
        if audio is None:
            raise InvalidRequest("audio_missing", "no recording was sent: add the audio to transcribe (a wav, "
                                 "flac, mp3 or ogg file)", param="audio", what="audio")
        transcript = self.transcriber().transcribe(audio, language, backend=self.backend_for(model))
        return {"text": transcript.text, "language": transcript.language, "backend": transcript.backend,
                "rough": transcript.rough, "seconds": round(audio.duration, 3)}

    def asr_models(self) -> dict:
        """What can transcribe now, and what can be downloaded (with the command that does it)."""
        transcriber = self.transcriber()
        data = []
        for choice in transcriber.choices():
            if choice.ready:
                download = None
            elif choice.name == POCKETSPHINX:
                download = "pip install pocketsphinx==5.1.1"
            else:
                download = f"python -m cosyvoice_ui download {choice.name}"
            data.append({"id": choice.name, "object": "model", "description": choice.description,
                         "size_gb": choice.size_gb, "ready": choice.ready, "download": download})
        return {"object": "list", "available": transcriber.available(), "data": data}


def check_transcript_format(value: str | None) -> str:
    fmt = (value or "json").strip().lower()
    if fmt not in TRANSCRIPT_FORMATS:
        raise InvalidRequest("bad_response_format", f"response_format {value!r} is not supported here; choose json "
                             "or text", param="response_format", format=str(value))
    return fmt
