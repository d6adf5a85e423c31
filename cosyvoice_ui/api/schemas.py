"""Request and response bodies of the REST API (pydantic), which also make the /docs schema."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_SEED = 2**31 - 1
# A glossary a request names: a saved id or an inline {word: pronunciation} object (or a list of entries).
GlossaryValue = str | dict[str, Any] | list[Any] | None


class TTSBody(BaseModel):
    """`POST /tts`. Only `text` is required: with no voice named, the server's default voice speaks.
    Which other fields matter depends on `mode` (omitted: inferred from the other fields)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text": "Hello there!"},
        {"text": "Your call is important to us.", "mode": "sft", "speaker": "英文女", "seed": 7, "format": "wav"},
        {"text": "Hello from a saved voice.", "voice_id": "narrator", "format": "mp3"},
    ]})

    text: str = Field("", description="what to say (all modes except vc)")
    model: str | None = Field(None, description="the model that speaks, by name (GET /v1/models); omitted: the "
                              "server's model. A cluster serves several")
    mode: str | None = Field(None, description="sft | zero_shot | cross_lingual | instruct | vc; omitted: "
                             "vc with source_audio, else zero_shot/cross_lingual with a voice, else sft/instruct")
    speaker: str | None = Field(None, description="preset speaker (sft, instruct) or saved voice id; omitted or "
                                "\"default\": the server's default voice (GET /v1/models says which)")
    voice_id: str | None = Field(None, description="saved voice id (zero_shot, cross_lingual, vc); see GET /v1/voices")
    prompt_audio: str | None = Field(None, description="base64 audio file (wav/flac/mp3/ogg) of the voice to clone")
    prompt_text: str = Field("", description="transcript of prompt_audio (zero_shot)")
    instruct_text: str = Field("", description="speaking style in words (instruct)")
    source_audio: str | None = Field(None, description="base64 audio whose words are re-voiced (vc)")
    speed: float = Field(1.0, description="tempo, 0.5-2.0")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="omitted: a fresh one, returned in X-Seed")
    format: str = Field("wav", description="wav | mp3 | flac | opus (Ogg) | aac (ADTS) | pcm (16-bit "
                        "little-endian mono)")
    stream: bool = Field(False, description="chunked audio body (wav or pcm) that starts before synthesis ends")
    normalize: bool = Field(True, description="bring the result to -20 LUFS")
    text_frontend: bool = Field(True, description="normalise and split the text first")
    voice_match: Literal["quick", "refine"] = Field(
        "quick", description="offline default voice only: quick (seconds) or refine (about a minute) prompt matching")
    subtitles: str | None = Field(None, description="srt | vtt: also return subtitles of the result, one cue per "
                                  "text segment, timed on the returned audio (not with `stream`)")
    glossary: GlossaryValue = Field(None, description="pronunciations applied to `text` first: a saved glossary "
                                    "id (GET /v1/glossaries) or an inline {\"word\": \"pronunciation\"} object")
    take_retries: int | None = Field(None, ge=0, le=5, description="re-renders of a bad take (too long or short "
                                     "for its text, repeated speech) per segment; omitted: the server's setting")
    check_takes: bool | None = Field(None, description="false: neither check nor retry takes; omitted: the "
                                     "server's setting")
    consent: bool = Field(False, description="true: you confirm that the speaker of prompt_audio agreed to have "
                          "their voice cloned. A shared server (public bind or share link, or --require-consent) "
                          "refuses a new recording without it: 428 consent_required. Not needed for a saved voice "
                          "or a preset")


class TakeRecord(BaseModel):
    """How one text segment's take was judged (see `take_retries`)."""

    segment: int
    text: str
    attempts: int = Field(description="takes rendered for it: 1 + its retries")
    ok: bool = Field(description="false: even the kept (least bad) take failed the check")
    reasons: list[str] = Field(description="why the kept take is suspect: too_long, too_short, repeat, asr_mismatch")
    seconds: float
    seed: int = Field(description="the seed of the kept take")
    detail: str = ""


class TTSResult(BaseModel):
    audio: str = Field(description="base64 of the encoded audio")
    sample_rate: int
    duration_s: float
    format: str
    seed: int
    voice: str | None = Field(None, description="the voice that spoke (a preset, saved voice id or builtin)")
    subtitles: str | None = Field(None, description="the SRT or WebVTT text when `subtitles` was asked for")
    subtitle_format: str | None = Field(None, description="srt | vtt (null without subtitles)")
    takes: list[TakeRecord] = Field(default_factory=list, description="one record per text segment (empty when "
                                    "take checks are off)")
    take_retries: int = Field(0, description="takes re-rendered in all (also in the X-Take-Retries header)")
    glossary: str | None = Field(None, description="the glossary applied: its id, \"inline\", or null")


