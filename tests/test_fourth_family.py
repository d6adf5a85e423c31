"""A fourth model family, added the way the checklist in docs/ARCHITECTURE.md ("Adding a model family") says:
a `FamilySpec` and a registry entry, nothing else. The toy is a renamed copy of v3 (its own yaml,
`cosyvoice4.yaml`, and its own model, `Toy-CosyVoice4-0.5B`), registered at run time and forgotten afterwards.

What it proves: such a family is detected by its yaml, loads and speaks through the engine, the `ModelManager`
and the REST API, and every message that names models names it (the mode hints in English and Chinese, the
download catalogue, the UI's labels, the studio's voice checks), with no edit anywhere else.
"""

from __future__ import annotations

import base64
import contextlib
import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui import InvalidRequest, Mode, SynthesisRequest, known_models, load_engine
from cosyvoice_ui.cosyvoice import families, registry
from cosyvoice_ui.cosyvoice.config import parse_v3
from cosyvoice_ui.cosyvoice.families import V3, Checkpoint, FamilySpec
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import EngineInfo
from tests.web_client import LOOPBACK

TOY_MODEL = "Toy-CosyVoice4-0.5B"
TOY = replace(
    V3, name="toy4", title="Toy-CosyVoice4", yaml_name="cosyvoice4.yaml",
    required_files=tuple("cosyvoice4.yaml" if name == V3.yaml_name else name for name in V3.required_files),
    checkpoints=(Checkpoint(TOY_MODEL, "example/Toy-CosyVoice4-0.5B", 0.1, "a renamed copy of the third generation"),),
)
PROMPT = voice_clip(3.0, seed=1)
TEXT = "Hello world, this is a test."


def toy_backend(family: FamilySpec) -> registry.FamilyBackend:
    """v3's classes for the toy, with its own parser entry (the yaml's name in messages) and no goldens."""
    return replace(registry.BACKENDS[V3], family=family, parse_config=parse_v3, parity=None)


@contextlib.contextmanager
def registered(family: FamilySpec):
    """The family and its classes, registered for the block only."""
    families.register(family)
    registry.register(toy_backend(family))
    try:
        yield family
    finally:
        registry.unregister(family)
        families.unregister(family)


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory):
    """The toy family registered, and a tiny random folder of it named like its checkpoint."""
    from cosyvoice_ui.testing.tiny_qwen import write_tiny_qwen_model

    with registered(TOY):
        yield write_tiny_qwen_model(tmp_path_factory.mktemp("toy") / TOY_MODEL, TOY)


@pytest.fixture(scope="module")
def toy_engine(toy: Path):
    return load_engine(toy, device="cpu")


def wave_of(engine, request: SynthesisRequest) -> np.ndarray:
    chunks = list(engine.synthesize(request))
    assert chunks and chunks[-1].final and all(c.sample_rate == TOY.sample_rate for c in chunks)
    return np.concatenate([c.samples for c in chunks])


# --- it runs ------------------------------------------------------------------------------------------------


def test_the_folder_is_detected_by_its_yaml(toy: Path) -> None:
    folder = families.detect(toy)
    assert folder.family is TOY and (toy / "cosyvoice4.yaml").is_file() and not (toy / V3.yaml_name).exists()
    assert families.folder_family(toy) is TOY and families.is_model_folder(toy, supported_only=True)


def test_the_engine_speaks_every_mode_and_streams(toy_engine) -> None:
    info = toy_engine.info
    assert info.family == "toy4" and info.name == TOY_MODEL and info.sample_rate == TOY.sample_rate
    assert set(info.modes) == {Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC}
    requests = {
        "zero_shot": SynthesisRequest(Mode.ZERO_SHOT, text=TEXT, prompt_audio=PROMPT, prompt_text="hello there",
                                      seed=3),
        "instruct": SynthesisRequest(Mode.INSTRUCT, text=TEXT, prompt_audio=PROMPT, seed=3,
                                     instruct_text=TOY.instructions[0].text),
        "vc": SynthesisRequest(Mode.VC, prompt_audio=PROMPT, source_audio=voice_clip(1.5, pitch=180.0, seed=3),
                               seed=3),
    }
    for mode, request in requests.items():
        wave = wave_of(toy_engine, request)
        assert np.isfinite(wave).all() and 0.1 < len(wave) / TOY.sample_rate < 20.0, mode
    whole = wave_of(toy_engine, requests["instruct"])
    streamed = wave_of(toy_engine, replace(requests["instruct"], stream=True))
    assert len(streamed) == len(whole)


def test_it_is_v3_under_another_name(toy_engine, tiny_v3: Path) -> None:
    """The same seed writes the same weights, and the registry gives the same classes: the same samples."""
    request = SynthesisRequest(Mode.CROSS_LINGUAL, text=TEXT, prompt_audio=PROMPT, seed=5)
    v3_wave = wave_of(load_engine(tiny_v3, device="cpu"), request)
    assert np.array_equal(wave_of(toy_engine, request), v3_wave)


def test_the_model_manager_lists_loads_and_runs_it(toy: Path) -> None:
    from cosyvoice_ui.serving.manager import ModelManager

    manager = ModelManager(str(toy), idle_unload_s=0, models_dir=toy.parent)
    try:
        assert TOY_MODEL in {choice.label for choice in manager.choices()}
        assert manager.info().family == "toy4"  # described from the folder, before any load
        with manager.job() as engine:
            wave = wave_of(engine, SynthesisRequest(Mode.CROSS_LINGUAL, text=TEXT, prompt_audio=PROMPT, seed=1))
        assert manager.state == "loaded" and len(wave) > 0
    finally:
        manager.shutdown()


