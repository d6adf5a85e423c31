"""A page of another origin, in Chromium, against a logged-in user's server (issue 23).

The app runs on loopback with a UI login and no API key (so its REST API is open, the default setup) and the
browser opens it as http://localhost:PORT; a second loopback origin (http://localhost:OTHER: another origin, the
same site, so the login cookie goes with its requests) serves the attacker's page, as another local app or dev
server could. Gradio's own CORS layer would reflect that Origin with credentials. The user logs in to the app, then opens that page, which tries what
a hostile page would: a credentialed read of `/config` and `/gradio_api/info`, `no-cors` POSTs of JSON typed as a
form (what curl's `-d` sends, which the API reads as JSON for curl), multipart uploads of a recording to
`/v1/voices` and to Gradio's `/gradio_api/upload`, and a classic auto-submitted `text/plain` form whose body is
JSON. The reads fail in the browser (no Access-Control-Allow-Origin) and the writes change
nothing on the server (403), while the app's own page, a plain HTTP client (as curl) and the `openai` client
still work.
"""

from __future__ import annotations

import base64
import http.server
import io
import json
import threading
import time
from pathlib import Path

import httpx
import pytest
import soundfile as sf

from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Mode
from cosyvoice_ui.web.server import create_app
from tests.web_client import free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]
USER, PASSWORD = "me", "correct horse"

ATTACK_PAGE = """<!doctype html><html><body>
<form id="csrf" method="POST" action="{app}/v1/glossaries" enctype="text/plain" target="sink">
  <input name='{{"name": "Planted by form", "entries": {{"a": "b"}}, "x": "' value='"}}'>
</form>
<iframe name="sink"></iframe>
<script>
window.results = {{}};
async function attempt(name, run) {{
  try {{ const r = await run(); window.results[name] = "read:" + r.status + ":" + (await r.text()).slice(0, 80); }}
  catch (e) {{ window.results[name] = "blocked:" + e.name; }}
}}
(async () => {{
  await attempt("config", () => fetch("{app}/config", {{credentials: "include"}}));
  await attempt("info", () => fetch("{app}/gradio_api/info", {{credentials: "include"}}));
  await attempt("post", () => fetch("{app}/v1/glossaries", {{method: "POST", mode: "no-cors", credentials: "include",
      headers: {{"Content-Type": "application/x-www-form-urlencoded"}},
      body: JSON.stringify({{name: "Planted by fetch", entries: {{a: "b"}}}})}}));
  await attempt("tts", () => fetch("{app}/tts", {{method: "POST", mode: "no-cors", credentials: "include",
      headers: {{"Content-Type": "application/x-www-form-urlencoded"}},
      body: JSON.stringify({{text: "Spoken for a stranger.", speaker: "alice"}})}}));
  const wav = Uint8Array.from(atob("{wav}"), c => c.charCodeAt(0));
  const voice = new FormData();
  voice.append("name", "Planted voice");
  voice.append("transcript", "hello");
  voice.append("audio", new Blob([wav], {{type: "audio/wav"}}), "voice.wav");
  await attempt("voice", () => fetch("{app}/v1/voices", {{method: "POST", mode: "no-cors", credentials: "include",
      body: voice}}));
  const upload = new FormData();
  upload.append("files", new Blob([wav], {{type: "audio/wav"}}), "voice.wav");
  await attempt("upload", () => fetch("{app}/gradio_api/upload", {{method: "POST", mode: "no-cors",
      credentials: "include", body: upload}}));
  document.getElementById("csrf").submit();
  window.done = true;
}})();
</script></body></html>"""


def _wav() -> bytes:
    buffer = io.BytesIO()
    clip = voice_clip(4.0)
    sf.write(buffer, clip.samples, clip.sample_rate, format="WAV")
    return buffer.getvalue()


