"""Studio routes: pronunciation glossaries and transcription (HTTP only; the work is `studio_service.py`).

    GET    /v1/glossaries            saved glossaries
    POST   /v1/glossaries            save a new one (its id is made from the name)
    POST   /v1/glossaries/preview    how a text will be read with a glossary (saved id or inline)
    GET    /v1/glossaries/{id}       one glossary (PUT: create or replace it, DELETE: forget it)
    POST   /v1/transcribe            JSON {audio: base64, language?} → {text, language, backend, rough, seconds}
    POST   /v1/audio/transcriptions  OpenAI's shape: multipart `file`, `model`, `language`, `response_format`
    GET    /v1/asr/models            what can transcribe now, and what can be downloaded
    POST   /v1/audio/detect          does a file carry the watermark (`routes_watermark.py`)
    POST   /v1/dubs ...              dubbing jobs: a video and its subtitles in, the dub out (`routes_dub.py`)

Guarded like every other route (API key, rate limit, upload cap); errors in the API's one shape.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from .deps import ERRORS, PROTECTED, api_service
from .errors import ApiError
from .schemas import error_responses
from .schemas_studio import (AsrModelList, GlossaryBody, GlossaryDeleted, GlossaryList, GlossaryRecord,
                             PreviewBody, PreviewResult, TranscribeBody, TranscribeResult, TranscriptionResult)
from .studio_service import StudioService, check_transcript_format
from .routes_dub import dub_routes
from .routes_watermark import WATERMARK_JSON_ROUTES, watermark_routes


def studio_service(request: Request) -> StudioService:
    """The studio half of the service (`ApiService.studio`)."""
    return api_service(request).studio


Studio = Annotated[StudioService, Depends(studio_service)]

glossary_routes = APIRouter(tags=["glossaries"], dependencies=PROTECTED, responses=ERRORS)
transcription_routes = APIRouter(tags=["transcription"], dependencies=PROTECTED, responses=ERRORS)
STUDIO_ROUTERS = (glossary_routes, transcription_routes, watermark_routes, dub_routes)
# curl -d labels JSON a form
STUDIO_JSON_ROUTES = ("/v1/glossaries", "/v1/glossaries/preview", "/v1/transcribe", *WATERMARK_JSON_ROUTES)

BODY_ERRORS = error_responses(400, 415, 422)  # not JSON, not an object, bad fields
GLOSSARY_ID_ERRORS = error_responses(404)
STORE_ERRORS = error_responses(409, 507)  # the glossary folder cannot be written, ids taken, the store is full
AUDIO_ERRORS = error_responses(400, 415, 422, 503)  # bad body or audio, no recogniser, the recogniser failed


# --- glossaries --------------------------------------------------------------------------------------------


@glossary_routes.get("/v1/glossaries", response_model=GlossaryList, summary="List saved pronunciation glossaries")
def list_glossaries(studio: Studio):
    return {"object": "list", "data": studio.glossaries()}


@glossary_routes.post("/v1/glossaries", status_code=201, response_model=GlossaryRecord,
                      responses={**BODY_ERRORS, **STORE_ERRORS},
                      summary="Save a new glossary (word → pronunciation); its id is made from the name")
def create_glossary(body: GlossaryBody, studio: Studio):
    return studio.create(body.name, body.entries, body.case_sensitive)


@glossary_routes.post("/v1/glossaries/preview", response_model=PreviewResult, responses=BODY_ERRORS,
                      summary="How a text will be read with a glossary (saved id or inline); loads no model")
def preview_glossary(body: PreviewBody, studio: Studio):
    return studio.preview(body.text, body.glossary)


@glossary_routes.get("/v1/glossaries/{glossary_id}", response_model=GlossaryRecord, responses=GLOSSARY_ID_ERRORS,
                     summary="One saved glossary")
def get_glossary(glossary_id: str, studio: Studio):
    return studio.glossary(glossary_id)


@glossary_routes.put("/v1/glossaries/{glossary_id}", response_model=GlossaryRecord,
                     responses={201: {"model": GlossaryRecord, "description": "The glossary was created."},
                                **BODY_ERRORS, **STORE_ERRORS},
                     summary="Create or replace the glossary with this id (200: replaced, 201: created)")
def put_glossary(glossary_id: str, body: GlossaryBody, studio: Studio, response: Response):
    record, new = studio.put(glossary_id, body.name, body.entries, body.case_sensitive)
    response.status_code = 201 if new else 200
    return record


@glossary_routes.delete("/v1/glossaries/{glossary_id}", response_model=GlossaryDeleted,
                        responses={**GLOSSARY_ID_ERRORS, **STORE_ERRORS}, summary="Delete a saved glossary")
def delete_glossary(glossary_id: str, studio: Studio):
    studio.delete(glossary_id)
    return {"id": glossary_id, "object": "glossary", "deleted": True}


# --- transcription -----------------------------------------------------------------------------------------


@transcription_routes.post("/v1/transcribe", response_model=TranscribeResult, responses=AUDIO_ERRORS,
                           summary="Transcribe a recording (base64 in JSON), e.g. a voice sample's transcript",
                           description="With no Whisper model downloaded only English is understood (pocketsphinx); "
                           "another language answers 422 with the command that downloads one.")
def transcribe(body: TranscribeBody, studio: Studio):
    return studio.transcribe(body.audio, body.language, body.model)


TRANSCRIPTION_UPLOAD = {"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary"},
        "model": {"type": "string", "description": "whisper-1 (the server's recogniser) or a name from "
                  "GET /v1/asr/models"},
        "language": {"type": "string", "description": "ISO-639-1 code (en, zh, ...); omitted: detect"},
        "response_format": {"type": "string", "enum": ["json", "text"]}}}}}}}


@transcription_routes.post("/v1/audio/transcriptions", response_model=TranscriptionResult,
                           openapi_extra=TRANSCRIPTION_UPLOAD,
                           responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                                            "description": "the transcript (JSON, or plain text with "
                                            "response_format text)"}, **AUDIO_ERRORS},
                           summary="OpenAI-compatible transcription (multipart file in, text out)")
async def audio_transcriptions(request: Request, studio: Studio):
    # Read by hand: OpenAI clients send multipart/form-data, which one declared body parameter cannot describe.
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(415, "unsupported_media_type", "send the recording as multipart/form-data with a file "
                       "field 'file' (as OpenAI's client does), or use POST /v1/transcribe with JSON")
    from starlette.exceptions import HTTPException

    try:
        form = await request.form(max_files=1, max_fields=16)
    except HTTPException:
        raise ApiError(400, "bad_multipart", "the multipart body could not be read; send one file field 'file' "
                       "and text fields model, language, response_format") from None
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise ApiError(422, "audio_missing", "send the recording as a file field named 'file'", param="file")
    fmt = check_transcript_format(_text_field(form, "response_format"))
    data = await upload.read()
    result = await run_in_threadpool(studio.transcribe, data, _text_field(form, "language") or None,
                                     _text_field(form, "model") or None)
    if fmt == "text":
        return PlainTextResponse(result["text"])
    return {"text": result["text"], "language": result["language"], "duration": result["seconds"],
            "backend": result["backend"], "rough": result["rough"]}


def _text_field(form, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


@transcription_routes.get("/v1/asr/models", response_model=AsrModelList, responses=error_responses(503),
                          summary="Speech recognisers: usable now, and downloadable (with the command)")
def asr_models(studio: Studio):
    return studio.asr_models()
