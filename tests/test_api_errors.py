"""The REST API's error mapping and its layering: every domain error has one status (from the one table in
`api/errors.py`), keeps OpenAI's body shape, and the service behind the routes knows no HTTP."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cosyvoice_ui.api import errors as api_errors
from cosyvoice_ui.api import service as api_service
from cosyvoice_ui.api.errors import STATUS_BY_ERROR, domain_error_response, error_type, status_of
from cosyvoice_ui.api.service import ModelNotFound, ModelUnavailable, PayloadTooLarge, QueueFull, VoiceNotFound
from cosyvoice_ui.errors import Cancelled, CheckpointError, ConfigError, CosyVoiceError, InvalidRequest
from cosyvoice_ui.serving.remote import RemoteBusy, RemoteError

PACKAGE = Path(__file__).resolve().parents[1] / "cosyvoice_ui"
HTTP_MODULES = ("fastapi", "starlette")


def body_of(exc: CosyVoiceError) -> tuple[int, dict, dict]:
    response = domain_error_response(exc)
    return response.status_code, json.loads(response.body)["error"], dict(response.headers)


@pytest.mark.parametrize("exc, status, code, kind", [
    (PayloadTooLarge("the prompt_audio is 30.0 MB; the limit is 20 MB", size_mb=30.0, limit_mb=20), 413,
     "payload_too_large", "invalid_request_error"),
    (VoiceNotFound("there is no saved voice 'x'", voice="x", param="voice_id"), 404, "voice_not_found",
     "not_found_error"),
    (ModelNotFound("unknown model 'dall-e-3'", param="model"), 404, "model_not_found", "not_found_error"),
    (InvalidRequest("text_empty", "type some text"), 422, "text_empty", "invalid_request_error"),
    (QueueFull("8 jobs are waiting already; retry shortly"), 503, "queue_full", "server_error"),
    (ModelUnavailable("the model cannot be read"), 503, "model_unavailable", "server_error"),
    (Cancelled("the job was stopped"), 503, "cancelled", "server_error"),
    (ConfigError("llm.pt is missing"), 503, "model_unavailable", "server_error"),
    (CheckpointError("flow.pt does not match"), 503, "model_unavailable", "server_error"),
    (RemoteError("the engine failed"), 502, "remote_engine_error", "server_error"),
    (RemoteBusy("the engine is busy", "queue_full"), 503, "queue_full", "server_error"),
])
def test_every_domain_error_has_its_status_and_openai_body(exc, status: int, code: str, kind: str) -> None:
    got_status, body, _ = body_of(exc)
    assert status_of(exc) == got_status == status
    assert set(body) == {"code", "message", "type", "param"}
    assert body["code"] == code and body["type"] == kind and body["message"] == str(exc)


def test_the_table_covers_every_domain_error_of_the_service() -> None:
    defined = [cls for _, cls in inspect.getmembers(api_service, inspect.isclass)
               if issubclass(cls, CosyVoiceError) and cls.__module__ == api_service.__name__]
    assert {PayloadTooLarge, VoiceNotFound, ModelNotFound, QueueFull, ModelUnavailable} <= set(defined)
    for cls in defined:
        assert cls in STATUS_BY_ERROR, f"{cls.__name__} has no status in api/errors.py"
    # refusals of the request are InvalidRequests (the UI and the Gradio API show them as such)
    assert all(issubclass(cls, InvalidRequest) for cls in defined if STATUS_BY_ERROR[cls] < 500)


def test_param_and_retry_after_reach_the_response() -> None:
    _, body, headers = body_of(ModelNotFound("unknown model", param="model"))
    assert body["param"] == "model"
    _, body, _ = body_of(PayloadTooLarge("too big", size_mb=30.0, limit_mb=20))
    assert body["param"] is None
    _, body, _ = body_of(VoiceNotFound("no such voice", voice="x"))  # DELETE /v1/voices/{id}: no param
    assert body["param"] is None
    _, _, headers = body_of(QueueFull("busy"))
    assert headers["retry-after"] == "5"
    _, _, headers = body_of(QueueFull("busy", retry_after_s=12))
    assert headers["retry-after"] == "12"
    _, _, headers = body_of(ModelUnavailable("gone"))
    assert "retry-after" not in headers


def test_unknown_errors_are_server_errors() -> None:
    class Odd(CosyVoiceError):
        pass

    class Refusal(InvalidRequest):
        pass

    assert status_of(Odd("x")) == 503 and status_of(Refusal("c", "m")) == 422
    assert error_type(401) == "authentication_error" and error_type(429) == "rate_limit_error"
    assert error_type(400) == "invalid_request_error" and error_type(502) == "server_error"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, top level or inside functions (relative ones resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ["cosyvoice_ui"] + list(path.relative_to(PACKAGE).parent.parts)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.add(".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])))
            elif node.module:
                names.add(node.module)
    return names


@pytest.mark.parametrize("module", ["api/service.py", "serving/content_policy.py"])
def test_service_side_imports_no_http(module: str) -> None:
    names = _imports(PACKAGE / module)
    bad = sorted(n for n in names if n.split(".")[0] in HTTP_MODULES)
    assert not bad, f"{module} imports {bad}"
    assert not {"cosyvoice_ui.api.routes", "cosyvoice_ui.api.errors", "cosyvoice_ui.api.security"} & names


def test_importing_the_service_loads_no_http_framework() -> None:
    code = ("import sys, cosyvoice_ui.api.service; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'fastapi', 'starlette', 'gradio', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout.strip()
    assert out == "[]", f"importing api.service pulled in {out}"


def test_statuses_live_only_in_the_http_modules() -> None:
    """No status code in the service: `ApiError` (with a status) is raised only by the HTTP side."""
    source = (PACKAGE / "api" / "service.py").read_text(encoding="utf-8")
    assert "ApiError" not in source and "status_code" not in source
    assert api_errors.ApiError.__module__ == "cosyvoice_ui.api.errors"
