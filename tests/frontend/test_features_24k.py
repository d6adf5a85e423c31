"""The 24 kHz frontend features (v2/v3) against the upstream goldens of the cosyvoice2-tiny and cosyvoice3-tiny
fixtures (`frontend_goldens.safetensors`, README section e / d): the prompt mel with each yaml's feat_extractor
settings (v2 fmax 8000, v3 fmax None = 12 kHz), its mel basis, whisper's 128-bin log-mel and the CAM++ fbank."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from cosyvoice_ui.cosyvoice.config import MelConfig, parse_v2, parse_v3, read_yaml
from cosyvoice_ui.cosyvoice.frontend import features as fx
from cosyvoice_ui.cosyvoice.frontend.prompt import PromptEncoder
from cosyvoice_ui.types import Audio

from ..conftest import fixture_dir

CASES = {  # fixture → (yaml, parser)
    "cosyvoice2-tiny": ("cosyvoice2.yaml", parse_v2),
    "cosyvoice3-tiny": ("cosyvoice3.yaml", parse_v3),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[str, MelConfig, dict[str, torch.Tensor]]:
    name = request.param
    folder = fixture_dir(name)
    yaml_name, parse = CASES[name]
    mel = parse(read_yaml(folder / yaml_name), yaml_name).mel
    return name, mel, load_file(str(folder / "frontend_goldens.safetensors"))


def max_diff(actual: torch.Tensor, expected: torch.Tensor, what: str) -> float:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    return (actual.double() - expected.double()).abs().max().item()


def test_the_yaml_mel_settings(case) -> None:
    name, mel, _ = case
    assert (mel.n_fft, mel.hop_size, mel.win_size, mel.sampling_rate, mel.num_mels) == (1920, 480, 1920, 24000, 80)
    assert mel.fmax == (8000.0 if name == "cosyvoice2-tiny" else None)


def test_mel_basis_matches_librosa(case) -> None:
    name, mel, golden = case
    basis = fx.slaney_mel_filters(mel.sampling_rate, mel.n_fft, mel.num_mels, mel.fmin, mel.fmax)
    assert basis.shape == (80, 961) and basis.dtype == np.float32
    assert max_diff(torch.from_numpy(basis), golden["mel_basis"], f"{name} mel_basis") <= 1e-7  # measured 0


def test_prompt_mel_matches_speech_feat_mel(case) -> None:
    name, mel, golden = case
    wave = golden["wave_24k"]
    feat = fx.matcha_mel(wave, mel)
    assert feat.shape[-1] == wave.shape[-1] // 480 == 50
    assert max_diff(feat, golden["speech_feat_mel"], f"{name} speech_feat_mel") <= 1e-4  # README tolerance
    # The engine's path: a 24 kHz recording → time-major [1, T, 80] prompt features (no resampling needed).
    encoder = PromptEncoder(speaker_encoder=None, speech_tokenizer=None, mel=mel)  # prompt_mel needs neither
    prompt = encoder.prompt_mel(Audio(samples=wave[0].numpy(), sample_rate=mel.sampling_rate))
    assert max_diff(prompt, golden["speech_feat_mel"].transpose(1, 2), f"{name} prompt_mel") <= 1e-4


def test_v2_and_v3_mels_differ_only_above_8k() -> None:
    v2 = parse_v2(read_yaml(fixture_dir("cosyvoice2-tiny") / "cosyvoice2.yaml"), "cosyvoice2.yaml").mel
    v3 = parse_v3(read_yaml(fixture_dir("cosyvoice3-tiny") / "cosyvoice3.yaml"), "cosyvoice3.yaml").mel
    wave = load_file(str(fixture_dir("cosyvoice3-tiny") / "frontend_goldens.safetensors"))["wave_24k"]
    a, b = fx.matcha_mel(wave, v2), fx.matcha_mel(wave, v3)  # one process, both bases: no shared cache entry
    assert a.shape == b.shape and not torch.equal(a, b)
    assert torch.equal(fx.matcha_mel(wave, v2), a)


def test_whisper_log_mel_128_matches(case) -> None:
    name, _, golden = case
    feat = fx.whisper_log_mel(golden["wave_16k"], n_mels=128)
    assert max_diff(feat, golden["whisper_log_mel_128"], f"{name} whisper_log_mel_128") <= 1e-4


def test_campplus_fbank_matches(case) -> None:
    name, _, golden = case
    feat = fx.campplus_features(golden["wave_16k"])
    assert max_diff(feat[0], golden["kaldi_fbank_80_cmn"], f"{name} kaldi_fbank_80_cmn") <= 1e-3
