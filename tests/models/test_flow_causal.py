"""The causal flow (`CausalMaskedDiffWithXvec` + `UpsampleConformerEncoder` + `CausalConditionalCFM` +
`CausalConditionalDecoder`) against the upstream goldens of the cosyvoice2-tiny fixture, plus the rules of
its parts: the pre-lookahead layer, the fixed noise, chunk-causal attention, the finalize split."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from cosyvoice_ui.cosyvoice.checkpoint import read_state_dict
from cosyvoice_ui.cosyvoice.config import CausalFlowConfig, parse_v2, read_yaml
from cosyvoice_ui.cosyvoice.models.cfm_causal import CausalConditionalCFM, fixed_noise
from cosyvoice_ui.cosyvoice.models.estimators.unet_causal import CausalConditionalDecoder, chunk_mask
from cosyvoice_ui.cosyvoice.models.flow_causal import CausalMaskedDiffWithXvec
from cosyvoice_ui.cosyvoice.models.lookahead import PreLookaheadLayer
from cosyvoice_ui.cosyvoice.models.upsample_encoder import UpsampleConformerEncoder

from ..conftest import fixture_dir

# case → (streaming, finalize), from the fixture manifest's `stages.flow`.
CASES = {
    "F1_zero_shot": (False, True),
    "F2_stream_chunk0": (True, False),
    "F3_stream_final": (True, True),
    "F4_noprompt": (False, True),
}
EST0_CASES = ["F1_zero_shot", "F2_stream_chunk0"]
# Tolerances from the fixture README / manifest.
ATOL = {"encoder_proj_out": 1e-4, "mu": 1e-4, "spks": 1e-5, "cond": 0.0, "mel": 1e-3, "est0_out": 1e-4}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    diff = (actual.float() - expected.float()).abs().max().item() if actual.numel() else 0.0
    assert diff <= atol, f"{what}: max abs diff {diff:.3g} > {atol}"


@pytest.fixture(scope="module")
def v2_dir() -> Path:
    return fixture_dir("cosyvoice2-tiny")


@pytest.fixture(scope="module")
def cfg(v2_dir: Path) -> CausalFlowConfig:
    return parse_v2(read_yaml(v2_dir / "cosyvoice2.yaml")).flow


@pytest.fixture(scope="module")
def flow(v2_dir: Path, cfg: CausalFlowConfig) -> CausalMaskedDiffWithXvec:
    model = CausalMaskedDiffWithXvec(cfg, CausalConditionalDecoder)
    result = model.load_state_dict(read_state_dict(v2_dir / "flow.pt"), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    return model.eval()


@pytest.fixture(scope="module")
def goldens(v2_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(v2_dir / "flow_goldens.safetensors")


def case_inputs(goldens: dict[str, torch.Tensor], case: str) -> tuple[torch.Tensor, ...]:
    return tuple(goldens[f"{case}.{n}"] for n in ("token", "prompt_token", "prompt_feat", "embedding"))


# --- config and strict load ------------------------------------------------------------------------

def test_config_from_yaml(cfg: CausalFlowConfig) -> None:
    assert (cfg.input_size, cfg.output_size, cfg.vocab_size) == (48, 80, 6561)
    assert (cfg.token_mel_ratio, cfg.pre_lookahead_len) == (2, 3)
    assert cfg.encoder.static_chunk_size == 25 and cfg.encoder.num_blocks == 2
    assert cfg.estimator_chunk_size == 50 and cfg.num_decoding_left_chunks == -1  # `<chunk_size> * <token_mel_ratio>`
    assert cfg.cfm.estimator.channels == (32,) and cfg.cfm.inference_cfg_rate == 0.7


def test_strict_load_uses_official_keys(v2_dir: Path, flow: CausalMaskedDiffWithXvec) -> None:
    sd = read_state_dict(v2_dir / "flow.pt")
    assert set(flow.state_dict()) == set(sd)
    # The fixture's 48-wide look-ahead and up layers (upstream hard-codes 512): widths follow output_size.
    assert flow.encoder.pre_lookahead_layer.conv1.weight.shape == sd["encoder.pre_lookahead_layer.conv1.weight"].shape
    assert flow.encoder.up_layer.conv.weight.shape == (48, 48, 5)


# --- parity --------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", EST0_CASES)
@pytest.mark.parametrize("with_mask", [True, False], ids=["mask", "no-mask"])
def test_estimator_call_matches_golden(flow: CausalMaskedDiffWithXvec, goldens: dict[str, torch.Tensor], case: str,
                                       with_mask: bool) -> None:
    x, mask, mu, t, spks, cond = (goldens[f"{case}.est0_{n}"] for n in ("x", "mask", "mu", "t", "spks", "cond"))
    streaming = bool(goldens[f"{case}.est0_streaming"].item())
    with torch.inference_mode():
        out = flow.estimator(x, mask if with_mask else None, mu, t, spks, cond, streaming=streaming)
    assert_close(out, goldens[f"{case}.est0_out"], ATOL["est0_out"], f"{case}.est0_out")


@pytest.mark.parametrize("case", list(CASES))
def test_conditioning_matches_golden(flow: CausalMaskedDiffWithXvec, goldens: dict[str, torch.Tensor], case: str) -> None:
    streaming, finalize = CASES[case]
    c = flow.condition(*case_inputs(goldens, case), streaming=streaming, finalize=finalize)
    for name in ("encoder_proj_out", "mu", "spks", "cond"):
        assert_close(getattr(c, name), goldens[f"{case}.{name}"], ATOL[name], f"{case}.{name}")
    assert c.mel_len1 == goldens[f"{case}.prompt_feat"].shape[1]


@pytest.mark.parametrize("case", list(CASES))
def test_mel_matches_golden(flow: CausalMaskedDiffWithXvec, goldens: dict[str, torch.Tensor], case: str) -> None:
    streaming, finalize = CASES[case]
    mel, cache = flow.inference(*case_inputs(goldens, case), streaming=streaming, finalize=finalize)
    assert cache is None and mel.dtype == torch.float32
    assert_close(mel, goldens[f"{case}.mel"], ATOL["mel"], f"{case}.mel")
    assert mel.size(2) == flow.generated_frames(goldens[f"{case}.token"].size(1), finalize)


# --- fixed noise ---------------------------------------------------------------------------------

def test_fixed_noise_is_seed0_randn_without_touching_the_global_rng(goldens: dict[str, torch.Tensor]) -> None:
    before = torch.random.get_rng_state()
    noise = fixed_noise()
    assert torch.equal(torch.random.get_rng_state(), before)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        assert torch.equal(noise, torch.randn([1, 80, 15000]))
    for case in CASES:
        golden = goldens[f"{case}.noise"]
        assert torch.equal(noise[:, :, : golden.size(2)], golden), case


class _Recorder(nn.Module):
    """A stand-in estimator: records its calls, returns zero velocity (so the sample is the noise)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[int, ...], bool]] = []

    def forward(self, x, mask, mu, t, spks, cond, streaming=False):  # noqa: ANN001, ANN201 - test double
        self.calls.append((tuple(x.shape), streaming))
        return torch.zeros_like(x)


