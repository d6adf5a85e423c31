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
    GET    /health            model state, device, memory, queue, whether outputs are watermarked (no key needed)
    GET    /docs              the interactive schema, its assets served from here (works offline)
    ...    /v1/glossaries, /v1/transcribe, /v1/audio/transcriptions, /v1/asr/models: `routes_studio.py`

Errors are `{"error": {"code", "message", "type", "param"}}` (OpenAI's shape, so OpenAI clients raise
their usual exceptions): 4xx for the client's faults (422 for a request the model
cannot serve as given), 503 when the model cannot be loaded, 502 when a remote engine fails
(the table is in `errors.py`). Audio responses carry `X-Seed` (re-send it to reproduce),
`X-Cache: hit|miss`, `X-Sample-Rate` and `X-Take-Retries` (bad takes re-rendered: every synthesis is checked).

Routes come in groups (`APIRouter`s: speech, voices, glossaries, transcription, service; /health is open),
each guarded by authentication and the rate limit, and reach the service through a dependency (`app.state.api`).
"""

from __future__ import annotations

import base64
import logging
import sys
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from .deps import ERRORS, PROTECTED, SYNTHESIS_ERRORS, Service, caller
from .errors import ApiError, add_error_handlers, route_error, validation_error
from .schemas import (InstructionRecord, ModelList, ModelRecord, SpeechBody, SpeechVoiceList, TTSBody,
                      TTSResult, VoiceBody, VoiceList, VoiceRecord)
from .schemas import audio_response, error_responses
from .routes_studio import STUDIO_ROUTERS, STUDIO_JSON_ROUTES
from .security import Guard, JsonDepthLimit, UploadLimit
from .service import ApiService, Finished, Prepared
from .studio_service import glossary_label, subtitle_text, take_records
from .stream import STREAM_FORMATS, audio_body, guarded, sse_body
from ..audio import MEDIA_TYPES, encode
from ..redact import public_url, without_paths
from ..errors import InvalidRequest
from ..serving.manager import ModelManager
from ..settings import Settings
from ..serving.voices import SavedVoice
from ..serving.watermarking import status as watermark_status
from ..types import Mode

log = logging.getLogger(__name__)

VOICE_ID_ERRORS = error_responses(404, 409, 422)  # unknown or invalid id, read-only store


DOCS_ASSETS = "/docs-assets"
JSON_ONLY_ROUTES = ("/tts", "/v1/audio/speech", *STUDIO_JSON_ROUTES)
FORM_TYPE = b"application/x-www-form-urlencoded"


class FormBodyAsJson:
    """`curl URL -d '{"text": ...}'` labels its JSON body as a form. The JSON-only routes never take
    forms, so there that label is read as JSON (a body that is not JSON still gets a clear 400) — but only for
    a client that is no web page: a browser may send a form to another site without asking it first, so a
    form from a page stays a form (and is refused as not JSON)."""

    def __init__(self, app, paths: tuple[str, ...] = JSON_ONLY_ROUTES) -> None:
        self.app = app
        self.paths = paths

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST" and scope["path"] in self.paths:
            headers = scope.get("headers", [])
            if not _from_a_page(headers) and any(k.lower() == b"content-type" and v.split(b";")[0].strip().lower() == FORM_TYPE
                   for k, v in headers):
                scope = dict(scope, headers=[(k, b"application/json") if k.lower() == b"content-type" else (k, v)
                                             for k, v in headers])
        await self.app(scope, receive, send)


def _from_a_page(headers) -> bool:
    """A browser sends `Origin` or `Sec-Fetch-*` with a form; curl and SDKs send neither."""
    return any(k.lower() == b"origin" or k.lower().startswith(b"sec-fetch-") for k, _ in headers)


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


speech_routes = APIRouter(tags=["speech"], dependencies=PROTECTED, responses=ERRORS)
voice_routes = APIRouter(tags=["voices"], dependencies=PROTECTED, responses=ERRORS)
service_routes = APIRouter(tags=["service"], dependencies=PROTECTED, responses=ERRORS)
probe_routes = APIRouter(tags=["service"])  # no key: load balancers and monitors ask without one


def add_routes(app, manager: ModelManager, settings: Settings, service: ApiService | None = None) -> ApiService:
    """Add the REST API to a FastAPI `app` (before the UI is mounted at "/"). Returns the service."""
    service = service or ApiService(manager, settings)
    app.state.api = service
    app.state.api_guard = Guard(settings)
    app.add_middleware(JsonDepthLimit)  # inside the upload cap: the body it reads is bounded
    app.add_middleware(UploadLimit, max_bytes=int(settings.max_upload_mb * 2**20))
    app.add_middleware(FormBodyAsJson)  # outermost: curl's form label is JSON before the JSON checks look
    add_error_handlers(app)
    for router in (speech_routes, voice_routes, *STUDIO_ROUTERS, service_routes, probe_routes):
        app.include_router(router)  # service_routes' catch-all of unknown /v1 paths comes after every route
    widen_thread_pool(app, settings.queue_size + settings.concurrency + THREAD_HEADROOM)
    return service


# Threads left for short handlers and the chunks of streamed bodies when the queue is full. Not more: every
# worker thread that runs a job keeps its own allocator memory, so a bigger pool costs RSS under load.
THREAD_HEADROOM = 8


def widen_thread_pool(app, tokens: int) -> None:
    """Size the worker-thread pool for a full queue, when the app starts.

    A job waiting in the model queue holds a worker thread (sync routes wait in `manager.job`), and the
    pool (anyio's, 40 threads) is shared with every other sync route and each chunk of a streamed body.
    With 40 jobs waiting, /health and the voice list stopped answering until the queue drained. The pool
    never shrinks below anyio's default.
    """
    import contextlib

    previous = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(scope_app):
        from anyio import to_thread

        limiter = to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(limiter.total_tokens, tokens)
        async with previous(scope_app) as state:
            yield state

    app.router.lifespan_context = lifespan


# --- speech ------------------------------------------------------------------------------------------------


def audio_headers(seed: int, cached: bool, rate: int, retries: int = 0) -> dict[str, str]:
    return {"X-Seed": str(seed), "X-Cache": "hit" if cached else "miss", "X-Sample-Rate": str(rate),
            "X-Take-Retries": str(retries)}


def stream_response(service: ApiService, job: Prepared, sse: bool = False) -> StreamingResponse:
    """A chunked body of `job` (from the cache when it ran recently); the job holds its queue slot until
    the body ends or the client leaves."""
    hit = service.cached(job)
    if hit is not None:
        body, live, rate = audio_body(iter([hit.samples]), job.fmt, hit.sample_rate, 1.0), None, hit.sample_rate
    else:
        live = service.start(job)
        rate = live.sample_rate

        def keep(samples) -> None:
            if live.complete:
                service.remember(job, samples, rate)

        body = audio_body((chunk.samples for chunk in live.chunks()), job.fmt, rate, None if job.normalize else 1.0,
                          keep)
    if sse:
        body, media = sse_body(body, len(job.request.text)), "text/event-stream"
    else:
        media = MEDIA_TYPES[job.fmt]
    headers = audio_headers(job.request.seed, hit is not None, rate)
    if sse:
        headers["Cache-Control"] = "no-cache"
    return StreamingResponse(guarded(body, live), media_type=media, headers=headers)


@speech_routes.post("/tts", response_model=TTSResult, responses={**SYNTHESIS_ERRORS, 200: audio_response(
                        tuple(MEDIA_TYPES[f] for f in STREAM_FORMATS), "JSON with base64 audio (and subtitles, "
                        "take reports), or with `stream: true` a chunked audio body")},
             summary="Synthesise speech (JSON in, base64 audio out; or a chunked audio stream)",
             description="Every take is checked (too long or short for its text, repeated speech) and a bad "
             "segment re-rendered (`take_retries`, `check_takes`; the result's `takes`, header X-Take-Retries). "
             "`glossary` rewrites words first. `subtitles: srt | vtt` returns subtitles timed on the returned "
             "audio, one cue per text segment; only here (not on /v1/audio/speech) and not with `stream`.")
def tts(body: TTSBody, service: Service, request: Request):
    job = service.tts_request(body, caller(request, "rest"))
    if body.stream:
        return stream_response(service, job)
    result = service.run(job)
    data = encode(result.samples, result.sample_rate, job.fmt)
    payload = TTSResult(audio=base64.b64encode(data).decode(), sample_rate=result.sample_rate,
                        duration_s=round(len(result.samples) / result.sample_rate, 3), format=job.fmt,
                        seed=result.seed, voice=None if job.request.prompt_audio is not None
                        else job.request.speaker, subtitles=subtitle_text(result.notes, job.subtitles),
                        subtitle_format=job.subtitles, takes=take_records(result.notes.takes),
                        take_retries=result.notes.retries, glossary=glossary_label(job.glossary))
    return JSONResponse(payload.model_dump(), headers=audio_headers(result.seed, result.cached, result.sample_rate,
                                                                    result.notes.retries))


@speech_routes.post("/v1/audio/speech", response_class=Response, responses={**SYNTHESIS_ERRORS, 200: audio_response(
                        (*dict.fromkeys(MEDIA_TYPES.values()), "text/event-stream"), "the audio file, a chunked "
                        "audio body (`stream_format: audio`) or server-sent events (`stream_format: sse`)")},
             summary="OpenAI-compatible speech endpoint (audio bytes out)",
             description="Extensions: `seed`, `normalize`, `glossary` (a saved id or inline {word: pronunciation}). "
             "Takes are checked and bad segments re-rendered with the server's settings (X-Take-Retries). "
             "Subtitles are not offered here: use POST /tts with `subtitles`.")
def speech(body: SpeechBody, service: Service, request: Request):
    job, streaming = service.speech_request(body, caller(request, "openai"))
    if streaming is not None:
        return stream_response(service, job, sse=streaming == "sse")
    result: Finished = service.run(job)
    return Response(encode(result.samples, result.sample_rate, job.fmt), media_type=MEDIA_TYPES[job.fmt],
                    headers=audio_headers(result.seed, result.cached, result.sample_rate, result.notes.retries))


@speech_routes.get("/v1/audio/voices", response_model=SpeechVoiceList, responses=error_responses(503),
            summary="Every voice name /v1/audio/speech accepts (presets, saved, OpenAI aliases)")
def speech_voices(service: Service):
    return service.voice_listing()


@speech_routes.get("/v1/audio/models", responses=error_responses(503),
                   summary="The model names /v1/audio/speech accepts")
def speech_models(service: Service):
    data = [{"id": name, "object": "model", "owned_by": "cosyvoice_ui"}
            for name in service.model_names(service.manager.info())]
    return {"object": "list", "data": data, "models": data}


# --- saved voices ------------------------------------------------------------------------------------------


VOICE_UPLOAD = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": VoiceBody.model_json_schema()},
    "multipart/form-data": {"schema": {"type": "object", "required": ["name", "audio"], "properties": {
        "name": {"type": "string"}, "transcript": {"type": "string"}, "consent": {"type": "boolean"},
        "audio": {"type": "string", "format": "binary"}}}}}}}


def voice_record(service: ApiService, voice: SavedVoice, ready: bool | None = None) -> VoiceRecord:
    return VoiceRecord(**voice.to_dict(), features=service.features_ready(voice.id) if ready is None else ready)


@voice_routes.post("/v1/voices", status_code=201, response_model=VoiceRecord, openapi_extra=VOICE_UPLOAD,
                   responses=error_responses(400, 409, 415, 422, 428, 502, 503, 507),
             summary="Save a cloned voice (prompt audio + transcript) and get its id")
async def add_voice(request: Request, service: Service):
    # The body is read by hand: it is JSON or multipart, which one declared body parameter cannot be.
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await request.form(max_files=1, max_fields=8)
        upload = form.get("audio") or form.get("file")
        if upload is None or isinstance(upload, str):
            raise InvalidRequest("prompt_missing", "send the recording as a file field named 'audio'")
        data: bytes | str = await upload.read()
        name, transcript = str(form.get("name") or ""), str(form.get("transcript") or "")
        consent = form_flag(form.get("consent"))
    else:
        try:
            body = VoiceBody.model_validate(await request.json())
        except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError are ValueErrors
            if not hasattr(exc, "errors") and "json" not in request.headers.get("content-type", "json").lower():
                raise ApiError(415, "unsupported_media_type", "send the voice as JSON ('Content-Type: "
                               "application/json') or as multipart/form-data with a file field 'audio'") from None
            raise validation_error(exc) from None
        data, name, transcript, consent = body.audio, body.name, body.transcript, body.consent
    voice, ready = await run_in_threadpool(service.add_voice, name, data, transcript, consent,
                                           caller(request, "rest"))
    return JSONResponse(voice_record(service, voice, ready).model_dump(), status_code=201)


def form_flag(value) -> bool:
    """A form field's yes ("true", "1", "yes", "on"); anything else is no."""
    return isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on")


@voice_routes.get("/v1/voices", response_model=VoiceList, summary="List saved voices")
def list_voices(service: Service):
    return VoiceList(data=[voice_record(service, v) for v in service.library.list()])


@voice_routes.delete("/v1/voices/{voice_id}", responses=VOICE_ID_ERRORS, summary="Delete a saved voice")
def delete_voice(voice_id: str, service: Service):
    service.remove_voice(voice_id)
    return {"id": voice_id, "object": "voice", "deleted": True}


@voice_routes.post("/v1/voices/{voice_id}/default", responses=VOICE_ID_ERRORS,
             summary="Make a saved voice the default (used when a request names none)")
def set_default_voice(voice_id: str, service: Service):
    service.set_default_voice(voice_id, True)
    return {"id": voice_id, "object": "voice", "default": True}


@voice_routes.delete("/v1/voices/{voice_id}/default", responses=VOICE_ID_ERRORS,
               summary="Stop using a saved voice as the default")
def clear_default_voice(voice_id: str, service: Service):
    service.set_default_voice(voice_id, False)
    return {"id": voice_id, "object": "voice", "default": False}


# --- the service itself ------------------------------------------------------------------------------------


@service_routes.get("/v1/models", response_model=ModelList, responses=error_responses(503),
                    summary="The model this server runs and what it can do")
def models(request: Request, service: Service):
    """The server's model first (a thin client uses it), then the other models an app serving several has."""
    records = [_model_record(service, service.require_info())]
    for other in getattr(request.app.state, "other_apis", ()):
        info = other.manager.info()
        if info is not None:  # one unreadable model must not hide the others
            records.append(_model_record(other, info))
    return ModelList(data=records)


def _model_record(service: ApiService, info) -> ModelRecord:
    return ModelRecord(
        id=info.name, name=info.name, family=info.family, sample_rate=info.sample_rate,
        modes=[m.value for m in info.modes], speakers=list(info.speakers),
        instruct_examples=list(info.instruct_examples), **_capabilities(info), streaming=info.streaming,
        device=info.device,
        notes=info.notes, loaded=service.manager.loaded is not None, saved_voices=list(service.library.ids()),
        default_voice=_ref_dict(service.default_voice(info)), accepted_model_names=list(service.model_names(info)),
        precision=precision_of(service, info))


def precision_of(service: ApiService, info) -> dict | None:
    """The precision in effect for the loaded model, else the mode it will load in (None: no switch)."""
    if info is None or info.precision is None:
        return None
    loaded = service.manager.loaded is not None
    if loaded:
        record = info.precision
        return {"mode": record.mode, "loaded": True, "llm": record.llm, "llm_rows": record.llm_rows,
                "llm_attention": record.llm_attention, "llm_step": record.llm_step, "flow": record.flow, "vocoder": record.hift,
                "flow_steps": record.flow_steps}
    return {"mode": service.manager.load_options.precision, "loaded": False}


def _capabilities(info) -> dict:
    """What the model's text and instruct mode accept (ModelRecord fields)."""
    instruct = Mode.INSTRUCT in info.modes
    return dict(instructions=[InstructionRecord(category=i.category, label_zh=i.zh, label_en=i.en, text=i.text)
                              for i in info.instructions],
                instruct_needs=("voice" if info.instruct_voice else "preset") if instruct else None,
                text_tags=list(info.text_tags), pronunciation=list(info.pronunciation),
                text_caveats=list(info.text_caveats))


@probe_routes.get("/health", summary="Model state (loaded/unloaded/loading), device, memory, queue")
def health(request: Request, service: Service):
    status = service.manager.status()
    guard: Guard = request.app.state.api_guard
    settings = service.settings
    roots = (settings.models_dir, settings.model_dir.parent if settings.model_dir else None, Path.cwd())
    model = {k: getattr(status, k) for k in ("state", "model", "device", "error", "load_fraction", "load_message")}
    model.update(error=without_paths(status.error, roots), load_message=without_paths(status.load_message, roots),
                 precision=precision_of(service, service.manager.info()))
    return {
        "status": "error" if status.state == "error" else "ok",
        "model": model,
        "queue": {"running": status.running, "queued": status.queued, "limit": service.settings.queue_size},
        "memory": {"rss_mb": status.rss_mb, "baseline_rss_mb": status.baseline_rss_mb, **_gpu_memory()},
        "idle_unload_s": status.idle_unload_s,
        "default_voice": _ref_dict(service.default_voice()),
        "api_key_required": bool(guard.keys) or guard.refuses_all,
        "engine_url": public_url(settings.engine_url),
        "watermark": watermark_status(settings),  # whether outputs carry the mark (and why not)
        **({"cluster": cluster()} if (cluster := getattr(request.app.state, "cluster_health", None)) else {}),
    }


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


# --- unknown API routes --------------------------------------------------------------------------------------
# The UI is mounted at "/" and answers every other path with its own 404 page; an API client gets the API's
# error body instead (defined last: the real routes match first).

ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@service_routes.api_route("/v1/{rest:path}", methods=ANY_METHOD, include_in_schema=False)
@service_routes.api_route("/tts", methods=["GET", "PUT", "PATCH", "DELETE"], include_in_schema=False)
def unknown_route(request: Request):
    path = request.scope["path"]
    allowed = sorted({method for router in (speech_routes, voice_routes, *STUDIO_ROUTERS, service_routes)
                      for route in router.routes
                      if getattr(route, "endpoint", None) is not unknown_route and route.path_regex.match(path)
                      for method in route.methods} - {"HEAD"})
    raise route_error(405 if allowed else 404, request.method, ", ".join(allowed))
