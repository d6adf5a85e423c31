"""The DiT flow (`CausalMaskedDiffWithDiT` + `CausalConditionalCFM` + `DiT`) against the upstream goldens of
the cosyvoice3-tiny fixture: the first estimator call and its internals, the conditioning, the 10-step mel
of every case (full and chunk attention, final and look-ahead calls), plus shapes and strict loading."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cosyvoice_ui.cosyvoice.checkpoint import load_strict, read_state_dict
from cosyvoice_ui.cosyvoice.config import DiTFlowConfig, parse_v3, read_yaml
from cosyvoice_ui.cosyvoice.models.estimators.dit import DiT, Rotation, apply_partial_rotary
from cosyvoice_ui.cosyvoice.models.flow_dit import CausalMaskedDiffWithDiT
from cosyvoice_ui.cosyvoice.models.fused_linears import fuse_linear_gelus, onednn_fused_gelu_works
from cosyvoice_ui.cosyvoice.models.linears import PackedLinear, unpack_linears
from cosyvoice_ui.cosyvoice.parity.v3 import est0_inputs, estimator_call_internals
from cosyvoice_ui.errors import CheckpointError
from ..conftest import fixture_dir

CASES = ["F1_zero_shot", "F2_stream_chunk0", "F3_stream_final", "F4_noprompt"]
EST_CASES = ["F1_zero_shot", "F2_stream_chunk0"]
# Tolerances from the fixture README (mel: 1e-3 recommended).
ATOL = {"pre_lookahead_out": 1e-5, "mu": 1e-5, "spks": 1e-5, "cond": 0.0, "mel": 1e-3, "est0": 1e-4,
        "est0_time_embed": 1e-5, "est0_input_embed": 1e-5, "est0_rope_freqs": 1e-5}
ESTIMATOR_PREFIX = "decoder.estimator."


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    diff = (actual.float() - expected.float()).abs().max().item() if actual.numel() else 0.0
    assert diff <= atol, f"{what}: max abs diff {diff:.3g} > {atol}"


@pytest.fixture(scope="module")
def v3_fixture() -> Path:
    return fixture_dir("cosyvoice3-tiny")


@pytest.fixture(scope="module")
def cfg(v3_fixture: Path) -> DiTFlowConfig:
    return parse_v3(read_yaml(v3_fixture / "cosyvoice3.yaml")).flow


@pytest.fixture(scope="module")
def state_dict(v3_fixture: Path) -> dict[str, torch.Tensor]:
    return read_state_dict(v3_fixture / "flow.pt")


@pytest.fixture(scope="module")
def flow(cfg: DiTFlowConfig, state_dict: dict[str, torch.Tensor]) -> CausalMaskedDiffWithDiT:
    model = CausalMaskedDiffWithDiT(cfg, DiT)
    load_strict(model, state_dict, "flow.pt")
    return model.eval()


@pytest.fixture(scope="module")
def goldens(v3_fixture: Path) -> dict[str, torch.Tensor]:
    return load_file(v3_fixture / "flow_goldens.safetensors")


# F3 shares F1's inputs (the fixture does not repeat them); only the DiT's attention mask differs.
FLAGS = {"F1_zero_shot": (False, True), "F2_stream_chunk0": (True, False), "F3_stream_final": (True, True),
         "F4_noprompt": (False, True)}
SAME_INPUTS = {"F3_stream_final": "F1_zero_shot"}


def case_inputs(goldens: dict[str, torch.Tensor], case: str) -> tuple[torch.Tensor, ...]:
    return tuple(goldens[f"{case}.{n}"] for n in ("token", "prompt_token", "prompt_feat", "embedding"))


# --- the first estimator call ----------------------------------------------------------------------

@pytest.mark.parametrize("with_mask", [True, False], ids=["ones_mask", "no_mask"])
@pytest.mark.parametrize("case", EST_CASES)
def test_estimator_call_matches_golden(flow: CausalMaskedDiffWithDiT, goldens: dict[str, torch.Tensor], case: str,
                                       with_mask: bool) -> None:
    """Output and every stored internal of the first call; mask None (what our flow passes at B = 1)
    must give the same as upstream's all-ones mask."""
    x, mask, mu, t, spks, cond, streaming = est0_inputs(goldens, case)
    seen = estimator_call_internals(flow.estimator, (x, mask if with_mask else None, mu, t, spks, cond, streaming))
    stored = {k.removeprefix(f"{case}.est0_") for k in goldens if k.startswith(f"{case}.est0_")}
    outputs = stored - {"t", "streaming", "attn_mask"}  # inputs, and the mask (its own test)
    assert outputs <= set(seen)
    for name in outputs:
        key = f"{case}.est0_{name}"
        assert_close(seen[name], goldens[key], ATOL.get(f"est0_{name}", ATOL["est0"]), key)
    assert seen["out"].dtype == torch.float32


