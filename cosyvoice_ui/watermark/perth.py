"""`PerthMark`: the PerTh implicit watermark put into a signal at any rate, and its score read back.

Embedding works at the network's 32 kHz: the signal is resampled there (polyphase), analysed, the encoder's
residual raises or lowers the levels under 2 kHz in the frames that carry sound, and only the change that makes
(the marked spectrum minus the original, turned back into a signal) is resampled to the signal's own rate and
added to it. At 32 kHz this is the original algorithm's output (it resynthesises the whole spectrum); at other
rates it spares the signal a round trip through two resamplers, while the mark is the same change.

A score is the decoder's answer on the signal at 32 kHz, clipped to 0-1: the mark is there at 0.5 or more.
Signals up to `WINDOW_SECONDS` are scored whole (exactly the original's answer); a longer one in equal windows
of at most that length, averaged by how many frames of each carry sound (bounded memory for an hour of audio).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from . import spectral
from .network import PerthNetwork
from .weights import load_tensors, locate

WINDOW_SECONDS = 20.0
MIN_SCORE_SECONDS = 0.5  # shorter signals hold too few frames for the decoder's three speeds
THRESHOLD = 0.5


def to_rate(samples: np.ndarray, rate: int, new_rate: int) -> np.ndarray:
    """Mono float32 resampled by an exact polyphase ratio (e.g. 24 kHz → 32 kHz is 4/3)."""
    x = np.asarray(samples, dtype=np.float32)
    if rate == new_rate or x.size == 0:
        return np.ascontiguousarray(x)
    from scipy.signal import resample_poly

    common = math.gcd(int(rate), int(new_rate))
    return np.ascontiguousarray(resample_poly(x, new_rate // common, rate // common), dtype=np.float32)


@dataclass(frozen=True)
class Score:
    """The decoder's score (0-1), the seconds it read and how many frames of them carried sound."""

    value: float
    seconds: float
    voiced_frames: int

    @property
    def marked(self) -> bool:
        return self.value >= THRESHOLD


class PerthMark:
    """The pretrained PerTh networks with our front end; thread-safe (inference only)."""

    def __init__(self, network: PerthNetwork) -> None:
        self.network = network

    @classmethod
    def load(cls) -> PerthMark:
        """From the pinned package's weights; `CheckpointError` (with the fix) when they are missing or wrong."""
        from ..errors import CheckpointError

        located, why = locate()
        if located is None:
            raise CheckpointError(why)
        return cls(PerthNetwork.from_state(load_tensors(located)))

    # --- embedding -----------------------------------------------------------------------------------------

    def embed(self, samples: np.ndarray, rate: int) -> np.ndarray:
        """`samples` (mono float, any length) with the mark added, same length and rate."""
        x = np.asarray(samples, dtype=np.float32)
        if x.size == 0 or not np.all(np.isfinite(x)):
            return x
        at_32k = to_rate(x, rate, spectral.RATE)
        length = at_32k.size
        if length < spectral.MIN_SAMPLES:  # a very short chunk: its mirror needs more than half a window
            at_32k = np.pad(at_32k, (0, spectral.MIN_SAMPLES - length))
        with torch.inference_mode():
            change = self.change(torch.from_numpy(at_32k)).numpy()[:length]
        if not np.any(change):
            return x
        back = to_rate(change, spectral.RATE, rate)
        if back.size < x.size:
            back = np.pad(back, (0, x.size - back.size))
        return (x + back[:x.size]).astype(np.float32)

    def change(self, signal: torch.Tensor) -> torch.Tensor:
        """What the mark adds to a 32 kHz signal (same length)."""
        window = self.network.window
        analysis = spectral.analyse(signal, window, keep_spectrum=True)
        mask = spectral.voiced(analysis.frame_sums)
        residual = self.network.encoder.residual(analysis.levels) * mask[None]
        gain = spectral.to_amplitude(analysis.levels + residual) - spectral.to_amplitude(analysis.levels)
        return spectral.synthesise(gain * spectral.unit_phases(analysis.spectrum), analysis.samples, window)

    # --- detection -----------------------------------------------------------------------------------------

    def score(self, samples: np.ndarray, rate: int) -> Score:
        """The mark's score of a recording; `ValueError` when it is too short or silent to be read. Each window is
        resampled to 32 kHz on its own, so memory holds the recording and one window."""
        x = np.asarray(samples, dtype=np.float32)
        seconds = x.size / rate
        if seconds < MIN_SCORE_SECONDS:
            raise ValueError("too_short")
        pieces = max(1, math.ceil(seconds / WINDOW_SECONDS))
        bounds = np.linspace(0, x.size, pieces + 1).astype(int)
        total, weight = 0.0, 0
        with torch.inference_mode():
            for start, end in zip(bounds[:-1], bounds[1:]):
                window = to_rate(np.nan_to_num(x[start:end]), rate, spectral.RATE)
                value, voiced = self._score_window(torch.from_numpy(window))
                if voiced:
                    total += value * voiced
                    weight += voiced
        if not weight:
            raise ValueError("silent")
        return Score(float(min(1.0, max(0.0, total / weight))), seconds, weight)

    def _score_window(self, signal: torch.Tensor) -> tuple[float, int]:
        """(the clipped score, voiced frames) of one window; (0, 0) when it holds no sound."""
        if signal.shape[0] < spectral.MIN_SAMPLES:
            signal = torch.nn.functional.pad(signal, (0, spectral.MIN_SAMPLES - signal.shape[0]))
        analysis = spectral.analyse(signal, self.network.window)
        mask = spectral.voiced(analysis.frame_sums)
        voiced = int(mask.sum())
        if not voiced:
            return 0.0, 0
        value = float(self.network.decoder.score(analysis.levels, mask).clamp(0.0, 1.0))
        return (value, voiced) if math.isfinite(value) else (0.0, 0)
