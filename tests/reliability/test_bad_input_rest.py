"""The bad-input corpus through the REST API of the real app (`create_app`, tiny SFT model, TestClient): every
refusal is a specific 4xx with OpenAI's error body and a clean message, every usable odd input is served, and
after each bad request a valid one is served normally. One test sends a 60 MB body to a real uvicorn server."""

from __future__ import annotations

import base64
import http.client
import io
import json
import re
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from cosyvoice_ui.api.errors import error_type
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.web.server import create_app

from .corpus import (AUDIO_CASES, SPEAKER, TEXT_CASES, TRAVERSAL, VALID_TEXT, AudioCase, Refusal, TextCase,
                     ValueCase, check_clean, value_cases, voice, wav_bytes)
from tests.web_client import LOOPBACK, free_port


@pytest.fixture(scope="module")
def served(tiny_sft: Path, tmp_path_factory):
    """(client, app, work folder) of the real app on the tiny SFT model."""
    work = tmp_path_factory.mktemp("rest-corpus")
    settings = Settings(model_dir=tiny_sft, voices_dir=work / "voices", device="cpu", idle_unload_s=0,
                        rate_limit_per_min=0, extra={"output_dir": str(work / "outputs")})
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False, base_url=LOOPBACK) as client:
        yield client, app, work


@pytest.fixture()
def client(served) -> TestClient:
    return served[0]


def post_json(client: TestClient, path: str, body: object) -> object:
    """JSON the way a careless client writes it: NaN and Infinity literals, lone surrogates as \\u escapes."""
    return client.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def data_url(data: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(data).decode()


def assert_refused(response, expect: Refusal, *paths: str) -> None:
    """A specific 4xx with OpenAI's error body whose message names the problem and leaks nothing."""
    assert 400 <= response.status_code < 500, f"{response.status_code}: {response.text[:300]}"
    assert response.status_code == expect.status, response.text[:300]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "type", "param"}, body
    assert body["error"]["type"] == error_type(response.status_code)
    expect.check(body["error"]["code"], body["error"]["message"], *paths)
    check_clean(response.text, *paths)


def assert_audio(response) -> None:
    """200 with real audio: a JSON /tts result or the audio bytes of /v1/audio/speech."""
    assert response.status_code == 200, response.text[:300]
    if response.headers["content-type"].startswith("application/json"):
        data = base64.b64decode(response.json()["audio"])
    else:
        data = response.content
    samples, rate = sf.read(io.BytesIO(data))
    assert rate == 22050 and len(samples) > 0 and np.isfinite(samples).all()


def assert_still_serving(client: TestClient, route: str = "/tts") -> None:
    """The next valid request (unseeded: the model runs, no cache) is served normally."""
    if route == "/tts":
        assert_audio(post_json(client, "/tts", {"text": VALID_TEXT, "speaker": SPEAKER}))
    else:
        assert_audio(post_json(client, route, {"input": VALID_TEXT, "voice": SPEAKER, "response_format": "wav"}))


def files_outside(work: Path, allowed: tuple[str, ...] = ("voices", "outputs", "tiny-sft")) -> list[str]:
    return sorted(p.name for p in work.iterdir() if p.name not in allowed)


# --- audio ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", AUDIO_CASES, ids=lambda c: c.id)
def test_audio_as_a_tts_prompt(client: TestClient, case: AudioCase) -> None:
    response = post_json(client, "/tts", {"text": VALID_TEXT, "mode": "cross_lingual",
                                          "prompt_audio": data_url(case.make())})
    if case.expect is None:
        assert_audio(response)
    else:
        assert_refused(response, case.expect)
    assert_still_serving(client)


@pytest.mark.parametrize("case", AUDIO_CASES, ids=lambda c: c.id)
def test_audio_as_a_saved_voice_upload(served, case: AudioCase) -> None:
    client, _, work = served
    before = sorted(p.name for p in (work / "voices").glob("*")) if (work / "voices").is_dir() else []
    response = client.post("/v1/voices", files={"audio": (case.filename, case.make(), "audio/wav")},
                           data={"name": f"corpus {case.id}", "transcript": "hello"})
    if case.expect is None:
        assert response.status_code == 201, response.text[:300]
        voice_id = response.json()["id"]
        assert client.delete(f"/v1/voices/{voice_id}").status_code == 200
    else:
        assert_refused(response, case.expect)
        after = sorted(p.name for p in (work / "voices").glob("*")) if (work / "voices").is_dir() else []
        assert after == before, "a refused recording left a voice behind"
    assert_still_serving(client)


