"""Hostile pages and hostile callers (issue 23): the same-origin policy, CORS, the Host check, secrets and paths,
no 5xx for deep JSON or exhausted ids, NFKC ids, store caps and indexed listings, and the login back-off.

Each family builds its inputs here and runs them through the real app (`create_app`, a fake engine, TestClient
with the Host a browser on this machine sends); the Chromium test of a second origin is
`test_cross_origin_browser.py`.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from cosyvoice_ui.api.security import MAX_JSON_DEPTH, FailureBackoff, client_address, json_depth
from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.ids import normal_id
from cosyvoice_ui.redact import public_url, without_paths
from cosyvoice_ui.serving.glossary import GlossaryStore, make_glossary
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.serving.voices import VoiceLibrary
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.store_index import StoreFull
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Mode
from cosyvoice_ui.web.flags import build_parser, settings_from_args
from cosyvoice_ui.web.origin import SameOrigin, parse_origin
from cosyvoice_ui.web.server import create_app
from tests.web_client import LOOPBACK

from .corpus import check_clean

EVIL = "http://evil.example"
TRUSTED = "https://studio.example.org"
# Every route that changes something, with a body it would take from a page: (method, path, JSON body).
STATE_CHANGING = (
    ("POST", "/tts", {"text": "Hi there.", "speaker": "alice"}),
    ("POST", "/v1/audio/speech", {"input": "Hi there.", "voice": "alice"}),
    ("POST", "/v1/glossaries", {"name": "Names", "entries": {"Nguyen": "Win"}}),
    ("POST", "/v1/glossaries/preview", {"text": "Nguyen", "glossary": {"Nguyen": "Win"}}),
    ("PUT", "/v1/glossaries/names", {"name": "Names", "entries": {"Nguyen": "Win"}}),
    ("DELETE", "/v1/glossaries/names", None),
    ("POST", "/v1/transcribe", {"audio": ""}),
    ("POST", "/v1/audio/detect", {"audio": ""}),
    ("POST", "/v1/voices", {"name": "x", "audio": ""}),
    ("POST", "/gradio_api/queue/join", {"data": [], "fn_index": 0, "session_hash": "x"}),
    ("POST", "/gradio_api/upload", None),
)


def fake_manager() -> ModelManager:
    engine = FakeEngine(name="fake-model", speakers=("alice", "bob"), modes=(Mode.SFT, Mode.ZERO_SHOT))
    return ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                        describe_model=lambda mid: engine.info)


def make_app(tmp_path: Path, **settings):
    options = {"voices_dir": tmp_path / "voices", "glossary_dir": tmp_path / "glossaries",
               "projects_dir": tmp_path / "projects", "idle_unload_s": 0, "rate_limit_per_min": 0,
               "extra": {"output_dir": str(tmp_path / "out")}, **settings}
    return create_app(Settings(**options), fake_manager())


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> TestClient:
    app = make_app(tmp_path_factory.mktemp("pages"), allowed_origins=(TRUSTED,))
    with TestClient(app, base_url=LOOPBACK) as c:
        yield c


def clip_b64(seconds: float = 4.0) -> str:
    clip = voice_clip(seconds)
    buffer = io.BytesIO()
    sf.write(buffer, clip.samples, clip.sample_rate, format="WAV")
    return base64.b64encode(buffer.getvalue()).decode()


def error_code(response) -> str:
    return response.json()["error"]["code"]


# --- the policy on its own ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method, headers, allowed", [
    ("POST", {"host": "127.0.0.1:7860"}, True),  # curl, the openai SDK: no Origin, no Sec-Fetch-*
    ("POST", {"host": "127.0.0.1:7860", "origin": "http://127.0.0.1:7860"}, True),  # the app's own page
    ("POST", {"host": "localhost:7860", "origin": "http://localhost:7860"}, True),
    ("POST", {"host": "[::1]:7860", "origin": "http://[::1]:7860"}, True),
    ("POST", {"host": "127.0.0.1:7860", "origin": "http://127.0.0.1:8000"}, False),  # another local app
    ("POST", {"host": "127.0.0.1:7860", "origin": "http://localhost:7860"}, False),  # same port, another name
    ("POST", {"host": "127.0.0.1:7860", "origin": EVIL}, False),
    ("POST", {"host": "127.0.0.1:7860", "origin": "null"}, False),  # sandboxed frames, file:// pages
    ("POST", {"host": "127.0.0.1:7860", "origin": TRUSTED}, True),  # --allowed-origin
    ("POST", {"host": "127.0.0.1:7860", "sec-fetch-site": "cross-site"}, False),
    ("POST", {"host": "127.0.0.1:7860", "sec-fetch-site": "same-site"}, False),
    ("POST", {"host": "127.0.0.1:7860", "sec-fetch-site": "same-origin"}, True),
    ("DELETE", {"host": "127.0.0.1:7860", "origin": EVIL}, False),
    ("GET", {"host": "127.0.0.1:7860", "origin": EVIL}, True),  # reading is CORS's business: see below
    ("GET", {"host": "evil.example:7860"}, False),  # DNS rebinding: the page's own name as Host
    ("GET", {"host": "studio.example.org"}, True),  # an --allowed-origin's host
    ("GET", {"host": "127.0.0.2:7860"}, True),
    ("GET", {"host": ""}, False),
])
def test_the_policy_table(method: str, headers: dict, allowed: bool) -> None:
    policy = SameOrigin.for_bind("127.0.0.1", (TRUSTED,))
    verdict = policy.judge(method, headers)
    assert verdict.allowed is allowed, verdict
    if not allowed:
        assert verdict.status in (403, 421) and verdict.code in ("cross_origin_refused", "host_not_allowed")
        check_clean(verdict.message)


def test_a_public_bind_does_not_check_host_but_still_refuses_cross_site_writes() -> None:
    policy = SameOrigin.for_bind("0.0.0.0")
    assert policy.judge("GET", {"host": "box.lan:7860"}).allowed
    assert policy.judge("POST", {"host": "box.lan:7860", "origin": "http://box.lan:7860"}).allowed
    assert not policy.judge("POST", {"host": "box.lan:7860", "origin": EVIL}).allowed


def test_the_share_link_is_an_allowed_origin_once_it_is_known() -> None:
    link = {"url": None}
    policy = SameOrigin.for_bind("127.0.0.1", share_origin=lambda: link["url"])
    headers = {"host": "abc123.gradio.live", "origin": "https://abc123.gradio.live"}
    assert not policy.judge("POST", headers).allowed
    link["url"] = "https://abc123.gradio.live"
    assert policy.judge("POST", headers).allowed
    assert policy.cors_origin("https://abc123.gradio.live") and not policy.cors_origin(EVIL)


@pytest.mark.parametrize("value", ["*", "https://*.example.org", "ftp://x.org", "https://x.org/path", "x.org",
                                   "https://user:pw@x.org", "https://x.org:99999"])
def test_allowed_origin_values_are_checked(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_origin(value)
    assert caught.value.code == "origin_invalid"
    with pytest.raises(SystemExit):
        settings_from_args(build_parser().parse_args(["--allowed-origin", value]))


def test_allowed_origins_are_canonical() -> None:
    assert parse_origin("HTTPS://Studio.Example.org:443/") == "https://studio.example.org"
    args = build_parser().parse_args(["--allowed-origin", "http://192.168.1.5:8080", "--allowed-origin",
                                      "http://192.168.1.5:8080/"])
    assert settings_from_args(args).allowed_origins == ("http://192.168.1.5:8080",)


# --- the policy in the app ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method, path, body", STATE_CHANGING, ids=[f"{m} {p}" for m, p, _ in STATE_CHANGING])
def test_cross_site_writes_are_refused_on_every_route(client: TestClient, method: str, path: str, body) -> None:
    for origin in (EVIL, "null", "http://127.0.0.1:9999"):
        response = client.request(method, path, content=json.dumps(body) if body is not None else None,
                                  headers={"origin": origin, "content-type": "application/x-www-form-urlencoded"})
        assert response.status_code == 403, (origin, response.text[:200])
        assert error_code(response) == "cross_origin_refused"
        assert "access-control-allow-origin" not in response.headers


def test_a_cross_site_form_carrying_json_never_runs(client: TestClient) -> None:
    """The classic CSRF shape: a form post (no preflight) with a JSON text body, from a page with only
    Sec-Fetch-Site (some browsers omit Origin on navigations)."""
    body = json.dumps({"name": "Planted", "entries": {"a": "b"}})
    response = client.post("/v1/glossaries", content=body, headers={
        "content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "cross-site",
        "sec-fetch-mode": "navigate"})
    assert response.status_code == 403
    assert "planted" not in client.get("/v1/glossaries").text.lower()


def test_curl_and_sdk_clients_keep_working(client: TestClient) -> None:
    """No Origin, no Sec-Fetch-*: curl's `-d` (a form label on a JSON body) is still read as JSON."""
    response = client.post("/tts", content=json.dumps({"text": "Hi there.", "speaker": "alice"}),
                           headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 200, response.text[:300]
    assert client.post("/v1/audio/speech", json={"input": "Hi there.", "voice": "alice"}).status_code == 200


def test_the_apps_own_page_may_write(client: TestClient) -> None:
    same = {"origin": LOOPBACK, "sec-fetch-site": "same-origin"}
    assert client.post("/tts", json={"text": "Hi there.", "speaker": "alice"}, headers=same).status_code == 200
    # but a form from the page itself is a form, never JSON
    response = client.post("/tts", content=json.dumps({"text": "Hi", "speaker": "alice"}),
                           headers={**same, "content-type": "application/x-www-form-urlencoded"})
    assert response.status_code in (400, 415, 422) and response.status_code != 200


def test_dns_rebinding_is_refused_on_loopback(client: TestClient) -> None:
    for path in ("/health", "/config", "/", "/v1/voices", "/gradio_api/info"):
        response = client.get(path, headers={"host": "rebind.evil.example:7860"})
        assert response.status_code == 421, path
        assert error_code(response) == "host_not_allowed"
    assert client.get("/health", headers={"host": "localhost:7860"}).status_code == 200


def test_a_public_bind_answers_any_host(tmp_path: Path) -> None:
    app = make_app(tmp_path, host="0.0.0.0", no_auth=True)
    with TestClient(app, base_url="http://box.lan:7860") as public:
        assert public.get("/health").status_code == 200


def test_cors_never_reflects_a_foreign_origin_with_credentials(client: TestClient) -> None:
    for origin in (EVIL, "null", "http://localhost:7860", "http://127.0.0.1:9999"):
        for path in ("/config", "/gradio_api/info", "/health", "/v1/voices"):
            response = client.get(path, headers={"origin": origin})
            assert "access-control-allow-origin" not in response.headers, (origin, path)
            assert "access-control-allow-credentials" not in response.headers, (origin, path)
        preflight = client.options("/gradio_api/upload", headers={
            "origin": origin, "access-control-request-method": "POST"})
        assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers


def test_an_allowed_origin_may_read_with_credentials(client: TestClient) -> None:
    response = client.get("/config", headers={"origin": TRUSTED})
    assert response.headers["access-control-allow-origin"] == TRUSTED
    assert response.headers["access-control-allow-credentials"] == "true"
    assert "Origin" in response.headers.get("vary", "")
    preflight = client.options("/tts", headers={"origin": TRUSTED, "access-control-request-method": "POST",
                                                "access-control-request-headers": "content-type"})
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == TRUSTED


# --- secrets and paths --------------------------------------------------------------------------------------


def test_health_and_config_show_no_credentials_and_no_absolute_paths(tmp_path: Path) -> None:
    models = tmp_path / "pretrained_models"
    missing = models / "NotThere-0.5B"
    settings = Settings(model_dir=missing, models_dir=models, voices_dir=tmp_path / "voices",
                        glossary_dir=tmp_path / "g", projects_dir=tmp_path / "p", idle_unload_s=0,
                        extra={"output_dir": str(tmp_path / "out")})
    app = create_app(settings)
    with TestClient(app, base_url=LOOPBACK) as c:
        health = c.get("/health").text
        config = c.get("/config").text
    for text in (health, config):
        assert str(tmp_path) not in text and str(Path.cwd()) not in text
    assert "NotThere-0.5B" in health  # named, relative to the models folder


def test_a_thin_clients_engine_url_loses_its_password(tmp_path: Path) -> None:
    settings = Settings(engine_url="http://user:hunter2@127.0.0.1:9/", voices_dir=tmp_path / "voices",
                        glossary_dir=tmp_path / "g", projects_dir=tmp_path / "p", idle_unload_s=0,
                        extra={"output_dir": str(tmp_path / "out")})
    app = create_app(settings)
    with TestClient(app, base_url=LOOPBACK) as c:
        texts = [c.get(path).text for path in ("/health", "/config", "/v1/models")]
    for text in texts:
        assert "hunter2" not in text and "user:hunter2" not in text
    assert json.loads(texts[0])["engine_url"] == "http://127.0.0.1:9/"


def test_redaction_helpers() -> None:
    assert public_url("https://u:p@host:8080/api?token=abc") == "https://host:8080/api"
    assert without_paths("model folder /srv/models/CosyVoice2 does not exist.", ["/srv/models"]) == \
        "model folder CosyVoice2 does not exist."
    assert without_paths("cannot read /etc/shadow", []) == "cannot read shadow"
    assert without_paths("see http://u:p@host/a/b", []) == "see http://host/a/b"
    assert without_paths("a 3/4 ratio, a/b", []) == "a 3/4 ratio, a/b"


def test_gradio_error_texts_name_no_folder(client: TestClient) -> None:
    """A request naming a server file gets our message, not Gradio's ("Cannot move /srv/app/secret ...")."""
    for path in ("secret.txt", "../../etc/passwd", "/etc/passwd", "voices/x/prompt.wav"):
        for lang in ("en-US", "zh-CN"):
            started = client.post("/gradio_api/call/save_voice", headers={"accept-language": lang}, json={
                "data": ["n", {"path": path, "meta": {"_type": "gradio.FileData"}}, "t", False]})
            assert started.status_code == 200, started.text
            events = client.get(f"/gradio_api/call/save_voice/{started.json()['event_id']}",
                                headers={"accept-language": lang}).text
            assert "event: error" in events
            message = json.loads(events.split("data:", 1)[1].strip().splitlines()[0])["error"]
            check_clean(message, str(Path.cwd()))
            assert "gradio cache" not in message and "blocked_paths" not in message
            assert ("上传" in message) if lang.startswith("zh") else ("upload" in message)


# --- no 5xx -------------------------------------------------------------------------------------------------

JSON_ROUTES = ("/tts", "/v1/audio/speech", "/v1/voices", "/v1/glossaries", "/v1/glossaries/preview",
               "/v1/transcribe")


@pytest.mark.parametrize("path", JSON_ROUTES)
@pytest.mark.parametrize("shape", ["arrays", "objects", "inside-a-field"])
def test_deep_json_is_a_clear_400_on_every_json_route(client: TestClient, path: str, shape: str) -> None:
    deep = {"arrays": "[" * 50_000 + "]" * 50_000, "objects": '{"a":' * 50_000 + "1" + "}" * 50_000,
            "inside-a-field": '{"text": "hi", "x": ' + "[" * 5_000 + "]" * 5_000 + "}"}[shape]
    response = client.post(path, content=deep, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text[:200]
    assert error_code(response) == "json_too_deep"
    check_clean(response.json()["error"]["message"])


def test_json_depth_is_counted_outside_strings() -> None:
    assert json_depth(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}') <= 1
    assert json_depth(b'["\\"[[[[", ' + b"[" * 70 + b"]" * 70 + b"]") > MAX_JSON_DEPTH
    assert json_depth(b'"\\\\"' + b"[" * 3 + b"]" * 3, stop_at=2) == 3
    assert json_depth(b"[" * 10 + b"]" * 10) == 0  # few brackets: no scan needed, never deeper than the cap


def test_exhausted_glossary_ids_are_a_409(client: TestClient, monkeypatch) -> None:
    import cosyvoice_ui.serving.glossary as glossary

    monkeypatch.setattr(glossary, "MAX_SAME_NAME", 3)
    codes = [client.post("/v1/glossaries", json={"name": "Twins", "entries": {"a": "b"}}).status_code
             for _ in range(4)]
    assert codes == [201, 201, 201, 409]
    refused = client.post("/v1/glossaries", json={"name": "Twins", "entries": {"a": "b"}})
    assert error_code(refused) == "glossary_name_taken" and "Twins" in refused.json()["error"]["message"]


# --- ids ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, expected", [
    ("names", "names"), ("ｎａｍｅｓ", "names"), ("Ｎames-2", "Names-2"), ("名字", "名字"),
    ("names\n", None), ("na\x00mes", None), ("na\u200bmes", None), ("", None), ("-names", None),
    ("../names", None), ("x" * 65, None), ("a b", None),
])
def test_ids_are_nfkc_and_refuse_control_characters(raw: str, expected: str | None) -> None:
    assert normal_id(raw) == expected


