"""The public Gradio API of the real app, driven with `gradio_client` on loopback (tiny model, CPU):
only named, described endpoints are listed, and preset/clone jobs return real audio files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.ui.api_tools import ENDPOINTS

from .launch import running_app

pytestmark = pytest.mark.slow
TRANSCRIPT = "希望你以后能够做的比我还好呦。"
SPEAKERS = ("中文女", "中文男", "英文女", "英文男", "日语男", "粤语女", "韩语女")  # the tiny SFT model's presets
UI_ONLY = ("lang", "history", "stream", "normalize", "fmt", "submode")


@pytest.fixture(scope="module")
def app_url(tiny_sft: Path, tmp_path_factory) -> str:
    with running_app(tiny_sft, tmp_path_factory.mktemp("gradio-api")) as url:
        yield url


@pytest.fixture(scope="module")
def client(app_url: str, tmp_path_factory):
    from gradio_client import Client

    return Client(app_url, verbose=False, download_files=str(tmp_path_factory.mktemp("downloads")))


@pytest.fixture(scope="module")
def api(client) -> dict:
    return client.view_api(return_format="dict", print_info=False)


@pytest.fixture(scope="module")
def prompt_wav(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompt") / "prompt.wav"
    clip = voice_clip(3.5, 16000)
    sf.write(path, clip.samples, clip.sample_rate)
    return path


def _audio(path: str) -> tuple[np.ndarray, int]:
    wave, rate = sf.read(path)
    assert np.isfinite(wave).all() and np.abs(wave).max() > 0, "the result is silent or broken"
    return wave, rate


def test_only_named_described_endpoints(api: dict) -> None:
    named = api["named_endpoints"]
    assert sorted(named) == sorted(f"/{name}" for name in ENDPOINTS)
    assert not api["unnamed_endpoints"]
    assert not [name for name in named if name.startswith(("/run", "/lambda", "/rerun", "/fill", "/adapt"))]
    for name, endpoint in named.items():
        assert endpoint["description"], f"{name} has no description"
        for param in endpoint["parameters"]:
            where = f"{name}({param['parameter_name']})"
            assert param["label"] == param["parameter_name"], where  # not "1st", "parameter_29" or an i18n key
            assert param["python_type"]["description"].strip(), f"{where} has no description"
            assert param["parameter_name"] not in UI_ONLY, f"{where} is a UI-only input"
    params = {name: [p["parameter_name"] for p in e["parameters"]] for name, e in named.items()}
    assert params["/clone"][:3] == ["text", "prompt_audio", "transcript"]
    assert params["/preset"][:2] == ["text", "speaker"]
    assert params["/instruct"][:3] == ["text", "instructions", "speaker"]
    assert params["/convert"][:2] == ["source_audio", "target_audio"]
    assert params["/synthesize"] == ["text", "voice", "instructions", "speed", "seed", "format"]
    assert params["/save_voice"] == ["name", "audio", "transcript", "consent"]
    # the caller's word that a new recording's speaker agreed (a shared server asks for it): last, optional
    assert [params[name][-1] for name in ("/clone", "/cross_lingual", "/convert")] == ["consent"] * 3
    required = {p["parameter_name"] for p in named["/clone"]["parameters"] if not p["parameter_has_default"]}
    assert required == {"text"}
    assert named["/clone"]["parameters"][1]["python_type"]["type"] == "filepath"


def test_preset_job_returns_real_audio_and_repeats_from_cache(client) -> None:
    path, details = client.predict(text="Hello world, this is a preset speaker.", speaker="英文女", seed=7,
                                   api_name="/preset")
    wave, rate = _audio(path)
    seconds = len(wave) / rate
    assert rate == 22050 and details["sample_rate"] == 22050
    # A short sentence on the tiny random model: 2x..20x its text tokens at 50 speech tokens/s.
    assert 0.3 < seconds < 4.0, f"unexpected duration {seconds:.2f} s"
    assert details["seed"] == 7 and details["format"] == "wav" and abs(details["duration_s"] - seconds) < 0.01
    again_path, again = client.predict(text="Hello world, this is a preset speaker.", speaker="英文女", seed=7,
                                       api_name="/preset")
    assert again["cached"] is True  # the same result cache as POST /tts
    assert np.array_equal(_audio(again_path)[0], wave)


def test_clone_job_with_an_uploaded_recording(client, prompt_wav: Path) -> None:
    from gradio_client import handle_file

    path, details = client.predict(text="Hello world, this is a cloned voice.", prompt_audio=handle_file(prompt_wav),
                                   transcript=TRANSCRIPT, seed=3, format="flac", api_name="/clone")
    assert Path(path).suffix == ".flac"
    wave, rate = _audio(path)
    assert rate == 22050 and 0.3 < len(wave) / rate < 4.0
    assert details["seed"] == 3 and not details["cached"]


def test_synthesize_with_a_preset_returns_one_audio_file(client) -> None:
    path = client.predict(text="Plain synthesis.", voice="英文男", seed=11, format="mp3", api_name="/synthesize")
    assert Path(path).suffix == ".mp3"
    wave, rate = _audio(path)
    assert 0.2 < len(wave) / rate < 4.0


def test_list_voices_names_the_presets(client) -> None:
    import json

    voices = json.loads(client.predict(api_name="/list_voices"))
    assert voices["model"] == "tiny-sft" and tuple(voices["presets"]) == SPEAKERS
    assert voices["saved"] == [] and voices["instructions_supported"] is False


def test_errors_are_clear_sentences(client) -> None:
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as unknown:
        client.predict(text="Hi there.", speaker="nobody", api_name="/preset")
    message = str(unknown.value)
    assert "nobody" in message and "英文女" in message
    with pytest.raises(AppError) as missing:
        client.predict(text="Hi there.", api_name="/clone")
    assert "prompt audio" in str(missing.value)
    with pytest.raises(AppError) as bad_seed:
        client.predict(text="Hi there.", speaker="英文女", seed=-1, api_name="/preset")
    assert str(bad_seed.value).startswith("seed:")
    with pytest.raises(AppError) as bad_format:
        client.predict(text="Hi there.", speaker="英文女", format="ogg", api_name="/preset")
    assert "wav, mp3, flac" in str(bad_format.value)
    for exc in (unknown, missing, bad_seed, bad_format):
        text = str(exc.value)
        assert "Traceback" not in text and "/tmp" not in text and "object at 0x" not in text, text


def test_a_server_path_is_not_accepted_as_an_upload(client) -> None:
    """Only files uploaded to (or fetched by) Gradio are read; a plain string naming a server file is refused."""
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as refused:
        client.predict(text="Hi there.", prompt_audio=str(Path(__file__).resolve()), transcript=TRANSCRIPT,
                       api_name="/clone")
    assert "must be an uploaded audio file" in str(refused.value) and "handle_file" in str(refused.value)


def test_a_forged_file_reference_is_refused(app_url: str, prompt_wav: Path) -> None:
    """A raw request naming a server file as if it had been uploaded is refused by Gradio's upload check."""
    import httpx

    call = app_url + "gradio_api/call/clone"
    forged = {"path": str(prompt_wav), "meta": {"_type": "gradio.FileData"}}
    event = httpx.post(call, json={"data": ["Hi there.", forged, TRANSCRIPT, "", 1.0, None, "wav", "quick",
                                                   False]},
                       timeout=30).json()["event_id"]
    stream = httpx.get(f"{call}/{event}", timeout=60).text
    assert "event: error" in stream and "not uploaded" in stream, stream[:300]
    assert "event: complete" not in stream