# --- text -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["/tts", "/v1/audio/speech"])
@pytest.mark.parametrize("case", TEXT_CASES, ids=lambda c: c.id)
def test_text(client: TestClient, case: TextCase, route: str) -> None:
    if route == "/tts":
        body = {"text": case.text, "speaker": SPEAKER, "format": "wav"}
    else:
        body = {"input": case.text, "voice": SPEAKER, "response_format": "wav"}
    response = post_json(client, route, body)
    if case.expect is None:
        assert_audio(response)
    else:
        assert_refused(response, case.expect)
    assert_still_serving(client, route)


# --- names and values (the shared cases) ------------------------------------------------------------------


def tts_body(case: ValueCase) -> dict:
    body = {"text": VALID_TEXT, "speaker": SPEAKER}
    if case.field == "speaker":
        return {**body, "mode": "sft", "speaker": case.value}
    if case.field == "voice":
        return {"text": VALID_TEXT, "voice_id": case.value}
    if case.field == "mode":
        return {**body, "mode": case.value, "instruct_text": "A calm voice."}
    return {**body, case.field: case.value}


@pytest.mark.parametrize("case", value_cases("rest"), ids=lambda c: c.id)
def test_bad_values_on_tts(client: TestClient, case: ValueCase) -> None:
    response = post_json(client, "/tts", tts_body(case))
    assert_refused(response, Refusal(case.codes["rest"], case.words))
    assert_still_serving(client)


# --- the REST API's own cases -----------------------------------------------------------------------------

GOOD_B64 = base64.b64encode(wav_bytes(voice())).decode()
JSON = {"content-type": "application/json"}


def R(code: str, *words: str, status: int = 422) -> Refusal:
    return Refusal(code, words, status)


UNSUPPORTED = R("unsupported_media_type", "Content-Type: application/json", status=415)

