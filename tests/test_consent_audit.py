"""Consent on shared servers and the audit trail (issue 27, items 4 and 5): the one rule (`serving/consent.py`)
through REST, the UI's handlers and the studio; the audit trail (`serving/audit.py`): its lines, who is named
(never a secret), rotation, a full queue; loopback unchanged.

"Public" servers are simulated with `share=True` or `host="0.0.0.0"` in Settings (nothing binds 0.0.0.0), as
tests/reliability/test_sharing.py does. The Gradio API and the browser: tests/test_consent_surfaces.py (slow).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from cosyvoice_ui.audio import audio_hash, read_audio
from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.audit import AuditLog, Caller, audit_log_for
from cosyvoice_ui.serving.consent import ConsentPolicy, consent_required
from cosyvoice_ui.serving.default_voice import builtin_audio
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Mode, SynthesisRequest
from cosyvoice_ui.web.flags import build_parser, settings_from_args
from cosyvoice_ui.web.server import create_app
from tests.web_client import LOOPBACK, free_port

TEXT = "A sentence the audit trail must never hold."


class VoicedEngine(FakeEngine):
    """The fake engine, able to use saved voices (it only remembers their ids)."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.voices: dict[str, str] = {}

    @property
    def info(self):
        return replace(self._info, saved_voices=tuple(self.voices))

    def register_voice(self, voice_id, audio, transcript, cache_dir) -> None:
        self.voices[voice_id] = transcript

    def unregister_voice(self, voice_id) -> None:
        self.voices.pop(voice_id, None)


def fake_manager() -> ModelManager:
    engine = VoicedEngine(name="fake-model", speakers=("alice", "bob"),
                          modes=(Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC))
    return ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                        describe_model=lambda mid: engine.info)


def make_app(tmp_path: Path, **settings):
    options = {"voices_dir": tmp_path / "voices", "glossary_dir": tmp_path / "glossaries",
               "projects_dir": tmp_path / "projects", "idle_unload_s": 0, "rate_limit_per_min": 0,
               "extra": {"output_dir": str(tmp_path / "out")}, **settings}
    return create_app(Settings(**options), fake_manager())


def wav_bytes(seconds: float = 4.0, seed: int = 0) -> bytes:
    clip = voice_clip(seconds, seed=seed)
    buffer = io.BytesIO()
    sf.write(buffer, clip.samples, clip.sample_rate, format="WAV")
    return buffer.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def audit_lines(app) -> list[dict]:
    trail = app.state.api.speech.audit
    assert trail is not None and trail.flush(), "the audit trail did not reach the disk"
    return [json.loads(line) for line in trail.path.read_text(encoding="utf-8").splitlines()]


def error_of(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


# --- the rule -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings, required", [
    (Settings(), False), (Settings(host="localhost"), False), (Settings(host="::1"), False),
    (Settings(share=True), True), (Settings(host="0.0.0.0"), True), (Settings(host="192.168.1.5"), True),
    (Settings(host="0.0.0.0", no_auth=True), True),  # no login, but still shared
    (Settings(require_consent=True), True), (Settings(share=True, require_consent=False), False),
])
def test_who_must_confirm_consent(settings: Settings, required: bool) -> None:
    assert consent_required(settings) is required
    policy = ConsentPolicy.from_settings(settings)
    clone = SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_audio=voice_clip(4.0), prompt_text="hello")
    if required:
        with pytest.raises(InvalidRequest) as refused:
            policy.check_request(clone, given=False)
        assert refused.value.code == "consent_required" and refused.value.params["param"] == "consent"
        assert '"consent": true' in refused.value.message and "saved voice" in refused.value.message
    else:
        policy.check_request(clone, given=False)
    policy.check_request(clone, given=True)
    # a saved voice, a preset, a voice conversion's source words and the app's own example voice need none
    for request in (SynthesisRequest(Mode.ZERO_SHOT, text="hi", speaker="narrator"),
                    SynthesisRequest(Mode.SFT, text="hi", speaker="alice"),
                    SynthesisRequest(Mode.VC, source_audio=voice_clip(4.0), speaker="narrator"),
                    SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_audio=builtin_audio(), prompt_text="x")):
        policy.check_request(request, given=False)


