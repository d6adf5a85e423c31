"""Families: folder detection (which generation, which variant, specific errors for bad folders), the
family data the rest of the package reads, and the registry that maps each family to our classes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cosyvoice_ui.cosyvoice.families import (FAMILIES, SUPPORTED, V1, V2, V3, detect, folder_family, folder_info,
                                              is_model_folder, modes_for)
from cosyvoice_ui.cosyvoice.hub import catalogue, find_models
from cosyvoice_ui.errors import CheckpointError, ConfigError
from cosyvoice_ui.types import Mode
from cosyvoice_ui.validation import mode_hint


def test_detects_v1_tiny_model(tiny_sft: Path) -> None:
    folder = detect(tiny_sft)
    assert folder.family is V1 and not folder.instruct and folder.has_spk2info
    assert modes_for(folder, ("a",)) == (Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC)
    assert modes_for(folder, ()) == (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC)


def test_instruct_variant(tiny_instruct: Path) -> None:
    folder = detect(tiny_instruct)
    assert folder.instruct
    modes = modes_for(folder, ("a",))
    assert Mode.INSTRUCT in modes and Mode.CROSS_LINGUAL not in modes


def test_instruct_by_folder_name(tmp_path: Path, tiny_base: Path) -> None:
    named = tmp_path / "CosyVoice-300M-Instruct"
    named.mkdir()
    for f in tiny_base.iterdir():
        if f.name != "cosyvoice_ui.json":
            (named / f.name).symlink_to(f)
    assert detect(named).instruct


def test_missing_folder_and_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        detect(tmp_path / "nope")
    with pytest.raises(ConfigError, match="not a CosyVoice model folder"):
        detect(tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        detect(tmp_path / "f")


def test_missing_weight_names_the_file(tmp_path: Path, tiny_base: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_base.iterdir():
        if f.name != "flow.pt":
            (broken / f.name).symlink_to(f)
    with pytest.raises(CheckpointError, match=r"missing flow\.pt"):
        detect(broken)


def test_v2_and_mixed_folders_are_explained(tmp_path: Path) -> None:
    (tmp_path / "cosyvoice2.yaml").write_text("x: 1")
    with pytest.raises(CheckpointError, match=r"missing llm\.pt.*CosyVoice-BlankEN/config\.json"):
        detect(tmp_path)
    (tmp_path / "cosyvoice.yaml").write_text("x: 1")
    with pytest.raises(ConfigError, match="several generations"):
        detect(tmp_path)


def test_mode_hints_name_checkpoints_of_families_this_engine_runs() -> None:
    runnable = {c.name for f in SUPPORTED for c in f.checkpoints}
    for mode in Mode:
        hint = mode_hint(mode)
        assert any(name in hint for name in runnable), f"{mode}: {hint!r} names no runnable checkpoint"
    assert "Instruct" in mode_hint(Mode.INSTRUCT) and "SFT" in mode_hint(Mode.SFT)


def test_family_facts() -> None:
    assert [f.name for f in FAMILIES] == ["v1", "v2", "v3"] and SUPPORTED == [V1, V2, V3]
    assert V1.mel_rate == 22050 / 256 and V2.mel_rate == V3.mel_rate == 50.0
    assert V1.token_rate == 50 and V2.token_rate == V3.token_rate == 25
    for family in FAMILIES:
        assert family.yaml_name in family.required_files and family.speech_tokenizer_file in family.required_files
        assert family.checkpoints and family.instruct_examples
        assert family.streaming.token_first_hop_len <= family.upstream_streaming.token_first_hop_len
    assert V2.upstream_streaming.pre_lookahead_len == 3 and V3.upstream_streaming.source_cache_len == 0


def test_is_model_folder_and_folder_family(tmp_path: Path, tiny_base: Path) -> None:
    assert is_model_folder(tiny_base) and is_model_folder(tiny_base, supported_only=True)
    assert folder_family(tiny_base) is V1
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / V2.yaml_name).write_text("x: 1")
    assert is_model_folder(v2) and is_model_folder(v2, supported_only=True) and folder_family(v2) is V2
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for family in (V1, V3):
        (mixed / family.yaml_name).write_text("x: 1")
    assert is_model_folder(mixed) and not is_model_folder(mixed, supported_only=True)
    assert folder_family(mixed) is None
    assert not is_model_folder(tmp_path / "absent") and not is_model_folder(tmp_path)
    assert find_models(tmp_path) == [mixed, v2]


def test_folder_info_reads_the_family(tiny_instruct: Path, tiny_sft: Path) -> None:
    instruct = folder_info(detect(tiny_instruct), ("a",))
    assert instruct.family == "v1" and instruct.sample_rate == V1.sample_rate
    assert instruct.instruct_examples == V1.instruct_examples
    assert folder_info(detect(tiny_sft), ("a",)).instruct_examples == ()  # no instruct mode, no examples


def test_catalogue_lists_every_family_checkpoint() -> None:
    entries = catalogue()
    assert [e.name for e in entries] == [c.name for f in FAMILIES for c in f.checkpoints]
    assert {e.name for e in entries if e.supported} == {c.name for f in SUPPORTED for c in f.checkpoints}
    assert entries[0].name == "CosyVoice-300M" and entries[0].family is V1


def test_registry_covers_exactly_the_supported_families() -> None:
    from cosyvoice_ui.cosyvoice.registry import BACKENDS, backend_for

    assert set(BACKENDS) == set(SUPPORTED)
    for family, backend in BACKENDS.items():
        assert backend.family is family
    assert backend_for(V2).family is V2 and backend_for(V3).family is V3
    with pytest.raises(ConfigError, match="no CosyVoice9 models yet"):
        backend_for(replace(V1, title="CosyVoice9"))


def test_registry_builds_v1_from_its_parts(v1_fixture: Path) -> None:
    from cosyvoice_ui.cosyvoice.config import read_yaml
    from cosyvoice_ui.cosyvoice.models.estimators.unet import ConditionalDecoder
    from cosyvoice_ui.cosyvoice.models.nsf import SineGen
    from cosyvoice_ui.cosyvoice.recipes import V1InputRecipe
    from cosyvoice_ui.cosyvoice.registry import backend_for

    backend = backend_for(V1)
    config = backend.parse_config(read_yaml(v1_fixture / V1.yaml_name), V1.yaml_name)
    backend.check_classes(config, V1.yaml_name)
    assert isinstance(backend.build_flow(config.flow).estimator, ConditionalDecoder)
    assert isinstance(backend.build_vocoder(config.hift).m_source.l_sin_gen, SineGen)  # the 22050 Hz source
    assert backend.input_recipe(config) == V1InputRecipe(n_mels=80)
    assert backend.text_tokenizer(v1_fixture).encode("<|en|>") == [50259]


def test_registry_refuses_a_yaml_with_foreign_classes(v1_fixture: Path) -> None:
    from dataclasses import replace

    from cosyvoice_ui.cosyvoice.config import read_yaml
    from cosyvoice_ui.cosyvoice.registry import backend_for

    backend = backend_for(V1)
    config = backend.parse_config(read_yaml(v1_fixture / V1.yaml_name), V1.yaml_name)
    for field, path in (("llm_class", "cosyvoice.llm.llm.Qwen2LM"),
                        ("estimator_class", "cosyvoice.flow.decoder.CausalConditionalDecoder")):
        with pytest.raises(ConfigError, match=f"declares .* {path}, expected"):
            backend.check_classes(replace(config, **{field: path}), V1.yaml_name)


def test_loading_a_folder_with_a_foreign_yaml_class_is_a_config_error(tmp_path: Path, tiny_base: Path) -> None:
    from cosyvoice_ui.cosyvoice.engine import load_engine

    folder = tmp_path / "renamed"
    folder.mkdir()
    for f in tiny_base.iterdir():
        if f.name != V1.yaml_name:
            (folder / f.name).symlink_to(f)
    text = (tiny_base / V1.yaml_name).read_text(encoding="utf-8")
    (folder / V1.yaml_name).write_text(text.replace("llm.llm.TransformerLM", "llm.llm.Qwen2LM"), encoding="utf-8")
    with pytest.raises(ConfigError, match="does not belong to a CosyVoice-300M folder"):
        load_engine(folder, device="cpu")