def test_look_alike_ids_name_the_same_glossary(client: TestClient) -> None:
    assert client.put("/v1/glossaries/places", json={"name": "Places", "entries": {"Xian": "Shee-an"}}).status_code \
        in (200, 201)
    assert client.get("/v1/glossaries/ｐｌａｃｅｓ").json()["id"] == "places"
    assert client.put("/v1/glossaries/ｐｌａｃｅｓ", json={"name": "Places", "entries": {"a": "b"}}).status_code == 200
    assert client.get("/v1/glossaries/places%0A").status_code == 404
    ids = [g["id"] for g in client.get("/v1/glossaries").json()["data"]]
    assert ids.count("places") == 1 and "ｐｌａｃｅｓ" not in ids


def test_a_voice_id_with_a_newline_is_not_a_voice(tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path)
    voice = library.add("Narrator", voice_clip(4.0), "hello")
    assert library.get(voice.id + "\n") is None and library.get("ｎａｒｒａｔｏｒ").id == voice.id


# --- caps and the index -------------------------------------------------------------------------------------


def test_the_voice_store_has_a_cap_with_a_clear_507(tmp_path: Path) -> None:
    app = make_app(tmp_path, max_voices=2)
    with TestClient(app, base_url=LOOPBACK) as c:
        made = [c.post("/v1/voices", json={"name": f"v{n}", "audio": clip_b64(), "transcript": "hi"})
                for n in range(3)]
        assert [r.status_code for r in made] == [201, 201, 507], made[-1].text
        assert error_code(made[-1]) == "voice_store_limit"
        message = made[-1].json()["error"]["message"]
        assert "2 voices" in message and "--max-voices" in message
        check_clean(message)
        assert c.delete(f"/v1/voices/{made[0].json()['id']}").status_code == 200
        assert c.post("/v1/voices", json={"name": "v9", "audio": clip_b64(), "transcript": "hi"}).status_code == 201


