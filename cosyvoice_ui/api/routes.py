"""REST routes, served by the same process, `ModelManager` and queue as the UI.

    POST   /tts               JSON in → JSON with base64 audio, or a chunked audio stream (`stream: true`)
    POST   /v1/audio/speech   OpenAI-compatible: audio bytes, chunked audio, or server-sent events
    POST   /v1/voices         save a voice (JSON with base64 audio, or multipart) → its id
    GET    /v1/voices         saved voices
    DELETE /v1/voices/{id}    forget one
    POST   /v1/voices/{id}/default   make it the voice used when a request names none (DELETE: undo)
    GET    /v1/audio/voices   every name `voice` accepts: presets, saved voices, default, OpenAI aliases
    GET    /v1/audio/models   the `model` names /v1/audio/speech accepts
    GET    /v1/models         the model and what it can do (modes, speakers, sample rate)
    GET    /health            model state, device, memory, queue (no key needed)
    GET    /docs              the interactive schema, its assets served from here (works offline)

Errors are `{"error": {"code", "message", "type", "param"}}` (OpenAI's shape, so OpenAI clients raise
their usual exceptions): 4xx for the client's faults (422 for a request the model
cannot serve as given), 503 when the model cannot be loaded, 502 when a remote engine fails.
Audio responses carry `X-Seed` (re-send it to reproduce), `X-Cache: hit|miss` and `X-Sample-Rate`.
"""

from __future__ import annotations

import base64
import logging
import sys

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from .schemas import (ErrorBody, ModelList, ModelRecord, SpeechBody, SpeechVoiceList, TTSBody, TTSResult, VoiceBody,
                      VoiceList, VoiceRecord)
from .security import ApiError, Guard, UploadLimit
from .service import ApiService, Finished, Prepared
from .stream import audio_body, guarded, sse_body
from ..audio import MEDIA_TYPES, encode
from ..errors import Cancelled, CosyVoiceError, InvalidRequest
from ..serving.manager import ModelManager
from ..settings import Settings
from ..serving.voices import SavedVoice

log = logging.getLogger(__name__)

STATUS_BY_CODE = {"payload_too_large": 413, "voice_not_found": 404}
ERRORS = {code: {"model": ErrorBody} for code in (400, 401, 403, 413, 422, 429, 503)}


DOCS_ASSETS = "/docs-assets"
JSON_ONLY_ROUTES = ("/tts", "/v1/audio/speech")
FORM_TYPE = b"application/x-www-form-urlencoded"


class FormBodyAsJson:
    """`curl URL -d '{"text": ...}'` labels its JSON body as a form. The JSON-only routes never take
    forms, so there that label is read as JSON (a body that is not JSON still gets a clear 400)."""

    def __init__(self, app, paths: tuple[str, ...] = JSON_ONLY_ROUTES) -> None:
        self.app = app
        self.paths = paths

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST" and scope["path"] in self.paths:
            headers = scope.get("headers", [])
            if any(k.lower() == b"content-type" and v.split(b";")[0].strip().lower() == FORM_TYPE
                   for k, v in headers):
                scope = dict(scope, headers=[(k, b"application/json") if k.lower() == b"content-type" else (k, v)
                                             for k, v in headers])
        await self.app(scope, receive, send)