def test_streaming_attention_mask_matches_golden(flow: CausalMaskedDiffWithDiT,
                                                 goldens: dict[str, torch.Tensor]) -> None:
    golden = goldens["F2_stream_chunk0.est0_attn_mask"].bool()
    frames = golden.size(-1)
    ours = flow.estimator.attention_mask(torch.ones(2, 1, frames), frames, True, torch.device("cpu"))
    assert torch.equal(ours.expand_as(golden), golden)
    assert torch.equal(flow.estimator.attention_mask(None, frames, True, torch.device("cpu"))[0, 0], golden[0, 0])
    assert flow.estimator.attention_mask(None, frames, False, torch.device("cpu")) is None


def test_streaming_sees_every_left_chunk_whatever_the_config_says(cfg: DiTFlowConfig) -> None:
    """Upstream stores num_decoding_left_chunks but passes -1 to its mask, and sizes proj_out by mel_dim."""
    est = DiT(replace(cfg.cfm.estimator, num_decoding_left_chunks=0, out_channels=7))
    mask = est.attention_mask(None, 120, True, torch.device("cpu"))[0, 0]
    assert mask[119].all() and not mask[49, 50:].any()
    assert est.proj_out.out_features == cfg.cfm.estimator.mel_dim
    with pytest.raises(ValueError, match="long_skip_connection"):
        DiT(replace(cfg.cfm.estimator, long_skip_connection=True))


