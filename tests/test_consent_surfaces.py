"""Consent and the audit trail on a public server, through the surfaces a guest uses: the Gradio API
(gradio_client), MCP, and the web page in headless Debian Chromium (Playwright). The rule itself and REST are in
tests/test_consent_audit.py.

The app is configured as public (`share=True`: a generated login and key, consent required, the audit trail on)
and served by uvicorn on 127.0.0.1 in this process; nothing binds 0.0.0.0 and no tunnel is opened.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import soundfile as sf

from cosyvoice_ui.testing.signals import voice_clip
from tests.test_consent_audit import make_app
from tests.web_client import free_port

pytestmark = [pytest.mark.slow]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]
CONSENT_LABEL = "The person in this sample agreed to have their voice cloned"


def _serve(app) -> Iterator[str]:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, name="consent-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the test server did not start"
    try:
        yield f"http://127.0.0.1:{server.config.port}/"
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture(scope="module")
def public(tmp_path_factory):
    """(url, app) of a public-configured app with MCP, its trail in a temporary folder."""
    work = tmp_path_factory.mktemp("public")
    app = make_app(work, share=True, mcp=True, audit_log=work / "audit.jsonl")
    for url in _serve(app):
        yield url, app


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sample") / "sample.wav"
    clip = voice_clip(4.0)
    sf.write(path, clip.samples, clip.sample_rate)
    return path


def _trail(app) -> list[dict]:
    trail = app.state.api.speech.audit
    assert trail.flush()
    return [json.loads(line) for line in trail.path.read_text(encoding="utf-8").splitlines()]


def test_the_gradio_api_asks_for_consent_and_is_logged(public, sample: Path, tmp_path: Path) -> None:
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    url, app = public
    key = app.state.access.generated_key
    client = Client(url, headers={"Authorization": f"Bearer {key}"}, verbose=False, download_files=str(tmp_path))
    before = len(_trail(app)) if app.state.api.speech.audit.path.exists() else 0
    clone = dict(text="Hello from the Gradio API.", prompt_audio=handle_file(str(sample)), transcript="hello there",
                 api_name="/clone")
    with pytest.raises(AppError) as refused:
        client.predict(**clone)
    assert "consent" in str(refused.value) and "consent=True" in str(refused.value)
    path, details = client.predict(**clone, consent=True)
    assert Path(path).is_file() and details["seed"] >= 0
    with pytest.raises(AppError) as refused_save:
        client.predict(name="Guest voice", audio=handle_file(str(sample)), api_name="/save_voice")
    assert "consent" in str(refused_save.value)
    saved = json.loads(client.predict(name="Guest voice", audio=handle_file(str(sample)), transcript="hello there",
                                      consent=True, api_name="/save_voice"))
    assert saved["id"] == "guest-voice"
    record = json.loads((Path(app.state.settings.voices_dir) / "guest-voice" / "voice.json").read_text())
    assert record["consent"]["given"] is True and record["consent"]["by"] == "key-1"
    # a saved voice needs no more consent
    client.predict(text="Hello again.", voice="guest-voice", api_name="/clone")

    lines = _trail(app)[before:]
    assert [(line["event"], line["surface"], line["who"]) for line in lines] == [
        ("speech", "gradio_api", "key-1"), ("voice_saved", "gradio_api", "key-1"), ("speech", "gradio_api", "key-1")]
    assert lines[0]["recording"] and lines[2]["voice"] == "guest-voice" and lines[2]["recording"] is None
    assert key not in app.state.api.speech.audit.path.read_text(encoding="utf-8")


def test_an_mcp_tool_call_is_logged_as_mcp(tmp_path: Path) -> None:
    """On loopback with --audit-log: no login, no key, and the trail still names the surface."""
    pytest.importorskip("mcp", reason="the mcp package is not installed (requirements.txt)")
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    app = make_app(tmp_path, mcp=True, audit_log=tmp_path / "audit.jsonl")

    async def call(url: str) -> object:
        async with streamable_http_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await asyncio.wait_for(session.initialize(), timeout=30)
                return await asyncio.wait_for(session.call_tool("synthesize", {"text": "Hello over MCP.",
                                                                               "voice": "alice"}), timeout=60)

    for url in _serve(app):
        result = asyncio.run(call(url))
    assert not result.isError, result
    lines = _trail(app)
    assert [(line["surface"], line["who"], line["voice"]) for line in lines] == [("mcp", None, "alice")]


def test_mcp_tools_run_behind_a_login_with_a_key_and_are_logged_by_key(public) -> None:
    """A public server requires a login; an MCP client sends an API key, and its tool calls run (Gradio's own
    loopback client is built with the caller's key: ui/api_tools.forward_mcp_credentials)."""
    pytest.importorskip("mcp", reason="the mcp package is not installed (requirements.txt)")
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    url, app = public
    key = app.state.access.generated_key

    async def call(headers: dict[str, str]) -> object:
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            async with streamable_http_client(url + "gradio_api/mcp/", http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await asyncio.wait_for(session.initialize(), timeout=30)
                    return await asyncio.wait_for(session.call_tool("synthesize", {"text": "Hello over MCP.",
                                                                                   "voice": "alice"}), timeout=60)

    before = len(_trail(app)) if app.state.api.speech.audit.path.exists() else 0
    result = asyncio.run(call({"Authorization": f"Bearer {key}"}))
    assert not result.isError, result
    lines = _trail(app)[before:]
    assert [(line["surface"], line["who"], line["voice"]) for line in lines] == [("mcp", "key-1", "alice")]
    with pytest.raises(BaseException):  # no key: the gate refuses the MCP endpoint itself
        asyncio.run(call({}))


# --- the web page ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield instance
        instance.close()


def _open(page, url: str) -> None:
    page.goto(url, wait_until="load", timeout=60_000)
    page.get_by_role("tab").first.wait_for(timeout=60_000)
    page.locator("textarea").first.wait_for(timeout=60_000)
    page.wait_for_timeout(800)  # demo.load's adapt event


@pytest.mark.browser
def test_the_page_asks_beside_the_sample_and_logs_the_login(public, browser, sample: Path) -> None:
    url, app = public
    user, password = app.state.access.generated_login
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1000})
    try:
        page = context.new_page()
        page.goto(url, wait_until="load", timeout=60_000)
        fields = page.locator("input")
        fields.first.wait_for(timeout=60_000)
        fields.nth(0).fill(user)
        fields.nth(1).fill(password)
        page.get_by_role("button", name="Login").click()
        page.get_by_text("3-second clone").first.wait_for(timeout=60_000)
        _open(page, url)
        tab = page.locator(".tabitem:visible")
        box = tab.get_by_label(CONSENT_LABEL)
        assert box.is_visible() and not box.is_checked()  # beside the sample, not ticked for the user
        tab.locator("input[type=file]").first.set_input_files(str(sample))
        tab.get_by_label("Transcript of the voice sample").fill("hello there")
        tab.get_by_label("Text to speak").first.fill("Hello from the browser.")
        tab.get_by_role("button", name="Generate", exact=True).click()
        alert = tab.locator(".job-alert")
        alert.wait_for(state="visible", timeout=60_000)
        assert "tick" in alert.inner_text() and "agreed to have their voice cloned" in alert.inner_text()
        assert not tab.locator(".result-file a[download]").count()
        box.check()
        tab.get_by_role("button", name="Generate", exact=True).click()
        tab.locator(".result-file a[download]").first.wait_for(timeout=120_000)
    finally:
        context.close()
    last = _trail(app)[-1]
    assert (last["surface"], last["who"], last["mode"]) == ("ui", user, "zero_shot") and last["recording"]


@pytest.mark.browser
def test_a_loopback_page_asks_nothing(browser, tmp_path: Path, sample: Path) -> None:
    app = make_app(tmp_path)
    for url in _serve(app):
        context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1000})
        try:
            page = context.new_page()
            _open(page, url)
            tab = page.locator(".tabitem:visible")
            assert not page.get_by_label(CONSENT_LABEL).first.is_visible()
            tab.locator("input[type=file]").first.set_input_files(str(sample))
            tab.get_by_label("Transcript of the voice sample").fill("hello there")
            tab.get_by_label("Text to speak").first.fill("Hello from loopback.")
            tab.get_by_role("button", name="Generate", exact=True).click()
            tab.locator(".result-file a[download]").first.wait_for(timeout=120_000)
        finally:
            context.close()
    assert app.state.api.speech.audit is None
