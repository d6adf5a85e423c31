"""HiFT vocoders: v1's `HiFTGenerator` at 22.05 kHz (SineGen), v2's at 24 kHz with three stages and `SineGen2`, v3's
`CausalHiFTGenerator` (fixed noise, float64 f0, `finalize`). Loading (official keys, both weight-norm spellings),
golden parity per stage (one parametrised test per stage for v1 and v2, which share the layout; v3's own), the
vocoder part of the streaming goldens, shapes and determinism on tiny random models.

Goldens: ../shared/fixtures/cosyvoice1-tiny, cosyvoice2-tiny and cosyvoice3-tiny (upstream runs); tolerances from
their READMEs: f0 5e-3, source 5e-4, conv_post_out 1e-4, wave from the saved source 1e-4, end to end 1e-3,
stream speech 1e-3.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cosyvoice_ui.cosyvoice import kernels
from cosyvoice_ui.cosyvoice.checkpoint import (fold_weight_norm, load_strict, read_state_dict,
                                               strip_generator_prefix)
from cosyvoice_ui.cosyvoice.config import HiFTConfig, parse_v1, read_yaml
from cosyvoice_ui.cosyvoice.families import V1
from cosyvoice_ui.cosyvoice.models.causal_conv import CausalConv1d
from cosyvoice_ui.cosyvoice.models.hift import HiFTGenerator, unfold_weight_norm, weight_norm_names
from cosyvoice_ui.cosyvoice.models.hift_causal import (CausalHiFTGenerator, construction_rng_ops,
                                                        upstream_fixed_noise)
from cosyvoice_ui.cosyvoice.models.nsf import (CausalSineGen2, FixedNSFNoise, NSFNoise, SineGen, SineGen2,
                                               SourceModuleHnNSF)
from cosyvoice_ui.cosyvoice.parity.v3 import causal_source_golden, stream_chunks
from cosyvoice_ui.cosyvoice.registry import backend_for
from cosyvoice_ui.errors import CheckpointError

from ..conftest import fixture_dir

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


def test_source_from_saved_draws_matches(hift: HiFTGenerator, goldens: dict[str, torch.Tensor]) -> None:
    case = "H1_frontend_mel"
    noise = NSFNoise(phase=goldens[f"{case}.phase_draw"], sine=goldens[f"{case}.sine_noise_draw"])
    with torch.no_grad():
        source = hift.source(goldens[f"{case}.f0"], noise=noise)
    assert_close(source, goldens[f"{case}.source"], 5e-4, "source from saved draws")
    # uv as upstream defines it, from the nearest-upsampled f0
    uv = (goldens[f"{case}.f0"].repeat_interleave(256, dim=1) > 10).float().unsqueeze(-1)
    assert torch.equal(uv, goldens[f"{case}.uv"])


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_inference_gives_the_same_bits_and_leaves_inputs_alone(dtype: torch.dtype) -> None:
    """Snake, ResBlock and the resblock average reuse their buffers when no gradient is wanted; the numbers must
    be those of the plain expressions (kept for autograd), and the tensors a caller still holds unchanged."""
    model = tiny_model()
    model.set_conv_dtype(dtype)
    mel = torch.randn(1, 80, 9, generator=torch.Generator().manual_seed(3))
    source = model.source(model.predict_f0(mel).detach(), torch.Generator().manual_seed(4)).detach()
    with torch.enable_grad():
        plain = model.decode_to_spectrum(mel, source).detach()
    with torch.inference_mode():
        reused = model.decode_to_spectrum(mel, source)
    assert torch.equal(plain, reused)
    block, snake = model.resblocks[0], model.resblocks[0].activations1[0]
    x = torch.randn(1, block.convs1[0].in_channels, 40, generator=torch.Generator().manual_seed(5)).to(dtype)
    kept = x.clone()
    with torch.enable_grad():
        want_block, want_snake = block(x).detach(), snake(x).detach()
    with torch.inference_mode():
        got_block, got_snake = block(x), snake(x)
    assert torch.equal(got_block, want_block) and torch.equal(got_snake, want_snake)
    assert torch.equal(x, kept)


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


# --- 24 kHz: v2 and v3 ---------------------------------------------------------------------------------------

V2_CASES = [("H1_frontend_mel", 301), ("H2_flow_mel", 302)]  # (case, the manifest's noise_recipe seed)
V3_CASES = [("H1_frontend_mel", True), ("H2_flow_mel", True), ("H3_stream_prefix", False)]  # (case, finalize)
G_SUFFIX = ".parametrizations.weight.original0"


def hift_args(yaml_path: Path) -> dict:
    return read_yaml(yaml_path)["hift"].args


def hift_config(args: dict) -> HiFTConfig:
    """The yaml's hift section as a HiFTConfig (the family parsers are not this test's subject)."""
    f0 = args["f0_predictor"].args

    def pairs(v: list) -> tuple:
        return tuple(tuple(x) for x in v)

    return HiFTConfig(
        in_channels=args["in_channels"], base_channels=args["base_channels"], nb_harmonics=args["nb_harmonics"],
        sampling_rate=args["sampling_rate"], nsf_alpha=args["nsf_alpha"], nsf_sigma=args["nsf_sigma"],
        nsf_voiced_threshold=args["nsf_voiced_threshold"], upsample_rates=tuple(args["upsample_rates"]),
        upsample_kernel_sizes=tuple(args["upsample_kernel_sizes"]), istft_n_fft=args["istft_params"]["n_fft"],
        istft_hop=args["istft_params"]["hop_len"], resblock_kernel_sizes=tuple(args["resblock_kernel_sizes"]),
        resblock_dilation_sizes=pairs(args["resblock_dilation_sizes"]),
        source_resblock_kernel_sizes=tuple(args["source_resblock_kernel_sizes"]),
        source_resblock_dilation_sizes=pairs(args["source_resblock_dilation_sizes"]),
        lrelu_slope=args["lrelu_slope"], audio_limit=args["audio_limit"], f0_in_channels=f0["in_channels"],
        f0_cond_channels=f0["cond_channels"])


def load(model: HiFTGenerator, sd: dict[str, torch.Tensor]) -> HiFTGenerator:
    """As the loader reads hift.pt: prefix strip, weight-norm folding, strict."""
    load_strict(model, fold_weight_norm(strip_generator_prefix(sd)), "hift.pt")
    return model.eval()


def manifest_ops(v3_dir: Path) -> list[tuple[str, tuple[int, ...]]]:
    """The manifest's replay recipe up to SineGen2.rand_ini (every RNG call before it)."""
    recipe = json.loads((v3_dir / "manifest.json").read_text())["fixed_noise"]["replay_recipe_for_this_fixture"]
    stop = next(i for i, r in enumerate(recipe) if r["what"].startswith("SineGen2.rand_ini"))
    return [(r["op"], tuple(r["shape"])) for r in recipe[:stop]]


