"""Safe sharing by default: the login/key policy (`web/access.py`), its console message, the login enforced
on the UI, the REST API and Gradio's own API (TestClient, gradio_client and MCP on a live loopback server),
the files Gradio may serve, the sweep of old results, and the rate limit.

"Public" servers are simulated with `share=True` or `host="0.0.0.0"` in Settings while the live server binds
127.0.0.1 only: `create_app` never opens a share tunnel (only `serve` does), and nothing binds 0.0.0.0.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui.api.security import PUBLIC_RATE_LIMIT, rate_limit_of
from cosyvoice_ui.errors import ConfigError
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode
import cosyvoice_ui.web.access as access_module
from cosyvoice_ui.web.access import (LOGIN_USER, add_sweeper, console_message, resolve_access, sweep_outputs,
                                     sweep_period)
from cosyvoice_ui.web.flags import build_parser, settings_from_args
from cosyvoice_ui.web.server import check_mcp, create_app
from tests.web_client import LOOPBACK, free_port

REPO = Path(__file__).resolve().parents[2]
GRADIO_API_PATHS = ("/gradio_api/info", "/gradio_api/runs", "/gradio_api/mcp/schema", "/gradio_api/upload_progress",
                    "/gradio_api/file=/etc/passwd")


def fake_manager() -> ModelManager:
    engine = FakeEngine(name="fake-model", speakers=("alice", "bob"), modes=(Mode.SFT, Mode.ZERO_SHOT))
    return ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                        describe_model=lambda mid: engine.info)


def make_app(tmp_path: Path, **settings):
    options = {"voices_dir": tmp_path / "voices", "idle_unload_s": 0, "extra": {"output_dir": str(tmp_path / "out")},
               **settings}
    return create_app(Settings(**options), fake_manager())


# --- the policy table ---------------------------------------------------------------------------------

GIVEN_LOGIN = (("me", "secret"),)


@pytest.mark.parametrize("settings, login, key", [
    # (settings, UI login: "given" | "generated" | None, API key: "given" | "generated" | None)
    (Settings(), None, None),
    (Settings(host="localhost"), None, None),
    (Settings(host="::1"), None, None),
    (Settings(auth=GIVEN_LOGIN), "given", None),
    (Settings(api_keys=("k",)), None, "given"),
    (Settings(host="0.0.0.0"), "generated", "generated"),
    (Settings(host="192.168.1.5"), "generated", "generated"),
    (Settings(share=True), "generated", "generated"),
    (Settings(host="0.0.0.0", auth=GIVEN_LOGIN), "given", "generated"),
    (Settings(share=True, api_keys=("k",)), "generated", "given"),
    (Settings(host="0.0.0.0", auth=GIVEN_LOGIN, api_keys=("k",)), "given", "given"),
    (Settings(host="0.0.0.0", no_auth=True), None, None),
    (Settings(share=True, no_auth=True), None, None),
    (Settings(share=True, no_auth=True, auth=GIVEN_LOGIN), "given", None),
    (Settings(no_auth=True), None, None),
])
def test_policy_table(settings: Settings, login: str | None, key: str | None) -> None:
    access = resolve_access(settings)
    assert access.public == settings.is_public
    expected_login = {"given": GIVEN_LOGIN, None: ()}.get(login, (access.generated_login,))
    assert access.logins == expected_login and access.login_required == (login is not None)
    assert (access.generated_login is not None) == (login == "generated")
    if login == "generated":
        assert access.generated_login[0] == LOGIN_USER
    assert access.keys == {"given": ("k",), None: ()}.get(key, (access.generated_key,))
    assert (access.generated_key is not None) == (key == "generated")
    applied = access.applied(settings)
    assert applied.auth == access.logins and applied.api_keys == access.keys


def test_generated_secrets_are_random_and_strong(monkeypatch) -> None:
    runs = [resolve_access(Settings(share=True)) for _ in range(20)]
    secrets_seen = {r.generated_login[1] for r in runs} | {r.generated_key for r in runs}
    assert len(secrets_seen) == 40  # every password and key differs from every other
    assert all(len(s) >= 16 and not s.startswith("-") for s in secrets_seen)
    # a leading dash would read as a flag when pasted into a command: drawn again, not edited
    draws = iter(["-abc", "-def", "good"])
    monkeypatch.setattr(access_module.secrets, "token_urlsafe", lambda n: next(draws))
    assert access_module.new_secret() == "good"


def test_console_message_shows_the_one_time_login_once_in_a_box() -> None:
    settings = Settings(host="0.0.0.0", port=7861)
    access = resolve_access(settings)
    message = console_message(settings, access)
    lines = message.splitlines()
    assert lines[0] == lines[-1] and set(lines[0]) == {"+", "-"}
    assert all(line.startswith("| ") and line.endswith(" |") and len(line) == len(lines[0]) for line in lines[1:-1])
    user, password = access.generated_login
    assert f"user {user}" in message and f"password {password}" in message and access.generated_key in message
    assert "0.0.0.0:7861" in message and "a login is required" in message
    for how in ("--auth USER:PASS", "--api-key KEY", "--no-auth", "Authorization: Bearer"):
        assert how in message
    shared = Settings(share=True, auth=GIVEN_LOGIN)
    only_key = console_message(shared, resolve_access(shared))
    assert "public share link" in only_key and "secret" not in only_key and "web UI login" not in only_key


def test_console_message_warns_loudly_with_no_auth_and_says_nothing_on_loopback() -> None:
    settings = Settings(host="0.0.0.0", no_auth=True)
    warning = console_message(settings, resolve_access(settings))
    assert "WARNING: --no-auth" in warning and "the web UI and the REST API" in warning
    half = Settings(share=True, no_auth=True, api_keys=("k",))
    assert "the web UI on" in console_message(half, resolve_access(half))
    assert console_message(Settings(), resolve_access(Settings())) is None
    full = Settings(host="0.0.0.0", auth=GIVEN_LOGIN, api_keys=("k",))
    assert console_message(full, resolve_access(full)) is None  # nothing generated, nothing to say


def test_flags_reach_settings() -> None:
    default = settings_from_args(build_parser().parse_args([]))
    assert default.no_auth is False and default.rate_limit_per_min is None and default.temp_max_age_min == 60
    assert default.results_max_age_min == 0  # the history's files are the user's work: kept unless asked
    args = build_parser().parse_args(["--host", "0.0.0.0", "--no-auth", "--temp-max-age-min", "5",
                                      "--rate-limit", "3", "--results-max-age-min", "1440"])
    settings = settings_from_args(args)
    assert settings.no_auth and settings.temp_max_age_min == 5 and settings.rate_limit_per_min == 3
    assert settings.results_max_age_min == 1440


def test_mcp_needs_a_key_when_a_login_is_required() -> None:
    with pytest.raises(ConfigError, match="--api-key"):
        check_mcp(Settings(mcp=True, auth=GIVEN_LOGIN))
    check_mcp(Settings(mcp=True, auth=GIVEN_LOGIN, api_keys=("k",)))  # MCP clients send the key
    check_mcp(Settings(mcp=True, host="0.0.0.0"))  # the generated key lets MCP clients in


# --- login and key enforced (TestClient) ----------------------------------------------------------------


def test_public_rest_api_needs_the_generated_key(tmp_path: Path) -> None:
    app = make_app(tmp_path, share=True)
    client, key = TestClient(app, base_url=LOOPBACK), app.state.access.generated_key
    missing = client.get("/v1/voices")
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "api_key_missing"
    assert client.get("/v1/voices", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert client.get("/v1/voices", headers={"X-API-Key": key}).status_code == 200
    assert client.get("/v1/voices", headers={"X-API-Key": "wrong"}).status_code == 401
    assert client.get("/health").json()["api_key_required"] is True


def test_no_auth_and_loopback_stay_open(tmp_path: Path) -> None:
    for settings in ({"host": "0.0.0.0", "no_auth": True}, {}):
        client = TestClient(make_app(tmp_path, **settings), base_url=LOOPBACK)
        assert client.get("/v1/voices").status_code == 200, settings
        for path in ("/config", "/gradio_api/info"):
            assert client.get(path).status_code == 200, (settings, path)


def test_ui_login_is_required_and_works(tmp_path: Path) -> None:
    app = make_app(tmp_path, host="0.0.0.0")
    client = TestClient(app, base_url=LOOPBACK)
    user, password = app.state.access.generated_login
    login_page = client.get("/")
    assert login_page.status_code == 200 and "login printed in the server" in login_page.text  # says where it is
    assert client.get("/config").status_code == 401
    assert client.post("/login", data={"username": user, "password": "wrong"}).status_code == 400
    assert client.post("/login", data={"username": user, "password": password}).json() == {"success": True}
    assert client.get("/config").status_code == 200
    assert client.get("/gradio_api/info").status_code == 200
    assert client.get("/v1/voices").status_code == 401  # the UI session is no REST key


@pytest.mark.parametrize("path", GRADIO_API_PATHS)
def test_gradio_api_refuses_callers_without_login_or_key(tmp_path: Path, path: str) -> None:
    """Routes Gradio's own auth leaves open (its MCP schema, the run history page) are refused too."""
    app = make_app(tmp_path, share=True, mcp=True)
    client = TestClient(app, base_url=LOOPBACK)
    refused = client.get(path)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "login_required", path
    assert "sign in" in refused.json()["error"]["message"] and "Bearer" in refused.json()["error"]["message"]
    assert refused.headers["www-authenticate"] == "Bearer"
    bad = client.get(path, headers={"Authorization": "Bearer wrong"})
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "api_key_invalid"
    assert client.post("/gradio_api/queue/join", json={}).status_code == 401
    assert client.post("/gradio_api/cancel", json={}).status_code == 401