def test_flags_reach_the_settings() -> None:
    parse = lambda *argv: settings_from_args(build_parser().parse_args(list(argv)))  # noqa: E731
    assert parse().require_consent is None and parse().audit_path is None  # loopback: nothing asked, no trail
    public = parse("--host", "0.0.0.0")
    import cosyvoice_ui.settings as settings_module  # its default file (the tests keep theirs in a temp folder)

    assert consent_required(public) and public.audit_path == settings_module.DEFAULT_AUDIT_LOG
    assert parse("--require-consent").require_consent is True and consent_required(parse("--require-consent"))
    assert not consent_required(parse("--share", "--no-require-consent"))
    assert parse("--audit-log", "trail.jsonl").audit_path == Path("trail.jsonl")  # loopback too, when asked
    assert parse("--share", "--no-audit-log").audit_path is None
    text = build_parser().format_help()
    assert "--require-consent, --no-require-consent" in text and "logs/audit.jsonl" in text and "10 MB" in text


# --- REST on a public server ------------------------------------------------------------------------------


@pytest.fixture()
def public(tmp_path: Path):
    """A share-configured app (a generated key), its client and key header, and its audit trail file."""
    app = make_app(tmp_path, share=True, audit_log=tmp_path / "trail" / "audit.jsonl")
    key = app.state.access.generated_key
    return app, TestClient(app, base_url=LOOPBACK), {"Authorization": f"Bearer {key}"}, key


def test_rest_refuses_a_new_recording_without_consent_and_logs_who_did_what(public) -> None:
    app, client, auth, key = public
    wav = wav_bytes()
    body = {"text": TEXT, "mode": "cross_lingual", "prompt_audio": b64(wav), "seed": 5}
    refused = client.post("/tts", json=body, headers=auth)
    assert error_of(refused) == (428, "consent_required")
    error = refused.json()["error"]
    assert error["param"] == "consent" and '"consent": true' in error["message"] and error["type"] == \
        "invalid_request_error"
    assert client.post("/tts", json={**body, "consent": False}, headers=auth).status_code == 428
    made = client.post("/tts", json={**body, "consent": True}, headers=auth)
    assert made.status_code == 200, made.text
    again = client.post("/tts", json={**body, "consent": True}, headers=auth)  # the same seeded request: cached
    assert again.headers["x-cache"] == "hit"
    # presets need no consent (nor does the OpenAI route, which takes no recording)
    assert client.post("/tts", json={"text": "Hi there.", "speaker": "alice"}, headers=auth).status_code == 200
    speech = client.post("/v1/audio/speech", json={"input": "Hi there.", "voice": "bob", "response_format": "wav"},
                         headers=auth)
    assert speech.status_code == 200, speech.text

    lines = audit_lines(app)
    assert [(entry["surface"], entry["cached"]) for entry in lines] == [("rest", False), ("rest", True),
                                                                        ("rest", False), ("openai", False)]
    first = lines[0]
    assert first["event"] == "speech" and first["who"] == "key-1" and first["model"] == "fake-model"
    assert first["mode"] == "cross_lingual" and first["voice"] is None and first["complete"] is True
    assert first["recording"] == audio_hash(read_audio(wav)) and first["source_recording"] is None
    assert first["text_sha256"] == hashlib.sha256(TEXT.encode()).hexdigest() and first["text_chars"] == len(TEXT)
    assert first["seconds"] > 0 and isinstance(first["marked"], bool) and first["time"].endswith("Z")
    assert lines[2]["voice"] == "alice" and lines[2]["recording"] is None
    stored = app.state.api.speech.audit.path.read_text(encoding="utf-8")
    assert key not in stored and TEXT not in stored and "Bearer" not in stored  # no secret, no text


def test_rest_saving_a_voice_needs_consent_and_the_voice_records_it(public) -> None:
    app, client, auth, key = public
    wav = wav_bytes(seed=1)
    body = {"name": "Narrator", "transcript": "hello there", "audio": b64(wav)}
    assert error_of(client.post("/v1/voices", json=body, headers=auth)) == (428, "consent_required")
    form = {"name": "Reader", "transcript": "hello there"}
    files = {"audio": ("reader.wav", wav, "audio/wav")}
    assert client.post("/v1/voices", data=form, files=files, headers=auth).status_code == 428
    assert client.post("/v1/voices", data={**form, "consent": "no"}, files=files, headers=auth).status_code == 428
    saved = client.post("/v1/voices", json={**body, "consent": True}, headers=auth)
    assert saved.status_code == 201, saved.text
    record = saved.json()["consent"]
    assert record["given"] is True and record["by"] == "key-1" and record["at"].endswith("Z")
    by_form = client.post("/v1/voices", data={**form, "consent": "true"}, files=files, headers=auth)
    assert by_form.status_code == 201 and by_form.json()["consent"]["by"] == "key-1"
    listed = {v["id"]: v for v in client.get("/v1/voices", headers=auth).json()["data"]}
    assert listed["narrator"]["consent"]["given"] is True  # kept with the voice (voice.json)
    # the saved voice is consented: cloning with it needs nothing more, and neither does converting to it
    assert client.post("/tts", json={"text": "Hi there.", "voice_id": "narrator"}, headers=auth).status_code == 200
    converted = client.post("/tts", json={"mode": "vc", "source_audio": b64(wav_bytes(seed=2)),
                                          "voice_id": "narrator"}, headers=auth)
    assert converted.status_code == 200, converted.text
    # a voice conversion to a new recording is cloning from it
    target = client.post("/tts", json={"mode": "vc", "source_audio": b64(wav_bytes(seed=2)), "prompt_audio": b64(wav)},
                         headers=auth)
    assert error_of(target) == (428, "consent_required")

    lines = audit_lines(app)
    saves = [entry for entry in lines if entry["event"] == "voice_saved"]
    assert [(s["voice"], s["consent"], s["who"]) for s in saves] == [("narrator", True, "key-1"),
                                                                    ("reader", True, "key-1")]
    vc = [entry for entry in lines if entry["event"] == "speech" and entry["mode"] == "vc"]
    assert len(vc) == 1 and vc[0]["voice"] == "narrator" and vc[0]["source_recording"] and vc[0]["text_chars"] == 0
    assert key not in app.state.api.speech.audit.path.read_text(encoding="utf-8")


def test_the_owner_can_turn_consent_off_and_the_trail_off(tmp_path: Path) -> None:
    app = make_app(tmp_path, host="0.0.0.0", require_consent=False, no_audit_log=True)
    client = TestClient(app, base_url=LOOPBACK)
    auth = {"X-API-Key": app.state.access.generated_key}
    body = {"text": "Hi there.", "mode": "cross_lingual", "prompt_audio": b64(wav_bytes())}
    assert client.post("/tts", json=body, headers=auth).status_code == 200
    assert app.state.api.speech.audit is None


def test_loopback_is_unchanged(tmp_path: Path, monkeypatch) -> None:
    """No consent asked and no audit file, unless the owner asks for them."""
    monkeypatch.chdir(tmp_path)
    app = make_app(tmp_path)
    client = TestClient(app, base_url=LOOPBACK)
    body = {"text": "Hi there.", "mode": "cross_lingual", "prompt_audio": b64(wav_bytes())}
    assert client.post("/tts", json=body).status_code == 200
    saved = client.post("/v1/voices", json={"name": "Mine", "audio": b64(wav_bytes())})
    assert saved.status_code == 201 and saved.json()["consent"] is None  # not asked, not recorded
    assert app.state.api.speech.audit is None and not (tmp_path / "logs").exists()
    asked = make_app(tmp_path / "asked", require_consent=True, audit_log=tmp_path / "mine.jsonl")
    strict = TestClient(asked, base_url=LOOPBACK)
    assert error_of(strict.post("/tts", json=body)) == (428, "consent_required")
    assert strict.post("/tts", json={**body, "consent": True}).status_code == 200
    assert [entry["who"] for entry in audit_lines(asked)] == [None]  # loopback has no logins


def test_428_is_declared_in_the_schema(public) -> None:
    _, client, _, _ = public
    paths = client.get("/openapi.json").json()["paths"]
    assert "428" in paths["/tts"]["post"]["responses"] and "428" in paths["/v1/voices"]["post"]["responses"]
    assert "consent" in paths["/v1/voices"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"][
        "properties"]


# --- the UI's handlers and the studio ----------------------------------------------------------------------