def test_the_glossary_store_has_a_cap_but_replacing_one_is_fine(tmp_path: Path) -> None:
    store = GlossaryStore(tmp_path, limit=2)
    store.save(make_glossary("One", {"a": "b"}))
    two = store.save(make_glossary("Two", {"a": "b"}))
    with pytest.raises(StoreFull) as caught:
        store.save(make_glossary("Three", {"a": "b"}))
    assert caught.value.code == "glossary_store_limit"
    store.save(make_glossary("Two", {"c": "d"}, glossary_id=two.id))  # a replacement is no new item


def test_listings_read_only_the_records_that_changed(tmp_path: Path, monkeypatch) -> None:
    store = GlossaryStore(tmp_path)
    for n in range(20):
        store.save(make_glossary(f"G{n}", {"a": "b"}))
    reads = []
    original = GlossaryStore._read

    def counting(self, glossary_id, path):
        reads.append(glossary_id)
        return original(self, glossary_id, path)

    monkeypatch.setattr(GlossaryStore, "_read", counting)
    assert len(store.list()) == 20
    reads.clear()
    assert len(store.list()) == 20 and reads == []  # nothing changed: no record read
    store.save(make_glossary("G3", {"x": "y"}, glossary_id="g3"))
    assert len(store.list()) == 20 and reads == ["g3"]
    reads.clear()
    fresh = GlossaryStore(tmp_path)  # a restarted process: the index file answers
    assert len(fresh.list()) == 20 and reads == []
    (tmp_path / "g5.json").unlink()  # another process removed one
    assert [g.id for g in fresh.list()].count("g5") == 0


