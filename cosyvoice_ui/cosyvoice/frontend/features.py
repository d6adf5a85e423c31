"""Audio features for the v1 frontend, in torch + numpy only (no torchaudio, librosa or whisper at run time).

Four feature kinds feed four consumers:

* `matcha_mel`       [B, 80, N//hop]  natural-log magnitude mel, the flow's prompt features (model rate);
* `whisper_log_mel`  [B, 128, N//160] whisper's clamped log10 power mel, the S3 speech tokenizer input (16 kHz);
* `kaldi_fbank`      [F, 80]          Kaldi log-power fbank, F = 1 + (N-400)//160 (16 kHz);
  `campplus_features` [1, F, 80]      the same minus its per-bin mean, the CAM++ speaker-model input;
* `resample`         [..., N']        torchaudio's default windowed-sinc `Resample`, N' = ceil(N*new/orig).

Filterbanks, windows and resampling kernels are small and deterministic, so they are cached per
(parameters, device, dtype) in bounded `lru_cache`s; cached tensors are never modified in place.
Unlike Matcha's own cache (keyed by fmax and device only), every parameter is part of the key, so two
configurations in one process never share a basis.

Not here: audio file loading and validation (`audio.py`), ONNX models (`onnx_models.py`).
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from ..config import MelConfig

log = logging.getLogger(__name__)

# whisper's fixed STFT framing at 16 kHz
WHISPER_N_FFT = 400
WHISPER_HOP = 160

# Kaldi / torchaudio.compliance.kaldi.fbank defaults used by CosyVoice for CAM++
_KALDI_FRAME_MS = 25.0
_KALDI_SHIFT_MS = 10.0
_KALDI_PREEMPH = 0.97
_KALDI_LOW_FREQ = 20.0
_KALDI_POVEY_POWER = 0.85
_FLOAT32_EPS = torch.finfo(torch.float32).eps

# torchaudio `Resample` defaults
_RESAMPLE_ZEROS = 6  # lowpass_filter_width
_RESAMPLE_ROLLOFF = 0.99


# --------------------------------------------------------------------------------------------- mel bases


def _hz_to_mel_slaney(hz: np.ndarray) -> np.ndarray:
    """Slaney's auditory scale: linear below 1 kHz (3 mel per 200 Hz), logarithmic above."""
    hz = np.asarray(hz, dtype=np.float64)
    f_sp = 200.0 / 3.0
    min_log_hz = 1000.0
    logstep = np.log(6.4) / 27.0
    linear = hz / f_sp
    logpart = min_log_hz / f_sp + np.log(np.maximum(hz, min_log_hz) / min_log_hz) / logstep
    return np.where(hz >= min_log_hz, logpart, linear)