def test_gradio_api_accepts_the_api_key(tmp_path: Path) -> None:
    app = make_app(tmp_path, share=True, mcp=True)
    client, key = TestClient(app, base_url=LOOPBACK), app.state.access.generated_key
    info = client.get("/gradio_api/info", headers={"Authorization": f"Bearer {key}"})
    assert info.status_code == 200 and "/list_voices" in info.json()["named_endpoints"]
    schema = client.get("/gradio_api/mcp/schema", headers={"X-API-Key": key})
    assert schema.status_code == 200 and {tool["name"] for tool in schema.json()} >= {"synthesize"}


# --- live loopback server: gradio_client and MCP -------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[tuple[str, object]]:
    """A public-configured app (share + MCP) served by uvicorn on 127.0.0.1 in this process."""
    import uvicorn

    app = make_app(tmp_path_factory.mktemp("live"), share=True, mcp=True)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, name="sharing-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the test server did not start"
    yield f"http://127.0.0.1:{server.config.port}/", app.state.access
    server.should_exit = True
    thread.join(15)


def test_gradio_client_needs_the_login_or_the_key(live, tmp_path: Path) -> None:
    from gradio_client import Client

    url, access = live
    with pytest.raises(Exception) as refused:
        Client(url, verbose=False, download_files=str(tmp_path))
    assert "401" in str(refused.value) or "login" in str(refused.value).lower() or "auth" in str(refused.value).lower()
    by_login = Client(url, auth=access.generated_login, verbose=False, download_files=str(tmp_path))
    assert json.loads(by_login.predict(api_name="/list_voices"))["presets"] == ["alice", "bob"]
    by_key = Client(url, headers={"Authorization": f"Bearer {access.generated_key}"}, verbose=False,
                    download_files=str(tmp_path))
    assert json.loads(by_key.predict(api_name="/list_voices"))["presets"] == ["alice", "bob"]


