"""Signal helpers of the offline backend: resampling, mel filters, STFT, loudness, pause removal."""

from __future__ import annotations

import numpy as np
import pytest

from cosyvoice_ui.offline.dsp import (
    drop_long_pauses,
    limit_peak,
    mel_filterbank,
    normalize_rms,
    power_spectrogram,
    resample,
    rms_dbfs,
    trim_silence,
)


@pytest.mark.parametrize("rate_in,rate_out", [(24000, 16000), (44100, 16000), (16000, 24000), (22050, 24000), (48000, 24000)])
def test_resample_keeps_a_tone(rate_in: int, rate_out: int) -> None:
    t = np.arange(rate_in) / rate_in
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    out = resample(tone, rate_in, rate_out)
    assert out.dtype == np.float32
    assert out.shape == (rate_out,)
    expected = np.sin(2 * np.pi * 1000 * np.arange(rate_out) / rate_out)
    edge = rate_out // 20  # the ends see zero padding
    err = np.abs(out - expected)[edge:-edge].max()
    assert err < 1e-3, f"max error {err:.2e}"


def test_resample_removes_content_above_the_new_nyquist() -> None:
    rate_in, rate_out = 24000, 16000
    t = np.arange(rate_in) / rate_in
    # The engine's resampler is torchaudio's default (Hann-windowed sinc, 6 zero crossings, roll-off 0.99),
    # as upstream CosyVoice uses: its transition band ends near 10 kHz here, so test beyond it.
    too_high = np.sin(2 * np.pi * 10000 * t).astype(np.float32)
    out = resample(too_high, rate_in, rate_out)
    assert np.sqrt(np.mean(out[800:-800] ** 2)) < 0.01  # at least 37 dB down from the 0.707 input RMS


def test_resample_identity_and_empty() -> None:
    x = np.arange(5, dtype=np.float32)
    assert np.array_equal(resample(x, 16000, 16000), x)
    assert resample(np.zeros(0, np.float32), 24000, 16000).size == 0


def test_mel_filterbank_matches_librosa() -> None:
    # Reference values: librosa 0.11.0, librosa.filters.mel(sr=16000, n_fft=400, n_mels=40)
    # (slaney scale and norm), the features Resemblyzer's encoder was trained on.
    fb = mel_filterbank(16000, 400, 40)
    assert fb.shape == (40, 201)
    for (i, j), ref in {
        (0, 1): 0.007390209473669529,
        (1, 2): 0.001187948975712061,
        (22, 51): 0.006377954501658678,
        (31, 101): 0.0032422614749521017,
        (36, 155): 0.0008211577660404146,
        (39, 199): 0.00012151539704063907,
        (5, 9): 0.0,
    }.items():
        assert fb[i, j] == pytest.approx(ref, abs=1e-7), (i, j)
    np.testing.assert_allclose(fb.sum(axis=1)[[0, 20, 39]], [0.02480904, 0.02521975, 0.02497876], atol=1e-6)


def test_power_spectrogram_of_a_tone() -> None:
    sr, n_fft, hop = 16000, 400, 160
    x = np.sin(2 * np.pi * 1000 * np.arange(sr) / sr).astype(np.float32)
    spec = power_spectrogram(x, n_fft, hop)
    assert spec.shape == (1 + sr // hop, n_fft // 2 + 1)
    # 1 kHz falls on bin 1000 / (16000 / 400) = 25.
    assert int(np.argmax(spec[50])) == 25


def test_loudness() -> None:
    x = (0.01 * np.sin(np.linspace(0, 200, 16000))).astype(np.float32)
    louder = normalize_rms(x, -20.0)
    assert rms_dbfs(louder) == pytest.approx(-20.0, abs=0.01)
    loud = (0.5 * np.sin(np.linspace(0, 200, 16000))).astype(np.float32)
    assert np.array_equal(normalize_rms(loud, -30.0, increase_only=True), loud)
    assert rms_dbfs(np.zeros(10, np.float32)) == float("-inf")


def test_trim_silence() -> None:
    sr = 1000
    x = np.zeros(3000, np.float32)
    x[1000:2000] = 0.5
    out = trim_silence(x, sr, pad_s=0.01)
    assert out.size == 1000 + 2 * 10
    assert np.array_equal(trim_silence(np.zeros(5, np.float32), sr), np.zeros(5, np.float32))


def test_drop_long_pauses_keeps_speech_and_short_gaps() -> None:
    sr = 16000
    rng = np.random.default_rng(0)
    speech = (0.3 * rng.standard_normal(sr)).astype(np.float32)
    short_gap = np.zeros(int(0.06 * sr), np.float32)
    long_gap = np.zeros(2 * sr, np.float32)
    x = np.concatenate([speech, short_gap, speech, long_gap, speech])
    out = drop_long_pauses(x, sr)
    # Most of the 2 s pause goes, all three bursts and the short gap stay.
    assert 3 * sr + short_gap.size <= out.size < x.size - sr


def test_limit_peak() -> None:
    x = np.array([0.5, -1.3, 0.2], np.float32)
    out = limit_peak(x)
    assert np.abs(out).max() == pytest.approx(0.99)
    np.testing.assert_allclose(out / out[0], x / x[0], rtol=1e-6)  # shape kept, only gain changes
    quiet = np.array([0.1, -0.2], np.float32)
    assert np.array_equal(limit_peak(quiet), quiet)
