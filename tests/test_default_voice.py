"""Default voices and OpenAI names: a request with only a text works on every backend.

Unit tests of `VoiceResolver` and `VoiceAliases`, the REST routes on a fake engine, and end to end on the
tiny base model (no presets: the built-in example voice speaks) through /tts and the CLI.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui import cli
from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.serving.default_voice import BUILTIN_ID, VoiceRef, VoiceResolver, builtin_audio, builtin_transcript
from cosyvoice_ui.errors import ConfigError
from cosyvoice_ui.web.server import create_manager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import EngineInfo, Mode, SynthesisRequest
from cosyvoice_ui.serving.voice_aliases import OPENAI_VOICES, VoiceAliases, default_aliases
from cosyvoice_ui.serving.voices import VoiceLibrary

from .test_api import api_engine, error_of, fake_client
from tests.web_client import LOOPBACK

V1_SFT = EngineInfo("CosyVoice-300M-SFT", "v1", 22050, (Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC),
                    speakers=("中文女", "中文男", "日语男", "粤语女", "英文女", "英文男", "韩语女"))
V1_BASE = EngineInfo("CosyVoice-300M", "v1", 22050, (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC))
OFFLINE = EngineInfo("Offline", "offline", 24000, (Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL),
                     speakers=("jf_gongitsune", "af_heart", "jm_kumo", "blend_x"),
                     default_speaker="jf_gongitsune",
                     speaker_genders=(("af_heart", "female"), ("jf_gongitsune", "female"), ("jm_kumo", "male")))


# --- resolver ------------------------------------------------------------------------------------------


def test_builtin_voice_is_a_usable_prompt() -> None:
    from cosyvoice_ui.audio import check_prompt

    audio = builtin_audio()
    assert 3.0 <= audio.duration <= 30.0 and audio.sample_rate >= 16000
    assert check_prompt(audio).duration > 3.0
    assert len(builtin_transcript().split()) >= 8


@pytest.mark.parametrize("info, expected", [
    (OFFLINE, VoiceRef("preset", "jf_gongitsune")),  # the backend's own default preset
    (V1_SFT, VoiceRef("preset", "中文女")),  # the first preset, in the model's order
    (V1_BASE, VoiceRef("builtin", BUILTIN_ID, builtin_transcript())),  # clone-only: the built-in voice
])
def test_every_backend_has_a_default_voice(info: EngineInfo, expected: VoiceRef, tmp_path: Path) -> None:
    assert VoiceResolver(VoiceLibrary(tmp_path)).default(info) == expected


def test_configured_and_marked_defaults_win_in_order(tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path)
    saved = library.add("Narrator", voice_clip(4.0), "hello there")
    assert VoiceResolver(library).default(V1_SFT).id == "中文女"
    library.set_default(saved.id)
    assert VoiceResolver(library).default(V1_SFT) == VoiceRef("saved", "narrator", "hello there")
    assert VoiceResolver(library, configured="英文男").default(V1_SFT) == VoiceRef("preset", "英文男")
    # a configured name this model lacks falls back to the marked voice, then to the model's own
    assert VoiceResolver(library, configured="jm_kumo").default(V1_SFT).id == "narrator"
    library.remove(saved.id)
    assert library.default_id() is None
    assert VoiceResolver(library, configured="jm_kumo").default(V1_SFT).id == "中文女"


def test_reserved_names_are_never_saved_voice_ids(tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path)
    assert library.add("default", voice_clip(4.0)).id == "default-2"
    assert library.add("Builtin", voice_clip(4.0)).id == "builtin-2"


def test_apply_fills_in_only_where_no_voice_is_named(tmp_path: Path) -> None:
    resolver = VoiceResolver(VoiceLibrary(tmp_path))
    plain = SynthesisRequest(Mode.SFT, text="hi")
    assert resolver.apply(plain, V1_SFT) == (SynthesisRequest(Mode.SFT, text="hi", speaker="中文女"), None)
    named = SynthesisRequest(Mode.SFT, text="hi", speaker="default")
    assert resolver.apply(named, OFFLINE)[0].speaker == "jf_gongitsune"
    own = SynthesisRequest(Mode.SFT, text="hi", speaker="英文男")
    assert resolver.apply(own, V1_SFT) == (own, None)
    # a base model: an inferred sft request becomes a clone with the built-in voice ...
    request, ref = resolver.apply(plain, V1_BASE, mode_given=False)
    assert (request.mode, request.speaker, ref.kind) == (Mode.ZERO_SHOT, BUILTIN_ID, "builtin")
    # ... but an explicit sft request stays as asked (validation then says the model has no presets)
    assert resolver.apply(plain, V1_BASE, mode_given=True) == (plain, None)
    # instruct without a preset never silently drops the instruction
    instruct = SynthesisRequest(Mode.INSTRUCT, text="hi", instruct_text="sadly")
    assert resolver.apply(instruct, V1_BASE, mode_given=False) == (instruct, None)
    # CosyVoice2/3 take an instruction in a cloned voice: a base model's default voice speaks it
    v3_base = EngineInfo("Fun-CosyVoice3-0.5B", "v3", 24000, (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT,
                                                              Mode.VC), instruct_voice=True)
    request, ref = resolver.apply(instruct, v3_base, mode_given=True)
    assert (request.mode, request.speaker, ref.kind) == (Mode.INSTRUCT, BUILTIN_ID, "builtin")
    # a recording is a voice: left alone
    clone = SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_audio=voice_clip(4.0), prompt_text="x")
    assert resolver.apply(clone, V1_BASE) == (clone, None)


# --- aliases -------------------------------------------------------------------------------------------


def test_default_aliases_follow_each_backend() -> None:
    v1 = default_aliases(V1_SFT, "default")
    assert set(v1) == set(OPENAI_VOICES)
    assert v1["alloy"] == "英文女" and v1["nova"] == "英文女"  # English-labelled presets first
    assert v1["onyx"] == "英文男" and v1["echo"] == "英文男"
    offline = default_aliases(OFFLINE, "default")
    assert offline["onyx"] == "jm_kumo"
    assert {offline[a] for a, g in OPENAI_VOICES.items() if g == "female"} == {"jf_gongitsune", "af_heart"}
    assert set(default_aliases(V1_BASE, "default").values()) == {"default"}


def test_alias_file_overrides_flat_and_per_family(tmp_path: Path) -> None:
    path = tmp_path / "aliases.json"
    path.write_text(json.dumps({"alloy": "中文女", "v1": {"nova": "粤语女", "echo": "missing-voice"},
                                "offline": {"alloy": "af_heart"}}), encoding="utf-8")
    aliases = VoiceAliases.from_file(path)
    mapping = aliases.mapping(V1_SFT, "default", exists=lambda name: name in V1_SFT.speakers)
    assert mapping["alloy"] == "中文女" and mapping["nova"] == "粤语女"
    assert mapping["echo"] == "英文男"  # a target this model lacks: the default mapping stays
    assert aliases.mapping(OFFLINE, "default", exists=lambda n: n in OFFLINE.speakers)["alloy"] == "af_heart"


@pytest.mark.parametrize("content, problem", [("{broken", "not valid JSON"), ('["alloy"]', "must map")])
def test_a_broken_alias_file_is_a_clear_startup_error(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "aliases.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=problem) as caught:
        VoiceAliases.from_file(path)
    assert str(tmp_path) not in str(caught.value)


# --- routes on a fake engine ----------------------------------------------------------------------------


def test_tts_with_only_text_returns_base64_wav(tmp_path: Path) -> None:
    client, _, engine = fake_client(tmp_path)
    response = client.post("/tts", json={"text": "Hello there"})
    assert response.status_code == 200, response.text
    body = response.json()
    samples, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
    assert rate == 16000 and len(samples) == 3 * 1600 and body["format"] == "wav"
    assert body["voice"] == "alice"
    named = client.post("/tts", json={"text": "Hello there", "speaker": "default", "seed": 3})
    assert named.status_code == 200 and named.json()["voice"] == "alice"


def test_curl_style_form_content_type_is_read_as_json(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path)
    form = {"content-type": "application/x-www-form-urlencoded"}  # what `curl -d '{...}'` sends
    response = client.post("/tts", content=b'{"text": "Hello there"}', headers=form)
    assert response.status_code == 200, response.text
    assert error_of(client.post("/tts", content=b"text=hello", headers=form)) == (400, "bad_json")


def test_speech_accepts_openai_names_and_models(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path)
    for model in ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "fake-model", ""):
        response = client.post("/v1/audio/speech", json={"model": model, "input": "hi", "voice": "alloy",
                                                          "response_format": "wav"})
        assert response.status_code == 200, (model, response.text)
    no_voice = client.post("/v1/audio/speech", json={"model": "tts-1", "input": "hi", "response_format": "pcm"})
    assert no_voice.status_code == 200 and len(no_voice.content) == 3 * 1600 * 2
    unknown = client.post("/v1/audio/speech", json={"model": "whisper-9", "input": "hi", "voice": "alloy"})
    error = unknown.json()["error"]
    assert unknown.status_code == 404 and error["code"] == "model_not_found" and error["param"] == "model"
    assert error["type"] == "not_found_error" and "tts-1" in error["message"]


@pytest.mark.parametrize("fmt, magic, media", [("opus", b"OggS", "audio/ogg"), ("aac", b"\xff\xf1", "audio/aac"),
                                               ("mp3", None, "audio/mpeg")])
def test_speech_encodes_opus_and_aac_with_ffmpeg(tmp_path: Path, fmt: str, magic: bytes | None, media: str) -> None:
    client, _, _ = fake_client(tmp_path)
    response = client.post("/v1/audio/speech", json={"input": "hi", "voice": "nova", "response_format": fmt})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == media
    if magic:
        assert response.content.startswith(magic)
    # 0.3 s in; AAC adds up to two 1024-sample frames of priming and padding
    assert 0.28 <= _decoded_seconds(response.content, tmp_path / f"x.{fmt}") <= 0.45


def _decoded_seconds(data: bytes, path: Path) -> float:
    """Decode with ffmpeg (the codec's own decoder) and measure the audio."""
    import subprocess

    from cosyvoice_ui.audio import ffmpeg_path

    path.write_bytes(data)
    wav = path.with_suffix(".wav")
    subprocess.run([ffmpeg_path(), "-loglevel", "error", "-y", "-i", str(path), str(wav)], check=True)
    samples, rate = sf.read(wav)
    return len(samples) / rate


def test_voice_listing_health_and_models_name_the_default(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path)
    listing = client.get("/v1/audio/voices").json()
    kinds = {(e["id"], e["kind"]) for e in listing["data"]}
    assert {("alice", "preset"), ("bob", "preset"), ("alloy", "alias")} <= kinds
    assert listing["voices"] == listing["data"] and listing["default"] == {"id": "alice", "kind": "preset"}
    assert set(listing["aliases"]) == set(OPENAI_VOICES) and set(listing["aliases"].values()) <= {"alice", "bob"}
    assert client.get("/health").json()["default_voice"] == {"id": "alice", "kind": "preset"}
    model = client.get("/v1/models").json()["data"][0]
    assert model["default_voice"] == {"id": "alice", "kind": "preset"} and "tts-1" in model["accepted_model_names"]
    assert {m["id"] for m in client.get("/v1/audio/models").json()["models"]} >= {"tts-1", "gpt-4o-mini-tts"}


def test_default_voice_flag_changes_the_default(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path, default_voice="bob")
    assert client.post("/tts", json={"text": "hi"}).json()["voice"] == "bob"
    assert client.get("/health").json()["default_voice"]["id"] == "bob"


def test_alias_file_reaches_the_speech_route(tmp_path: Path) -> None:
    path = tmp_path / "aliases.json"
    path.write_text(json.dumps({"alloy": "bob"}), encoding="utf-8")
    client, _, _ = fake_client(tmp_path, voice_aliases_file=path)
    alloy = client.post("/v1/audio/speech", json={"input": "hi", "voice": "alloy", "response_format": "pcm",
                                                  "seed": 5})
    bob = client.post("/v1/audio/speech", json={"input": "hi", "voice": "bob", "response_format": "pcm", "seed": 5})
    alice = client.post("/v1/audio/speech", json={"input": "hi", "voice": "alice", "response_format": "pcm",
                                                  "seed": 5})
    assert alloy.status_code == 200 and alloy.content == bob.content  # FakeEngine: audio depends on the seed ...
    assert client.get("/v1/audio/voices").json()["aliases"]["alloy"] == "bob"
    assert alice.status_code == 200  # ... so the mapping itself is checked through the listing above


# --- end to end: a base model speaks with the built-in voice ---------------------------------------------


@pytest.fixture(scope="module")
def base_client(tiny_base: Path, tmp_path_factory) -> tuple[TestClient, Path]:
    voices = tmp_path_factory.mktemp("voices")
    settings = Settings(model_dir=tiny_base, voices_dir=voices, device="cpu", idle_unload_s=0, rate_limit_per_min=0)
    app = FastAPI()
    add_routes(app, create_manager(settings), settings)
    return TestClient(app, base_url=LOOPBACK), voices


def test_base_model_speaks_text_alone_with_the_builtin_voice(base_client) -> None:
    client, voices = base_client
    assert client.get("/health").json()["default_voice"] == {"id": BUILTIN_ID, "kind": "builtin"}
    response = client.post("/tts", json={"text": "Hello there", "seed": 1})
    assert response.status_code == 200, response.text
    samples, rate = sf.read(io.BytesIO(base64.b64decode(response.json()["audio"])))
    assert rate == 22050 and len(samples) > rate // 10 and np.isfinite(samples).all()
    assert any((voices / ".builtin").glob("features-*")), "the built-in voice's features are cached"
    assert VoiceLibrary(voices).ids() == ()  # and it is not listed as a saved voice
    speech = client.post("/v1/audio/speech", json={"model": "tts-1", "input": "Hello", "voice": "alloy",
                                                   "response_format": "wav"})
    assert speech.status_code == 200, speech.text
    listing = client.get("/v1/audio/voices").json()
    assert (BUILTIN_ID, "builtin") in {(e["id"], e["kind"]) for e in listing["data"]}
    assert set(listing["aliases"].values()) == {"default"}


def test_marking_a_saved_voice_as_default_over_the_api(base_client) -> None:
    client, voices = base_client
    import base64 as b64

    buffer = io.BytesIO()
    clip = voice_clip(4.0)
    sf.write(buffer, clip.samples, clip.sample_rate, format="WAV")
    saved = client.post("/v1/voices", json={"name": "Host", "transcript": "hello",
                                            "audio": b64.b64encode(buffer.getvalue()).decode()})
    assert saved.status_code == 201, saved.text
    assert client.post("/v1/voices/host/default").json()["default"] is True
    assert client.get("/health").json()["default_voice"] == {"id": "host", "kind": "saved"}
    assert client.post("/tts", json={"text": "Hello", "seed": 2}).json()["voice"] == "host"
    assert error_of(client.post("/v1/voices/nobody/default")) == (404, "voice_not_found")
    assert client.delete("/v1/voices/host/default").json()["default"] is False
    assert client.get("/health").json()["default_voice"]["kind"] == "builtin"


def test_cli_synth_with_only_text_on_a_base_model(tiny_base: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "a.wav"
    code = cli.main(["synth", "--model-dir", str(tiny_base), "--device", "cpu", "--text", "Hello there",
                     "--voices-dir", str(tmp_path / "voices"), "--seed", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    samples, rate = sf.read(out)
    assert rate == 22050 and len(samples) > 0


def test_cli_voices_default_marks_and_clears(tmp_path: Path, capsys) -> None:
    library = VoiceLibrary(tmp_path / "voices")
    library.add("Host", voice_clip(4.0), "hello")
    assert cli.main(["voices", "default", "host", "--voices-dir", str(tmp_path / "voices")]) == 0
    assert library.default_id() == "host"
    assert cli.main(["voices", "default", "--voices-dir", str(tmp_path / "voices")]) == 0
    assert capsys.readouterr().out.strip().endswith("host")
    assert cli.main(["voices", "default", "--clear", "--voices-dir", str(tmp_path / "voices")]) == 0
    assert library.default_id() is None
    assert cli.main(["voices", "default", "nobody", "--voices-dir", str(tmp_path / "voices")]) == 2
    assert "no saved voice 'nobody'" in capsys.readouterr().err


def test_fake_engine_without_presets_has_no_default_and_says_so(tmp_path: Path) -> None:
    engine = api_engine(modes=(Mode.SFT,), speakers=())
    client, _, _ = fake_client(tmp_path, engine=engine)
    response = client.post("/v1/audio/speech", json={"input": "hi"})
    assert error_of(response) == (422, "voice_missing")
    assert "GET /v1/audio/voices" in response.json()["error"]["message"]
