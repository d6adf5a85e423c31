"""The GE2E speaker encoder built on Resemblyzer's weights (skipped without the resemblyzer wheel)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from cosyvoice_ui.offline.engine import OfflineEngine
from cosyvoice_ui.offline.dvector import (
    EMBED_DIM,
    PARTIAL_FRAMES,
    SpeakerEncoder,
    cosine,
    drop_training_only_keys,
)

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("resemblyzer") is None, reason="resemblyzer==0.1.4 is not installed (requirements-offline.txt)"
)


@pytest.fixture(scope="module")
def encoder() -> SpeakerEncoder:
    return SpeakerEncoder.from_resemblyzer()


def voiced(seconds: float, f0: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """A crude vowel-like signal: harmonics of f0 with a slow amplitude wobble and a little noise."""
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(seed)
    wave = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 12))
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)
    return (0.1 * wave * envelope + 0.003 * rng.standard_normal(t.size)).astype(np.float32)


def test_drop_training_only_keys() -> None:
    state = {"similarity_weight": torch.ones(1), "similarity_bias": torch.zeros(1), "linear.bias": torch.zeros(2)}
    assert list(drop_training_only_keys(state)) == ["linear.bias"]


def test_embedding_shape_norm_and_determinism(encoder: SpeakerEncoder) -> None:
    x = voiced(3.0, 120.0)
    a = encoder.embed(x, 16000)
    assert a.shape == (EMBED_DIM,) and a.dtype == np.float32
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-5)
    assert (a >= 0).all()  # ReLU before the norm, as upstream
    np.testing.assert_array_equal(a, encoder.embed(x, 16000))


def test_embedding_is_rate_independent(encoder: SpeakerEncoder) -> None:
    from cosyvoice_ui.offline.dsp import resample

    x = voiced(3.0, 140.0)
    at_24k = resample(x, 16000, 24000)
    assert cosine(encoder.embed(x, 16000), encoder.embed(at_24k, 24000)) > 0.99


def test_partials_cover_the_audio(encoder: SpeakerEncoder) -> None:
    # 3 s at 16 kHz: 1.6 s windows every 0.77 s -> windows starting at 0, 0.77, 1.54 s (the last one
    # covers 1.46 s of audio, enough of its 1.6 s to keep).
    mels = encoder.partial_mels(voiced(3.0, 120.0))
    assert mels.shape == (3, PARTIAL_FRAMES, 40)
    one = encoder.partial_mels(voiced(0.5, 120.0))  # shorter than one window: padded, still one partial
    assert one.shape == (1, PARTIAL_FRAMES, 40)


def test_silence_is_refused(encoder: SpeakerEncoder) -> None:
    with pytest.raises(ValueError, match="too short or silent"):
        encoder.embed(np.zeros(50, np.float32), 16000)


@pytest.mark.slow
def test_same_voice_is_closer_than_another_voice(real_engine: OfflineEngine) -> None:
    matcher = real_engine.matcher()

    def dvec(voice: str, text: str) -> np.ndarray:
        pack = real_engine.space.pack(real_engine.space.stock(voice))
        audio = np.concatenate([real_engine.model.render(ids, pack) for s in real_engine.frontend.prepare(text) for ids in s.ids])
        return matcher.encoder.embed(audio, 24000)

    kumo_a = dvec("jm_kumo", "The sun rose slowly over the quiet hills.")
    kumo_b = dvec("jm_kumo", "Please bring the blue folder to my office.")
    alpha_b = dvec("jf_alpha", "Please bring the blue folder to my office.")
    assert cosine(kumo_a, kumo_b) > cosine(kumo_b, alpha_b) + 0.1