# (id, method, path, request keyword arguments, refusal, route to check afterwards)
REST_CASES = [
    ("speech-unknown-voice", "POST", "/v1/audio/speech", {"json": {"input": VALID_TEXT, "voice": "nobody"}},
     R("voice_unknown", "unknown voice", "nobody")),
    ("speech-traversal-voice", "POST", "/v1/audio/speech", {"json": {"input": VALID_TEXT, "voice": TRAVERSAL}},
     R("voice_unknown", "unknown voice")),
    ("speech-voice-object-with-a-number", "POST", "/v1/audio/speech",
     {"json": {"input": VALID_TEXT, "voice": {"id": 5}}}, R("voice_unknown", "unknown voice '5'")),
    ("speech-traversal-model", "POST", "/v1/audio/speech",
     {"json": {"input": VALID_TEXT, "voice": SPEAKER, "model": "../../pretrained_models/x"}},
     R("model_not_found", "unknown model", status=404)),
    ("speech-unknown-model", "POST", "/v1/audio/speech",
     {"json": {"input": VALID_TEXT, "voice": SPEAKER, "model": "dall-e-3"}},
     R("model_not_found", "unknown model 'dall-e-3'", status=404)),
    ("speech-unknown-format", "POST", "/v1/audio/speech",
     {"json": {"input": VALID_TEXT, "voice": SPEAKER, "response_format": "exe"}}, R("bad_format", "'exe'")),
    ("speech-unknown-stream-format", "POST", "/v1/audio/speech",
     {"json": {"input": VALID_TEXT, "voice": SPEAKER, "stream_format": "pigeon"}},
     R("bad_stream_format", "stream_format", "pigeon")),
    ("speech-speed-nan", "POST", "/v1/audio/speech",
     {"content": b'{"input": "Hi there.", "voice": "\\u82f1\\u6587\\u5973", "speed": NaN}', "headers": JSON},
     R("speed_out_of_range", "speed nan")),
    ("speech-instructions-on-a-preset-model", "POST", "/v1/audio/speech",
     {"json": {"input": VALID_TEXT, "voice": SPEAKER, "instructions": "Sad."}},
     R("mode_unsupported", "cannot do instruct", "Instruct")),
    ("speech-input-missing", "POST", "/v1/audio/speech", {"json": {"voice": SPEAKER}},
     R("invalid_field", "input", "Field required")),
    ("speech-text-plain", "POST", "/v1/audio/speech", {"content": b"Hi there.", "headers": {
        "content-type": "text/plain"}}, UNSUPPORTED),
    ("tts-malformed-json", "POST", "/tts", {"content": b'{"text": "Hi there.",', "headers": JSON},
     R("bad_json", "not valid JSON", status=400)),
    ("tts-binary-body", "POST", "/tts", {"content": b"\xff\xfe\x00\x81garbage", "headers": JSON},
     R("bad_json", "not valid JSON", status=400)),
    ("tts-json-array", "POST", "/tts", {"content": b"[1, 2]", "headers": JSON},
     R("invalid_field", "JSON object", "not an array")),
    ("tts-json-null", "POST", "/tts", {"content": b"null", "headers": JSON}, R("invalid_field", "JSON object", "null")),
    ("tts-empty-body", "POST", "/tts", {"content": b"", "headers": JSON}, R("body_missing", "body is empty")),
    ("tts-text-plain", "POST", "/tts", {"content": b"text=hi", "headers": {"content-type": "text/plain"}},
     UNSUPPORTED),
    ("tts-xml", "POST", "/tts", {"content": b"<tts><text>hi</text></tts>", "headers": {
        "content-type": "application/xml"}}, UNSUPPORTED),
    ("tts-multipart", "POST", "/tts", {"files": {"text": ("t.txt", b"hi")}}, UNSUPPORTED),
    ("tts-unknown-field", "POST", "/tts", {"json": {"text": VALID_TEXT, "speaker": SPEAKER, "colour": "blue"}},
     R("invalid_field", "colour")),
    ("tts-text-a-number", "POST", "/tts", {"json": {"text": 5, "speaker": SPEAKER}},
     R("invalid_field", "text", "string")),
    ("tts-bad-voice-match", "POST", "/tts", {"json": {"text": VALID_TEXT, "speaker": SPEAKER,
                                                       "voice_match": "perfect"}}, R("invalid_field", "voice_match")),
    ("tts-prompt-not-base64", "POST", "/tts", {"json": {"text": VALID_TEXT, "prompt_audio": "not base64!!"}},
     R("audio_not_base64", "base64")),
    ("tts-traversal-in-prompt-audio", "POST", "/tts", {"json": {"text": VALID_TEXT, "prompt_audio": TRAVERSAL}},
     R("audio_not_base64", "base64")),
    ("tts-traversal-in-source-audio", "POST", "/tts", {"json": {"mode": "vc", "source_audio": TRAVERSAL,
                                                                 "prompt_audio": GOOD_B64}},
     R("audio_not_base64", "source_audio", "base64")),
    ("tts-stream-as-mp3", "POST", "/tts", {"json": {"text": VALID_TEXT, "speaker": SPEAKER, "format": "mp3",
                                                     "stream": True}}, R("bad_format", "mp3")),
    ("tts-surrogate-in-transcript", "POST", "/tts",
     {"content": b'{"text": "Hi.", "prompt_audio": "' + GOOD_B64.encode() + b'", "prompt_text": "a\\udc00"}',
      "headers": JSON}, R("text_invalid", "transcript", "U+DC00")),
    ("voices-blank-name", "POST", "/v1/voices", {"json": {"name": "   ", "audio": GOOD_B64}},
     R("voice_name_missing", "name")),
    ("voices-100k-name", "POST", "/v1/voices", {"json": {"name": "n" * 100_000, "audio": GOOD_B64}},
     R("voice_name_too_long", "100000 characters")),
    ("voices-surrogate-name", "POST", "/v1/voices",
     {"content": b'{"name": "\\ud800", "audio": "' + GOOD_B64.encode() + b'"}', "headers": JSON},
     R("text_invalid", "voice name", "U+D800")),
    ("voices-surrogate-transcript", "POST", "/v1/voices",
     {"content": b'{"name": "ok", "transcript": "\\udfff", "audio": "' + GOOD_B64.encode() + b'"}',
      "headers": JSON}, R("text_invalid", "transcript", "U+DFFF")),
    ("voices-audio-not-base64", "POST", "/v1/voices", {"json": {"name": "x", "audio": "%%%"}},
     R("audio_not_base64", "base64")),
    ("voices-traversal-in-audio", "POST", "/v1/voices", {"json": {"name": "x", "audio": TRAVERSAL}},
     R("audio_not_base64", "base64")),
    ("voices-audio-missing", "POST", "/v1/voices", {"json": {"name": "x"}}, R("invalid_field", "audio", "required")),
    ("voices-malformed-json", "POST", "/v1/voices", {"content": b'{"name": ', "headers": JSON},
     R("bad_json", "not valid JSON", status=400)),
    ("voices-text-plain", "POST", "/v1/voices", {"content": b"name=x", "headers": {"content-type": "text/plain"}},
     R("unsupported_media_type", "multipart/form-data", status=415)),
    ("voices-multipart-without-a-file", "POST", "/v1/voices", {"data": {"name": "x"}, "files": {"other": (
        "a.txt", b"x")}}, R("prompt_missing", "file field named 'audio'")),
    ("voices-delete-unknown", "DELETE", "/v1/voices/ghost", {}, R("voice_not_found", "no saved voice 'ghost'",
                                                                   status=404)),
    ("voices-delete-dot-dot", "DELETE", "/v1/voices/%2E%2E", {}, R("voice_not_found", "no saved voice", status=404)),
    ("voices-delete-encoded-traversal", "DELETE", "/v1/voices/..%2F..%2Fetc%2Fpasswd", {},
     R("route_not_found", "no such API route", status=404)),
    ("voices-default-traversal", "POST", "/v1/voices/%2E%2E/default", {},
     R("voice_not_found", "no saved voice", status=404)),
    ("get-on-tts", "GET", "/tts", {}, R("method_not_allowed", "GET", "POST", status=405)),
    ("put-on-voices", "PUT", "/v1/voices", {}, R("method_not_allowed", "PUT", status=405)),
    ("unknown-route", "GET", "/v1/nothing/here", {}, R("route_not_found", "no such API route", status=404)),
    ("traversal-in-the-path", "GET", "/v1/%2E%2E/%2E%2E/etc/passwd", {},
     R("route_not_found", "no such API route", status=404)),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "expect"), [case[1:] for case in REST_CASES],
                         ids=[case[0] for case in REST_CASES])
