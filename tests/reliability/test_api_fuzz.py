"""OpenAPI fuzzing of the REST API (issue 13, item 3): schemathesis generates requests from the app's own
`/openapi.json` and sends them to the real app (`web.server.create_app`: REST routes, their middleware and
the Gradio UI mounted beside them) on the tiny CosyVoice-300M-SFT model, in process through ASGI (no socket).

Each response must not be a server error, and its status, content type, headers and body must be what the
schema declares for that operation: so every status a route can answer is in its `responses=`.

The CI run is bounded: FUZZ_EXAMPLES (default 30) generated cases per operation, reproducible
(`derandomize=True`, no example database). For a longer run, raise it; no script is needed:

    FUZZ_EXAMPLES=200 nice -n 19 .venv/bin/python -m pytest -q tests/reliability/test_api_fuzz.py

(FUZZ_SEED_RANDOM=1 lets hypothesis pick new examples each run instead of the fixed ones.) Against a server
you started yourself on loopback, schemathesis' own CLI does the same:
`schemathesis run http://127.0.0.1:7860/openapi.json --max-examples 200`.

The schema is loaded at collection time through `Forward` rather than with `schemathesis.pytest.from_fixture`,
whose lazy mode fails under pytest 9 (it sets `Function._nodeid`, which pytest no longer has).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_headers_conformance,
                                 response_schema_conformance, status_code_conformance)

from cosyvoice_ui.settings import Settings

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "30"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]


class Forward:
    """An ASGI app that passes every call on to `target`: the schema is read at collection time, before the
    tiny model exists, and the fixture below points it at the real app for the fuzzed requests. Each call is
    addressed to 127.0.0.1, as a local client's is (schemathesis' in-process client names another host, which
    a loopback server refuses as DNS rebinding)."""

    def __init__(self, target) -> None:
        self.target = target

    async def __call__(self, scope, receive, send) -> None:
        await self.target(as_loopback(scope), receive, send)


def as_loopback(scope):
    if scope["type"] not in ("http", "websocket"):
        return scope
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"host"]
    return dict(scope, headers=[*headers, (b"host", b"127.0.0.1:7860")])


def bare_app():
    """A FastAPI app with the same REST routes as `create_app`'s and nothing behind them (cheap enough for
    collection time); `test_the_fuzzed_schema_is_the_real_apps` checks that both serve the same document."""
    from types import SimpleNamespace

    from fastapi import FastAPI

    from cosyvoice_ui.api.routes import add_routes

    bare = FastAPI(title="CosyVoice Studio API", docs_url=None, redoc_url=None)  # as create_app
    add_routes(bare, manager=None, settings=Settings(), service=SimpleNamespace())
    return bare


TARGET = Forward(bare_app())
schema = schemathesis.openapi.from_asgi("/openapi.json", TARGET)


@pytest.fixture(scope="module")
def app(tiny_sft: Path, tmp_path_factory: pytest.TempPathFactory):
    from cosyvoice_ui.web.server import create_app, create_manager

    work = tmp_path_factory.mktemp("fuzz")
    # Loopback and no key: the routes themselves are fuzzed, not only the guard. No rate limit (the fuzzer
    # is one client sending hundreds of requests), and a short text limit keeps each synthesis quick.
    config = Settings(model_dir=tiny_sft, voices_dir=work / "voices", glossary_dir=work / "glossaries",
                      projects_dir=work / "projects", device="cpu", idle_unload_s=0,
                      rate_limit_per_min=0, max_text_chars=200, temp_max_age_min=0,
                      extra={"output_dir": str(work / "outputs")})
    manager = create_manager(config)
    try:
        yield create_app(config, manager)
    finally:
        manager.shutdown()


@pytest.fixture(autouse=True)
def fuzz_the_real_app(app):
    """Every generated case goes to the real app, in process (ASGI, no socket)."""
    bare, TARGET.target = TARGET.target, app
    yield
    TARGET.target = bare


def test_the_fuzzed_schema_is_the_real_apps(app) -> None:
    served = schemathesis.openapi.from_asgi("/openapi.json", Forward(app)).raw_schema
    assert served == schema.raw_schema
    assert len(list(schema.get_all_operations())) >= 10


# (operation, status) of every fuzzed response: the last test reports the count and checks that synthesis
# was reached, so a run that only ever met the guard or the body checks does not pass as a fuzz.
SEEN: Counter[tuple[str, int]] = Counter()


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("FUZZ_SEED_RANDOM"), database=None,
          suppress_health_check=list(HealthCheck))
def test_every_response_conforms_to_the_schema(case) -> None:
    response = case.call_and_validate(checks=CHECKS)
    SEEN[(f"{case.operation.method.upper()} {case.operation.path}", response.status_code)] += 1


def test_the_fuzz_reached_every_operation_and_synthesis(capsys: pytest.CaptureFixture) -> None:
    if not SEEN:
        pytest.skip("run together with test_every_response_conforms_to_the_schema")
    operations = {f"{op.method.upper()} {op.path}" for op in (r.ok() for r in schema.get_all_operations())}
    assert {op for op, _ in SEEN} == operations
    for synthesis in ("POST /tts", "POST /v1/audio/speech"):
        assert SEEN[(synthesis, 200)] > 0, f"no fuzzed {synthesis} was synthesised: {sorted(SEEN.items())}"
    with capsys.disabled():  # the figures of the run, in CI's log
        print(f"\nfuzzed {len(operations)} operations with {sum(SEEN.values())} cases; responses by status: "
              + ", ".join(f"{status}: {n}" for status, n in sorted(Counter(s for _, s in SEEN.elements()).items())))