def _mcp_tools(url: str, headers: dict[str, str]) -> list[str]:
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> list[str]:
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            async with streamable_http_client(url + "gradio_api/mcp/", http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await asyncio.wait_for(session.initialize(), timeout=30)
                    tools = await asyncio.wait_for(session.list_tools(), timeout=30)
                    return [tool.name for tool in tools.tools]

    return asyncio.run(main())


def test_mcp_needs_the_key(live) -> None:
    pytest.importorskip("mcp", reason="the mcp package is not installed (requirements.txt)")
    import httpx

    url, access = live
    assert httpx.post(url + "gradio_api/mcp/", json={}, timeout=10).status_code == 401
    assert "synthesize" in _mcp_tools(url, {"Authorization": f"Bearer {access.generated_key}"})


# --- files Gradio may serve ---------------------------------------------------------------------------


def test_only_results_and_gradio_uploads_are_served(tmp_path: Path) -> None:
    voices, out = tmp_path / "voices", tmp_path / "out"
    client = TestClient(make_app(tmp_path, voices_dir=voices), base_url=LOOPBACK)  # loopback: no login, so only the file rules act
    result = out / "20260101-120000-abcdef.wav"
    result.write_bytes(b"RIFF....WAVE")
    saved = voices / "narrator" / "prompt.wav"
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"RIFF....WAVE")
    assert client.get(f"/gradio_api/file={result}").content == b"RIFF....WAVE"
    for path in ("/etc/passwd", str(REPO / "README.md"), str(REPO / "cosyvoice_ui" / "settings.py"), str(saved),
                 f"{out}/../voices/narrator/prompt.wav", str(tmp_path / "elsewhere.wav")):
        (tmp_path / "elsewhere.wav").write_bytes(b"x")
        response = client.get(f"/gradio_api/file={path}")
        assert response.status_code in (403, 404), path
        assert b"root:" not in response.content and b"RIFF" not in response.content
    assert client.get("/file=/etc/passwd").status_code in (403, 404)  # Gradio 3's route is not there


