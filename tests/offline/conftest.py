"""Fixtures of the offline-backend tests: fakes for orchestration, the real engine for the slow checks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from cosyvoice_ui.offline.assets import offline_available

if TYPE_CHECKING:  # the modules below import onnxruntime/torch; keep collection light
    from cosyvoice_ui.offline.assets import KokoroAssets
    from cosyvoice_ui.offline.engine import OfflineEngine
    from cosyvoice_ui.offline.frontend import OfflineFrontend


def require_offline() -> None:
    """Skip the test when the Kokoro packages (weights + G2P) are not installed."""
    ok, reason = offline_available()
    if not ok:
        pytest.skip(reason)


class FakeKokoro:
    """Stands in for `KokoroModel`: audio length follows the phoneme count and speed, pitch follows the style.

    Records every call so tests can check what reached the model.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], float]] = []

    def render(self, ids: list[int] | tuple[int, ...], pack: np.ndarray, speed: float = 1.0) -> np.ndarray:
        self.calls.append((tuple(ids), speed))
        n = int(len(ids) * 1200 / speed)
        freq = 150.0 + 50.0 * float(np.tanh(pack.mean()))
        t = np.arange(n) / 24000.0
        return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.fixture(scope="session")
def kokoro_assets() -> KokoroAssets:
    require_offline()
    from cosyvoice_ui.offline.assets import load_assets

    return load_assets()


@pytest.fixture(scope="session")
def offline_frontend(kokoro_assets: KokoroAssets) -> OfflineFrontend:
    from cosyvoice_ui.offline.frontend import OfflineFrontend

    frontend = OfflineFrontend(kokoro_assets.vocab)
    frontend.phonemizer.warm_up()
    return frontend


@pytest.fixture()
def fake_engine(kokoro_assets: KokoroAssets, offline_frontend: OfflineFrontend, tmp_path: Path) -> OfflineEngine:
    """An `OfflineEngine` with the real text front end and voices but a fake (instant) model."""
    from cosyvoice_ui.offline.engine import OfflineEngine
    from cosyvoice_ui.offline.styles import StyleSpace

    return OfflineEngine(FakeKokoro(), offline_frontend, StyleSpace(kokoro_assets.voices), tmp_path / "voices")


@pytest.fixture(scope="session")
def real_engine(tmp_path_factory: pytest.TempPathFactory) -> OfflineEngine:
    """The real offline engine (Kokoro ONNX), shared by the tests of a session."""
    require_offline()
    from cosyvoice_ui.offline import load_offline_engine

    return load_offline_engine(voices_dir=tmp_path_factory.mktemp("offline_voices"))
