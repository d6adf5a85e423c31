"""Audio features against the upstream goldens (each tiny fixture's frontend_goldens.safetensors: v1 at 22.05 kHz,
v2/v3 at 24 kHz with each yaml's feat_extractor settings, v2 fmax 8000, v3 fmax None = 12 kHz): the mel basis, the
prompt mel, whisper's 128-bin log-mel and the CAM++ fbank, one parametrised test per feature for the three
generations; and an independent resampler."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from cosyvoice_ui.cosyvoice.config import MelConfig, parse_v1, parse_v2, parse_v3, read_yaml
from cosyvoice_ui.cosyvoice.frontend import features as fx
from cosyvoice_ui.cosyvoice.frontend.prompt import PromptEncoder
from cosyvoice_ui.types import Audio

from ..conftest import fixture_dir

V1_MEL = MelConfig(n_fft=1024, num_mels=80, sampling_rate=22050, hop_size=256, win_size=1024, fmin=0.0, fmax=8000.0)
V2_MEL = MelConfig(n_fft=1920, num_mels=80, sampling_rate=24000, hop_size=480, win_size=1920, fmin=0.0, fmax=8000.0)
# family → (golden folder, yaml, parser, the goldens' wave at the model's rate)
FAMILIES = {"v1": ("cosyvoice1-tiny", "cosyvoice.yaml", parse_v1, "wave_22050"),
            "v2": ("cosyvoice2-tiny", "cosyvoice2.yaml", parse_v2, "wave_24k"),
            "v3": ("cosyvoice3-tiny", "cosyvoice3.yaml", parse_v3, "wave_24k")}
# (n_fft, hop, window, rate, bins, fmax) each yaml gives
MEL_SETTINGS = {"v1": (1024, 256, 1024, 22050, 80, 8000.0), "v2": (1920, 480, 1920, 24000, 80, 8000.0),
                "v3": (1920, 480, 1920, 24000, 80, None)}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def case(request: pytest.FixtureRequest) -> tuple[str, MelConfig, dict[str, torch.Tensor]]:
    """(family, its yaml's mel settings, its goldens)."""
    family = request.param
    name, yaml_name, parse, _ = FAMILIES[family]
    folder = fixture_dir(name)
    mel = parse(read_yaml(folder / yaml_name), yaml_name).mel
    return family, mel, load_file(str(folder / "frontend_goldens.safetensors"))


@pytest.fixture(scope="module")
def golden(v1_fixture: Path) -> dict[str, torch.Tensor]:
    return load_file(str(v1_fixture / "frontend_goldens.safetensors"))


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    diff = (actual.double() - expected.double()).abs()
    assert diff.max().item() <= atol, f"{what}: max abs diff {diff.max().item():.3g} (mean {diff.mean().item():.3g})"


# ------------------------------------------------------------------------------------------ goldens, every family


def test_the_yaml_mel_settings(case) -> None:
    family, mel, _ = case
    settings = (mel.n_fft, mel.hop_size, mel.win_size, mel.sampling_rate, mel.num_mels, mel.fmax)
    assert settings == MEL_SETTINGS[family]


def test_slaney_mel_basis_matches_librosa(case) -> None:
    family, mel, golden = case
    basis = fx.slaney_mel_filters(mel.sampling_rate, mel.n_fft, mel.num_mels, mel.fmin, mel.fmax)
    assert basis.shape == (80, mel.n_fft // 2 + 1) and basis.dtype == np.float32
    assert_close(torch.from_numpy(basis), golden["mel_basis"], 1e-7, f"{family} mel_basis")  # measured 0


def test_prompt_mel_matches_speech_feat_mel(case) -> None:
    family, mel, golden = case
    wave = golden[FAMILIES[family][3]]
    feat = fx.matcha_mel(wave, mel)
    assert feat.shape[-1] == wave.shape[-1] // mel.hop_size
    assert_close(feat, golden["speech_feat_mel"], 1e-4, f"{family} speech_feat_mel")  # README tolerance
    # The engine's path: a recording at the model's rate → time-major [1, T, 80] prompt features.
    encoder = PromptEncoder(speaker_encoder=None, speech_tokenizer=None, mel=mel)  # prompt_mel needs neither
    prompt = encoder.prompt_mel(Audio(samples=wave[0].numpy(), sample_rate=mel.sampling_rate))
    assert_close(prompt, golden["speech_feat_mel"].transpose(1, 2), 1e-4, f"{family} prompt_mel")


def test_whisper_log_mel_matches_golden(case) -> None:
    family, _, golden = case
    feat = fx.whisper_log_mel(golden["wave_16k"], n_mels=128)
    assert_close(feat, golden["whisper_log_mel_128"], 1e-4, f"{family} whisper_log_mel_128")


def test_campplus_features_match_golden(case) -> None:
    family, _, golden = case
    feat = fx.campplus_features(golden["wave_16k"])
    assert feat.shape[0] == 1
    assert_close(feat[0], golden["kaldi_fbank_80_cmn"], 1e-3, f"{family} kaldi_fbank_80_cmn")


def test_kaldi_fbank_matches_golden(golden: dict[str, torch.Tensor]) -> None:
    """The raw fbank (before CMN): only the v1 goldens hold it."""
    wave = golden["wave_16k"]
    fbank = fx.kaldi_fbank(wave, num_mel_bins=80, sample_frequency=16000)
    assert fbank.shape[0] == 1 + (wave.shape[-1] - 400) // 160
    assert_close(fbank, golden["kaldi_fbank_80"], 1e-3, "kaldi_fbank_80")
    assert_close(fx.kaldi_fbank(wave[0]), fbank, 0.0, "1-D input")


def test_v2_and_v3_mels_differ_only_above_8k() -> None:
    v2 = parse_v2(read_yaml(fixture_dir("cosyvoice2-tiny") / "cosyvoice2.yaml"), "cosyvoice2.yaml").mel
    v3 = parse_v3(read_yaml(fixture_dir("cosyvoice3-tiny") / "cosyvoice3.yaml"), "cosyvoice3.yaml").mel
    wave = load_file(str(fixture_dir("cosyvoice3-tiny") / "frontend_goldens.safetensors"))["wave_24k"]
    a, b = fx.matcha_mel(wave, v2), fx.matcha_mel(wave, v3)  # one process, both bases: no shared cache entry
    assert a.shape == b.shape and not torch.equal(a, b)
    assert torch.equal(fx.matcha_mel(wave, v2), a)


# ------------------------------------------------------------------------------------------ shapes, caches, batches


def test_mel_cache_is_keyed_by_the_whole_config() -> None:
    # v1 and v2 share fmax 8000; Matcha's own cache would hand the v2 call v1's basis and window.
    wave = torch.randn(1, 24000, generator=torch.Generator().manual_seed(0)) * 0.1
    fx.matcha_mel(wave, V1_MEL)
    after_v1 = fx.matcha_mel(wave, V2_MEL)
    fx._slaney_basis.cache_clear()
    fx._hann.cache_clear()
    fresh = fx.matcha_mel(wave, V2_MEL)
    assert after_v1.shape == (1, 80, 24000 // 480)
    assert_close(after_v1, fresh, 0.0, "v2 mel after a v1 call")


def test_fmax_none_means_nyquist() -> None:
    nyquist = fx.slaney_mel_filters(24000, 1920, 80, 0.0, None)
    assert np.array_equal(nyquist, fx.slaney_mel_filters(24000, 1920, 80, 0.0, 12000.0))
    assert not np.array_equal(nyquist, fx.slaney_mel_filters(24000, 1920, 80, 0.0, 8000.0))


def test_batch_equals_single() -> None:
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(2, 16000, generator=gen) * 0.1
    batch = torch.stack([a, 0.01 * b])
    mel = fx.matcha_mel(batch, V1_MEL)
    assert_close(mel[1:], fx.matcha_mel(0.01 * b[None], V1_MEL), 1e-5, "matcha batch")
    # whisper's dynamic-range floor is per item: a quiet item is not floored by a loud neighbour
    logmel = fx.whisper_log_mel(batch)
    assert logmel.shape == (2, 128, 100)
    assert_close(logmel[1:], fx.whisper_log_mel(0.01 * b[None]), 1e-5, "whisper batch")


def test_too_short_inputs_raise() -> None:
    with pytest.raises(ValueError, match="fbank frame"):
        fx.kaldi_fbank(torch.zeros(399))
    with pytest.raises(ValueError, match="mel"):
        fx.matcha_mel(torch.zeros(1, 300), V1_MEL)
    with pytest.raises(TypeError):
        fx.kaldi_fbank(torch.zeros(1000, dtype=torch.int16))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_features_on_cuda_match_cpu() -> None:
    wave = torch.randn(1, 16000, generator=torch.Generator().manual_seed(2)) * 0.1
    cuda = torch.device("cuda")
    assert_close(fx.matcha_mel(wave.to(cuda), V1_MEL).cpu(), fx.matcha_mel(wave, V1_MEL), 1e-3, "mel cuda")
    assert_close(fx.whisper_log_mel(wave.to(cuda)).cpu(), fx.whisper_log_mel(wave), 1e-3, "whisper cuda")
    assert_close(fx.kaldi_fbank(wave.to(cuda)).cpu(), fx.kaldi_fbank(wave), 1e-3, "fbank cuda")
    assert_close(fx.resample(wave.to(cuda), 16000, 22050).cpu(), fx.resample(wave, 16000, 22050), 1e-5, "resample cuda")


# ------------------------------------------------------------------------------------------ resampling


def reference_resample(x: np.ndarray, orig_sr: int, new_sr: int, float32_phase: bool) -> np.ndarray:
    """Direct float64 evaluation of y[m] = sum_i x[i] * h(base * (i/orig - m/new)) with the Hann-sinc h.

    `float32_phase` rounds the within-period phase j/new (m = q*new + j) to float32, as torchaudio does.
    """
    g = math.gcd(orig_sr, new_sr)
    orig, new = orig_sr // g, new_sr // g
    base = min(orig, new) * 0.99
    out = np.zeros(-(-len(x) * new // orig))
    i = np.arange(len(x), dtype=np.float64)
    for m in range(len(out)):
        q, j = divmod(m, new)
        phase = float(np.float32(j / new)) if float32_phase else j / new
        t = base * ((i - q * orig) / orig - phase)
        inside = np.abs(t) < 6
        tt = t[inside]
        sinc = np.where(tt == 0, 1.0, np.sin(np.pi * tt) / np.where(tt == 0, 1.0, np.pi * tt))
        weights = sinc * np.cos(np.pi * tt / 12) ** 2 * base / orig
        out[m] = np.dot(weights, x[inside])
    return out


@pytest.mark.parametrize(
    "orig_sr,new_sr", [(16000, 22050), (22050, 16000), (24000, 16000), (16000, 24000), (44100, 16000)]
)
def test_resample_matches_direct_sinc_evaluation(orig_sr: int, new_sr: int) -> None:
    x = np.random.default_rng(orig_sr + new_sr).uniform(-0.5, 0.5, 1501)
    y = fx.resample(torch.from_numpy(x).float()[None], orig_sr, new_sr)[0].double().numpy()
    exact = reference_resample(x, orig_sr, new_sr, float32_phase=True)
    assert y.shape == exact.shape == (math.ceil(1501 * new_sr / orig_sr),)
    assert np.abs(y - exact).max() < 1e-6  # measured ~1.2e-7 (float32 kernel and conv)
    # The float32 phase rounding (torchaudio's) is a small shift from the pure float64 formula.
    assert np.abs(y - reference_resample(x, orig_sr, new_sr, float32_phase=False)).max() < 1e-4  # measured <= 1.1e-5


def test_resample_keeps_a_sine() -> None:
    sr_in, sr_out, freq = 16000, 22050, 440.0
    wave = torch.sin(2 * math.pi * freq * torch.arange(sr_in, dtype=torch.float64) / sr_in).float()
    out = fx.resample(wave, sr_in, sr_out).double()
    assert out.shape == (sr_out,)
    expected = torch.sin(2 * math.pi * freq * torch.arange(sr_out, dtype=torch.float64) / sr_out)
    interior = slice(200, -200)  # the zero padding fades the first/last few kernel widths
    assert (out[interior] - expected[interior]).abs().max().item() < 2e-3  # measured 4.4e-4
    peak_bin = torch.fft.rfft(out).abs().argmax().item()
    assert peak_bin == round(freq)  # 1 s of audio: bin k is k Hz


def test_resample_lengths_shapes_and_identity() -> None:
    x = torch.randn(2, 3, 1001, dtype=torch.float64)
    y = fx.resample(x, 16000, 22050)
    assert y.shape == (2, 3, math.ceil(1001 * 22050 / 16000)) and y.dtype == torch.float64
    assert fx.resample(x, 16000, 48000).shape[-1] == 3003
    assert fx.resample(x, 48000, 16000).shape[-1] == math.ceil(1001 / 3)
    assert fx.resample(x, 16000, 16000) is x
    with pytest.raises(ValueError):
        fx.resample(x, 0, 16000)