class SpeechBody(BaseModel):
    """`POST /v1/audio/speech`, OpenAI's shape; `seed`, `normalize` and `glossary` are extensions (subtitles
    are a `POST /tts` feature: this body has no `subtitles`)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"model": "tts-1", "input": "Hello there!", "voice": "alloy"},
        {"model": "tts-1", "input": "Hello there!", "voice": "英文女", "response_format": "wav"},
    ]})

    model: str = Field("", description="tts-1, tts-1-hd, gpt-4o-mini-tts or this server's model id; the "
                       "loaded model answers")
    input: str = Field(description="the text to speak")
    voice: str | dict | None = Field(None, description="a preset speaker, a saved voice id, \"default\", or an "
                                     "OpenAI voice name (alloy, ash, ballad, coral, echo, fable, onyx, nova, sage, "
                                     "shimmer, verse; mapped to this server's voices, see GET /v1/audio/voices); "
                                     "omitted: the default voice. {\"id\": ...} works too")
    response_format: str = Field("mp3", description="mp3 | opus | aac | flac | wav | pcm")
    speed: float = Field(1.0, description="0.5-2.0")
    stream_format: str | None = Field(None, description="audio: chunked body (wav/pcm stream as produced); "
                                      "sse: text/event-stream of speech.audio.delta events")
    instructions: str = Field("", description="speaking style (needs an instruct model and a preset voice)")
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    normalize: bool = True
    glossary: GlossaryValue = Field(None, description="extension: a saved glossary id or an inline "
                                    "{\"word\": \"pronunciation\"} object, applied to `input` first")


class VoiceBody(BaseModel):
    """`POST /v1/voices` as JSON (multipart/form-data with a file field `audio` works too)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="display name; the id is made from it")
    transcript: str = Field("", description="what is said in the recording (needed for zero_shot)")
    audio: str = Field(description="base64 audio file, 3-30 s of clear speech")
    consent: bool = Field(False, description="true: you confirm that the speaker of the recording agreed to have "
                          "their voice cloned. A shared server (public bind or share link, or --require-consent) "
                          "refuses a new recording without it: 428 consent_required. Not needed for a saved voice "
                          "or a preset")


class VoiceRecord(BaseModel):
    id: str
    name: str
    transcript: str
    created: str
    sample_rate: int
    duration_s: float
    object: str = "voice"
    features: bool = Field(True, description="False when the loaded backend cannot use saved voices yet")
    consent: dict | None = Field(None, description="{given, at (UTC), by (login or API key id)} when its speaker's "
                                 "consent was confirmed on saving; null when it was not asked (loopback)")


class VoiceList(BaseModel):
    object: str = "list"
    data: list[VoiceRecord]


class InstructionRecord(BaseModel):
    category: str = Field(description="dialect, emotion, rate, volume or style")
    label_zh: str
    label_en: str
    text: str = Field(description="send it as `instructions` (or `instruct_text`); the server adds <|endofprompt|>")


class PrecisionRecord(BaseModel):
    """The precision mode (stock | fast | extra-fast) and, once loaded, what each stage runs as."""

    mode: str
    loaded: bool = Field(description="true: the loaded model computes so; false: the mode it will load in")
    llm: str | None = None
    llm_rows: str | None = Field(None, description="where the int8 LLM's many-row calls (prefills) run when not "
                                 "on its own layers: oneDNN's int8 GEMM on CPUs with AMX; empty when they do not")
    llm_attention: str | None = Field(None, description="where decoding steps' attention runs: \"own kernel, ...\" "
                                      "(one pass over the cached keys and values), empty: torch's ops")
    llm_step: str | None = Field(None, description="how one-row decoding steps run: \"recorded graph\" (a "
                                 "TorchScript trace of the step, the same numbers with less overhead), empty: eagerly")
    flow: str | None = None
    vocoder: str | None = None
    flow_steps: int | None = None


class ModelRecord(BaseModel):
    id: str
    object: str = "model"
    created: int = 0
    owned_by: str = "cosyvoice_ui"
    name: str
    family: str
    sample_rate: int
    modes: list[str]
    speakers: list[str]
    instruct_examples: list[str]
    instructions: list[InstructionRecord] = Field(default_factory=list, description="the model's known-good "
                                                  "instructions (free text works too)")
    instruct_needs: str | None = Field(None, description="what instruct mode speaks with: \"preset\" (a preset "
                                       "speaker), \"voice\" (a saved or uploaded voice), null (no instruct mode)")
    text_tags: list[str] = Field(default_factory=list, description="inline tags the text may carry, e.g. [breath]")
    pronunciation: list[str] = Field(default_factory=list, description="inline pronunciation hints it reads: "
                                     "pinyin ([j][ǐ]), cmu ([R][EH1][D])")
    text_caveats: list[str] = Field(default_factory=list, description="known text limits, e.g. ja_kanji: "
                                    "Japanese kanji may get Chinese readings (write kana)")
    streaming: bool
    device: str
    notes: str
    loaded: bool
    saved_voices: list[str]
    default_voice: dict | None = Field(None, description="{id, kind}: the voice used when a request names none")
    accepted_model_names: list[str] = Field(default_factory=list, description="`model` values "
                                            "/v1/audio/speech accepts")
    precision: PrecisionRecord | None = Field(None, description="how the model computes: in effect when it is "
                                              "loaded, else what it will load as; null for backends without the "
                                              "switch (the offline voice, a remote engine)")


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelRecord]


