"""Request and response bodies of the REST API (pydantic), which also make the /docs schema."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_SEED = 2**31 - 1


class TTSBody(BaseModel):
    """`POST /tts`. Which fields matter depends on `mode` (omitted: inferred from the other fields)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text": "Your call is important to us.", "mode": "sft", "speaker": "英文女", "seed": 7, "format": "wav"},
        {"text": "Hello from a saved voice.", "voice_id": "narrator", "format": "mp3"},
    ]})

    text: str = Field("", description="what to say (all modes except vc)")
    mode: str | None = Field(None, description="sft | zero_shot | cross_lingual | instruct | vc; omitted: "
                             "vc with source_audio, else zero_shot/cross_lingual with a voice, else sft/instruct")
    speaker: str | None = Field(None, description="preset speaker (sft, instruct); see GET /v1/models")
    voice_id: str | None = Field(None, description="saved voice id (zero_shot, cross_lingual, vc); see GET /v1/voices")
    prompt_audio: str | None = Field(None, description="base64 audio file (wav/flac/mp3/ogg) of the voice to clone")
    prompt_text: str = Field("", description="transcript of prompt_audio (zero_shot)")
    instruct_text: str = Field("", description="speaking style in words (instruct)")
    source_audio: str | None = Field(None, description="base64 audio whose words are re-voiced (vc)")
    speed: float = Field(1.0, description="tempo, 0.5-2.0")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="omitted: a fresh one, returned in X-Seed")
    format: str = Field("wav", description="wav | mp3 | flac | pcm (16-bit little-endian mono)")
    stream: bool = Field(False, description="chunked audio body (wav or pcm) that starts before synthesis ends")
    normalize: bool = Field(True, description="bring the result to -20 LUFS")
    text_frontend: bool = Field(True, description="normalise and split the text first")
    voice_match: Literal["quick", "refine"] = Field(
        "quick", description="offline default voice only: quick (seconds) or refine (about a minute) prompt matching")


class TTSResult(BaseModel):
    audio: str = Field(description="base64 of the encoded audio")
    sample_rate: int
    duration_s: float
    format: str
    seed: int


class SpeechBody(BaseModel):
    """`POST /v1/audio/speech`, OpenAI's shape; `seed` and `normalize` are extensions."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"model": "tts-1", "input": "Hello there!", "voice": "英文女", "response_format": "wav"},
    ]})

    model: str = Field("", description="accepted for compatibility; the loaded model answers")
    input: str = Field(description="the text to speak")
    voice: str | dict = Field(description="a preset speaker or a saved voice id (or {\"id\": ...})")
    response_format: str = Field("mp3", description="mp3 | wav | flac | pcm")
    speed: float = Field(1.0, description="0.5-2.0")
    stream_format: str | None = Field(None, description="audio: chunked body (wav/pcm stream as produced); "
                                      "sse: text/event-stream of speech.audio.delta events")
    instructions: str = Field("", description="speaking style (needs an instruct model and a preset voice)")
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    normalize: bool = True


class VoiceBody(BaseModel):
    """`POST /v1/voices` as JSON (multipart/form-data with a file field `audio` works too)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="display name; the id is made from it")
    transcript: str = Field("", description="what is said in the recording (needed for zero_shot)")
    audio: str = Field(description="base64 audio file, 3-30 s of clear speech")


class VoiceRecord(BaseModel):
    id: str
    name: str
    transcript: str
    created: str
    sample_rate: int
    duration_s: float
    object: str = "voice"
    features: bool = Field(True, description="False when the loaded backend cannot use saved voices yet")


class VoiceList(BaseModel):
    object: str = "list"
    data: list[VoiceRecord]


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
    streaming: bool
    device: str
    notes: str
    loaded: bool
    saved_voices: list[str]


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelRecord]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail
