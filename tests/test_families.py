"""Model folder detection: which generation, which variant, and specific errors for bad folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.errors import CheckpointError, ConfigError
from cosyvoice_ui.cosyvoice.families import V1, detect, model_that_can, modes_for
from cosyvoice_ui.types import Mode


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
    with pytest.raises(ConfigError, match="CosyVoice2-0.5B folder"):
        detect(tmp_path)
    (tmp_path / "cosyvoice.yaml").write_text("x: 1")
    with pytest.raises(ConfigError, match="several generations"):
        detect(tmp_path)


def test_model_that_can_names_a_model() -> None:
    assert "Instruct" in model_that_can(Mode.INSTRUCT)
    assert "SFT" in model_that_can(Mode.SFT)
