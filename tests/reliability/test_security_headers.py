"""Security headers on every response (REST, Gradio, refusals), HSTS only over https, Retry-After on every 429,
and, in Chromium, that the page still works under them behind the generated login."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.testclient import TestClient

from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode
from cosyvoice_ui.web.access import SecurityHeaders
from cosyvoice_ui.web.server import create_app
from tests.web_client import LOOPBACK, free_port

EXPECTED = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "strict-origin-when-cross-origin",
    "x-frame-options": "SAMEORIGIN",
    "cross-origin-opener-policy": "same-origin",
}
CHROMIUM = "/usr/bin/chromium"


def make_app(tmp_path: Path, **settings):
    engine = FakeEngine(name="fake-model", speakers=("alice", "bob"), modes=(Mode.SFT, Mode.ZERO_SHOT))
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    options = {"voices_dir": tmp_path / "voices", "idle_unload_s": 0, "extra": {"output_dir": str(tmp_path / "out")},
               **settings}
    return create_app(Settings(**options), manager)


def assert_secure(response) -> None:
    for name, value in EXPECTED.items():
        assert response.headers.get(name) == value, (response.url, name)
    policy = response.headers["permissions-policy"]
    assert "microphone=(self)" in policy and "camera=()" in policy  # the clone tab records; nothing else


def test_rest_and_gradio_routes_carry_the_headers(tmp_path: Path) -> None:
    client = TestClient(make_app(tmp_path), base_url=LOOPBACK)
    for path in ("/health", "/v1/voices", "/docs", "/", "/config", "/gradio_api/info", "/theme.css"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert_secure(response)
        assert "strict-transport-security" not in response.headers  # plain http on loopback
    not_found = client.delete("/v1/voices/nobody-here")
    assert not_found.status_code == 404
    assert_secure(not_found)


def test_refusals_carry_the_headers_too(tmp_path: Path) -> None:
    client = TestClient(make_app(tmp_path, host="0.0.0.0"), base_url=LOOPBACK)
    for path in ("/v1/voices", "/gradio_api/info", "/config"):
        refused = client.get(path)
        assert refused.status_code == 401, path
        assert_secure(refused)


def test_hsts_only_over_https(tmp_path: Path) -> None:
    local = TestClient(make_app(tmp_path), base_url=LOOPBACK)
    proxied = local.get("/health", headers={"X-Forwarded-Proto": "https"})
    assert proxied.headers["strict-transport-security"].startswith("max-age=")
    assert "strict-transport-security" not in local.get("/health").headers
    shared = TestClient(make_app(tmp_path, share=True), base_url=LOOPBACK)  # the share link is https (browsers ignore it over http)
    assert "strict-transport-security" in shared.get("/health").headers


def _tiny_app() -> FastAPI:
    app = FastAPI()

    @app.get("/framed")
    def framed():
        return PlainTextResponse("ok", headers={"X-Frame-Options": "DENY"})

    @app.get("/busy")
    def busy():
        return JSONResponse({"error": "busy"}, status_code=429)

    @app.get("/busy-for")
    def busy_for():
        return JSONResponse({"error": "busy"}, status_code=429, headers={"Retry-After": "42"})

    app.add_middleware(SecurityHeaders)
    return app


def test_a_route_header_wins_and_every_429_says_when_to_retry() -> None:
    client = TestClient(_tiny_app(), base_url=LOOPBACK)
    assert client.get("/framed").headers["x-frame-options"] == "DENY"
    assert int(client.get("/busy").headers["retry-after"]) >= 1
    assert client.get("/busy-for").headers["retry-after"] == "42"
    assert client.get("/framed").headers["x-content-type-options"] == "nosniff"


# --- the page in Chromium, behind the generated login ---------------------------------------------------


@pytest.mark.browser
@pytest.mark.slow
def test_browser_logs_in_and_the_page_works_under_the_headers(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    import uvicorn

    app = make_app(tmp_path, share=True)  # a share link's policy, served on 127.0.0.1 without a tunnel
    user, password = app.state.access.generated_login
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, name="headers-browser-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            errors: list[str] = []
            queue_calls: list[int] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("response", lambda r: queue_calls.append(r.status) if "/gradio_api/queue/join" in r.url else None)
            page.goto(f"http://127.0.0.1:{server.config.port}/")
            fields = page.locator("input")
            fields.first.wait_for(timeout=60_000)
            assert page.get_by_text("3-second clone").count() == 0  # nothing of the app before login
            fields.nth(0).fill(user)
            fields.nth(1).fill(password)
            page.get_by_role("button", name="Login").click()
            page.get_by_text("3-second clone").first.wait_for(timeout=60_000)
            page.get_by_role("tab", name="Preset speakers").click()
            for _ in range(120):  # at most 60 s for the page's first events
                if queue_calls:
                    break
                page.wait_for_timeout(500)
            browser.close()
        assert not errors, errors
        assert queue_calls and set(queue_calls) == {200}, queue_calls  # the page's events ran through the queue
    finally:
        server.should_exit = True
        thread.join(15)