def test_the_ui_asks_beside_the_sample_in_its_words(tmp_path: Path) -> None:
    from cosyvoice_ui.ui import strings
    from cosyvoice_ui.ui.handlers import Handlers, OutputOptions
    from cosyvoice_ui.ui.requests import clone_meta, field_of, request_from_meta, sft_meta

    wav = tmp_path / "sample.wav"
    wav.write_bytes(wav_bytes())
    settings = Settings(share=True, voices_dir=tmp_path / "voices", glossary_dir=tmp_path / "g",
                        audit_log=tmp_path / "ui.jsonl")
    handlers = Handlers(fake_manager(), settings, tmp_path / "out")
    meta = clone_meta(str(wav), None, "hello there", "Hi there.")
    assert meta["consent"] is False
    with pytest.raises(InvalidRequest) as refused:
        handlers.check(request_from_meta(meta))
    assert field_of(refused.value) == "prompt"  # shown on the sample, right above its box
    assert "tick" in strings.message(refused.value, "en") and "勾选" in strings.message(refused.value, "zh")
    ticked = clone_meta(str(wav), None, "hello there", "Hi there.", consent=True)
    handlers.check(request_from_meta(ticked), consent=True)
    list(handlers.run(request_from_meta(ticked, seed=3), OutputOptions(), [], None, None, ticked))  # as history
    handlers.check(request_from_meta(sft_meta("alice", "Hi there.")))  # a preset: nothing to confirm
    from cosyvoice_ui.ui.examples import example_voice

    example, spoken = example_voice(tmp_path / "examples")  # "Try an example voice": the app's own, no one's
    handlers.check(request_from_meta(clone_meta(example, None, spoken, "Hi there.")))
    lines = [json.loads(line) for line in (tmp_path / "ui.jsonl").read_text().splitlines()] \
        if handlers.speech.audit.flush() else []
    assert [(entry["surface"], entry["mode"]) for entry in lines] == [("ui", "zero_shot")]


def test_a_script_sample_carries_its_own_consent(tmp_path: Path) -> None:
    from cosyvoice_ui.studio.voice_map import VoiceChoice, prepare
    from cosyvoice_ui.testing.speech import speech_jobs

    speech = speech_jobs(tmp_path, host="0.0.0.0")
    info = fake_manager().info()
    sample = VoiceChoice("sample", "bob.flac", "hello there")
    with pytest.raises(InvalidRequest) as refused:
        prepare("Hi there.", sample, info, speech, speech_options(), sample_audio=voice_clip(4.0))
    assert refused.value.code == "consent_required"
    consented = VoiceChoice("sample", "bob.flac", "hello there", consent=True)
    job = prepare("Hi there.", consented, info, speech, speech_options("script"), sample_audio=voice_clip(4.0))
    assert job.caller.surface == "script"
    # the consent is kept with the project's voice, but a take of the voice does not depend on it
    assert VoiceChoice.from_dict(consented.to_dict()) == consented and "consent" not in sample.to_dict()
    assert consented.identity() == sample.identity()


def speech_options(surface: str = "script"):
    from cosyvoice_ui.serving.jobs import JobOptions

    return JobOptions(caller=Caller(surface, "studio"))


# --- the audit trail's file ------------------------------------------------------------------------------


def test_the_trail_rotates_by_size_and_keeps_its_lines_whole(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    trail = AuditLog(path, max_bytes=2000, backups=2)
    for number in range(200):  # about 8 KB: more than the three files hold
        trail.write({"event": "speech", "number": number, "who": "key-1"})
    assert trail.flush()
    trail.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]  # two older files kept, no third
    kept = []
    for name in ("audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"):
        text = (tmp_path / name).read_text()
        assert len(text.encode()) < 2000 + 100  # rotated once past the size (a line may cross it)
        kept += [json.loads(line)["number"] for line in text.splitlines()]
    assert kept == list(range(kept[0], 200)) and kept[0] > 0  # the oldest went, the rest whole and in order
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # the owner's alone


def test_a_full_queue_drops_counts_warns_once_and_marks_the_gap(tmp_path: Path, caplog) -> None:
    trail = AuditLog(tmp_path / "audit.jsonl", queue_size=2)
    gate = threading.Event()
    write = trail._write

    def slow(lines):  # the disk stalls: requests must not wait for it
        gate.wait(10)
        write(lines)

    trail._write = slow
    for number in range(50):
        trail.write({"number": number})  # returns at once, every time
    assert trail.dropped >= 45
    assert sum("audit lines are being dropped" in r.getMessage() for r in caplog.records) == 1
    dropped = trail.dropped
    gate.set()
    assert trail.flush()
    trail.write({"number": "after"})
    assert trail.flush()
    lines = [json.loads(line) for line in trail.path.read_text().splitlines()]
    gaps = [line for line in lines if line.get("event") == "dropped"]
    assert sum(gap["count"] for gap in gaps) == dropped and lines[-1] == {"number": "after"}
    trail.close()


