"""Errors → HTTP: the one table from a domain error to its status, and the exception handlers.

Every error body is OpenAI's shape, `{"error": {"code", "message", "type", "param"}}`, so OpenAI clients
raise their usual exceptions (404 → NotFoundError, 422 → UnprocessableEntityError, ...).
The service (`service.py`) raises domain errors and knows no statuses; only this module and the guard
(`security.py`, which is HTTP by nature) speak in status codes.
"""

from __future__ import annotations

import logging

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .service import ModelNotFound, ModelUnavailable, PayloadTooLarge, QueueFull, VoiceNotFound
from .studio_service import GlossaryNotFound
from ..errors import Cancelled, CosyVoiceError, InvalidRequest
from ..serving.consent import ConsentRequired
from ..serving.manager import ShuttingDown
from ..serving.remote import RemoteBusy, RemoteError
from ..serving.voices import VoiceNameTaken, VoiceStoreUnwritable
from ..store_index import StoreFull

log = logging.getLogger(__name__)

# Domain error → status. The most specific class wins (looked up along the error's MRO), so the order
# here does not matter; an error outside the table is a server-side failure (503).
STATUS_BY_ERROR: dict[type[BaseException], int] = {
    RemoteBusy: 503,  # a thin client's remote engine is busy: retry later
    RemoteError: 502,  # ... or it failed or refused us: a bad gateway, not the client's fault
    PayloadTooLarge: 413,
    VoiceNotFound: 404,
    VoiceStoreUnwritable: 409,  # the voices folder is read-only or full: nothing was changed
    VoiceNameTaken: 409,  # every id made from the name is taken
    StoreFull: 507,  # the store holds as many items as --max-voices / --max-glossaries allow
    ModelNotFound: 404,
    GlossaryNotFound: 404,
    ConsentRequired: 428,  # a shared server needs the speaker's consent for a new recording ("consent": true)
    InvalidRequest: 422,  # the request is well-formed but this model cannot serve it as given
    QueueFull: 503,
    ModelUnavailable: 503,
    ShuttingDown: 503,  # with Retry-After: the restarted server answers
    Cancelled: 503,
    CosyVoiceError: 503,  # the client asked for nothing wrong: the model could not serve it
}

# Errors the back ends raise as a plain `InvalidRequest` whose code says more than "422".
STATUS_BY_CODE: dict[str, int] = {
    "glossary_store_unwritable": 409,  # the glossary folder is read-only or full: nothing was changed
    "glossary_name_taken": 409,  # every id made from the name is taken
    "dub_job_unknown": 404,
    "dub_file_unknown": 404,
    "dub_not_ready": 409,  # the dub's files are asked for before it finished
    "dub_busy": 409,  # a cue is changed while the job renders
    "dub_cue_unknown": 404,
}

ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
               429: "rate_limit_error"}


class ApiError(Exception):
    """An HTTP-level refusal (authentication, rate limit, unparsable body) with its status and headers.

    Raised only by HTTP code (the guard, the routes); the service raises domain errors instead.
    """

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.param = param  # the request field at fault, when one is (OpenAI's error shape has it)


def status_of(exc: BaseException) -> int:
    """The status a domain error is answered with."""
    if isinstance(exc, InvalidRequest) and type(exc) is InvalidRequest and exc.code in STATUS_BY_CODE:
        return STATUS_BY_CODE[exc.code]
    for cls in type(exc).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 503


def headers_of(exc: BaseException) -> dict[str, str] | None:
    """Headers a domain error adds (when to retry)."""
    retry = getattr(exc, "retry_after_s", None)
    return {"Retry-After": str(retry)} if isinstance(retry, int) else None