def add_docs(app, title: str = "CosyVoice Studio API") -> bool:
    """Serve the interactive schema at `/docs` with Swagger UI's files from the `swagger-ui-bundle-v2`
    package, so the page works without internet (FastAPI's default page loads them from a CDN).
    Swagger UI 5 is needed: FastAPI writes OpenAPI 3.1, which the 4.x bundle refuses to draw.
    Create `app` with `docs_url=None`. Returns False (and serves FastAPI's CDN page) without the package."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        log.warning("swagger-ui-bundle-v2 is not installed: /docs loads Swagger UI from a CDN")
        from fastapi.openapi.docs import get_swagger_ui_html

        app.add_api_route("/docs", lambda: get_swagger_ui_html(openapi_url=app.openapi_url, title=title),
                          include_in_schema=False)
        return False
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    def docs_page():
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=title,
                                   swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png")

    app.add_api_route("/docs", docs_page, include_in_schema=False)
    return True


def add_routes(app, manager: ModelManager, settings: Settings, service: ApiService | None = None) -> ApiService:
    """Add the REST API to a FastAPI `app` (before the UI is mounted at "/"). Returns the service."""
    service = service or ApiService(manager, settings)
    guard = Guard(settings)
    app.state.api = service
    app.add_middleware(UploadLimit, max_bytes=int(settings.max_upload_mb * 2**20))
    app.add_middleware(FormBodyAsJson)
    _add_error_handlers(app)

    def client(request: Request) -> str:
        return guard(request.headers, request.client.host if request.client else None)

    protected = [Depends(client)]

    def audio_headers(seed: int, cached: bool, rate: int) -> dict[str, str]:
        return {"X-Seed": str(seed), "X-Cache": "hit" if cached else "miss", "X-Sample-Rate": str(rate)}

    def stream(job: Prepared, sse: bool = False) -> StreamingResponse:
        hit = service.cached(job)
        if hit is not None:
            body, live, rate = audio_body(iter([hit.samples]), job.fmt, hit.sample_rate, 1.0), None, hit.sample_rate
        else:
            live = service.start(job)
            rate = live.sample_rate

            def keep(samples) -> None:
                if live.complete:
                    service.remember(job, samples, rate)

            body = audio_body(live.chunks(), job.fmt, rate, None if job.normalize else 1.0, keep)
        if sse:
            body, media = sse_body(body, len(job.request.text)), "text/event-stream"
        else:
            media = MEDIA_TYPES[job.fmt]
        headers = audio_headers(job.request.seed, hit is not None, rate)
        if sse:
            headers["Cache-Control"] = "no-cache"
        return StreamingResponse(guarded(body, live), media_type=media, headers=headers)

    @app.post("/tts", tags=["speech"], dependencies=protected, response_model=TTSResult, responses=ERRORS,
              summary="Synthesise speech (JSON in, base64 audio out; or a chunked audio stream)")
    def tts(body: TTSBody):
        job = service.tts_request(body)
        if body.stream:
            return stream(job)
        result = service.run(job)
        data = encode(result.samples, result.sample_rate, job.fmt)
        payload = TTSResult(audio=base64.b64encode(data).decode(), sample_rate=result.sample_rate,
                            duration_s=round(len(result.samples) / result.sample_rate, 3), format=job.fmt,
                            seed=result.seed, voice=None if job.request.prompt_audio is not None
                            else job.request.speaker)
        return JSONResponse(payload.model_dump(), headers=audio_headers(result.seed, result.cached,
                                                                       result.sample_rate))

    @app.post("/v1/audio/speech", tags=["speech"], dependencies=protected, responses=ERRORS,
              response_class=Response, summary="OpenAI-compatible speech endpoint (audio bytes out)")
    def speech(body: SpeechBody):
        job, streaming = service.speech_request(body)
        if streaming is not None:
            return stream(job, sse=streaming == "sse")
        result: Finished = service.run(job)
        return Response(encode(result.samples, result.sample_rate, job.fmt), media_type=MEDIA_TYPES[job.fmt],
                        headers=audio_headers(result.seed, result.cached, result.sample_rate))

    def record(voice: SavedVoice, ready: bool) -> dict:
        return VoiceRecord(**voice.to_dict(), features=ready).model_dump()

    @app.post("/v1/voices", tags=["voices"], dependencies=protected, status_code=201, response_model=VoiceRecord,
              responses=ERRORS, summary="Save a cloned voice (prompt audio + transcript) and get its id",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": VoiceBody.model_json_schema()},
                  "multipart/form-data": {"schema": {"type": "object", "required": ["name", "audio"], "properties": {
                      "name": {"type": "string"}, "transcript": {"type": "string"},
                      "audio": {"type": "string", "format": "binary"}}}}}}})
    async def add_voice(request: Request):
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            form = await request.form(max_files=1, max_fields=8)
            upload = form.get("audio") or form.get("file")
            if upload is None or isinstance(upload, str):
                raise InvalidRequest("prompt_missing", "send the recording as a file field named 'audio'")
            data: bytes | str = await upload.read()
            name, transcript = str(form.get("name") or ""), str(form.get("transcript") or "")
        else:
            try:
                body = VoiceBody.model_validate(await request.json())
            except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError are ValueErrors
                raise _validation_error(exc) from None
            data, name, transcript = body.audio, body.name, body.transcript
        voice, ready = await run_in_threadpool(service.add_voice, name, data, transcript)
        return JSONResponse(record(voice, ready), status_code=201)

    @app.get("/v1/voices", tags=["voices"], dependencies=protected, response_model=VoiceList, responses=ERRORS,
             summary="List saved voices")
    def list_voices():
        return VoiceList(data=[VoiceRecord(**v.to_dict(), features=service.features_ready(v.id))
                               for v in service.library.list()])

    @app.delete("/v1/voices/{voice_id}", tags=["voices"], dependencies=protected, responses=ERRORS | {
                404: {"model": ErrorBody}}, summary="Delete a saved voice")
    def delete_voice(voice_id: str):
        if not service.remove_voice(voice_id):
            raise ApiError(404, "voice_not_found", f"there is no saved voice {voice_id!r}; saved voices: "
                           f"{', '.join(service.library.ids()) or 'none'}")
        return {"id": voice_id, "object": "voice", "deleted": True}

    def voice_or_404(voice_id: str) -> None:
        if service.library.get(voice_id) is None:
            raise ApiError(404, "voice_not_found", f"there is no saved voice {voice_id!r}; saved voices: "
                           f"{', '.join(service.library.ids()) or 'none'}", param="voice_id")

    @app.post("/v1/voices/{voice_id}/default", tags=["voices"], dependencies=protected, responses=ERRORS | {
              404: {"model": ErrorBody}}, summary="Make a saved voice the default (used when a request names none)")
    def set_default_voice(voice_id: str):
        voice_or_404(voice_id)
        service.library.set_default(voice_id)
        return {"id": voice_id, "object": "voice", "default": True}

    @app.delete("/v1/voices/{voice_id}/default", tags=["voices"], dependencies=protected, responses=ERRORS | {
                404: {"model": ErrorBody}}, summary="Stop using a saved voice as the default")
    def clear_default_voice(voice_id: str):
        voice_or_404(voice_id)
        if service.library.default_id() == voice_id:
            service.library.set_default(None)
        return {"id": voice_id, "object": "voice", "default": False}

    @app.get("/v1/audio/voices", tags=["speech"], dependencies=protected, response_model=SpeechVoiceList,
             responses=ERRORS, summary="Every voice name /v1/audio/speech accepts (presets, saved, OpenAI aliases)")
    def speech_voices():
        return service.voice_listing()

    @app.get("/v1/audio/models", tags=["speech"], dependencies=protected, responses=ERRORS,
             summary="The model names /v1/audio/speech accepts")
    def speech_models():
        names = service.model_names(manager.info())
        data = [{"id": name, "object": "model", "owned_by": "cosyvoice_ui"} for name in names]
        return {"object": "list", "data": data, "models": data}

    @app.get("/v1/models", tags=["service"], dependencies=protected, response_model=ModelList, responses=ERRORS,
             summary="The model this server runs and what it can do")
    def models():
        info = manager.info()
        if info is None:
            raise ApiError(503, "model_unavailable", f"the model cannot be read: {manager.status().error}")
        loaded = manager.loaded is not None
        return ModelList(data=[ModelRecord(
            id=info.name, name=info.name, family=info.family, sample_rate=info.sample_rate,
            modes=[m.value for m in info.modes], speakers=list(info.speakers),
            instruct_examples=list(info.instruct_examples), streaming=info.streaming, device=info.device,
            notes=info.notes, loaded=loaded, saved_voices=list(service.library.ids()),
            default_voice=_ref_dict(service.default_voice(info)), accepted_model_names=list(service.model_names(info)))])

    @app.get("/health", tags=["service"], summary="Model state (loaded/unloaded/loading), device, memory, queue")
    def health():
        status = manager.status()
        return {
            "status": "error" if status.state == "error" else "ok",
            "model": {k: getattr(status, k) for k in ("state", "model", "device", "error", "load_fraction",
                                                      "load_message")},
            "queue": {"running": status.running, "queued": status.queued, "limit": settings.queue_size},
            "memory": {"rss_mb": status.rss_mb, "baseline_rss_mb": status.baseline_rss_mb, **_gpu_memory()},
            "idle_unload_s": status.idle_unload_s,
            "default_voice": _ref_dict(service.default_voice()),
            "api_key_required": bool(guard.keys) or guard.refuses_all,
            "engine_url": settings.engine_url,
        }

    return service


def _ref_dict(ref) -> dict | None:
    return ref.to_dict() if ref is not None else None


def _gpu_memory() -> dict:
    """CUDA memory figures when torch is already loaded with a GPU (never imports torch for this)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return {"cuda_allocated_mb": round(torch.cuda.memory_allocated() / 1e6, 1),
                    "cuda_reserved_mb": round(torch.cuda.memory_reserved() / 1e6, 1)}
    except Exception:  # a broken CUDA setup must not break /health
        log.debug("cuda memory query failed", exc_info=True)
    return {}


ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
               429: "rate_limit_error"}