@pytest.fixture(scope="module")
def v2_dir() -> Path:
    return fixture_dir("cosyvoice2-tiny")


@pytest.fixture(scope="module")
def v3_dir() -> Path:
    return fixture_dir("cosyvoice3-tiny")


@pytest.fixture(scope="module")
def v2_cfg(v2_dir: Path) -> HiFTConfig:
    return hift_config(hift_args(v2_dir / "cosyvoice2.yaml"))


@pytest.fixture(scope="module")
def v3_args(v3_dir: Path) -> dict:
    return hift_args(v3_dir / "cosyvoice3.yaml")


@pytest.fixture(scope="module")
def v2(v2_dir: Path, v2_cfg: HiFTConfig) -> HiFTGenerator:
    return load(HiFTGenerator(v2_cfg, SineGen2), read_state_dict(v2_dir / "hift.pt"))


@pytest.fixture(scope="module")
def fixed_noise(v3_dir: Path, v3_args: dict) -> FixedNSFNoise:
    return upstream_fixed_noise(manifest_ops(v3_dir), 9, 300 * v3_args["sampling_rate"])


def build_v3(v3_args: dict, noise: FixedNSFNoise | None = None) -> CausalHiFTGenerator:
    return CausalHiFTGenerator(hift_config(v3_args), CausalSineGen2,
                               conv_pre_look_right=v3_args["conv_pre_look_right"], fixed_noise=noise)


@pytest.fixture(scope="module")
def v3(v3_dir: Path, v3_args: dict, fixed_noise: FixedNSFNoise) -> CausalHiFTGenerator:
    return load(build_v3(v3_args, fixed_noise), read_state_dict(v3_dir / "hift.pt"))


@pytest.fixture(scope="module")
def g2(v2_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(v2_dir / "hift_goldens.safetensors"))


@pytest.fixture(scope="module")
def g3(v3_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(v3_dir / "hift_goldens.safetensors"))