def test_rotary_covers_head_zero_only(flow: CausalMaskedDiffWithDiT) -> None:
    """The quirk: RoPE rotates only the first dim_head channels of the full-width q (head 0); the other
    heads' channels pass through untouched (position 0 has angle 0, so it is left out of the check)."""
    est = flow.estimator
    attn = est.transformer_blocks[0].attn
    x = torch.randn(1, 8, est.cfg.dim, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        q = attn.to_q(x)
        rotated = apply_partial_rotary(q, est.rotary_embed(8))
    dh = est.cfg.dim_head
    assert torch.equal(rotated[..., dh:], q[..., dh:])
    assert not torch.allclose(rotated[:, 1:, :dh], q[:, 1:, :dh])


# --- the flow ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", [c for c in CASES if c not in SAME_INPUTS])
def test_conditioning_matches_golden(flow: CausalMaskedDiffWithDiT, goldens: dict[str, torch.Tensor],
                                     case: str) -> None:
    _, finalize = FLAGS[case]
    c = flow.condition(*case_inputs(goldens, case), finalize=finalize)
    assert_close(c.encoder_proj_out, goldens[f"{case}.pre_lookahead_out"], ATOL["pre_lookahead_out"],
                 f"{case}.pre_lookahead_out")
    for name in ("mu", "spks", "cond"):
        assert_close(getattr(c, name), goldens[f"{case}.{name}"], ATOL[name], f"{case}.{name}")
    assert c.mel_len1 == goldens[f"{case}.prompt_feat"].shape[1]
    assert c.mel_len1 + c.mel_len2 == goldens[f"{case}.noise"].shape[2]


def test_fixed_noise_is_the_golden_noise(flow: CausalMaskedDiffWithDiT, goldens: dict[str, torch.Tensor]) -> None:
    for case in ("F1_zero_shot", "F2_stream_chunk0", "F4_noprompt"):
        golden = goldens[f"{case}.noise"]
        assert torch.equal(flow.decoder.initial_noise(golden.size(2), golden.device, golden.dtype), golden)


@pytest.mark.parametrize("case", CASES)
def test_mel_matches_golden(flow: CausalMaskedDiffWithDiT, goldens: dict[str, torch.Tensor], case: str) -> None:
    """10 Euler steps from the fixed noise buffer, streaming and finalize as upstream ran the case."""
    streaming, finalize = FLAGS[case]
    mel, cache = flow.inference(*case_inputs(goldens, case), streaming=streaming, finalize=finalize)
    assert cache is None
    assert mel.dtype == torch.float32
    assert_close(mel, goldens[f"{case}.mel"], ATOL["mel"], f"{case}.mel")


def test_stream_call_1_matches_golden(flow: CausalMaskedDiffWithDiT, v3_fixture: Path) -> None:
    """The second flow call of upstream's streamed request (stream goldens): the first 78 tokens,
    chunk attention, last 3 tokens look-ahead only, unsliced output."""
    s = load_file(v3_fixture / "stream_goldens.safetensors")
    prompt = (s["S1.prompt_token"], s["S1.prompt_feat"], s["S1.embedding"])
    mel, _ = flow.inference(s["S1.token"][:, :78], *prompt, streaming=True, finalize=False)
    assert_close(mel, s["S1.flow_mel_1"], ATOL["mel"], "S1.flow_mel_1")


def test_f3_inputs_are_f1s(goldens: dict[str, torch.Tensor]) -> None:
    for a, b in zip(case_inputs(goldens, "F3_stream_final"), case_inputs(goldens, "F1_zero_shot")):
        assert torch.equal(a, b)


def test_chunk_attention_changes_the_mel_but_not_its_first_chunk(flow: CausalMaskedDiffWithDiT,
                                                                 goldens: dict[str, torch.Tensor]) -> None:
    """Streaming frames never see later chunks: the first 50-frame chunk (the prompt) is identical whatever
    follows, and the streamed mel differs from the full-attention one."""
    inputs = case_inputs(goldens, "F1_zero_shot")
    c = flow.condition(*inputs)
    with torch.inference_mode():
        full = flow.decoder(c.mu, c.spks, c.cond, n_timesteps=2)
        stream = flow.decoder(c.mu, c.spks, c.cond, n_timesteps=2, streaming=True)
        short = flow.decoder(c.mu[:, :, :60], c.spks, c.cond[:, :, :60], n_timesteps=2, streaming=True)
    chunk = flow.estimator.cfg.static_chunk_size
    # Equal up to float rounding (other lengths take other kernel blockings).
    assert_close(stream[:, :, :chunk], short[:, :, :chunk], 1e-5, "first chunk")
    assert (full - stream).abs().max() > 1e-3


# --- shapes, inputs and loading ---------------------------------------------------------------------

def test_shapes_and_lengths(flow: CausalMaskedDiffWithDiT) -> None:
    r, look = flow.cfg.token_mel_ratio, flow.cfg.pre_lookahead_len
    emb = torch.randn(1, flow.cfg.spk_embed_dim, generator=torch.Generator().manual_seed(3))
    token = torch.arange(10, dtype=torch.int32).unsqueeze(0)
    prompt_token = torch.arange(4, dtype=torch.int32).unsqueeze(0)
    prompt_feat = torch.zeros(1, r * 4, flow.cfg.output_size)
    final, _ = flow.inference(token, prompt_token, prompt_feat, emb, n_timesteps=1)
    partial, _ = flow.inference(token, prompt_token, prompt_feat, emb, streaming=True, finalize=False,
                                n_timesteps=1)
    assert final.shape == (1, flow.cfg.output_size, flow.generated_frames(10)) == (1, 80, r * 10)
    assert partial.shape == (1, 80, flow.generated_frames(10, finalize=False)) == (1, 80, r * (10 - look))
    est = flow.estimator
    with torch.inference_mode():
        v = est(torch.zeros(2, 80, 7), None, torch.zeros(2, 80, 7), torch.zeros(2), torch.zeros(2, 80),
                torch.zeros(2, 80, 7))
    assert v.shape == (2, est.cfg.mel_dim, 7)


def test_bad_inputs_are_rejected(flow: CausalMaskedDiffWithDiT, goldens: dict[str, torch.Tensor]) -> None:
    token, prompt_token, prompt_feat, emb = case_inputs(goldens, "F1_zero_shot")
    with pytest.raises(ValueError, match="T2"):
        flow.inference(token[:, :0], prompt_token, prompt_feat, emb)
    with pytest.raises(ValueError, match="look-ahead"):
        flow.inference(token[:, :3], prompt_token, prompt_feat, emb, finalize=False)
    with pytest.raises(ValueError, match="mel frames per prompt token"):
        flow.inference(token, prompt_token, prompt_feat[:, :-1], emb)
    with pytest.raises(ValueError, match="shape of mu"):
        flow.inference(token, prompt_token, prompt_feat, emb, noise=torch.zeros(1, 80, 3))


def test_official_keys_load_strictly(cfg: DiTFlowConfig, state_dict: dict[str, torch.Tensor]) -> None:
    model = CausalMaskedDiffWithDiT(cfg, DiT)
    assert set(model.state_dict()) == set(state_dict)
    model.load_state_dict(state_dict, strict=True)
    assert "decoder.estimator.rotary_embed.inv_freq" in state_dict  # a persistent buffer upstream
    assert not any("rand_noise" in k for k in model.state_dict())  # the fixed noise is not in flow.pt
    broken = dict(state_dict)
    broken.pop(ESTIMATOR_PREFIX + "proj_out.bias")
    with pytest.raises(CheckpointError, match="proj_out.bias"):
        load_strict(CausalMaskedDiffWithDiT(cfg, DiT), broken, "flow.pt")


# --- fast mode ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("matmul_attention", [False, True], ids=["sdpa", "matmul"])
def test_bf16_estimator_stays_near_float32(cfg: DiTFlowConfig, state_dict: dict[str, torch.Tensor],
                                           goldens: dict[str, torch.Tensor], matmul_attention: bool) -> None:
    """`to_bf16` (what fast mode calls on any estimator): float32 in and out, time embedding and rotary
    angles kept float32, output within bf16 rounding of the golden call (streaming mask included)."""
    model = CausalMaskedDiffWithDiT(cfg, DiT)
    load_strict(model, state_dict, "flow.pt")
    est = model.eval().estimator
    est.to_bf16(matmul_attention=matmul_attention)
    assert est.time_embed.time_mlp[0].weight.dtype == torch.float32
    assert est.rotary_embed.inv_freq.dtype == torch.float32
    assert est.proj_out.weight.dtype == torch.bfloat16
    _assert_first_calls_near_golden(est, goldens, "bf16")  # measured 0.007·scale



# --- a CPU's layouts: time-major position convolutions (every precision), fused GELUs (fast, bf16) ----------------


def test_time_major_position_convolutions_match_the_goldens(cfg: DiTFlowConfig, state_dict: dict[str, torch.Tensor],
                                                          goldens: dict[str, torch.Tensor], v3_fixture: Path) -> None:
    """`DiT.use_time_major` (what a CPU load does in every precision): the input embedding and output of the first
    call, the 10-step mel of every case, and a streamed call, at the goldens' tolerances."""
    laid = CausalMaskedDiffWithDiT(cfg, DiT)
    load_strict(laid, state_dict, "flow.pt")
    laid.eval()
    assert laid.estimator.use_time_major() == 2
    pos = laid.estimator.input_embed.conv_pos_embed
    assert pos.conv1[0].time_major and pos.conv2[0].time_major
    for case in EST_CASES:
        x, mask, mu, t, spks, cond, streaming = est0_inputs(goldens, case)
        seen = estimator_call_internals(laid.estimator, (x, mask, mu, t, spks, cond, streaming))
        stored = [n for n in ("input_embed", "out") if f"{case}.est0_{n}" in goldens]
        assert "out" in stored
        for name in stored:
            key = f"{case}.est0_{name}"
            assert_close(seen[name], goldens[key], ATOL.get(f"est0_{name}", ATOL["est0"]), f"{key}, time-major")
    for case in CASES:
        streaming, finalize = FLAGS[case]
        mel, _ = laid.inference(*case_inputs(goldens, case), streaming=streaming, finalize=finalize)
        assert_close(mel, goldens[f"{case}.mel"], ATOL["mel"], f"{case}.mel, time-major")
    s = load_file(v3_fixture / "stream_goldens.safetensors")
    prompt = (s["S1.prompt_token"], s["S1.prompt_feat"], s["S1.embedding"])
    mel, _ = laid.inference(s["S1.token"][:, :78], *prompt, streaming=True, finalize=False)
    assert_close(mel, s["S1.flow_mel_1"], ATOL["mel"], "S1.flow_mel_1, time-major")


def test_an_all_valid_mask_is_no_mask_and_a_padded_one_still_masks(flow: CausalMaskedDiffWithDiT,
                                                                  goldens: dict[str, torch.Tensor]) -> None:
    x, _, mu, t, spks, cond, _ = est0_inputs(goldens, "F1_zero_shot")
    frames = x.size(-1)
    with torch.inference_mode():
        none = flow.estimator(x, None, mu, t, spks, cond)
        ones = flow.estimator(x, torch.ones(x.size(0), 1, frames), mu, t, spks, cond)
        padded_mask = torch.ones(x.size(0), 1, frames)
        padded_mask[:, :, frames - 5:] = 0
        padded = flow.estimator(x, padded_mask, mu, t, spks, cond)
    assert torch.equal(none, ones)
    assert not torch.allclose(padded[..., :frames - 5], none[..., :frames - 5])  # the padding was masked out


def test_a_rotation_computed_once_is_the_angles_rotation() -> None:
    g = torch.Generator().manual_seed(0)
    x, angles = torch.randn(2, 7, 48, generator=g), torch.randn(1, 7, 16, generator=g) * 30
    assert torch.equal(apply_partial_rotary(x, Rotation.of(angles)), apply_partial_rotary(x, angles))


@pytest.mark.skipif(not onednn_fused_gelu_works(torch.bfloat16), reason="oneDNN has no fused bf16 GELU here")
def test_fused_gelu_bf16_estimator_stays_near_float32(cfg: DiTFlowConfig, state_dict: dict[str, torch.Tensor],
                                                      goldens: dict[str, torch.Tensor]) -> None:
    """Fast's bf16 DiT with its feed-forwards' GELU inside oneDNN's product: within bf16 rounding of the golden
    call, as the unfused bf16 estimator is; `unpack_linears` gives back the unfused layers with the same keys."""
    model = CausalMaskedDiffWithDiT(cfg, DiT)
    load_strict(model, state_dict, "flow.pt")
    est = model.eval().estimator
    est.to_bf16(matmul_attention=True)
    keys = set(est.state_dict())
    assert fuse_linear_gelus(est, skip=("time_embed",)) == len(est.transformer_blocks)
    fused = est.transformer_blocks[0].ff.ff[0]
    assert isinstance(fused, PackedLinear) and fused.activation == "gelu_tanh"
    _assert_first_calls_near_golden(est, goldens, "bf16, fused GELU")
    unpack_linears(est)
    assert set(est.state_dict()) == keys and isinstance(est.transformer_blocks[0].ff.ff[0][1], torch.nn.GELU)


def _assert_first_calls_near_golden(est: DiT, goldens: dict[str, torch.Tensor], what: str) -> None:
    """Each case's first estimator call (streaming mask included): float32 out, within 0.02 of the golden's scale."""
    for case in EST_CASES:
        x, _, mu, t, spks, cond, streaming = est0_inputs(goldens, case)
        with torch.inference_mode():
            out = est(x, None, mu, t, spks, cond, streaming)
        golden = goldens[f"{case}.est0_out"]
        assert out.dtype == torch.float32
        assert_close(out, golden, 0.02 * golden.abs().max().item(), f"{case}.est0_out ({what})")