def test_one_trail_per_file_in_a_process(tmp_path: Path) -> None:
    one = audit_log_for(Settings(audit_log=tmp_path / "a.jsonl"))
    assert one is audit_log_for(Settings(share=True, audit_log=tmp_path / "a.jsonl"))
    assert one is not audit_log_for(Settings(audit_log=tmp_path / "b.jsonl"))
    assert audit_log_for(Settings()) is None


def test_a_stream_is_logged_once_at_its_end_and_a_stopped_one_as_incomplete(tmp_path: Path) -> None:
    from cosyvoice_ui.serving.jobs import JobOptions, SpeechJobs

    speech = SpeechJobs(fake_manager(), Settings(voices_dir=tmp_path / "v", glossary_dir=tmp_path / "g",
                                                 audit_log=tmp_path / "audit.jsonl"))
    options = JobOptions(caller=Caller("rest", "key-2"))
    whole = speech.start(speech.prepare(SynthesisRequest(Mode.SFT, text="one two three", speaker="alice",
                                                         stream=True), options))
    assert len(list(whole.chunks())) >= 2
    whole.result()  # a caller that asks for the result too: still one line
    stopped = speech.start(speech.prepare(SynthesisRequest(Mode.SFT, text="one two three four", speaker="bob",
                                                           stream=True), options))
    next(iter(stopped.chunks()))
    stopped.release()  # the client left after the first chunk
    assert speech.audit.flush()
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(line["voice"], line["complete"]) for line in lines] == [("alice", True), ("bob", False)]
    assert 0 < lines[1]["seconds"] < lines[0]["seconds"] + 1 and lines[1]["who"] == "key-2"


def test_the_cli_names_its_surface_and_takes_audit_log(tmp_path: Path) -> None:
    from cosyvoice_ui.cli.common import cli_settings, speech_jobs
    from cosyvoice_ui.cli.main import build_parser as cli_parser

    args = cli_parser().parse_args(["synth", "--text", "Hi.", "--out", str(tmp_path / "a.wav"),
                                    "--voices-dir", str(tmp_path / "voices"), "--audit-log",
                                    str(tmp_path / "cli.jsonl")])
    assert cli_settings(args).audit_path == tmp_path / "cli.jsonl"
    assert not consent_required(cli_settings(args))  # the owner, on the machine
    for surface in ("cli", "script", "book"):
        assert speech_jobs(args, surface=surface)[1].caller == Caller(surface)


def test_a_thin_client_vouches_for_the_consent_it_checked(tmp_path: Path) -> None:
    """A thin client sends every cloned voice (its saved ones too) as a recording: having applied the rule to its
    own caller, it tells a remote that requires consent so."""
    import uvicorn
    from fastapi import FastAPI

    from cosyvoice_ui.api.routes import add_routes
    from cosyvoice_ui.serving.remote import RemoteEngine

    settings = Settings(voices_dir=tmp_path / "v", glossary_dir=tmp_path / "g", api_keys=("box-key",),
                        require_consent=True, audit_log=tmp_path / "box.jsonl", rate_limit_per_min=0)
    app = FastAPI()
    add_routes(app, fake_manager(), settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, name="consent-remote", daemon=True)
    thread.start()
    try:
        for _ in range(400):
            if server.started:
                break
            threading.Event().wait(0.05)
        engine = RemoteEngine(f"http://127.0.0.1:{server.config.port}", api_key="box-key")
        request = SynthesisRequest(Mode.CROSS_LINGUAL, text="Hi there.", prompt_audio=voice_clip(4.0), seed=1)
        assert sum(len(chunk.samples) for chunk in engine.synthesize(engine.check(request))) > 0
        engine.close()
    finally:
        server.should_exit = True
        thread.join(10)
    assert [line["who"] for line in audit_lines(app)] == ["key-1"]


def test_a_cluster_ingress_logs_its_requests_as_cluster(tmp_path: Path) -> None:
    """The ingress serves the app's own routes and names itself (`app.state.surface`, cluster/ingress.py)."""
    from fastapi import FastAPI

    from cosyvoice_ui.api.routes import add_routes

    app = FastAPI()
    app.state.surface = "cluster"
    add_routes(app, fake_manager(), Settings(voices_dir=tmp_path / "v", glossary_dir=tmp_path / "g",
                                             audit_log=tmp_path / "cluster.jsonl"))
    client = TestClient(app, base_url=LOOPBACK)
    assert client.post("/tts", json={"text": "Hi there.", "speaker": "alice"}).status_code == 200
    assert client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "bob"}).status_code == 200
    assert [line["surface"] for line in audit_lines(app)] == ["cluster", "cluster"]