# --- loading -------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["v1", "v2", "v3"])
def test_weight_norm_names_match_the_official_layout(which: str, request: pytest.FixtureRequest) -> None:
    folder_fixture, model_fixture = {"v1": ("v1_fixture", "hift"), "v2": ("v2_dir", "v2"), "v3": ("v3_dir", "v3")}[which]
    folder, model = request.getfixturevalue(folder_fixture), request.getfixturevalue(model_fixture)
    sd = read_state_dict(folder / "hift.pt")
    in_file = {k[: -len(G_SUFFIX)] for k in sd if k.endswith(G_SUFFIX)}
    names = weight_norm_names(model)
    assert len(names) == len(set(names)) and set(names) == in_file
    if which == "v1":  # two upsampling stages; the first source down-sampler has no weight norm
        assert "source_downs.0" not in names
    else:
        assert len(model.ups) == 3 and len(model.source_resblocks) == 3 and len(model.resblocks) == 9


@pytest.mark.parametrize("which", ["v2", "v3"])
def test_legacy_weight_norm_spelling_loads_identically(which: str, request: pytest.FixtureRequest,
                                                       v3_args: dict, v2_cfg: HiFTConfig) -> None:
    folder, model = request.getfixturevalue(f"{which}_dir"), request.getfixturevalue(which)
    legacy_sd = unfold_weight_norm(model.state_dict(), weight_norm_names(model), legacy=True)
    fresh = HiFTGenerator(v2_cfg, SineGen2) if which == "v2" else build_v3(v3_args)
    load(fresh, legacy_sd)
    for key, value in model.state_dict().items():
        assert_close(fresh.state_dict()[key], value, 1e-6, key)
    assert read_state_dict(folder / "hift.pt").keys() >= {f"conv_post{G_SUFFIX}"}


def test_v3_ups_are_conv1d_layout(v3_dir: Path, v3: CausalHiFTGenerator) -> None:
    sd = read_state_dict(v3_dir / "hift.pt")
    v = sd["ups.0.parametrizations.weight.original1"]
    assert v.shape == v3.ups[0].weight.shape == (16, 32, 16)  # [out, in, k]
    assert sd[f"ups.0{G_SUFFIX}"].shape == (16, 1, 1)
    assert sd["conv_pre.parametrizations.weight.original1"].shape[-1] == 5  # conv_pre_look_right + 1
    assert "m_source.l_sin_gen.sine_waves" not in v3.state_dict()  # fixed noise is not a checkpoint entry


def test_mismatched_v3_checkpoint_is_rejected(v3_dir: Path, v3_args: dict) -> None:
    sd = read_state_dict(v3_dir / "hift.pt")
    sd.pop("f0_predictor.classifier.bias")
    with pytest.raises(CheckpointError, match="classifier.bias"):
        load(build_v3(v3_args), sd)


# --- v2 golden parity ------------------------------------------------------------------------------


def test_v2_draws_follow_the_recipe(v2: HiFTGenerator, g2: dict[str, torch.Tensor]) -> None:
    noise = v2.m_source.l_sin_gen.draw(1, 24000, torch.Generator().manual_seed(301))
    assert torch.equal(noise.phase.squeeze(-1), g2["H1_frontend_mel.rand_ini_draw"])
    assert torch.equal(noise.sine.transpose(1, 2), g2["H1_frontend_mel.sine_noise_draw"])


def test_v2_source_from_saved_draws(v2: HiFTGenerator, g2: dict[str, torch.Tensor]) -> None:
    case = "H1_frontend_mel"
    noise = NSFNoise(phase=g2[f"{case}.rand_ini_draw"].unsqueeze(-1),
                     sine=g2[f"{case}.sine_noise_draw"].transpose(1, 2))
    with torch.no_grad():
        assert_close(v2.source(g2[f"{case}.f0"], noise=noise), g2[f"{case}.source"], 5e-4, "source from draws")
    uv = (g2[f"{case}.f0"].repeat_interleave(480, dim=1) > 10).float().unsqueeze(-1)
    assert torch.equal(uv, g2[f"{case}.uv"])


# --- v3 golden parity ------------------------------------------------------------------------------


def test_v3_fixed_noise_replay(fixed_noise: FixedNSFNoise, v3_dir: Path, g3: dict[str, torch.Tensor]) -> None:
    assert torch.equal(fixed_noise.rand_ini, g3["fixed_noise.rand_ini"])
    assert torch.equal(fixed_noise.sine(24000), g3["fixed_noise.sine_waves_head"])
    full = fixed_noise.sine(fixed_noise.max_samples)
    sha = json.loads((v3_dir / "manifest.json").read_text())["fixed_noise"]["sha256_sine_waves_full_buffer"]
    assert full.shape == (1, fixed_noise.max_samples, 9)
    assert hashlib.sha256(full.numpy().tobytes()).hexdigest() == sha
    with pytest.raises(ValueError, match="fixed noise buffer"):
        fixed_noise.sine(fixed_noise.max_samples + 1)


