"""Small signal helpers for the offline backend: resampling, loudness, silence trimming, mel filters.

All functions take and return mono float32 numpy arrays ([N] samples). Resampling and mel filters
reuse the engine's frontend; the rest is small enough to keep here without scipy or librosa.
"""

from __future__ import annotations

import math

import numpy as np

def resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """[N] float32 at `rate_in` → float32 at `rate_out`, with the engine's windowed-sinc resampler."""
    import torch

    from ..cosyvoice.frontend.features import resample as resample_tensor

    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    if rate_in == rate_out or x.size == 0:
        return x.copy()
    return resample_tensor(torch.from_numpy(x), int(rate_in), int(rate_out)).numpy()


def rms_dbfs(samples: np.ndarray) -> float:
    """Loudness of `samples` in dB relative to full scale (-inf for digital silence)."""
    x = np.asarray(samples, dtype=np.float64)
    rms = float(np.sqrt(np.mean(x**2))) if x.size else 0.0
    return 20.0 * math.log10(rms) if rms > 0 else -math.inf


def normalize_rms(samples: np.ndarray, target_dbfs: float, increase_only: bool = False) -> np.ndarray:
    """Scale `samples` so their RMS level is `target_dbfs`.

    With `increase_only`, quiet audio is raised but loud audio is left alone.
    """
    level = rms_dbfs(samples)
    if not math.isfinite(level):
        return np.asarray(samples, dtype=np.float32)
    change = target_dbfs - level
    if increase_only and change < 0:
        return np.asarray(samples, dtype=np.float32)
    return (np.asarray(samples, dtype=np.float32) * (10.0 ** (change / 20.0))).astype(np.float32)


def limit_peak(samples: np.ndarray, ceiling: float = 0.99) -> np.ndarray:
    """Scale `samples` down so no sample exceeds `ceiling` (untouched when they already fit).

    Kokoro's output occasionally peaks above 1.0; a plain gain keeps the waveform's shape where
    clipping would add distortion.
    """
    x = np.asarray(samples, dtype=np.float32)
    peak = float(np.abs(x).max()) if x.size else 0.0
    return x * (ceiling / peak) if peak > ceiling else x


def trim_silence(samples: np.ndarray, sample_rate: int, threshold: float = 0.01, pad_s: float = 0.03) -> np.ndarray:
    """Cut leading and trailing stretches quieter than `threshold`, keeping `pad_s` of margin."""
    x = np.asarray(samples, dtype=np.float32)
    loud = np.flatnonzero(np.abs(x) > threshold)
    if loud.size == 0:
        return x
    pad = int(pad_s * sample_rate)
    return x[max(0, int(loud[0]) - pad) : int(loud[-1]) + pad + 1]


def drop_long_pauses(
    samples: np.ndarray, sample_rate: int, window_s: float = 0.03, max_pause_windows: int = 6, floor_db: float = -40.0
) -> np.ndarray:
    """Remove pauses longer than `max_pause_windows` windows, keeping speech and short gaps.

    An energy gate standing in for a VAD: a window counts as speech when its RMS is within `floor_db`
    of the loudest window. Speech regions are widened by `max_pause_windows` on each side so short
    pauses between words survive, as the d-vector was trained on natural utterances.
    """
    x = np.asarray(samples, dtype=np.float32)
    win = max(1, int(window_s * sample_rate))
    n = x.size // win
    if n < 2:
        return x
    frames = x[: n * win].reshape(n, win)
    level = 10.0 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-12)
    voiced = level > (level.max() + floor_db)
    # Widen voiced regions: a window is kept when any voiced window lies within the margin.
    margin = max_pause_windows // 2
    kernel = np.ones(2 * margin + 1)
    keep = np.convolve(voiced.astype(np.float64), kernel, mode="same") > 0
    if not keep.any():
        return x
    return frames[keep].reshape(-1)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] Slaney mel filters, 0 Hz to Nyquist (librosa's default, which the
    speaker encoder was trained with); the engine's own implementation."""
    from ..cosyvoice.frontend.features import slaney_mel_filters

    return slaney_mel_filters(sample_rate, n_fft, n_mels, 0.0, sample_rate / 2.0)


def power_spectrogram(samples: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """|STFT|^2 with a periodic Hann window, frames centred on multiples of `hop` (zero padded).

    Returns:
        [frames, n_fft // 2 + 1] float32, frames = 1 + N // hop.
    """
    x = np.pad(np.asarray(samples, dtype=np.float32), (n_fft // 2, n_fft // 2))
    n_frames = 1 + (x.size - n_fft) // hop
    window = (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
    idx = np.arange(n_fft)[None, :] + hop * np.arange(n_frames)[:, None]
    spec = np.fft.rfft(x[idx] * window[None, :], axis=1)
    return (spec.real**2 + spec.imag**2).astype(np.float32)
