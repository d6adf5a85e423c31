"""The v1 flow estimator (`ConditionalDecoder`): golden parity on the tiny fixture, and mask behaviour
on a tiny random model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cosyvoice_ui.cosyvoice.checkpoint import load_strict, read_state_dict
from cosyvoice_ui.cosyvoice.config import EstimatorConfig, parse_v1, read_yaml
from cosyvoice_ui.cosyvoice.models.estimators.unet import ConditionalDecoder, SinusoidalPosEmb

PREFIX = "decoder.estimator."


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


@pytest.fixture(scope="module")
def golden_estimator(v1_fixture: Path) -> ConditionalDecoder:
    cfg = parse_v1(read_yaml(v1_fixture / "cosyvoice.yaml"))
    est = ConditionalDecoder(cfg.flow.cfm.estimator)
    sd = read_state_dict(v1_fixture / "flow.pt")
    load_strict(est, {k[len(PREFIX):]: v for k, v in sd.items() if k.startswith(PREFIX)}, "flow.pt")
    return est.eval()


@pytest.mark.parametrize("use_mask", [True, False], ids=["golden-mask", "no-mask-path"])
def test_first_estimator_call_matches_golden(golden_estimator: ConditionalDecoder, v1_fixture: Path,
                                             use_mask: bool) -> None:
    goldens = load_file(v1_fixture / "flow_goldens.safetensors")
    g = {k.split(".est0_")[1]: v for k, v in goldens.items() if ".est0_" in k}
    mask = g["mask"] if use_mask else None
    with torch.inference_mode():
        out = golden_estimator(g["x"], mask, g["mu"], g["t"], g["spks"], g["cond"])
    assert out.shape == g["out"].shape == (2, 80, 189)
    diff = max_diff(out, g["out"])
    assert diff <= 1e-4, f"est0_out max abs diff {diff:.3g}"


# --- tiny random model ----------------------------------------------------------------------------

TINY = EstimatorConfig(in_channels=320, out_channels=80, channels=(16, 16), attention_head_dim=8,
                       n_blocks=1, num_mid_blocks=1, num_heads=2)


@pytest.fixture(scope="module")
def tiny() -> ConditionalDecoder:
    with torch.random.fork_rng():  # module init draws from the global RNG; keep other tests unaffected
        torch.manual_seed(0)
        est = ConditionalDecoder(TINY).eval()
    # Non-trivial norms/biases so masked and unmasked frames really differ.
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in est.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return est


def inputs(b: int, t: int, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(b, 80, t, generator=g),
        "mu": torch.randn(b, 80, t, generator=g),
        "t": torch.rand(b, generator=g),
        "spks": torch.randn(b, 80, generator=g),
        "cond": torch.randn(b, 80, t, generator=g),
    }


def run(est: ConditionalDecoder, a: dict[str, torch.Tensor], mask: torch.Tensor | None) -> torch.Tensor:
    with torch.inference_mode():
        return est(a["x"], mask, a["mu"], a["t"], a["spks"], a["cond"])


def lengths_mask(lengths: list[int], t: int) -> torch.Tensor:
    return (torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).unsqueeze(1).float()


@pytest.mark.parametrize("t", [1, 2, 7, 8, 33])
def test_output_shape_for_odd_and_even_lengths(tiny: ConditionalDecoder, t: int) -> None:
    out = run(tiny, inputs(2, t), None)
    assert out.shape == (2, 80, t)
    assert torch.isfinite(out).all()


def test_all_ones_mask_equals_no_mask(tiny: ConditionalDecoder) -> None:
    a = inputs(2, 21)
    assert torch.equal(run(tiny, a, torch.ones(2, 1, 21)), run(tiny, a, None))


def test_bool_and_float_masks_agree(tiny: ConditionalDecoder) -> None:
    a, m = inputs(2, 21), lengths_mask([21, 13], 21)
    assert torch.equal(run(tiny, a, m), run(tiny, a, m.bool()))


def test_padded_frames_are_zero_and_their_content_does_not_leak(tiny: ConditionalDecoder) -> None:
    t, n = 24, 15
    a, m = inputs(2, t), lengths_mask([t, n], t)
    out = run(tiny, a, m)
    assert out[1, :, n:].abs().max() == 0
    b = {k: v.clone() for k, v in a.items()}
    for k in ("x", "mu", "cond"):
        b[k][1, :, n:] = 100 * torch.randn(80, t - n)
    assert max_diff(run(tiny, b, m), out) <= 1e-6


def test_batch_rows_are_independent(tiny: ConditionalDecoder) -> None:
    """An unpadded row gives the same result alone (no mask) as next to a padded row."""
    t = 24
    a = inputs(2, t)
    out = run(tiny, a, lengths_mask([t, 11], t))
    alone = run(tiny, {k: v[:1] for k, v in a.items()}, None)
    assert max_diff(out[:1], alone) <= 1e-5


def test_padding_changes_valid_frames_as_upstream(tiny: ConditionalDecoder) -> None:
    """Not invariant, by design of the reference: GroupNorm statistics (and the down/up-sampled
    lengths) include padded frames, so a padded row differs from the same row run unpadded.
    Parity with upstream requires keeping this; B=1 inference never pads."""
    t, n = 24, 11
    a = inputs(2, t)
    padded = run(tiny, a, lengths_mask([t, n], t))[1:, :, :n]
    alone = run(tiny, {k: (v[1:, ..., :n] if v.dim() == 3 else v[1:]) for k, v in a.items()}, None)
    assert max_diff(padded, alone) > 1e-4


def test_time_embedding_layout() -> None:
    emb = SinusoidalPosEmb(320)
    zero = emb(torch.zeros(1))
    assert torch.equal(zero[0, :160], torch.zeros(160)) and torch.equal(zero[0, 160:], torch.ones(160))
    t = torch.tensor([0.25])
    j = torch.arange(160, dtype=torch.float64)
    expected = 1000 * 0.25 * torch.exp(-j * torch.log(torch.tensor(10000.0, dtype=torch.float64)) / 159)
    assert max_diff(emb(t)[0, :160], expected.sin()) < 1e-3  # arguments reach 250 rad: float32 rounding
    assert max_diff(emb(t)[0, 160:], expected.cos()) < 1e-3


def test_to_bf16_keeps_shapes_and_the_float32_interface() -> None:
    with torch.random.fork_rng():
        torch.manual_seed(1)
        est = ConditionalDecoder(TINY).eval()
    a = inputs(2, 19)
    ref = run(est, a, lengths_mask([19, 12], 19))
    est.to_bf16(matmul_attention=True)
    out = run(est, a, lengths_mask([19, 12], 19))
    assert est.compute_dtype == torch.bfloat16 and est.final_proj.weight.dtype == torch.bfloat16
    assert est.time_mlp.linear_1.weight.dtype == torch.float32  # t·1000 stays float32
    assert all(block.attn1.matmul_attention for block in est.mid_blocks[0][1])
    assert out.dtype == torch.float32 and out.shape == ref.shape == (2, 80, 19)
    assert out[1, :, 12:].abs().max() == 0  # padded frames stay exactly zero
    assert ((out - ref).norm() / ref.norm()).item() < 0.05
