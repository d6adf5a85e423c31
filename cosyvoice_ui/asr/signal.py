"""The one conversion both recognisers need: a mono float recording at any rate → 16 kHz float32."""

from __future__ import annotations

from math import gcd

import numpy as np

ASR_RATE = 16000  # Whisper's feature extractor and pocketsphinx's bundled en-us model both expect 16 kHz


def to_asr_rate(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """`samples` (mono float) resampled to 16 kHz with a polyphase filter (exact ratio, e.g. 24k → 16k is 2/3,
    22.05k → 16k is 320/441), so the length is `len * 16000 / rate` rounded up and pitch is kept."""
    x = np.asarray(samples, dtype=np.float32)
    if sample_rate == ASR_RATE or x.size == 0:
        return np.ascontiguousarray(x)
    from scipy.signal import resample_poly

    common = gcd(int(sample_rate), ASR_RATE)
    y = resample_poly(x, ASR_RATE // common, int(sample_rate) // common)
    return np.ascontiguousarray(y, dtype=np.float32)
