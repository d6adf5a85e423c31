"""The watermark detector's route (HTTP only; the check is `serving/watermarking.check_file`, as for the CLI's
`detect` and the UI's "Check a file").

    POST   /v1/audio/detect   an audio or video file (multipart `file`, or JSON {audio: base64}) →
                              {marked, confidence, score, seconds}

Guarded like every other route (API key, rate limit, upload cap); the file is read within the detector's door
(`CHECK_LIMITS`: 10 minutes) by `media_read.py`; errors in the API's one shape.
"""

from __future__ import annotations

import base64
import binascii

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from .deps import ERRORS, PROTECTED
from .errors import ApiError, validation_error
from .schemas import error_responses
from .schemas_studio import WatermarkCheckBody, WatermarkCheckResult
from ..errors import InvalidRequest
from ..serving.watermarking import check_file

watermark_routes = APIRouter(tags=["watermark"], dependencies=PROTECTED, responses=ERRORS)
WATERMARK_JSON_ROUTES = ("/v1/audio/detect",)  # curl -d labels JSON a form

DETECT_UPLOAD = {"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary", "description": "an audio or video file"}}}},
    "application/json": {"schema": WatermarkCheckBody.model_json_schema()}}}}


@watermark_routes.post("/v1/audio/detect", response_model=WatermarkCheckResult, openapi_extra=DETECT_UPLOAD,
                       responses=error_responses(400, 415, 422, 503),
                       summary="Does a file carry this server's watermark? (any audio or video file)",
                       description="Every output of this app carries an inaudible PerTh watermark unless its owner "
                       "started it with --no-watermark. `marked` is the detector's verdict and `confidence` how sure "
                       "it is (0.5-1); 503 when this server has no detector installed.")
async def detect(request: Request):
    kind = request.headers.get("content-type", "")
    if kind.startswith("multipart/form-data"):
        from starlette.exceptions import HTTPException

        try:
            form = await request.form(max_files=1, max_fields=4)
        except HTTPException:
            raise ApiError(400, "bad_multipart", "the multipart body could not be read; send one file field "
                           "'file'") from None
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise ApiError(422, "audio_missing", "send the file as a field named 'file'", param="file")
        data = await upload.read()
    else:
        try:
            body = WatermarkCheckBody.model_validate(await request.json())
        except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError are ValueErrors
            if not hasattr(exc, "errors") and "json" not in kind.lower():
                raise ApiError(415, "unsupported_media_type", "send the file as multipart/form-data with a field "
                               "'file', or as JSON {\"audio\": \"<base64>\"}") from None
            raise validation_error(exc) from None
        data = _base64_file(body.audio)
    if not data:
        raise InvalidRequest("audio_missing", "the file is empty: send an audio or video file", param="file")
    verdict = await run_in_threadpool(check_file, data, "file")
    return WatermarkCheckResult(**verdict.to_dict())


def _base64_file(text: str) -> bytes:
    """base64 (or a data: URL's base64 part) → bytes; a clear 422 otherwise."""
    if text[:5].lower() == "data:":
        text = text.partition(",")[2]
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("audio_not_base64", "`audio` must be a base64-encoded audio or video file",
                             param="audio", what="audio") from None
