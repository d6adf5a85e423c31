"""Dubbing routes (HTTP only; the jobs are `studio/dub_jobs.py`, the work `studio/dub*.py`).

    POST   /v1/dubs                   multipart: `media` (a video or audio file), `cues` (an SRT or WebVTT file in the
                                      target language; speakers as "Name: text" or "[Name] text"), optional fields
                                      lang, source_lang, min_speed, max_speed, overflow, original (duck or replace),
                                      duck_db, consent → 202 and the job
    GET    /v1/dubs/{id}              the job: status, progress, and the cue table with each cue's fit and overrun
    GET    /v1/dubs/{id}/files/{name} video (the video stream copied, the dub and the original as tagged tracks),
                                      srt and vtt (the times actually spoken), track (the speech alone, WAV)
    PATCH  /v1/dubs/{id}/cues/{n}     change cue n: text, locked, take (pick one), mode, instruct, fit (added to the
                                      cue's own fit; null: the project's again; resume fits it anew, no new take)
    POST   /v1/dubs/{id}/cues/{n}/regenerate   a new take of cue n (a new seed), chosen
    POST   /v1/dubs/{id}/resume       render what is missing (a stopped or failed job, one a restart of the server
                                      interrupted, edited cues) and export again
    DELETE /v1/dubs/{id}              stop it (what was rendered is kept)

Guarded like every other route (API key, rate limit, the upload cap on the whole body). A voice cut from the
uploaded media is a new recording: where the server requires consent, send consent=true (as for any sample).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from ..errors import InvalidRequest
from .deps import ERRORS, PROTECTED, api_service, caller
from .errors import ApiError
from .schemas import error_responses
from .schemas_studio import DubCueEdit, DubJobRecord

dub_routes = APIRouter(tags=["dubbing"], dependencies=PROTECTED, responses=ERRORS)
JOB_ERRORS = error_responses(404)

DUB_UPLOAD = {"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "required": ["media", "cues"], "properties": {
        "media": {"type": "string", "format": "binary", "description": "the video (or audio) to dub"},
        "cues": {"type": "string", "format": "binary", "description": "SRT or WebVTT in the target language"},
        "lang": {"type": "string", "description": "the cues' language (en, zh, ...; default: guessed)"},
        "source_lang": {"type": "string", "description": "the media's language (default: unknown, so cues are "
                        "cloned cross-lingually)"},
        "min_speed": {"type": "number", "default": 0.85}, "max_speed": {"type": "number", "default": 1.2},
        "overflow": {"type": "boolean", "default": True}, "original": {"type": "string", "enum": ["duck", "replace"]},
        "duck_db": {"type": "number", "default": 12}, "consent": {"type": "boolean", "default": False}}}}}}}


def job_record(request: Request, job_id: str) -> dict:
    """The job as the API shows it: its state and the cue table."""
    jobs = api_service(request).dubs
    state = jobs.status(job_id)
    project = jobs.project(job_id)
    cues = [{"number": number, "start": cue.start, "end": cue.end, "speaker": cue.speaker, "text": cue.text,
             "mode": cue.mode, "locked": cue.locked, "takes": len(cue.takes), "fit": cue.fit_result,
             "own_fit": cue.fit}
            for number, cue in enumerate(project.cues, start=1)]
    return {"id": state.id, "object": "dub", "status": state.status, "progress": round(state.fraction, 4),
            "message": state.message, "code": state.code, "params": state.params, "error": state.error,
            "cues": cues, "files": [f"/v1/dubs/{state.id}/files/{name}" for name in ("video", "srt", "vtt", "track")]
            if state.status == "done" else []}


@dub_routes.post("/v1/dubs", status_code=202, response_model=DubJobRecord, openapi_extra=DUB_UPLOAD,
                 responses=error_responses(400, 415, 422, 428, 507),
                 summary="Dub a video: its subtitles spoken in the original voices, on cue (a background job)")
async def start_dub(request: Request):
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(415, "unsupported_media_type", "send the video and its subtitles as multipart/form-data: "
                       "file fields 'media' and 'cues'")
    from starlette.exceptions import HTTPException

    try:
        form = await request.form(max_files=2, max_fields=16)
    except HTTPException:
        raise ApiError(400, "bad_multipart", "the multipart body could not be read; send file fields 'media' and "
                       "'cues'") from None
    media, cues = form.get("media"), form.get("cues")
    if media is None or isinstance(media, str):
        raise ApiError(422, "media_missing", "send the video (or audio) as a file field named 'media'", param="media")
    if cues is None:
        raise ApiError(422, "cues_missing", "send the subtitles (SRT or WebVTT) as a field named 'cues'",
                       param="cues")
    cues_text = cues if isinstance(cues, str) else _text(await cues.read())
    settings = _settings(form)
    from ..serving.jobs import JobOptions

    options = JobOptions(consent=_flag(form, "consent", False), caller=caller(request, "rest"))
    state = await run_in_threadpool(api_service(request).dubs.start, await media.read(), media.filename or "",
                                    cues_text, settings, options)
    return await run_in_threadpool(job_record, request, state.id)


@dub_routes.get("/v1/dubs/{job_id}", response_model=DubJobRecord, responses=JOB_ERRORS,
                summary="A dubbing job: status, progress and the cue table (each cue's fit and overrun)")
def get_dub(job_id: str, request: Request):
    return job_record(request, job_id)


@dub_routes.get("/v1/dubs/{job_id}/files/{name}", responses={**JOB_ERRORS, **error_responses(409)},
                response_class=FileResponse, summary="A finished dub's file: video, srt, vtt or track")
def get_dub_file(job_id: str, name: str, request: Request):
    path = api_service(request).dubs.file(job_id, name)
    return FileResponse(path, filename=f"dubbed-{job_id}{path.suffix}")


@dub_routes.post("/v1/dubs/{job_id}/resume", status_code=202, response_model=DubJobRecord, responses=JOB_ERRORS,
                 summary="Start a stopped, failed or interrupted dubbing job again (only the missing cues render)")
def resume_dub(job_id: str, request: Request, consent: bool = False):
    from ..serving.jobs import JobOptions

    api_service(request).dubs.resume(job_id, JobOptions(consent=consent, caller=caller(request, "rest")))
    return job_record(request, job_id)


@dub_routes.patch("/v1/dubs/{job_id}/cues/{number}", response_model=DubJobRecord,
                  responses={**JOB_ERRORS, **error_responses(400, 409, 422)},
                  summary="Change a cue: its text, lock, chosen take, mode, instruction or fit (resume renders it)")
def edit_cue(job_id: str, number: int, body: DubCueEdit, request: Request):
    api_service(request).dubs.edit(job_id, number, body.model_dump(exclude_unset=True))
    return job_record(request, job_id)


@dub_routes.post("/v1/dubs/{job_id}/cues/{number}/regenerate", response_model=DubJobRecord,
                 responses={**JOB_ERRORS, **error_responses(409, 422, 428, 503)},
                 summary="A new take of one cue (a new seed), chosen; resume exports the dub again")
def regenerate_cue(job_id: str, number: int, request: Request, consent: bool = False):
    from ..serving.jobs import JobOptions

    api_service(request).dubs.regenerate(job_id, number, JobOptions(consent=consent, caller=caller(request, "rest")))
    return job_record(request, job_id)


@dub_routes.delete("/v1/dubs/{job_id}", response_model=DubJobRecord, responses=JOB_ERRORS,
                   summary="Stop a dubbing job (what was rendered is kept; resume continues it)")
def stop_dub(job_id: str, request: Request):
    api_service(request).dubs.stop(job_id)
    return job_record(request, job_id)


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidRequest("dub_cues_unreadable", "the subtitles are not UTF-8 text; save the SRT or WebVTT file "
                             "as UTF-8") from None


def _flag(form, name: str, default: bool) -> bool:
    value = form.get(name)
    if not isinstance(value, str) or not value.strip():
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _number(form, name: str) -> float | None:
    value = form.get(name)
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return float(value)
    except ValueError:
        raise InvalidRequest("dub_field_invalid", f"{name} must be a number, not {value[:20]!r}",
                             param=name) from None


def _settings(form):
    from ..studio.dub import DubSettings
    from ..studio.dub_cues import FitPolicy

    base = FitPolicy()
    low, high = _number(form, "min_speed"), _number(form, "max_speed")
    policy = FitPolicy(base.min_speed if low is None else low, base.max_speed if high is None else high,
                       _flag(form, "overflow", True))
    duck = _number(form, "duck_db")
    original = form.get("original") if isinstance(form.get("original"), str) and form.get("original") else "duck"
    lang = form.get("lang") if isinstance(form.get("lang"), str) else ""
    source = form.get("source_lang") if isinstance(form.get("source_lang"), str) else ""
    return DubSettings(source_lang=source.strip().lower() or "und", target_lang=lang.strip().lower() or "",
                       policy=policy, original=original.strip().lower(), duck_db=12.0 if duck is None else duck)
