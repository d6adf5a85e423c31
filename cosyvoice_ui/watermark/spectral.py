"""The watermark's front end at 32 kHz: a signal's short-time spectrum as levels the network reads, and a change
of those levels back to a signal.

The facts are PerTh's (its hparams.yaml and audio processing): a 2048-point periodic Hann window every 320
samples, frames centred on their hop (the signal mirrored by half a window at each end), magnitudes in dB above
a floor of 1e-9 (-180 dB), scaled so that the floor is 0 and 15 dB over full scale is 1. The network only
touches the bins under 2 kHz (the first 128 of 1025), so analysis keeps those (and each frame's level sum, for
the mask of frames that carry sound) and synthesis turns a change of those bins into a signal by overlap-add.
Both run a block of frames at a time: memory grows with the 128 kept bins, not with the whole spectrum.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

RATE = 32000
N_FFT = 2048
HOP = 320
HALF = N_FFT // 2
BINS = N_FFT // 2 + 1
MAX_MARK_HZ = 2000
SUBBAND = int(round(BINS * MAX_MARK_HZ / (RATE / 2)))  # 128 bins: 0-2 kHz
FLOOR = 1e-9
FLOOR_DB = -180.0  # 20·log10(FLOOR)
SPAN_DB = -FLOOR_DB + 15.0  # the floor maps to 0, 15 dB over full scale to 1
VOICED_SHARE = 0.05  # a frame carries sound when its level sum is over this share of the loudest frame's
BLOCK_FRAMES = 256  # frames transformed at once (about 2.6 s)
MIN_SAMPLES = N_FFT  # shorter signals are padded with silence to this (the mirror needs more than half a window)


@lru_cache(maxsize=1)
def hann() -> torch.Tensor:
    """The periodic Hann window, computed in float64 and rounded once: what the checkpoint's stored window is
    checked against (`network.py`; the transforms use the stored one, the exact window the network was trained
    with). Not `torch.hann_window`: on this project's CPU machine its float32 window came out 7.6e-5 off at one
    sample in about one process in eight."""
    n = np.arange(N_FFT, dtype=np.float64)
    return torch.from_numpy((0.5 - 0.5 * np.cos(2.0 * np.pi * n / N_FFT)).astype(np.float32))


def frame_count(samples: int) -> int:
    """Frames of a centred STFT of `samples` samples."""
    return 1 + samples // HOP


def to_level(amplitude: torch.Tensor) -> torch.Tensor:
    """Magnitudes → the network's normalised dB levels."""
    return (20.0 * torch.log10(amplitude.clamp(min=FLOOR)) - FLOOR_DB) / SPAN_DB


def to_amplitude(level: torch.Tensor) -> torch.Tensor:
    """The inverse of `to_level` (capped at 10^10, as the original is)."""
    return torch.pow(10.0, ((level * SPAN_DB + FLOOR_DB) / 20.0).clamp(max=10.0))


def voiced(frame_sums: torch.Tensor) -> torch.Tensor:
    """1.0 for the frames whose level sum is over `VOICED_SHARE` of the largest, else 0.0 (float, [T])."""
    if frame_sums.numel() == 0:
        return frame_sums
    return (frame_sums > frame_sums.max() * VOICED_SHARE).to(torch.float32)


@dataclass
class Analysis:
    """What the network needs of a signal: the low bins' levels [SUBBAND, T], each frame's level sum over all
    bins [T] and, for embedding, the low bins' complex values (their phases) [SUBBAND, T]."""

    levels: torch.Tensor
    frame_sums: torch.Tensor
    spectrum: torch.Tensor | None
    samples: int

    @property
    def frames(self) -> int:
        return self.levels.shape[1]


def analyse(signal: torch.Tensor, window: torch.Tensor, keep_spectrum: bool = False) -> Analysis:
    """The centred STFT of a 1-D float32 signal at 32 kHz (at least `MIN_SAMPLES` long) with `window` (the
    network's Hann window), block by block."""
    samples = signal.shape[0]
    if samples < MIN_SAMPLES:
        raise ValueError(f"at least {MIN_SAMPLES} samples are needed, not {samples}")
    padded = F.pad(signal[None, None], (HALF, HALF), mode="reflect")[0, 0]
    frames = frame_count(samples)
    levels = torch.empty(SUBBAND, frames, dtype=torch.float32)
    sums = torch.empty(frames, dtype=torch.float32)
    spectrum = torch.empty(SUBBAND, frames, dtype=torch.complex64) if keep_spectrum else None
    for start in range(0, frames, BLOCK_FRAMES):
        end = min(frames, start + BLOCK_FRAMES)
        piece = padded[start * HOP:(end - 1) * HOP + N_FFT]
        complex_ = torch.stft(piece, N_FFT, HOP, N_FFT, window, center=False, return_complex=True)
        level = to_level(complex_.abs())
        sums[start:end] = level.sum(dim=0)
        levels[:, start:end] = level[:SUBBAND]
        if spectrum is not None:
            spectrum[:, start:end] = complex_[:SUBBAND]
    return Analysis(levels, sums, spectrum, samples)


def unit_phases(spectrum: torch.Tensor) -> torch.Tensor:
    """e^(i·angle) of each value (1 where the value is 0: its angle is 0)."""
    return torch.polar(torch.ones(spectrum.shape, dtype=torch.float32), torch.angle(spectrum))


def synthesise(low_bins: torch.Tensor, samples: int, window: torch.Tensor) -> torch.Tensor:
    """The signal (`samples` long) whose centred STFT's low bins are `low_bins` [SUBBAND, T] and whose other bins
    are zero: the inverse STFT by least-squares overlap-add (each frame's inverse FFT windowed, summed, divided by
    the summed squared window), block by block."""
    frames = low_bins.shape[1]
    total = (frames - 1) * HOP + N_FFT
    out = torch.zeros(total, dtype=torch.float32)
    envelope = torch.zeros(total, dtype=torch.float32)
    squared = (window ** 2)[:, None]
    full = torch.zeros(BINS, min(frames, BLOCK_FRAMES), dtype=torch.complex64)
    for start in range(0, frames, BLOCK_FRAMES):
        end = min(frames, start + BLOCK_FRAMES)
        count = end - start
        full[:SUBBAND, :count] = low_bins[:, start:end]
        pieces = torch.fft.irfft(full[:, :count], n=N_FFT, dim=0) * window[:, None]
        span = slice(start * HOP, (end - 1) * HOP + N_FFT)
        out[span] += _overlap_add(pieces)
        envelope[span] += _overlap_add(squared.expand(N_FFT, count))
    kept = slice(HALF, HALF + samples)
    return out[kept] / envelope[kept]


def _overlap_add(pieces: torch.Tensor) -> torch.Tensor:
    """[N_FFT, count] frames → one signal, frame k starting at k·HOP."""
    count = pieces.shape[1]
    length = (count - 1) * HOP + N_FFT
    folded = F.fold(pieces[None].contiguous(), output_size=(1, length), kernel_size=(1, N_FFT), stride=(1, HOP))
    return folded.reshape(length)