def test_the_rest_api_speaks_with_it(toy: Path, tmp_path: Path) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from cosyvoice_ui.api.routes import add_routes
    from cosyvoice_ui.settings import Settings
    from cosyvoice_ui.web.server import create_manager

    settings = Settings(model_dir=toy, voices_dir=tmp_path / "voices", device="cpu", idle_unload_s=0,
                        rate_limit_per_min=0)
    manager = create_manager(settings)
    app = FastAPI()
    add_routes(app, manager, settings)
    buffer = io.BytesIO()
    sf.write(buffer, PROMPT.samples, PROMPT.sample_rate, format="WAV")
    try:
        client = TestClient(app, base_url=LOOPBACK)
        [model] = client.get("/v1/models").json()["data"]
        assert model["family"] == "toy4" and model["instruct_needs"] == "voice"
        response = client.post("/tts", json={"mode": "instruct", "text": TEXT, "seed": 2,
                                             "prompt_audio": base64.b64encode(buffer.getvalue()).decode(),
                                             "instruct_text": TOY.instructions[0].text})
        assert response.status_code == 200, response.text
        samples, rate = sf.read(io.BytesIO(base64.b64decode(response.json()["audio"])))
        assert rate == TOY.sample_rate and 0.1 < len(samples) / rate < 20.0
    finally:
        manager.shutdown()


# --- every message that names models names it -----------------------------------------------------------


def test_the_mode_hints_name_it_in_both_languages(toy: Path) -> None:
    for mode in (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC):
        assert TOY_MODEL in known_models.mode_hint(mode) and TOY_MODEL in known_models.mode_hint(mode, "zh")
    assert TOY_MODEL not in known_models.mode_hint(Mode.SFT)  # it ships no preset speakers
    assert known_models.mode_hint(Mode.INSTRUCT).endswith("Fun-CosyVoice3-0.5B or Toy-CosyVoice4-0.5B")
    assert TOY_MODEL in known_models.models_for(Mode.INSTRUCT, instruct_voice=True)
    assert TOY_MODEL in known_models.models_reading("pinyin")


def test_a_refused_mode_names_it(toy: Path) -> None:
    from cosyvoice_ui.ui import strings
    from cosyvoice_ui.validation import check_request

    plain = EngineInfo("Some-Base-Model", "v1", 22050, (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL))
    with pytest.raises(InvalidRequest) as refused:
        check_request(SynthesisRequest(Mode.INSTRUCT, text=TEXT, instruct_text="slowly"), plain)
    assert refused.value.code == "mode_unsupported" and TOY_MODEL in refused.value.message
    chinese = strings.message(refused.value, "zh")
    assert TOY_MODEL in chinese and "或 Toy-CosyVoice4-0.5B" in chinese


def test_the_catalogue_and_the_download_list_name_it(toy: Path, capsys) -> None:
    from cosyvoice_ui.cli.main import main
    from cosyvoice_ui.cosyvoice.hub import catalogue, catalogue_entry
    from cosyvoice_ui.serving.backends import downloadable_models

    assert catalogue()[-1].name == TOY_MODEL and catalogue_entry(TOY_MODEL).family is TOY
    assert TOY_MODEL in downloadable_models()
    assert main(["list-models", "--models-dir", str(toy.parent)]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith(TOY_MODEL)]
    assert listed and "installed" in listed[0]


def test_the_ui_labels_and_the_studio_name_it(toy: Path) -> None:
    from cosyvoice_ui.studio.voice_map import VoiceChoice, request_for
    from cosyvoice_ui.ui import strings

    for lang in ("en", "zh"):
        assert TOY_MODEL in strings.label("instruct_unavailable", lang)
        assert TOY_MODEL in strings.label("glossary_help", lang)
        assert TOY_MODEL in strings.filled(strings.LABELS_ZH if lang == "zh" else strings.LABELS_EN,
                                           lang)["instruct_unavailable"]
    plain = EngineInfo("Some-Base-Model", "v1", 22050, (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL))
    with pytest.raises(InvalidRequest, match=TOY_MODEL):
        request_for("Hi.", VoiceChoice("saved", "bob", instruct="slowly"), plain)
    presets = EngineInfo("Some-Instruct-Model", "v1", 22050, (Mode.SFT, Mode.INSTRUCT), speakers=("a",))
    with pytest.raises(InvalidRequest, match=TOY_MODEL):  # instruct in a cloned voice: which models can
        request_for("Hi.", VoiceChoice("saved", "bob", instruct="slowly"), presets)


def test_a_registered_family_leaves_nothing_behind() -> None:
    """Registering and unregistering another copy: afterwards no table, list or message knows it."""
    from cosyvoice_ui.cosyvoice.hub import catalogue

    other = replace(TOY, name="toy5", yaml_name="cosyvoice5.yaml",
                    checkpoints=(Checkpoint("Toy-CosyVoice5-0.5B", "example/toy5", 0.1, "another copy"),))
    before = (list(families.FAMILIES), dict(registry.BACKENDS), known_models.known_models())
    with registered(other):
        assert "Toy-CosyVoice5-0.5B" in known_models.mode_hint(Mode.INSTRUCT)
        with pytest.raises(Exception, match="already registered"):
            families.register(other)
    assert (list(families.FAMILIES), dict(registry.BACKENDS), known_models.known_models()) == before
    assert "Toy-CosyVoice5-0.5B" not in known_models.mode_hint(Mode.INSTRUCT)
    assert all(entry.family is not other for entry in catalogue())
    with pytest.raises(Exception, match="no Toy-CosyVoice4 models yet"):
        registry.backend_for(replace(TOY, name="toy6"))