def _history_render(client: TestClient, app, entries: list[dict]) -> str:
    """Run the history tab's render with browser state `entries` (as a crafted client could); its SSE text."""
    from cosyvoice_ui.web.access import gradio_app_of

    blocks = gradio_app_of(app).get_blocks()
    index = next(i for i, fn in blocks.fns.items() if getattr(fn, "renderable", None) is not None
                 and [type(b).__name__ for b in fn.inputs] == ["BrowserState", "Textbox"])
    joined = client.post("/gradio_api/queue/join", json={"data": [entries, "en"], "fn_index": index,
                                                         "session_hash": "crafted1", "trigger_id": None})
    assert joined.status_code == 200, joined.text
    with client.stream("GET", "/gradio_api/queue/data?session_hash=crafted1") as events:
        for line in events.iter_lines():
            if "process_completed" in line:
                return line
    raise AssertionError("the render did not complete")


def test_a_crafted_history_entry_cannot_fetch_a_server_file(tmp_path: Path) -> None:
    """The history tab plays the file its (browser-held) entry names: only results in the output folder are
    played, so a forged entry cannot turn a saved voice's recording, or any other server file, into a served file."""
    voices = tmp_path / "voices"
    saved = voices / "narrator" / "prompt.wav"
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"RIFF-saved-voice")
    elsewhere = tmp_path / "private-notes.wav"  # e.g. a file under the working directory or the temp dir
    elsewhere.write_bytes(b"RIFF-private")
    app = make_app(tmp_path, voices_dir=voices)
    entry = {"id": "x", "time": "12:00:00", "mode": "sft", "text": "t", "voice": "", "seed": 1, "speed": 1.0,
             "request": {}}
    with TestClient(app, base_url=LOOPBACK) as client:
        result = tmp_path / "out" / "20260101-120000-abcdef.wav"
        result.write_bytes(b"RIFF-result")
        shown = _history_render(client, app, [dict(entry, file=str(result))])
        assert '"success":true' in shown.replace(" ", "") and "abcdef.wav" in shown  # a real result is shown
        for forged in (saved, elsewhere, tmp_path / "out" / ".." / "private-notes.wav"):
            crafted = _history_render(client, app, [dict(entry, file=str(forged))])
            assert '"success":true' in crafted.replace(" ", "")  # the entry is listed, without its audio
            assert forged.name not in crafted and "file=" not in crafted