def test_cfm_uses_buffer_prefix_and_passes_streaming(cfg: CausalFlowConfig) -> None:
    est = _Recorder()
    cfm = CausalConditionalCFM(cfg.cfm, est)
    mu = torch.zeros(1, 80, 30)
    out = cfm(mu, torch.zeros(1, 80), torch.zeros(1, 80, 30), n_timesteps=3, streaming=True)
    assert torch.equal(out, cfm.rand_noise[:, :, :30])
    assert est.calls == [((2, 80, 30), True)] * 3  # guidance batch of two, flag passed every step
    assert "rand_noise" not in cfm.state_dict()
    with pytest.raises(ValueError, match="fixed noise buffer"):
        cfm(torch.zeros(1, 80, 15001), torch.zeros(1, 80), torch.zeros(1, 80, 15001), n_timesteps=1)


# --- the parts' rules ----------------------------------------------------------------------------

def test_lookahead_shapes_and_context() -> None:
    torch.manual_seed(5)
    wide = PreLookaheadLayer(80, 1024, 80, pre_lookahead_len=3)
    assert wide.conv1.weight.shape == (1024, 80, 4) and wide.conv2.weight.shape == (80, 1024, 3)
    layer = PreLookaheadLayer(8, 16).eval()
    x, ctx = torch.randn(1, 10, 8), torch.randn(1, 3, 8)
    with torch.no_grad():
        plain = layer(x)
        assert plain.shape == (1, 10, 8)
        assert torch.equal(plain, layer(x, torch.zeros(1, 3, 8)))  # zero context == no context
        with_ctx = layer(x, ctx)
        # The context reaches only the last L conv1 outputs, and conv2 is causal: frames before T-L are untouched.
        assert torch.equal(with_ctx[:, :7], plain[:, :7]) and not torch.allclose(with_ctx[:, 7:], plain[:, 7:])
        # The output at t is that of the longer sequence x ++ ctx at t: the context is just the next frames.
        assert torch.allclose(with_ctx, layer(torch.cat([x, ctx], 1))[:, :10], atol=1e-6)
    with pytest.raises(ValueError, match="residual"):
        PreLookaheadLayer(80, 1024, 64)