def test_v3_construction_rng_ops_match_the_manifest_recipe(v3_dir: Path, v3_args: dict) -> None:
    flow = read_yaml(v3_dir / "cosyvoice3.yaml")["flow"].args
    ops = construction_rng_ops(hift_config(v3_args), cfm_noise_shape=(1, 80, 15000),
                               flow_vocab_size=flow["vocab_size"], flow_input_size=flow["input_size"],
                               flow_output_size=flow["output_size"], spk_embed_dim=flow["spk_embed_dim"])
    assert ops == manifest_ops(v3_dir)


def test_v3_look_right_comes_from_the_argument_or_the_config(v3_args: dict) -> None:
    cfg = hift_config(v3_args)
    assert CausalHiFTGenerator(cfg, conv_pre_look_right=2).conv_pre.kernel_size == (3,)
    if hasattr(cfg, "conv_pre_look_right"):
        with pytest.raises(ValueError, match="conv_pre_look_right"):
            CausalHiFTGenerator(dataclasses.replace(cfg, conv_pre_look_right=0))
        assert CausalHiFTGenerator(dataclasses.replace(cfg, conv_pre_look_right=4)).conv_pre_look_right == 4


def _v3_source(case: str, g3: dict[str, torch.Tensor]) -> torch.Tensor:
    """H3's source is H2's prefix (the README: bitwise, not repeated), as the parity command reads it."""
    return causal_source_golden(g3, case)