def error_type(status: int) -> str:
    """OpenAI's error `type` for a status (clients branch on it)."""
    if status >= 500:
        return "server_error"
    return ERROR_TYPES.get(status, "invalid_request_error")


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   param: str | None = None) -> JSONResponse:
    body = {"code": code, "message": message, "type": error_type(status), "param": param}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _validation_error(exc: Exception) -> ApiError:
    """pydantic / JSON errors → one readable line ("field 'speed': Input should be a valid number")."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return ApiError(400, "bad_json", f"the request body is not valid JSON ({exc})")
    problems = []
    for err in errors():
        if err.get("type") == "json_invalid":
            return ApiError(400, "bad_json", "the request body is not valid JSON: "
                            f"{(err.get('ctx') or {}).get('error', err.get('msg'))}")
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        problems.append(f"{where or 'body'}: {err.get('msg')}")
    return ApiError(422, "invalid_field", "; ".join(problems) or "the request body is invalid")


def _add_error_handlers(app) -> None:
    async def on_api_error(request, exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, exc.headers, exc.param)

    async def on_invalid(request, exc: InvalidRequest):
        param = exc.params.get("param") or exc.params.get("what")
        return error_response(STATUS_BY_CODE.get(exc.code, 422), exc.code, exc.message,
                              param=param if isinstance(param, str) else None)

    async def on_validation(request, exc: RequestValidationError):
        err = _validation_error(exc)
        return error_response(err.status, err.code, err.message)

    async def on_cancelled(request, exc: Cancelled):
        return error_response(503, "cancelled", str(exc))

    async def on_engine_error(request, exc: CosyVoiceError):
        # The client asked for nothing wrong: the model (or a remote engine) could not serve it.
        status = getattr(exc, "status", 503)
        log.warning("engine error on %s: %s", request.url.path, exc)
        return error_response(status, getattr(exc, "code", "model_unavailable"), str(exc))

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(InvalidRequest, on_invalid)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(Cancelled, on_cancelled)
    app.add_exception_handler(CosyVoiceError, on_engine_error)