def test_voice_listings_come_from_the_index(tmp_path: Path, monkeypatch) -> None:
    library = VoiceLibrary(tmp_path)
    for n in range(5):
        library.add(f"Voice {n}", voice_clip(4.0), "hi")
    assert len(library.list()) == 5  # the last one is read (and indexed) here
    reads = []
    original = VoiceLibrary._read
    monkeypatch.setattr(VoiceLibrary, "_read", lambda self, vid, path: reads.append(vid) or original(self, vid, path))
    assert len(VoiceLibrary(tmp_path).list()) == 5 and reads == []


# --- the back-off -------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_backoff_doubles_after_the_free_tries() -> None:
    clock = Clock()
    backoff = FailureBackoff(free=3, base_s=1.0, max_s=8.0, clock=clock)
    waits = [backoff.failed("ip:1") for _ in range(8)]
    assert waits == [None, None, None, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff.locked_for("ip:1") == pytest.approx(8.0) and backoff.locked_for("ip:2") is None
    clock.now += 9
    assert backoff.locked_for("ip:1") is None
    backoff.succeeded("ip:1")
    assert backoff.failed("ip:1") is None  # forgotten after a success


def test_forwarded_for_counts_only_behind_a_local_proxy() -> None:
    assert client_address("127.0.0.1", {"x-forwarded-for": "1.2.3.4, 5.6.7.8"}) == "5.6.7.8"
    assert client_address("10.0.0.9", {"x-forwarded-for": "1.2.3.4"}) == "10.0.0.9"


def test_wrong_passwords_and_keys_back_off_with_retry_after(tmp_path: Path) -> None:
    app = make_app(tmp_path, auth=(("me", "secret"),), api_keys=("k" * 16,))
    clock = Clock()
    app.state.api_guard.backoff.clock = clock
    with TestClient(app, base_url=LOOPBACK) as c:
        statuses = [c.post("/login", data={"username": "me", "password": f"guess{n}"}).status_code for n in range(7)]
        assert statuses[:5] == [400] * 5 and statuses[6] == 429, statuses
        locked = c.post("/login", data={"username": "me", "password": "secret"})
        assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 1
        clock.now += 3600
        assert c.post("/login", data={"username": "me", "password": "secret"}).status_code == 200
        # wrong API keys share the count, on the REST API and on Gradio's
        keys = [c.get("/v1/voices", headers={"authorization": f"Bearer wrong{n}"}).status_code for n in range(7)]
        assert keys[:5] == [401] * 5 and keys[-1] == 429, keys
        refused = c.get("/gradio_api/info", headers={"authorization": "Bearer wrong"})
        assert refused.status_code == 429 and "retry-after" in refused.headers
        check_clean(refused.json()["error"]["message"])
        clock.now += 3600
        assert c.get("/v1/voices", headers={"authorization": "Bearer " + "k" * 16}).status_code == 200


def test_projects_have_a_cap_nfkc_folders_and_an_indexed_list(tmp_path: Path, monkeypatch) -> None:
    from cosyvoice_ui.serving.jobs import SpeechJobs
    from cosyvoice_ui.studio import workspace
    from cosyvoice_ui.studio.workspace import Workspace

    settings = Settings(projects_dir=tmp_path / "projects", glossary_dir=tmp_path / "glossaries", max_projects=3)
    studio = Workspace(SpeechJobs(fake_manager(), settings))
    studio.create("Radio play", "Alice: Hi.\nBob: Hello.")
    with pytest.raises(InvalidRequest) as twin:
        studio.create("Ｒａｄｉｏ play", "Alice: Hi.")  # a full-width look-alike is the same project
    assert twin.value.code == "project_exists"
    studio.create("Second", "Hi.")
    studio.create("Third", "Hi.")
    with pytest.raises(StoreFull) as full:
        studio.create("Fourth", "Hi.")
    assert full.value.code == "project_store_limit" and "--max-projects" in full.value.message
    reads = []
    original = workspace._project_summary
    monkeypatch.setattr(workspace, "_project_summary",
                        lambda folder, record: reads.append(folder) or original(folder, record))
    again = Workspace(SpeechJobs(fake_manager(), settings))
    assert sorted(name for name, _ in again.projects()) == ["Radio play", "Second", "Third"]
    assert reads == []  # listed from the index file, no project.json read