def test_a_crafted_history_entry_cannot_read_a_server_file_as_its_recording(tmp_path: Path) -> None:
    """Re-running an entry reads its recordings back only from the output folder or Gradio's uploads."""
    from cosyvoice_ui.ui.tabs.history import inside

    out = (tmp_path / "out").resolve()
    assert inside(out / "a.wav", [out]) and not inside(out / ".." / "a.wav", [out])
    assert not inside("/etc/passwd", [out]) and not inside(None, [out]) and not inside("\x00", [out])


# --- old files are swept ------------------------------------------------------------------------------


def _aged(path: Path, age_s: float, data: bytes = b"x") -> Path:
    path.write_bytes(data)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_sweep_removes_only_old_results(tmp_path: Path) -> None:
    old = _aged(tmp_path / "20260101-120000-abcdef.wav", 3700)
    fresh = _aged(tmp_path / "20260101-130000-123456.mp3", 60)
    mine = _aged(tmp_path / "notes.txt", 9999)  # not a name this app writes
    (tmp_path / "examples").mkdir()
    example = _aged(tmp_path / "examples" / "20260101-120000-abcdef.wav", 9999)  # subfolders stay
    assert sweep_outputs(tmp_path, 3600) == 1
    assert not old.exists() and fresh.exists() and mine.exists() and example.exists()
    assert sweep_outputs(tmp_path, 30) == 1 and not fresh.exists()
    assert sweep_outputs(tmp_path / "missing", 30) == 0


def test_sweep_period_and_gradio_cache_settings(tmp_path: Path) -> None:
    assert sweep_period(3600) == 900 and sweep_period(120) == 120
    app = make_app(tmp_path, temp_max_age_min=60)
    from cosyvoice_ui.web.access import gradio_app_of

    assert gradio_app_of(app).get_blocks().delete_cache == (900, 3600)
    kept = make_app(tmp_path, temp_max_age_min=0)
    assert gradio_app_of(kept).get_blocks().delete_cache is None


def test_sweeper_runs_while_the_app_serves(tmp_path: Path) -> None:
    old = _aged(tmp_path / "20260101-120000-abcdef.wav", 7200)
    app = FastAPI()
    add_sweeper(app, tmp_path, 3600)
    with TestClient(app, base_url=LOOPBACK):
        deadline = time.monotonic() + 30
        while old.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not old.exists()


# --- rate limits --------------------------------------------------------------------------------------


def test_rate_limit_applies_to_public_servers_unless_given() -> None:
    assert rate_limit_of(Settings()) == 0  # a local batch client is not throttled
    assert rate_limit_of(Settings(share=True)) == rate_limit_of(Settings(host="0.0.0.0")) == PUBLIC_RATE_LIMIT
    assert rate_limit_of(Settings(rate_limit_per_min=5)) == 5 and rate_limit_of(Settings(share=True,
                                                                                       rate_limit_per_min=0)) == 0


def test_local_batch_is_not_throttled_and_public_gets_429_with_retry_after(tmp_path: Path) -> None:
    local = TestClient(make_app(tmp_path), base_url=LOOPBACK)
    assert all(local.get("/v1/models").status_code == 200 for _ in range(PUBLIC_RATE_LIMIT + 5))
    app = make_app(tmp_path, share=True)
    public, key = TestClient(app, base_url=LOOPBACK), {"X-API-Key": app.state.access.generated_key}
    codes = [public.get("/v1/models", headers=key).status_code for _ in range(PUBLIC_RATE_LIMIT + 1)]
    assert codes[:-1] == [200] * PUBLIC_RATE_LIMIT and codes[-1] == 429
    limited = public.get("/v1/models", headers=key)
    assert limited.json()["error"]["code"] == "rate_limited" and 1 <= int(limited.headers["retry-after"]) <= 60