def error_type(status: int) -> str:
    """OpenAI's error `type` for a status (clients branch on it)."""
    if status >= 500:
        return "server_error"
    return ERROR_TYPES.get(status, "invalid_request_error")


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   param: str | None = None) -> JSONResponse:
    body = {"code": code, "message": message, "type": error_type(status), "param": param}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def domain_error_response(exc: CosyVoiceError) -> JSONResponse:
    """Any domain error → its response (status and headers from the table above)."""
    status = status_of(exc)
    if isinstance(exc, InvalidRequest):
        param = exc.params.get("param") or exc.params.get("what")
        return error_response(status, exc.code, exc.message, headers_of(exc),
                              param=param if isinstance(param, str) else None)
    if isinstance(exc, Cancelled):
        return error_response(status, "cancelled", str(exc))
    return error_response(status, str(getattr(exc, "code", "model_unavailable")), str(exc), headers_of(exc))


def validation_error(exc: Exception) -> ApiError:
    """pydantic / JSON errors → one readable line ("field 'speed': Input should be a valid number")."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return ApiError(400, "bad_json", f"the request body is not valid JSON ({exc})")
    problems = []
    for err in errors():
        if err.get("type") == "json_invalid":
            return ApiError(400, "bad_json", "the request body is not valid JSON: "
                            f"{(err.get('ctx') or {}).get('error', err.get('msg'))}")
        if tuple(err.get("loc", ())) in ((), ("body",)):  # () when a route validates the parsed JSON itself
            return _body_error(err)
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        problems.append(f"{where or 'body'}: {err.get('msg')}")
    return ApiError(422, "invalid_field", "; ".join(problems) or "the request body is invalid")


JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false",
              type(None): "null"}


def _body_error(err: dict) -> ApiError:
    """The body as a whole is wrong: missing, not JSON at all (FastAPI hands over the raw bytes of a body
    whose Content-Type is not JSON), or JSON that is not an object."""
    value = err.get("input")
    if err.get("type") == "missing":
        return ApiError(422, "body_missing", "the request body is empty: send the request as a JSON object with "
                        "'Content-Type: application/json' (GET /docs shows its fields)")
    if isinstance(value, (bytes, bytearray)):
        return ApiError(415, "unsupported_media_type", "the request body must be JSON: send a JSON object with "
                        "'Content-Type: application/json'")
    kind = JSON_KINDS.get(type(value), "something else")
    return ApiError(422, "invalid_field", f"the request body must be a JSON object ({{\"field\": value, ...}}), not "
                    f"{kind}")


def route_error(status: int, method: str, allowed: str = "") -> ApiError:
    """An unknown API path (404), a method the path does not take (405) or an undecodable body (400), in the
    API's own error shape."""
    if status == 405:
        return ApiError(405, "method_not_allowed", f"{method} is not allowed on this route; use {allowed or 'another'}",
                        {"Allow": allowed} if allowed else None)
    if status == 400:  # FastAPI's one 400: a body it cannot even decode (not UTF-8, ...)
        return ApiError(400, "bad_json", "the request body is not valid JSON: it could not be decoded; send UTF-8 "
                        "JSON with 'Content-Type: application/json'")
    return ApiError(status, "route_not_found" if status == 404 else "http_error",
                    "there is no such API route; GET /docs lists them" if status == 404 else "the request was refused")


def add_error_handlers(app) -> None:
    from starlette.exceptions import HTTPException

    async def on_api_error(request, exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, exc.headers, exc.param)

    async def on_http_error(request, exc: HTTPException):  # the router's own 404 / 405 (no UI mounted)
        err = route_error(exc.status_code, request.method, (exc.headers or {}).get("Allow", ""))
        return error_response(err.status, err.code, err.message, err.headers)

    async def on_validation(request, exc: RequestValidationError):
        err = validation_error(exc)
        return error_response(err.status, err.code, err.message)

    async def on_domain_error(request, exc: CosyVoiceError):
        if status_of(exc) >= 500 and not isinstance(exc, (QueueFull, Cancelled, ShuttingDown)):
            log.warning("engine error on %s: %s", request.url.path, exc)
        return domain_error_response(exc)

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(CosyVoiceError, on_domain_error)
