"""Small signal helpers for the offline backend: resampling, loudness, silence trimming, mel filters.

All functions take and return mono float32 numpy arrays ([N] samples). They exist so the offline
backend needs neither scipy nor librosa (each pulls in a large native stack for one function).
"""

from __future__ import annotations

import math

import numpy as np

# Kaiser window shape of the resampling filter; 8.6 keeps the stop-band below about -80 dB.
_KAISER_BETA = 8.6
# Taps on each side of the interpolation point (in input samples at the lower of the two rates).
_HALF_TAPS = 16
_ROLLOFF = 0.94


def resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Band-limited resampling by windowed-sinc interpolation.

    Args:
        samples: [N] mono audio at `rate_in`.
    Returns:
        [round(N * rate_out / rate_in)] float32 audio at `rate_out`.
    """
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    if rate_in == rate_out or x.size == 0:
        return x.copy()
    g = math.gcd(int(rate_in), int(rate_out))
    up, down = int(rate_out) // g, int(rate_in) // g
    n_out = int(round(x.size * up / down))
    # Cut-off a little below the lower Nyquist frequency (in input-sample units) so the transition
    # band ends before aliasing starts.
    cutoff = _ROLLOFF * min(1.0, up / down)
    half = int(math.ceil(_HALF_TAPS / cutoff))
    # Output sample n sits at input position n * down / up; only `up` distinct fractional phases exist,
    # so the filter is built once per phase (polyphase) instead of once per output sample.
    offsets = np.arange(-half + 1, half + 1)
    frac = np.arange(up) / up  # fractional input position of phase p = (n * down) % up
    t = offsets[None, :] - frac[:, None]  # [up, taps] distance from the interpolation point
    # The Kaiser window evaluated at the (fractional) tap distances, not at integer points.
    w = np.i0(_KAISER_BETA * np.sqrt(np.clip(1.0 - (t / (half + 1)) ** 2, 0.0, 1.0))) / np.i0(_KAISER_BETA)
    kernel = (cutoff * np.sinc(cutoff * t) * w).astype(np.float32)  # [up, taps]
    padded = np.pad(x, (half, half + 1))
    out = np.empty(n_out, dtype=np.float32)
    positions = np.arange(n_out, dtype=np.int64) * down
    base = positions // up  # integer input index of each output sample
    phase = positions % up
    # Process in blocks to keep the gathered [block, taps] matrix small.
    block = 65536
    cols = offsets + half
    for start in range(0, n_out, block):
        sl = slice(start, min(n_out, start + block))
        idx = base[sl, None] + cols[None, :]
        out[sl] = np.einsum("ij,ij->i", padded[idx], kernel[phase[sl]])
    return out


def rms_dbfs(samples: np.ndarray) -> float:
    """Loudness of `samples` in dB relative to full scale (-inf for digital silence)."""
    x = np.asarray(samples, dtype=np.float64)
    rms = float(np.sqrt(np.mean(x**2))) if x.size else 0.0
    return 20.0 * math.log10(rms) if rms > 0 else -math.inf


def normalize_loudness(samples: np.ndarray, target_dbfs: float, increase_only: bool = False) -> np.ndarray:
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


def hz_to_mel_slaney(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (the `htk=False` convention)."""
    hz = np.asarray(hz, dtype=np.float64)
    f_sp = 200.0 / 3.0
    mel = hz / f_sp
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = math.log(6.4) / 27.0
    return np.where(hz >= min_log_hz, min_log_mel + np.log(np.maximum(hz, 1e-10) / min_log_hz) / logstep, mel)


def mel_to_hz_slaney(mel: np.ndarray) -> np.ndarray:
    """Inverse of `hz_to_mel_slaney`."""
    mel = np.asarray(mel, dtype=np.float64)
    f_sp = 200.0 / 3.0
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = math.log(6.4) / 27.0
    return np.where(mel >= min_log_mel, min_log_hz * np.exp(logstep * (mel - min_log_mel)), f_sp * mel)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """Triangular mel filters with Slaney area normalisation, 0 Hz to Nyquist.

    Returns:
        [n_mels, n_fft // 2 + 1] float32 weights.
    """
    fft_hz = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    edges_hz = mel_to_hz_slaney(np.linspace(hz_to_mel_slaney(0.0), hz_to_mel_slaney(sample_rate / 2.0), n_mels + 2))
    widths = np.diff(edges_hz)
    ramps = edges_hz[:, None] - fft_hz[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    # Each triangle gets unit area so bands of different widths carry comparable energy.
    weights *= (2.0 / (edges_hz[2:] - edges_hz[:-2]))[:, None]
    return weights.astype(np.float32)


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