class ErrorDetail(BaseModel):
    code: str
    message: str
    type: str = Field("invalid_request_error", description="OpenAI's error type (invalid_request_error, "
                      "authentication_error, permission_error, not_found_error, rate_limit_error, server_error)")
    param: str | None = Field(None, description="the request field at fault, when one is")


class ErrorBody(BaseModel):
    """Every error response: OpenAI's shape, so OpenAI clients raise their usual exceptions."""

    error: ErrorDetail


# What each error status means on this API (the /docs text), and the headers it carries.
ERROR_STATUSES: dict[int, str] = {
    400: "The body is not valid JSON (or nests deeper than 64 levels).",
    401: "An API key is needed and was missing or wrong (WWW-Authenticate: Bearer).",
    403: "The server is reachable from the network with no API key set: the REST API is off; or the request "
         "came from another web site's page (see docs/SECURITY.md).",
    404: "No such saved voice or model name.",
    409: "The store cannot be written (read-only or full), or every id made from the name is taken; nothing was "
         "changed.",
    413: "The body or a recording in it is over the upload limit (--max-upload-mb).",
    421: "A loopback server was addressed by another host name (a DNS-rebinding page): use localhost or "
         "127.0.0.1, or start it with --allowed-origin.",
    415: "The body is not JSON (or, where the route takes it, multipart/form-data).",
    422: "The request is well-formed but cannot be served as given (the message says what to change).",
    428: "A shared server needs the speaker's consent for a new recording: send `\"consent\": true` with it (code "
         "consent_required), or use a saved voice or a preset.",
    429: "Over the per-client rate limit; Retry-After says when to try again.",
    502: "The remote engine this server forwards to failed.",
    507: "The store holds as many items as this server keeps (--max-voices, --max-glossaries): delete one first.",
    503: "The model cannot be loaded, the queue is full or the server is shutting down (Retry-After when "
         "it is worth retrying).",
}
_DIGITS = {"schema": {"type": "string", "pattern": "^[0-9]+$"}}
_ERROR_HEADERS: dict[int, dict] = {
    401: {"WWW-Authenticate": {"description": "Bearer", "required": False, "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "seconds until a request is accepted again", "required": True,
                          **_DIGITS}},
    503: {"Retry-After": {"description": "seconds after which retrying is worthwhile", "required": False,
                          **_DIGITS}},
}


def error_responses(*statuses: int) -> dict[int | str, dict]:
    """FastAPI `responses=` entries for these error statuses: the `ErrorBody` model, meaning and headers."""
    out: dict[int | str, dict] = {}
    for status in statuses:
        entry: dict = {"model": ErrorBody, "description": ERROR_STATUSES[status]}
        if status in _ERROR_HEADERS:
            entry["headers"] = _ERROR_HEADERS[status]
        out[status] = entry
    return out


_BINARY = {"schema": {"type": "string", "format": "binary"}}
AUDIO_HEADERS = {
    "X-Seed": {"description": "the seed used; send it back to reproduce the result", "required": True, **_DIGITS},
    "X-Cache": {"description": "hit: served from the recent-results cache", "required": True,
                "schema": {"type": "string", "enum": ["hit", "miss"]}},
    "X-Sample-Rate": {"description": "sample rate of the audio in Hz", "required": True, **_DIGITS},
    "X-Take-Retries": {"description": "bad takes re-rendered for this result (0 when streamed: checked, not "
                       "retried)", "required": True, **_DIGITS},
}


def audio_response(media_types: tuple[str, ...], description: str) -> dict:
    """A 200 `responses=` entry for audio bodies (binary, one of `media_types`) with the audio headers."""
    return {"description": description, "headers": AUDIO_HEADERS,
            "content": {media: dict(_BINARY) for media in media_types}}


class VoiceEntry(BaseModel):
    id: str
    name: str
    kind: str = Field(description="preset | saved | builtin | alias")
    target: str | None = Field(None, description="aliases: the voice the name maps to")


class SpeechVoiceList(BaseModel):
    """`GET /v1/audio/voices`: every name `voice` accepts (`voices` repeats `data` for clients that read it)."""

    object: str = "list"
    data: list[VoiceEntry]
    voices: list[VoiceEntry]
    default: dict | None
    aliases: dict[str, str]
