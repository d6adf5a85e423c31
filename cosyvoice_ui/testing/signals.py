"""Synthetic test signals (no audio files in git): a voiced clip with speech-like modulation."""

from __future__ import annotations

import numpy as np

from ..types import Audio


def voice_clip(seconds: float = 4.0, rate: int = 16000, pitch: float = 140.0, seed: int = 0) -> Audio:
    """Harmonics of a wavering f0 under a syllable-rate envelope, plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = pitch * (1 + 0.08 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    samples = 0.2 * voice * envelope + 0.003 * rng.standard_normal(t.size)
    return Audio(samples.astype(np.float32), rate)