def test_lookahead_output_ignores_frames_beyond_lookahead() -> None:
    torch.manual_seed(6)
    layer = PreLookaheadLayer(4, 8, pre_lookahead_len=3).eval()
    x = torch.randn(1, 12, 4)
    y = x.clone()
    y[:, 8:] += 1.0
    with torch.no_grad():
        # Frame t sees inputs ≤ t+3 (conv1) through conv1 outputs t-2…t (conv2): frames < 5 cannot see frame 8.
        assert torch.equal(layer(x)[:, :5], layer(y)[:, :5])


def test_chunk_mask() -> None:
    m = chunk_mask(5, 2)
    assert m.tolist() == [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert chunk_mask(6, 2, left_chunks=0)[5].tolist() == [0, 0, 0, 0, 1, 1]


def test_upsample_encoder_shapes_and_streaming_causality(cfg: CausalFlowConfig) -> None:
    torch.manual_seed(7)
    enc = UpsampleConformerEncoder(cfg.encoder, pre_lookahead_len=3, upsample_stride=2).eval()
    x = torch.randn(1, 60, 48)
    y = x.clone()
    y[:, 40:] += 1.0  # change tokens of the second 25-token chunk (and beyond) only
    with torch.no_grad():
        out = enc(x, streaming=True)
        assert out.shape == (1, 120, 48)
        # Chunk 0 (tokens < 25, frames < 50) looks ahead to token 27 at most: tokens ≥ 40 cannot reach it.
        assert torch.equal(out[:, :50], enc(y, streaming=True)[:, :50])
        assert not torch.allclose(enc(x)[:, :50], enc(y)[:, :50])  # full attention: everything mixes


def test_estimator_streaming_is_chunk_causal(flow: CausalMaskedDiffWithXvec) -> None:
    torch.manual_seed(8)
    x, mu, cond = torch.randn(1, 80, 120), torch.randn(1, 80, 120), torch.randn(1, 80, 120)
    spks, t = torch.randn(1, 80), torch.tensor([0.3])
    x2 = x.clone()
    x2[:, :, 50:] += 1.0
    with torch.inference_mode():
        a = flow.estimator(x, None, mu, t, spks, cond, streaming=True)
        b = flow.estimator(x2, None, mu, t, spks, cond, streaming=True)
    assert a.shape == (1, 80, 120)
    assert torch.equal(a[:, :, :50], b[:, :, :50])  # the first 50-frame chunk never sees later frames


def test_finalize_false_drops_lookahead_frames(flow: CausalMaskedDiffWithXvec, goldens: dict[str, torch.Tensor]) -> None:
    token, prompt_token, prompt_feat, embedding = case_inputs(goldens, "F2_stream_chunk0")
    c = flow.condition(token, prompt_token, prompt_feat, embedding, streaming=True, finalize=False)
    assert c.mu.shape == (1, 80, 2 * (prompt_token.size(1) + token.size(1) - 3))
    with pytest.raises(ValueError, match="T2 ≥ 4"):
        flow.condition(token[:, :3], prompt_token, prompt_feat, embedding, finalize=False)
    with pytest.raises(ValueError, match="frames per prompt token"):
        flow.condition(token, prompt_token, prompt_feat[:, :-1], embedding)


def test_estimator_bf16_transform(v2_dir: Path, cfg: CausalFlowConfig, goldens: dict[str, torch.Tensor]) -> None:
    """The inherited `to_bf16` runs the causal blocks too; the velocity stays float32 and near the golden."""
    est = CausalConditionalDecoder(cfg.cfm.estimator, cfg.estimator_chunk_size, cfg.num_decoding_left_chunks)
    prefix = "decoder.estimator."
    sd = read_state_dict(v2_dir / "flow.pt")
    est.load_state_dict({k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}, strict=True)
    est.eval().to_bf16()
    case = "F2_stream_chunk0"
    x, mask, mu, t, spks, cond = (goldens[f"{case}.est0_{n}"] for n in ("x", "mask", "mu", "t", "spks", "cond"))
    with torch.inference_mode():
        out = est(x, mask, mu, t, spks, cond, streaming=True)
    assert out.dtype == torch.float32
    golden = goldens[f"{case}.est0_out"]
    assert (out - golden).abs().max() < 0.05 * golden.abs().max()  # bf16 rounding, not a different network