def test_rest_request(served, method: str, path: str, kwargs: dict, expect: Refusal) -> None:
    client, _, work = served
    assert_refused(client.request(method, path, **kwargs), expect)
    assert files_outside(work) == []
    assert_still_serving(client, "/v1/audio/speech" if path.startswith("/v1/audio") else "/tts")


@pytest.mark.parametrize("name, filename", [(TRAVERSAL, "../../evil.wav"), ("..\\..\\evil", "/etc/passwd"),
                                            ("../voices/../../x", "C:\\evil.wav")])
def test_traversal_in_voice_names_and_file_names_stays_in_the_voices_folder(served, name: str, filename: str) -> None:
    client, _, work = served
    response = client.post("/v1/voices", files={"audio": (filename, wav_bytes(voice()), "audio/wav")},
                           data={"name": name})
    assert response.status_code == 201, response.text[:300]
    voice_id = response.json()["id"]
    assert re.fullmatch(r"\w[\w-]*", voice_id), voice_id
    assert (work / "voices" / voice_id / "voice.json").is_file()
    assert files_outside(work) == [] and not (work.parent / "evil.wav").exists()
    assert client.delete(f"/v1/voices/{voice_id}").status_code == 200
    assert_still_serving(client)


# --- a real server: a 60 MB body ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live_port(served):
    """The same app served by uvicorn on a free loopback port, in a thread."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(served[1], host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="corpus-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield port
    server.should_exit = True
    thread.join(30)


def live_post(port: int, body, headers: dict, chunked: bool = False) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/tts", body=body, headers=headers, encode_chunked=chunked)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_60_mb_body_gets_a_413_from_a_real_server(live_port: int, chunked: bool) -> None:
    body = b'{"text": "' + b"a" * (60 * 2**20) + b'"}'
    sent = (body[i:i + 2**20] for i in range(0, len(body), 2**20)) if chunked else body
    status, headers, data = live_post(live_port, sent, {"content-type": "application/json"}, chunked)
    assert status == 413
    assert headers.get("connection", headers.get("Connection")) == "close"
    error = json.loads(data)["error"]
    assert error["code"] == "payload_too_large" and error["type"] == "invalid_request_error"
    assert "larger than the 20 MB limit" in error["message"]
    check_clean(data.decode())
    status, headers, data = live_post(live_port, json.dumps({"text": VALID_TEXT, "speaker": SPEAKER}).encode(),
                                      {"content-type": "application/json"})
    assert status == 200 and sf.read(io.BytesIO(base64.b64decode(json.loads(data)["audio"])))[0].size > 0


def test_a_client_that_waits_for_100_continue_gets_the_413_before_sending(live_port: int) -> None:
    """curl sends `Expect: 100-continue` with a large body: it is refused before a byte of it is sent."""
    with socket.create_connection(("127.0.0.1", live_port), timeout=30) as sock:
        sock.sendall(b"POST /tts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 62914560\r\nExpect: 100-continue\r\n\r\n")
        reply = b""
        while b"}}" not in reply:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and b"100 Continue" not in head
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    status, _, data = live_post(live_port, json.dumps({"text": VALID_TEXT, "speaker": SPEAKER}).encode(),
                                {"content-type": "application/json"})
    assert status == 200 and json.loads(data)["audio"]
