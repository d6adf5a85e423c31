"""Bodies of the studio routes (pydantic, and so the /docs schema): pronunciation glossaries and transcription."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .schemas import GlossaryValue


class GlossaryEntryRecord(BaseModel):
    """One word and how it is read: a pinyin or CMU hint (with an optional plain respelling for models that read
    no hints), or only a respelling."""

    word: str
    pinyin: str | None = Field(None, description="tone-marked pinyin hint, e.g. [x][ī][ān]")
    cmu: str | None = Field(None, description="CMU phones with stress, e.g. [R][EH1][D]")
    respell: str | None = Field(None, description="plain text read instead of the word, e.g. Shee-ahn")


class GlossaryRecord(BaseModel):
    id: str
    object: str = "glossary"
    name: str
    case_sensitive: bool = False
    entries: list[GlossaryEntryRecord]


class GlossaryList(BaseModel):
    object: str = "list"
    data: list[GlossaryRecord]


class GlossaryBody(BaseModel):
    """`POST /v1/glossaries` (a new id from the name) and `PUT /v1/glossaries/{id}` (create or replace)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"name": "Place names", "entries": {"Xi'an": "[x][ī][ān]", "Nguyen": "Win"}},
        {"name": "Brands", "entries": [{"word": "GIF", "cmu": "[JH][IH1][F]", "respell": "jif"}]},
    ]})

    name: str = Field("", description="display name (the id of a new glossary is made from it)")
    entries: dict[str, Any] | list[Any] = Field(default_factory=list, description="{word: pronunciation} or a "
                                                 "list of {word, pinyin | cmu | respell} entries (at most 500)")
    case_sensitive: bool = Field(False, description="match words with their exact case")


class GlossaryDeleted(BaseModel):
    id: str
    object: str = "glossary"
    deleted: bool = True


class PreviewBody(BaseModel):
    """`POST /v1/glossaries/preview`: how a text will be read with a glossary."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text": "We flew to Xi'an.", "glossary": {"Xi'an": "[x][ī][ān]"}},
        {"text": "We flew to Xi'an.", "glossary": "place-names"},
    ]})

    text: str = Field(description="the text to read")
    glossary: GlossaryValue = Field(None, description="a saved glossary id or an inline {word: pronunciation} "
                                    "object")


class SkippedEntry(BaseModel):
    word: str
    reason: str = Field(description="why the entry changed nothing for this model")


class PreviewResult(BaseModel):
    text: str = Field(description="the text with the glossary applied (what the model is given)")
    segments: list[str] = Field(description="how it will be read: the loaded model's own normalisation and "
                                "split, else the glossary-applied text")
    used: list[GlossaryEntryRecord] = Field(description="entries that matched and were applied")
    skipped: list[SkippedEntry] = Field(description="entries that matched but have nothing this model reads")
    model_loaded: bool = Field(description="false: the segments are not the model's own split (it is not loaded)")


class TranscribeBody(BaseModel):
    """`POST /v1/transcribe`: a recording as base64 → its words (e.g. the transcript of a voice sample)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"audio": "<base64 wav>", "language": "en"},
    ]})

    audio: str = Field(description="base64 audio file (wav/flac/mp3/ogg), 0.3 s to 10 min")
    language: str | None = Field(None, description="en, zh, ja, ... or a name (English); omitted or auto: detect")
    model: str | None = Field(None, description="a recogniser from GET /v1/asr/models; omitted: the best one "
                              "available for the language")


ROUGH_DESCRIPTION = ("true when the recogniser is the rough offline one (pocketsphinx): check and correct the text "
                     "before using it as a voice sample's transcript")


class TranscribeResult(BaseModel):
    text: str
    language: str = Field(description="the language code heard (or asked for)")
    backend: str = Field(description="the recogniser that heard it")
    rough: bool = Field(False, description=ROUGH_DESCRIPTION)
    seconds: float = Field(description="length of the recording")


class TranscriptionResult(BaseModel):
    """OpenAI's transcription (`response_format: json`); `language`, `duration` and `backend` are extensions."""

    text: str
    language: str
    duration: float
    backend: str
    rough: bool = Field(False, description=ROUGH_DESCRIPTION)


class AsrModelRecord(BaseModel):
    id: str
    object: str = "model"
    description: str
    size_gb: float
    ready: bool = Field(description="usable now (downloaded or installed)")
    download: str | None = Field(None, description="the command that downloads it (null when ready or built in)")


class AsrModelList(BaseModel):
    object: str = "list"
    available: list[str] = Field(description="recognisers that can transcribe now, best first")
    data: list[AsrModelRecord]


class WatermarkCheckBody(BaseModel):
    """`POST /v1/audio/detect` with JSON: a file as base64 (multipart with a `file` field works too)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"audio": "<base64 file>"}]})

    audio: str = Field(description="base64 audio or video file (anything ffmpeg reads), at most 10 minutes")


class WatermarkCheckResult(BaseModel):
    object: str = "watermark.check"
    marked: bool = Field(description="the file carries this server's kind of watermark (PerTh, implicit)")
    confidence: float = Field(description="how sure the detector is of `marked`, 0.5-1")
    score: float = Field(description="the detector's output, 0-1: 0.5 or more is marked")
    seconds: float = Field(description="length of the sound checked")


class DubCueRecord(BaseModel):
    number: int
    start: float
    end: float
    speaker: str
    text: str
    mode: str
    locked: bool
    takes: int
    fit: dict | None = Field(None, description="the last export's fit: speed, seconds (spoken), overflow (into the "
                             "gap), overrun (past the next cue: flagged)")
    own_fit: dict | None = Field(None, description="the cue's own fit policy (min_speed, max_speed, overflow: the "
                                 "fields it sets over the project's), or null")


class DubJobRecord(BaseModel):
    id: str
    object: str = "dub"
    status: str = Field(description="queued, running, done, failed, stopped, or interrupted (a restart of the server "
                        "stopped it: params say how many cues are rendered; resume continues it)")
    progress: float
    message: str = ""
    code: str = ""
    params: dict = {}
    error: dict | None = None
    cues: list[DubCueRecord] = []
    files: list[str] = Field([], description="the finished dub's files (video, srt, vtt, track)")


class DubCueEdit(BaseModel):
    """What to change in one cue (fields left out stay as they are)."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(None, max_length=5000, description="the words to speak (translated or fixed)")
    locked: bool | None = Field(None, description="a locked cue keeps its take")
    take: int | None = Field(None, ge=1, description="pick one of the cue's takes (1 = its first)")
    mode: str | None = Field(None, description="auto, cross_lingual, zero_shot or instruct")
    instruct: str | None = Field(None, max_length=500, description="a style instruction (instruct mode)")
    fit: dict | None = Field(None, description="this cue's own fit policy: some of min_speed, max_speed, overflow, "
                             "added to what it set before (a field set to null drops it); null: the project's fit "
                             "again. Resume fits the cue anew without a new take")
