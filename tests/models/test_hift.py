"""HiFT vocoder: loading (both weight-norm spellings), golden parity per stage, streaming hift part,
shapes and determinism on a tiny random model.

Goldens: ../shared/fixtures/cosyvoice1-tiny (upstream run on a tiny v1 model); tolerances from its README.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cosyvoice_ui.cosyvoice.checkpoint import fold_weight_norm, read_state_dict
from cosyvoice_ui.cosyvoice.config import HiFTConfig, parse_v1, read_yaml
from cosyvoice_ui.errors import CheckpointError
from cosyvoice_ui.cosyvoice.families import V1
from cosyvoice_ui.cosyvoice.models.hift import HiFTGenerator, unfold_weight_norm, weight_norm_names
from cosyvoice_ui.cosyvoice.models.nsf import NSFNoise, SineGen, SourceModuleHnNSF
from cosyvoice_ui.cosyvoice.registry import backend_for

# (case, seed of the manifest's noise_recipe)
CASES = [("H1_frontend_mel", 201), ("H2_flow_mel", 202)]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    diff = (actual.double() - expected.double()).abs().max().item()
    assert diff <= atol, f"{what}: max abs diff {diff:.3g} > {atol:g}"


def tiny_config(sampling_rate: int = 22050) -> HiFTConfig:
    return HiFTConfig(
        in_channels=80, base_channels=16, nb_harmonics=8, sampling_rate=sampling_rate, nsf_alpha=0.1,
        nsf_sigma=0.003, nsf_voiced_threshold=10.0, upsample_rates=(8, 8), upsample_kernel_sizes=(16, 16),
        istft_n_fft=16, istft_hop=4, resblock_kernel_sizes=(3, 7, 11),
        resblock_dilation_sizes=((1, 3, 5),) * 3, source_resblock_kernel_sizes=(7, 11),
        source_resblock_dilation_sizes=((1, 3, 5),) * 2, lrelu_slope=0.1, audio_limit=0.99,
        f0_in_channels=80, f0_cond_channels=8)


def load_hift(cfg: HiFTConfig, state_dict: dict[str, torch.Tensor]) -> HiFTGenerator:
    """hift.pt as the loader reads it for v1 (prefix strip, weight-norm folding, strict)."""
    return backend_for(V1).load_vocoder(cfg, state_dict)


def tiny_model(seed: int = 0) -> HiFTGenerator:
    torch.manual_seed(seed)  # test-only: the library itself never seeds
    model = HiFTGenerator(tiny_config(), SineGen).eval()
    with torch.no_grad():
        # Push f0 into a voiced range so the sine path (not only noise) is exercised.
        model.f0_predictor.classifier.bias.fill_(150.0)
    return model


@pytest.fixture(scope="module")
def fixture_cfg(v1_fixture: Path) -> HiFTConfig:
    return parse_v1(read_yaml(v1_fixture / "cosyvoice.yaml")).hift


@pytest.fixture(scope="module")
def hift(v1_fixture: Path, fixture_cfg: HiFTConfig) -> HiFTGenerator:
    return load_hift(fixture_cfg, read_state_dict(v1_fixture / "hift.pt"))


@pytest.fixture(scope="module")
def goldens(v1_fixture: Path) -> dict[str, torch.Tensor]:
    return load_file(str(v1_fixture / "hift_goldens.safetensors"))


@pytest.fixture(scope="module")
def streaming(v1_fixture: Path) -> dict[str, torch.Tensor]:
    return load_file(str(v1_fixture / "streaming_goldens.safetensors"))


# --- loading -------------------------------------------------------------------------------------


def test_weight_norm_names_match_the_official_layout(v1_fixture: Path, hift: HiFTGenerator) -> None:
    sd = read_state_dict(v1_fixture / "hift.pt")
    suffix = ".parametrizations.weight.original0"
    in_file = {k[: -len(suffix)] for k in sd if k.endswith(suffix)}
    names = weight_norm_names(hift)
    assert len(names) == len(set(names))
    assert set(names) == in_file
    assert "source_downs.0" not in names


def test_both_weight_norm_spellings_load_to_identical_outputs(v1_fixture: Path, fixture_cfg: HiFTConfig,
                                                              hift: HiFTGenerator,
                                                              goldens: dict[str, torch.Tensor]) -> None:
    legacy_sd = read_state_dict(v1_fixture / "hift_legacy_weight_norm.pt")
    assert any(k.endswith(".weight_g") for k in legacy_sd)
    legacy = load_hift(fixture_cfg, legacy_sd)
    for key, value in hift.state_dict().items():
        assert torch.equal(value, legacy.state_dict()[key]), key
    mel, src = goldens["H1_frontend_mel.mel"], goldens["H1_frontend_mel.source"]
    with torch.no_grad():
        assert torch.equal(hift.decode(mel, src), legacy.decode(mel, src))
    # The STFT window is derived, not a checkpoint entry.
    assert "stft_window" not in hift.state_dict()


def test_generator_prefix_is_stripped(v1_fixture: Path, fixture_cfg: HiFTConfig, hift: HiFTGenerator) -> None:
    sd = {f"generator.{k}": v for k, v in read_state_dict(v1_fixture / "hift.pt").items()}
    model = load_hift(fixture_cfg, sd)
    assert torch.equal(model.conv_post.weight, hift.conv_post.weight)


def test_mismatched_checkpoint_is_rejected(v1_fixture: Path, fixture_cfg: HiFTConfig) -> None:
    sd = read_state_dict(v1_fixture / "hift.pt")
    sd.pop("m_source.l_linear.bias")
    with pytest.raises(CheckpointError, match="l_linear.bias"):
        load_hift(fixture_cfg, sd)


@pytest.mark.parametrize("legacy", [False, True])
def test_unfold_then_fold_round_trips(legacy: bool) -> None:
    model = tiny_model()
    sd = model.state_dict()
    names = weight_norm_names(model)
    unfolded = unfold_weight_norm(sd, names, legacy=legacy)
    g_key = "conv_pre.weight_g" if legacy else "conv_pre.parametrizations.weight.original0"
    assert unfolded[g_key].shape == (16, 1, 1)
    assert "ups.0.weight" not in unfolded and "source_downs.0.weight" in unfolded
    assert len(unfolded) == len(sd) + len(names)
    refolded = fold_weight_norm(unfolded)
    assert set(refolded) == set(sd)
    for key, value in sd.items():
        assert_close(refolded[key], value, 1e-6, key)
    # And the unfolded dict loads like an official file.
    reloaded = load_hift(tiny_config(), unfolded)
    mel = torch.randn(1, 80, 5, generator=torch.Generator().manual_seed(1))
    src = 0.1 * torch.randn(1, 1, 5 * 256, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert_close(reloaded.decode(mel, src), model.decode(mel, src), 1e-5, "decode after round trip")


def test_unfold_rejects_unknown_names() -> None:
    with pytest.raises(KeyError, match="nope"):
        unfold_weight_norm(tiny_model().state_dict(), ["nope"], legacy=False)


# --- golden parity ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [c for c, _ in CASES])
def test_f0_matches_golden(case: str, hift: HiFTGenerator, goldens: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        f0 = hift.predict_f0(goldens[f"{case}.mel"])
    assert_close(f0, goldens[f"{case}.f0"], 5e-3, f"{case} f0")


def test_noise_draws_follow_the_recipe(goldens: dict[str, torch.Tensor]) -> None:
    noise = NSFNoise.draw(1, 9, 22016, torch.Generator().manual_seed(201))
    # The golden phase was served by a recipe written (u*2-1)*pi; upstream's Uniform computes
    # -pi + u*2pi: equal up to float32 rounding.
    assert_close(noise.phase, goldens["H1_frontend_mel.phase_draw"], 1e-6, "phase draw")
    assert torch.equal(noise.sine, goldens["H1_frontend_mel.sine_noise_draw"])


def test_noise_draw_consumes_the_unused_branch_draw() -> None:
    g = torch.Generator().manual_seed(5)
    NSFNoise.draw(1, 9, 100, g)
    after = torch.rand(3, generator=g)
    ref = torch.Generator().manual_seed(5)
    torch.rand(1, 9, 1, generator=ref), torch.randn(1, 9, 100, generator=ref), torch.randn(1, 100, 1, generator=ref)
    assert torch.equal(after, torch.rand(3, generator=ref))


@pytest.mark.parametrize("case,seed", CASES)
def test_source_from_golden_f0_matches(case: str, seed: int, hift: HiFTGenerator,
                                       goldens: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        source = hift.source(goldens[f"{case}.f0"], torch.Generator().manual_seed(seed))
    assert_close(source, goldens[f"{case}.source"], 5e-4, f"{case} source")


def test_source_from_saved_draws_matches(hift: HiFTGenerator, goldens: dict[str, torch.Tensor]) -> None:
    case = "H1_frontend_mel"
    noise = NSFNoise(phase=goldens[f"{case}.phase_draw"], sine=goldens[f"{case}.sine_noise_draw"])
    with torch.no_grad():
        source = hift.source(goldens[f"{case}.f0"], noise=noise)
    assert_close(source, goldens[f"{case}.source"], 5e-4, "source from saved draws")
    # uv as upstream defines it, from the nearest-upsampled f0
    uv = (goldens[f"{case}.f0"].repeat_interleave(256, dim=1) > 10).float().unsqueeze(-1)
    assert torch.equal(uv, goldens[f"{case}.uv"])


def test_conv_post_out_from_saved_source(hift: HiFTGenerator, goldens: dict[str, torch.Tensor]) -> None:
    case = "H1_frontend_mel"
    with torch.no_grad():
        out = hift.decode_to_spectrum(goldens[f"{case}.mel"], goldens[f"{case}.source"])
    assert_close(out, goldens[f"{case}.conv_post_out"], 1e-4, "conv_post_out")


@pytest.mark.parametrize("case", [c for c, _ in CASES])
def test_wave_from_saved_source(case: str, hift: HiFTGenerator, goldens: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        wave = hift.decode(goldens[f"{case}.mel"], goldens[f"{case}.source"])
    assert_close(wave, goldens[f"{case}.wave"], 1e-4, f"{case} wave from source")


@pytest.mark.parametrize("case,seed", CASES)
def test_wave_end_to_end_from_mel(case: str, seed: int, hift: HiFTGenerator,
                                  goldens: dict[str, torch.Tensor]) -> None:
    wave, source = hift.inference(goldens[f"{case}.mel"], generator=torch.Generator().manual_seed(seed))
    assert_close(source, goldens[f"{case}.source"], 5e-4, f"{case} source end to end")
    assert_close(wave, goldens[f"{case}.wave"], 1e-3, f"{case} wave end to end")


# --- streaming addendum (hift part) --------------------------------------------------------------


def _chunk_noise(phase_seed: int, length: int) -> NSFNoise:
    """The addendum serves each random call from its own generator (seeds base+1, +2, +3)."""
    u = torch.rand(1, 9, 1, generator=torch.Generator().manual_seed(phase_seed))
    phase = -math.pi + u * (2 * math.pi)
    sine = torch.randn(1, 9, length, generator=torch.Generator().manual_seed(phase_seed + 1))
    return NSFNoise(phase=phase, sine=sine)


@pytest.mark.parametrize("chunk,phase_seed", [(0, 9101), (1, 9105)])
def test_streaming_chunk(chunk: int, phase_seed: int, hift: HiFTGenerator,
                         streaming: dict[str, torch.Tensor]) -> None:
    key = f"S1.chunk{chunk}"
    mel = streaming[f"{key}.hift_mel"]
    n = mel.size(-1) * 256
    noise = _chunk_noise(phase_seed, n)
    assert_close(noise.phase, streaming[f"{key}.phase_draw"], 1e-6, f"{key} phase draw")
    cache = streaming["S1.chunk0.source"][..., -5120:] if chunk == 1 else None
    wave, source = hift.inference(mel, cache_source=cache, noise=noise)
    assert_close(source, streaming[f"{key}.source"], 5e-4, f"{key} source")
    if cache is not None:
        assert torch.equal(source[..., :5120], cache)
    assert_close(wave, streaming[f"{key}.hift_speech"], 1e-3, f"{key} hift_speech end to end")
    with torch.no_grad():
        from_saved = hift.decode(mel, streaming[f"{key}.source"])
    assert_close(from_saved, streaming[f"{key}.hift_speech"], 1e-4, f"{key} hift_speech from saved source")


# --- tiny random model: shapes, determinism, batching -----------------------------------------------


def test_shapes_batch_of_two() -> None:
    model = tiny_model()
    mel = torch.randn(2, 80, 7, generator=torch.Generator().manual_seed(0))
    f0 = model.predict_f0(mel)
    assert f0.shape == (2, 7) and bool((f0 >= 0).all())
    with torch.no_grad():
        source = model.source(f0, torch.Generator().manual_seed(1))
        assert source.shape == (2, 1, 7 * 256)
        assert model.decode_to_spectrum(mel, source).shape == (2, 18, 7 * 64 + 1)
    wave, src = model.inference(mel, generator=torch.Generator().manual_seed(1))
    assert wave.shape == (2, 7 * 256) and src.shape == (2, 1, 7 * 256)
    assert float(wave.abs().max()) <= 0.99 and float(wave.abs().max()) > 0


def test_same_generator_seed_is_deterministic_and_seeds_differ() -> None:
    model = tiny_model()
    mel = torch.randn(1, 80, 6, generator=torch.Generator().manual_seed(0))
    w1, s1 = model.inference(mel, generator=torch.Generator().manual_seed(7))
    w2, s2 = model.inference(mel, generator=torch.Generator().manual_seed(7))
    w3, _ = model.inference(mel, generator=torch.Generator().manual_seed(8))
    assert torch.equal(w1, w2) and torch.equal(s1, s2)
    assert not torch.equal(w1, w3)


def test_batch_equals_single_for_decode() -> None:
    model = tiny_model()
    g = torch.Generator().manual_seed(3)
    mel = torch.randn(2, 80, 6, generator=g)
    src = 0.1 * torch.randn(2, 1, 6 * 256, generator=g)
    with torch.no_grad():
        both = model.decode(mel, src)
        for b in range(2):
            assert_close(both[b : b + 1], model.decode(mel[b : b + 1], src[b : b + 1]), 1e-6, f"row {b}")


def test_cache_source_overwrites_the_head_only() -> None:
    model = tiny_model()
    mel = torch.randn(1, 80, 4, generator=torch.Generator().manual_seed(0))
    cache = torch.full((1, 1, 300), 0.5)
    _, plain = model.inference(mel, generator=torch.Generator().manual_seed(1))
    _, cached = model.inference(mel, cache_source=cache, generator=torch.Generator().manual_seed(1))
    assert torch.equal(cached[..., :300], cache)
    assert torch.equal(cached[..., 300:], plain[..., 300:])
    with pytest.raises(ValueError, match="cache_source"):
        model.inference(mel, cache_source=torch.zeros(1, 1, 4 * 256 + 1))


def test_source_is_sine_when_voiced_and_noise_when_unvoiced() -> None:
    module = SourceModuleHnNSF(SineGen(22050, 8, 0.1, 0.003, 10.0))
    with torch.no_grad():
        module.l_linear.weight.zero_()
        module.l_linear.weight[0, 0] = 1.0  # pass the fundamental straight through
        module.l_linear.bias.zero_()
    n = 2205
    f0 = torch.cat([torch.full((1, 1, n), 220.0), torch.zeros(1, 1, n)], dim=-1)
    noise = NSFNoise(phase=torch.zeros(1, 9, 1), sine=torch.zeros(1, 9, 2 * n))
    with torch.no_grad():
        out = module(f0, noise)
    t = torch.arange(1, n + 1, dtype=torch.float64)
    expected = torch.tanh(0.1 * torch.sin(2 * math.pi * 220.0 * t / 22050))
    assert_close(out[0, 0, :n], expected, 1e-4, "voiced sine")
    assert float(out[0, 0, n:].abs().max()) == 0.0


def test_set_conv_dtype_keeps_shapes_and_float32_around_the_convolutions() -> None:
    model = tiny_model(3)
    mel = torch.randn(1, 80, 6, generator=torch.Generator().manual_seed(4)) - 4
    src = 0.1 * torch.randn(1, 1, 6 * 256, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = model.decode_to_spectrum(mel, src)
        model.set_conv_dtype(torch.bfloat16)
        spec = model.decode_to_spectrum(mel, src)
        wave = model.decode(mel, src)
    assert model.decode_dtype == torch.bfloat16 and model.resblocks[0].convs1[0].weight.dtype == torch.bfloat16
    assert model.f0_predictor.condnet[0].weight.dtype == torch.float32  # f0 and the source stay float32
    assert spec.dtype == torch.float32 and spec.shape == ref.shape == (1, 18, 6 * 256 // 4 + 1)
    assert wave.shape == (1, 6 * 256) and wave.dtype == torch.float32