@pytest.mark.parametrize("case,finalize", V3_CASES)
def test_v3_f0(case: str, finalize: bool, v3: CausalHiFTGenerator, g3: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        f0 = v3.predict_f0(g3[f"{case}.mel"], finalize)
    assert f0.dtype == torch.float32
    assert_close(f0, g3[f"{case}.f0"], 5e-3, f"{case} f0")


@pytest.mark.parametrize("case,finalize", V3_CASES)
def test_v3_source_from_golden_f0(case: str, finalize: bool, v3: CausalHiFTGenerator,
                                  g3: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        assert_close(v3.source(g3[f"{case}.f0"]), _v3_source(case, g3), 5e-4, f"{case} source")


def test_v3_conv_post_out(v3: CausalHiFTGenerator, g3: dict[str, torch.Tensor]) -> None:
    case = "H1_frontend_mel"
    with torch.no_grad():
        out = v3.decode_to_spectrum(g3[f"{case}.mel"], g3[f"{case}.source"])
    assert_close(out, g3[f"{case}.conv_post_out"], 1e-4, "conv_post_out")


@pytest.mark.parametrize("case,finalize", V3_CASES)
def test_v3_wave(case: str, finalize: bool, v3: CausalHiFTGenerator, g3: dict[str, torch.Tensor]) -> None:
    mel = g3[f"{case}.mel"]
    with torch.no_grad():
        from_saved = v3.decode(mel if finalize else mel[..., :-3], _v3_source(case, g3), finalize)
    assert_close(from_saved, g3[f"{case}.wave"], 1e-4, f"{case} wave from source")
    wave, source = v3.inference(mel, finalize)
    assert_close(source, _v3_source(case, g3), 5e-4, f"{case} source end to end")
    assert_close(wave, g3[f"{case}.wave"], 1e-3, f"{case} wave end to end")


def test_v3_inference_draws_no_random_numbers(v3: CausalHiFTGenerator, g3: dict[str, torch.Tensor]) -> None:
    state = torch.get_rng_state()
    v3.inference(g3["H1_frontend_mel.mel"], True)
    assert torch.equal(state, torch.get_rng_state())


def test_v3_stream_goldens_vocoder_part(v3_dir: Path, v3: CausalHiFTGenerator) -> None:
    """S1: the vocoder re-run from scratch on the accumulated mel (50, 150 frames not final, then 160
    final); each call emits the samples after the previous call's. Flow mels taken from the goldens."""
    chunks, stage, speech = _s1_vocoder_calls(v3_dir, v3)
    assert [c.size(1) for c in chunks] == stage["chunk_samples"]
    assert_close(torch.cat(chunks, dim=1), speech, 1e-3, "S1 speech")


def _s1_vocoder_calls(v3_dir: Path, model: CausalHiFTGenerator) -> tuple[list[torch.Tensor], dict, torch.Tensor]:
    """The stream golden S1's vocoder calls run on `model`: (the chunks, the manifest's stage, the golden speech)."""
    stream = load_file(str(v3_dir / "stream_goldens.safetensors"))
    flow = load_file(str(v3_dir / "flow_goldens.safetensors"))
    stage = json.loads((v3_dir / "manifest.json").read_text())["stages"]["stream"]["S1"]
    call_mels = [flow["F2_stream_chunk0.mel"], stream["S1.flow_mel_1"], flow["F1_zero_shot.mel"]]
    finals = [c["finalize"] for c in stage["hift_calls"]]
    return stream_chunks(model, call_mels, stage["token_offsets"], finals, token_mel_ratio=2), stage, stream["S1.speech"]


# --- tiny random models ------------------------------------------------------------------------------


def tiny_config_24k(rate: int = 24000) -> HiFTConfig:
    return HiFTConfig(
        in_channels=80, base_channels=16, nb_harmonics=8, sampling_rate=rate, nsf_alpha=0.1, nsf_sigma=0.003,
        nsf_voiced_threshold=10.0, upsample_rates=(8, 5, 3), upsample_kernel_sizes=(16, 11, 7), istft_n_fft=16,
        istft_hop=4, resblock_kernel_sizes=(3, 7, 11), resblock_dilation_sizes=((1, 3, 5),) * 3,
        source_resblock_kernel_sizes=(7, 7, 11), source_resblock_dilation_sizes=((1, 3, 5),) * 3,
        lrelu_slope=0.1, audio_limit=0.99, f0_in_channels=80, f0_cond_channels=8)


def tiny(model: HiFTGenerator) -> HiFTGenerator:
    with torch.no_grad():
        model.f0_predictor.classifier.bias.fill_(150.0)  # voiced, so the sine path runs
    return model.eval()


def tiny_noise(max_samples: int = 48000) -> FixedNSFNoise:
    return FixedNSFNoise.from_generator(torch.Generator().manual_seed(0), 9, max_samples)


def test_v2_shapes_batch_of_two() -> None:
    torch.manual_seed(0)  # test-only: the library never seeds
    model = tiny(HiFTGenerator(tiny_config_24k(), SineGen2))
    mel = torch.randn(2, 80, 7, generator=torch.Generator().manual_seed(1))
    wave, source = model.inference(mel, generator=torch.Generator().manual_seed(2))
    assert wave.shape == (2, 7 * 480) and source.shape == (2, 1, 7 * 480)
    with torch.no_grad():
        assert model.decode_to_spectrum(mel, source).shape == (2, 18, 7 * 120 + 1)
    again, _ = model.inference(mel, generator=torch.Generator().manual_seed(2))
    assert torch.equal(wave, again) and 0 < float(wave.abs().max()) <= 0.99


@pytest.mark.parametrize("finalize,samples", [(True, 12 * 480), (False, 4 * 480)])
def test_v3_shapes(finalize: bool, samples: int) -> None:
    torch.manual_seed(0)
    model = tiny(CausalHiFTGenerator(tiny_config_24k(), conv_pre_look_right=4, fixed_noise=tiny_noise()))
    mel = torch.randn(2, 80, 12, generator=torch.Generator().manual_seed(1))
    wave, source = model.inference(mel, finalize)
    assert wave.shape == (2, samples)
    assert source.shape == (2, 1, (12 if finalize else 9) * 480)
    # Rows share the fixed noise: a row alone gives the same wave (up to batched-conv rounding).
    assert_close(wave[0:1], model.inference(mel[0:1], finalize)[0], 1e-6, "row 0 alone")


def test_v3_non_final_samples_match_a_longer_run() -> None:
    torch.manual_seed(0)
    model = tiny(CausalHiFTGenerator(tiny_config_24k(), conv_pre_look_right=4, fixed_noise=tiny_noise()))
    mel = torch.randn(1, 80, 20, generator=torch.Generator().manual_seed(3))
    full, _ = model.inference(mel, True)
    part, _ = model.inference(mel[..., :14], False)
    assert_close(part, full[:, : part.size(1)], 1e-6, "chunk prefix")
    with pytest.raises(ValueError, match="non-final chunk"):
        model.inference(mel[..., :7], False)


def test_v3_needs_fixed_noise_and_checks_its_length() -> None:
    model = tiny(CausalHiFTGenerator(tiny_config_24k(), conv_pre_look_right=4))
    mel = torch.zeros(1, 80, 4)
    with pytest.raises(RuntimeError, match="set_fixed_noise"):
        model.inference(mel, True)
    model.set_fixed_noise(tiny_noise(max_samples=3 * 480))
    with pytest.raises(ValueError, match="fixed noise buffer"):
        model.inference(mel, True)
    with pytest.raises(ValueError, match="harmonics"):
        model.set_fixed_noise(FixedNSFNoise.from_generator(torch.Generator(), 5, 100))


def test_v3_set_conv_dtype_keeps_f0_in_float64_and_outputs_float32() -> None:
    torch.manual_seed(0)
    model = tiny(CausalHiFTGenerator(tiny_config_24k(), conv_pre_look_right=4, fixed_noise=tiny_noise()))
    mel = torch.randn(1, 80, 10, generator=torch.Generator().manual_seed(4)) - 4
    ref, _ = model.inference(mel, True)
    model.set_conv_dtype(torch.bfloat16)
    wave, _ = model.inference(mel, False)
    assert model.conv_pre.weight.dtype == torch.bfloat16 and model.f0_predictor.classifier.weight.dtype == torch.float32
    assert wave.dtype == torch.float32 and wave.shape == (1, 2 * 480)
    assert float((wave - ref[:, :960]).abs().max()) < 0.1  # bf16 is close, not equal


def test_causal_conv_right_context_and_left_padding() -> None:
    conv = CausalConv1d(2, 3, 5, right=True)
    x = torch.randn(1, 2, 10, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert conv(x).shape == (1, 3, 10)
        assert torch.equal(conv(x[..., :6], x[..., 6:]), torch.nn.functional.conv1d(x, conv.weight, conv.bias))
        left = CausalConv1d(2, 3, 3, dilation=2)
        y = left(x)
        x2 = x.clone()
        x2[..., 7:] = 9.0  # the future does not reach the past
        assert torch.equal(left(x2)[..., :7], y[..., :7])
    with pytest.raises(ValueError, match="context frames"):
        conv(x, x[..., :3])


@pytest.mark.parametrize("sine_cls,mode", [(SineGen2, "linear"), (CausalSineGen2, "nearest")])
def test_sinegen2_voiced_sine_follows_the_frame_phase(sine_cls: type, mode: str) -> None:
    gen = sine_cls(24000, 8, 0.1, 0.003, 10.0, upsample_scale=480)
    module = SourceModuleHnNSF(gen)
    with torch.no_grad():
        module.l_linear.weight.zero_()
        module.l_linear.weight[0, 0] = 1.0
        module.l_linear.bias.zero_()
    f0 = torch.full((1, 1, 4800), 240.0)  # 10 frames of 240 Hz: 4.8 cycles per frame
    noise = NSFNoise(phase=torch.full((1, 9, 1), 0.3), sine=torch.zeros(1, 9, 4800))
    with torch.no_grad():
        out = module(f0, noise)[0, 0]
    frame_phase = 2 * torch.pi * 480 * 0.01 * torch.arange(1, 11, dtype=torch.float64)  # cumsum per frame
    if mode == "nearest":
        expected = frame_phase.repeat_interleave(480)
    else:
        pos = ((torch.arange(4800, dtype=torch.float64) + 0.5) / 480 - 0.5).clamp(0, 9)
        lo = pos.floor().long()
        hi = (lo + 1).clamp(max=9)
        expected = frame_phase[lo] + (pos - lo) * (frame_phase[hi] - frame_phase[lo])
    assert_close(out, torch.tanh(0.1 * torch.sin(expected)), 1e-4, f"{mode} sine")


def test_sine_generators_take_the_same_arguments_and_v1_draws_are_unchanged() -> None:
    v1 = SineGen(22050, 8, 0.1, 0.003, 10.0, upsample_scale=256)
    a = v1.draw(1, 100, torch.Generator().manual_seed(5))
    b = NSFNoise.draw(1, 9, 100, torch.Generator().manual_seed(5))
    assert torch.equal(a.phase, b.phase) and torch.equal(a.sine, b.sine)
    g = torch.Generator().manual_seed(5)
    SineGen2(24000, 8, 0.1, 0.003, 10.0, 480).draw(1, 100, g)
    ref = torch.Generator().manual_seed(5)
    torch.rand(1, 9, generator=ref), torch.randn(1, 100, 9, generator=ref), torch.randn(1, 100, 1, generator=ref)
    assert torch.equal(torch.rand(3, generator=g), torch.rand(3, generator=ref))  # unused branch consumed


# --- golden parity per stage, v1 and v2 ------------------------------------------------------------------------
# (family, case, the seed of the case's noise recipe)
PARITY = [("v1", case, seed) for case, seed in CASES] + [("v2", case, seed) for case, seed in V2_CASES]


@pytest.fixture(scope="module")
def vocoders(request: pytest.FixtureRequest):
    """family → (the loaded vocoder, its goldens), loaded when first asked for."""
    names = {"v1": ("hift", "goldens"), "v2": ("v2", "g2")}
    return lambda family: tuple(request.getfixturevalue(name) for name in names[family])


@pytest.mark.parametrize("family,case,seed", PARITY)
def test_f0_matches_golden(family: str, case: str, seed: int, vocoders) -> None:
    model, golden = vocoders(family)
    with torch.no_grad():
        assert_close(model.predict_f0(golden[f"{case}.mel"]), golden[f"{case}.f0"], 5e-3, f"{family} {case} f0")


@pytest.mark.parametrize("family,case,seed", PARITY)
def test_source_from_golden_f0_matches(family: str, case: str, seed: int, vocoders) -> None:
    model, golden = vocoders(family)
    with torch.no_grad():
        source = model.source(golden[f"{case}.f0"], torch.Generator().manual_seed(seed))
    assert_close(source, golden[f"{case}.source"], 5e-4, f"{family} {case} source")


@pytest.mark.parametrize("family", ["v1", "v2"])
def test_conv_post_out_from_saved_source(family: str, vocoders) -> None:
    model, golden = vocoders(family)
    case = "H1_frontend_mel"
    with torch.no_grad():
        out = model.decode_to_spectrum(golden[f"{case}.mel"], golden[f"{case}.source"])
    assert_close(out, golden[f"{case}.conv_post_out"], 1e-4, f"{family} conv_post_out")


@pytest.mark.parametrize("window", [1, 3, 40])
@pytest.mark.parametrize("family", ["v1", "v2"])
def test_conv_post_out_in_windows_matches_golden_and_the_whole_pass(family: str, window: int, vocoders) -> None:
    """Later stages decoded a window of mel frames at a time (1 frame: every window is mostly context) give
    upstream's spectrum, and the whole pass's to float rounding."""
    model, golden = vocoders(family)
    case = "H1_frontend_mel"
    mel, source = golden[f"{case}.mel"], golden[f"{case}.source"]
    saved = model.window_frames
    try:
        with torch.no_grad():
            model.window_frames = 0
            whole = model.decode_to_spectrum(mel, source)
            model.window_frames = window
            windowed = model.decode_to_spectrum(mel, source)
    finally:
        model.window_frames = saved
    assert mel.size(-1) > window + model.context_samples() // model.cfg.upsample_rates[0], "the case must need windows"
    assert_close(windowed, golden[f"{case}.conv_post_out"], 1e-4, f"{family} windowed conv_post_out")
    assert_close(windowed, whole, 1e-5, f"{family} windowed against whole")


@pytest.mark.parametrize("frames", [7, 13, 41])
def test_windows_of_any_length_and_batch_give_the_whole_pass(frames: int) -> None:
    model = tiny_model()
    mel = torch.randn(2, 80, frames, generator=torch.Generator().manual_seed(frames)) - 5.0
    with torch.no_grad():
        source = model.source(model.predict_f0(mel), torch.Generator().manual_seed(0))
        model.window_frames = 0
        whole = model.decode(mel, source)
        model.window_frames = 2
        windowed = model.decode(mel, source)
    assert windowed.shape == whole.shape == (2, frames * model.upsample_factor)
    assert_close(windowed, whole, 1e-5, f"{frames} frames in windows of 2")


def test_window_context_is_what_the_convolutions_reach() -> None:
    """The computed context makes windows exact (a bound that came out too small fails the first check), and is
    not far above the need: five samples fewer already move the spectrum, and no context at all moves it a lot."""
    model = tiny_model()
    mel = torch.randn(1, 80, 40, generator=torch.Generator().manual_seed(9)) - 5.0
    context = model.context_samples()
    with torch.no_grad():
        source = model.source(model.predict_f0(mel), torch.Generator().manual_seed(0))
        model.window_frames = 0
        whole = model.decode_to_spectrum(mel, source)
        model.window_frames = 2

        def windowed_with(samples: int) -> float:
            model.context_samples = lambda: samples
            try:
                return (model.decode_to_spectrum(mel, source) - whole).abs().max().item()
            finally:
                del model.context_samples
        assert windowed_with(context) <= 1e-6
        assert windowed_with(context - 5) > 1e-6
        assert windowed_with(0) > 1e-2


def test_windows_are_not_used_under_autograd() -> None:
    """Training-style calls (autograd on) keep the one whole pass, whose graph is upstream's."""
    model = tiny_model()
    model.window_frames = 1
    mel = torch.randn(1, 80, 12, generator=torch.Generator().manual_seed(2)) - 5.0
    source = model.source(model.predict_f0(mel).detach(), torch.Generator().manual_seed(0))
    out = model.decode_to_spectrum(mel, source)
    assert out.requires_grad and out.shape == (1, 18, 12 * 64 + 1)
    calls = []
    model.context_samples = lambda: calls.append(1) or 17
    model.decode_to_spectrum(mel, source)
    assert not calls, "the windowed path ran with autograd on"


@pytest.mark.parametrize("family,case,seed", PARITY)
def test_wave_from_saved_source_and_end_to_end(family: str, case: str, seed: int, vocoders) -> None:
    model, golden = vocoders(family)
    with torch.no_grad():
        wave = model.decode(golden[f"{case}.mel"], golden[f"{case}.source"])
    assert_close(wave, golden[f"{case}.wave"], 1e-4, f"{family} {case} wave from source")
    wave, source = model.inference(golden[f"{case}.mel"], generator=torch.Generator().manual_seed(seed))
    assert_close(source, golden[f"{case}.source"], 5e-4, f"{family} {case} source end to end")
    assert_close(wave, golden[f"{case}.wave"], 1e-3, f"{family} {case} wave end to end")


@pytest.mark.parametrize("finalize", [False, True])
def test_v3_window_from_a_frame_gives_the_whole_run_s_samples(v3: CausalHiFTGenerator, finalize: bool) -> None:
    """A streamed chunk decodes only its frames and a causal context (`inference_from`), yet its samples are
    those of re-vocoding the whole mel, as upstream does."""
    mel = torch.randn(1, 80, 160, generator=torch.Generator().manual_seed(3)) - 5.0
    whole, _ = v3.inference(mel, finalize)
    step = v3.upsample_factor
    for first in (0, 7, 60, 120):
        part = v3.inference_from(mel, first, finalize)
        assert_close(part, whole[:, first * step:], 1e-5, f"window from frame {first}")


def test_v3_window_context_covers_the_decoder_s_reach(v3: CausalHiFTGenerator) -> None:
    """The context is what makes the window exact: with none, the first frames come out different."""
    mel = torch.randn(1, 80, 160, generator=torch.Generator().manual_seed(4)) - 5.0
    whole, _ = v3.inference(mel, False)
    saved = v3.WINDOW_CONTEXT_FRAMES
    try:
        v3.WINDOW_CONTEXT_FRAMES = 0
        bare = v3.inference_from(mel, 100, False)
    finally:
        v3.WINDOW_CONTEXT_FRAMES = saved
    assert (bare - whole[:, 100 * v3.upsample_factor:]).abs().max().item() > 1e-4


# --- a CPU's layout and kernel (conv_layout.py, kernels/snake.cpp) against the goldens ------------------------


def _laid_out(model: HiFTGenerator, kernel: bool) -> HiFTGenerator:
    """A copy with time-major convolutions (every precision on a CPU) and, when asked, the Snake kernel (fast)."""
    if kernel and not kernels.snake_available():
        pytest.skip(f"the kernels are not available here: {kernels.why_not_built() or 'build failed'}")
    laid = copy.deepcopy(model)
    assert laid.use_time_major() > 0
    if kernel:
        assert laid.use_snake_kernel() > 0
    return laid


@pytest.mark.parametrize("kernel", [False, True])
@pytest.mark.parametrize("family", ["v1", "v2"])
def test_time_major_conv_post_out_matches_golden(family: str, kernel: bool, vocoders) -> None:
    model, golden = vocoders(family)
    laid = _laid_out(model, kernel)
    case = "H1_frontend_mel"
    for window in (0, 3):  # whole, and later stages in windows
        laid.window_frames = window
        with torch.no_grad():
            out = laid.decode_to_spectrum(golden[f"{case}.mel"], golden[f"{case}.source"])
        assert_close(out, golden[f"{case}.conv_post_out"], 1e-4, f"{family} time-major conv_post_out ({window})")


@pytest.mark.parametrize("kernel", [False, True])
def test_v3_time_major_matches_goldens(kernel: bool, v3_dir: Path, v3: CausalHiFTGenerator,
                                       g3: dict[str, torch.Tensor]) -> None:
    """conv_post_out, every case's wave (final and not: conv_pre's right context), and the streamed vocoder calls."""
    laid = _laid_out(v3, kernel)
    case = "H1_frontend_mel"
    with torch.no_grad():
        out = laid.decode_to_spectrum(g3[f"{case}.mel"], g3[f"{case}.source"])
    assert_close(out, g3[f"{case}.conv_post_out"], 1e-4, "time-major conv_post_out")
    for case, finalize in V3_CASES:
        wave, _ = laid.inference(g3[f"{case}.mel"], finalize)
        assert_close(wave, g3[f"{case}.wave"], 1e-3, f"{case} time-major wave end to end")
    chunks, _, speech = _s1_vocoder_calls(v3_dir, laid)
    assert_close(torch.cat(chunks, dim=1), speech, 1e-3, "S1 speech, time-major")