def _mel_to_hz_slaney(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    f_sp = 200.0 / 3.0
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    linear = f_sp * mel
    logpart = min_log_hz * np.exp(logstep * (mel - min_log_mel))
    return np.where(mel >= min_log_mel, logpart, linear)


def slaney_mel_filters(sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """Triangular mel filters on the Slaney scale with Slaney area normalisation, float32 [n_mels, n_fft//2+1].

    Same definition as `librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax)`
    (htk=False, norm="slaney"), including its rounding: the triangles are stored as float32 before the
    float64 area factor is applied. `fmax=None` means sr/2.
    """
    if fmax is None:
        fmax = sr / 2.0
    fft_hz = np.fft.rfftfreq(n_fft, d=1.0 / sr)
    # n_mels + 2 band edges equally spaced in mel; filter i spans edges i .. i+2
    edges_hz = _mel_to_hz_slaney(np.linspace(_hz_to_mel_slaney(fmin), _hz_to_mel_slaney(fmax), n_mels + 2))
    widths = np.diff(edges_hz)
    offsets = edges_hz[:, None] - fft_hz[None, :]  # [n_mels+2, n_freq]
    rising = -offsets[:-2] / widths[:-1, None]
    falling = offsets[2:] / widths[1:, None]
    triangles = np.maximum(0.0, np.minimum(rising, falling)).astype(np.float32)
    # Area normalisation: each triangle integrates to a constant (2 / bandwidth in Hz).
    area = 2.0 / (edges_hz[2:] - edges_hz[:-2])
    return (triangles.astype(np.float64) * area[:, None]).astype(np.float32)


@lru_cache(maxsize=32)
def _slaney_basis(
    sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    return torch.from_numpy(slaney_mel_filters(sr, n_fft, n_mels, fmin, fmax)).to(device=device, dtype=dtype)


@lru_cache(maxsize=32)
def _hann(size: int, periodic: bool, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.hann_window(size, periodic=periodic, device=device, dtype=dtype)


def _float_wave(wave: torch.Tensor, name: str) -> torch.Tensor:
    if not torch.is_floating_point(wave):
        raise TypeError(f"{name} must be a floating-point tensor in [-1, 1], got dtype {wave.dtype}")
    return wave


# --------------------------------------------------------------------------------------------- Matcha mel


def matcha_mel(wave: torch.Tensor, cfg: MelConfig) -> torch.Tensor:
    """Matcha-TTS `mel_spectrogram`: the flow's prompt features at the model's sample rate.

    Args:
        wave: [B, N] (or [N]) float waveform at `cfg.sampling_rate`.
        cfg: framing and filterbank parameters from the model yaml.
    Returns:
        [B, num_mels, frames] natural-log magnitude mel; frames = N // hop when `cfg.center` is False.
    """
    wave = _float_wave(wave, "wave")
    if wave.dim() == 1:
        wave = wave.unsqueeze(0)
    pad = (cfg.n_fft - cfg.hop_size) // 2
    if wave.shape[-1] <= pad:
        raise ValueError(f"wave has {wave.shape[-1]} samples; the mel needs more than {pad}")
    # Matcha pads by (n_fft - hop) / 2 itself so that frames = N // hop with center=False.
    padded = F.pad(wave.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    window = _hann(cfg.win_size, True, wave.device, wave.dtype)
    spec = torch.stft(
        padded,
        cfg.n_fft,
        hop_length=cfg.hop_size,
        win_length=cfg.win_size,
        window=window,
        center=cfg.center,
        pad_mode="reflect",
        normalized=False,
        onesided=True,
        return_complex=True,
    )
    spec = torch.view_as_real(spec)
    magnitude = torch.sqrt(spec.pow(2).sum(-1) + 1e-9)
    basis = _slaney_basis(
        cfg.sampling_rate, cfg.n_fft, cfg.num_mels, float(cfg.fmin), cfg.fmax, wave.device, wave.dtype
    )
    return torch.log(torch.clamp(basis @ magnitude, min=1e-5))


# --------------------------------------------------------------------------------------------- whisper log-mel


def whisper_log_mel(wave_16k: torch.Tensor, n_mels: int = 128) -> torch.Tensor:
    """whisper's `log_mel_spectrogram` (padding 0): the S3 speech tokenizer's input.

    Args:
        wave_16k: [B, N] (or [N]) float waveform at 16 kHz.
        n_mels: 128 for every CosyVoice speech tokenizer (80 was whisper v1-v2's size).
    Returns:
        [B, n_mels, N // 160]: log10 power mel, floored at (max - 8) and mapped by (x + 4) / 4.
        The max is taken per batch item (whisper takes it over the whole tensor; identical for B = 1).
    """
    wave_16k = _float_wave(wave_16k, "wave_16k")
    if wave_16k.dim() == 1:
        wave_16k = wave_16k.unsqueeze(0)
    window = _hann(WHISPER_N_FFT, True, wave_16k.device, wave_16k.dtype)
    stft = torch.stft(wave_16k, WHISPER_N_FFT, WHISPER_HOP, window=window, center=True, return_complex=True)
    # The centred STFT yields N//160 + 1 frames; whisper drops the last one.
    power = stft[..., :-1].abs() ** 2
    basis = _slaney_basis(16000, WHISPER_N_FFT, n_mels, 0.0, None, wave_16k.device, wave_16k.dtype)
    log_spec = torch.clamp(basis @ power, min=1e-10).log10()
    floor = log_spec.amax(dim=(-2, -1), keepdim=True) - 8.0
    return (torch.maximum(log_spec, floor) + 4.0) / 4.0


# --------------------------------------------------------------------------------------------- Kaldi fbank


@lru_cache(maxsize=16)
def _kaldi_mel_banks(
    num_bins: int, n_fft: int, sample_frequency: float, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """Kaldi's triangular mel bins on mel(f) = 1127 ln(1 + f/700), low 20 Hz, high = Nyquist.

    Returns [num_bins, n_fft//2 + 1]; the last (Nyquist) column is zero, as in Kaldi. Built in float32 like
    torchaudio, then cast. No area normalisation.
    """

    def mel(hz: torch.Tensor | float) -> torch.Tensor | float:
        if isinstance(hz, torch.Tensor):
            return 1127.0 * (1.0 + hz / 700.0).log()
        return 1127.0 * math.log(1.0 + hz / 700.0)

    mel_low = mel(_KALDI_LOW_FREQ)
    mel_high = mel(0.5 * sample_frequency)
    # num_bins + 1 intervals: bin i rises from edge i to edge i+1 and falls to edge i+2.
    delta = (mel_high - mel_low) / (num_bins + 1)
    index = torch.arange(num_bins).unsqueeze(1)
    left = mel_low + index * delta
    center = mel_low + (index + 1.0) * delta
    right = mel_low + (index + 2.0) * delta
    bin_mel = mel((sample_frequency / n_fft) * torch.arange(n_fft // 2)).unsqueeze(0)
    rising = (bin_mel - left) / (center - left)
    falling = (right - bin_mel) / (right - center)
    banks = torch.clamp(torch.minimum(rising, falling), min=0.0)
    return F.pad(banks, (0, 1)).to(device=device, dtype=dtype)


def kaldi_fbank(wave_16k: torch.Tensor, num_mel_bins: int = 80, sample_frequency: float = 16000.0) -> torch.Tensor:
    """`torchaudio.compliance.kaldi.fbank(wave, num_mel_bins=..., dither=0, sample_frequency=...)`, vectorised.

    Per 25 ms frame (10 ms shift, frames that fit entirely only): subtract the frame mean, pre-emphasise
    (x[n] - 0.97 x[n-1], the first sample against itself), multiply by the Povey window, zero-pad to the
    next power of two, power spectrum, Kaldi mel bins, natural log floored at float32 eps.

    Args:
        wave_16k: [N] or [C, N] (channel 0 is used, as torchaudio does) float waveform.
    Returns:
        [frames, num_mel_bins], frames = 1 + (N - 400) // 160 at 16 kHz.
    """
    wave_16k = _float_wave(wave_16k, "wave_16k")
    samples = wave_16k if wave_16k.dim() == 1 else wave_16k[0]
    frame_len = int(sample_frequency * _KALDI_FRAME_MS * 0.001)
    shift = int(sample_frequency * _KALDI_SHIFT_MS * 0.001)
    n_fft = 1 << (frame_len - 1).bit_length()
    if samples.shape[0] < frame_len:
        raise ValueError(f"wave has {samples.shape[0]} samples; an fbank frame needs {frame_len}")
    frames = samples.unfold(0, frame_len, shift)  # [F, frame_len] view
    frames = frames - frames.mean(dim=1, keepdim=True)
    previous = torch.cat([frames[:, :1], frames[:, :-1]], dim=1)
    frames = frames - _KALDI_PREEMPH * previous
    povey = _hann(frame_len, False, samples.device, samples.dtype).pow(_KALDI_POVEY_POWER)
    frames = F.pad(frames * povey, (0, n_fft - frame_len))
    power = torch.fft.rfft(frames).abs().pow(2.0)
    banks = _kaldi_mel_banks(num_mel_bins, n_fft, float(sample_frequency), samples.device, samples.dtype)
    energies = power @ banks.T
    return torch.clamp(energies, min=_FLOAT32_EPS).log()


def campplus_features(wave_16k: torch.Tensor) -> torch.Tensor:
    """CAM++ input: 80-bin Kaldi fbank minus its mean over frames (no variance norm). [N] -> [1, frames, 80]."""
    fbank = kaldi_fbank(wave_16k, num_mel_bins=80, sample_frequency=16000.0)
    return (fbank - fbank.mean(dim=0, keepdim=True)).unsqueeze(0)


# --------------------------------------------------------------------------------------------- resampling


@lru_cache(maxsize=16)
def _sinc_kernel(orig: int, new: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, int]:
    """Polyphase Hann-windowed sinc kernels [new, 1, 2*width + orig] for gcd-reduced rates, and `width`.

    Row j holds the weights of output phase j: k(t) = sinc(pi t) * cos(pi t / 12)^2 * base / orig with
    t = base * (i/orig - j/new) clamped to +-6 zero crossings, base = 0.99 * min(orig, new).
    """
    base = min(orig, new) * _RESAMPLE_ROLLOFF
    width = math.ceil(_RESAMPLE_ZEROS * orig / base)
    taps = torch.arange(-width, width + orig, dtype=torch.float64) / orig
    # torchaudio computes the phase offsets j/new in float32 before the float64 sum; keep that rounding.
    phases = (torch.arange(0, -new, -1) / new).to(torch.float64)
    t = (phases[:, None, None] + taps[None, None, :]) * base
    t = t.clamp(-_RESAMPLE_ZEROS, _RESAMPLE_ZEROS)
    window = torch.cos(t * math.pi / _RESAMPLE_ZEROS / 2) ** 2
    t = t * math.pi
    sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t)
    kernel = (sinc * window * (base / orig)).to(torch.float32)
    return kernel.to(device=device, dtype=dtype), width


def resample(wave: torch.Tensor, orig_sr: int, new_sr: int) -> torch.Tensor:
    """torchaudio's default `Resample(orig_sr, new_sr)`: Hann-windowed sinc, 6 zero crossings, rolloff 0.99.

    Args:
        wave: [..., N] float waveform at `orig_sr`.
    Returns:
        [..., ceil(N * new_sr / orig_sr)] at `new_sr` (the input itself when the rates are equal).
    """
    wave = _float_wave(wave, "wave")
    if int(orig_sr) != orig_sr or int(new_sr) != new_sr or orig_sr <= 0 or new_sr <= 0:
        raise ValueError(f"sample rates must be positive integers, got {orig_sr} -> {new_sr}")
    if orig_sr == new_sr:
        return wave
    g = math.gcd(int(orig_sr), int(new_sr))
    orig, new = int(orig_sr) // g, int(new_sr) // g
    kernel, width = _sinc_kernel(orig, new, wave.device, wave.dtype)
    shape = wave.shape
    flat = wave.reshape(-1, shape[-1])
    length = shape[-1]
    # Zero padding: `width` samples of history on the left, one extra input period on the right.
    padded = F.pad(flat, (width, width + orig))
    out = F.conv1d(padded.unsqueeze(1), kernel, stride=orig)  # [B, new, periods]
    out = out.transpose(1, 2).reshape(flat.shape[0], -1)
    target = -(-new * length // orig)  # ceil(N * new / orig)
    return out[:, :target].reshape(*shape[:-1], -1)