@pytest.fixture()
def servers(tmp_path: Path):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    import uvicorn

    engine = FakeEngine(name="fake-model", speakers=("alice", "bob"), modes=(Mode.SFT, Mode.ZERO_SHOT))
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    settings = Settings(voices_dir=tmp_path / "voices", glossary_dir=tmp_path / "glossaries",
                        projects_dir=tmp_path / "projects", idle_unload_s=0, auth=((USER, PASSWORD),),
                        rate_limit_per_min=0, extra={"output_dir": str(tmp_path / "out")})
    app = create_app(settings, manager)
    port = free_port("127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="origin-app", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    app_url = f"http://localhost:{port}"

    evil_host = "127.0.0.1"  # bound here, opened as http://localhost:OTHER: same site, another origin
    page = ATTACK_PAGE.format(app=app_url, wav=base64.b64encode(_wav()).decode()).encode()

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args) -> None:
            pass

    evil = http.server.ThreadingHTTPServer((evil_host, free_port(evil_host)), Attacker)
    threading.Thread(target=evil.serve_forever, name="attacker-page", daemon=True).start()
    try:
        yield app_url, f"http://localhost:{evil.server_address[1]}/", engine
    finally:
        evil.shutdown()
        server.should_exit = True
        thread.join(15)


def test_a_foreign_page_can_neither_read_nor_write(servers) -> None:
    from playwright.sync_api import sync_playwright

    app_url, evil_url, engine = servers
    refused: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context()
        page = context.new_page()
        page.goto(app_url + "/")
        fields = page.locator("input")
        fields.first.wait_for(timeout=60_000)
        fields.nth(0).fill(USER)
        fields.nth(1).fill(PASSWORD)
        page.get_by_role("button", name="Login").click()
        page.get_by_text("3-second clone").first.wait_for(timeout=60_000)
        # the app's own page reads and writes through the same routes
        own = page.evaluate("""async () => {
            const config = await fetch('/config', {credentials: 'include'});
            const made = await fetch('/v1/glossaries', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                     body: JSON.stringify({name: 'Made by the app page', entries: {a: 'b'}})});
            return [config.status, made.status];
        }""")
        assert own == [200, 201], own
        assert any(c["name"].startswith("access-token") for c in context.cookies())  # logged in: cookies exist

        attacker = context.new_page()
        attacker.on("response", lambda r: refused.append(f"{r.status} {r.url}") if r.status == 403 else None)
        calls_before = engine.calls
        attacker.goto(evil_url)
        attacker.wait_for_function("window.done === true", timeout=30_000)
        attacker.wait_for_timeout(1500)  # the form's navigation into the frame
        results = attacker.evaluate("window.results")
        browser.close()

    assert results["config"].startswith("blocked"), results  # no CORS grant: the page cannot read it
    assert results["info"].startswith("blocked"), results
    # no-cors answers are opaque to the page; the server's refusals are what matter (checked here and below)
    assert sum("/v1/glossaries" in r for r in refused) == 2, refused  # the fetch and the form post: 403
    for route in ("/tts", "/v1/voices", "/gradio_api/upload"):
        assert any(route in r for r in refused), (route, refused)
    assert engine.calls == calls_before  # nothing was synthesised for the foreign page
    listing = httpx.get(app_url + "/v1/glossaries").json()["data"]  # a plain client (curl) still works
    names = [g["name"] for g in listing]
    assert "Made by the app page" in names
    assert not any(name.startswith("Planted") for name in names), names
    assert httpx.get(app_url + "/v1/voices").json()["data"] == []  # no voice was saved from the page


def test_plain_clients_and_the_openai_sdk_still_work(servers) -> None:
    openai = pytest.importorskip("openai")
    app_url, _, _ = servers
    made = httpx.post(app_url + "/v1/glossaries", content=json.dumps({"name": "From curl", "entries": {"a": "b"}}),
                      headers={"content-type": "application/x-www-form-urlencoded"})  # curl -d labels it a form
    assert made.status_code == 201, made.text
    client = openai.OpenAI(base_url=app_url + "/v1", api_key="unused")
    speech = client.audio.speech.create(model="tts-1", voice="alice", input="Hello there.")
    assert len(speech.content) > 1000
