"""The v1 flow (`MaskedDiffWithXvec` + `ConditionalCFM`) against the upstream goldens of the tiny fixture:
intermediates, the 10-step mel with injected noise, the two-chunk streaming case, plus sampler rules."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cosyvoice_ui.cosyvoice.checkpoint import read_state_dict
from cosyvoice_ui.cosyvoice.config import parse_v1, read_yaml
from cosyvoice_ui.errors import CheckpointError
from cosyvoice_ui.cosyvoice.models.cfm import draw_noise, euler_steps, time_grid
from cosyvoice_ui.cosyvoice.families import V1
from cosyvoice_ui.cosyvoice.models.flow import MaskedDiffWithXvec
from cosyvoice_ui.cosyvoice.registry import backend_for

CASES = ["F1_zero_shot", "F2_short", "F3_noprompt"]
# Tolerances from the fixture README.
ATOL = {"encoder_proj_out": 1e-4, "mu": 1e-4, "spks": 1e-5, "cond": 0.0, "mel": 1e-3, "flow_cache_out": 1e-4}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    diff = (actual.float() - expected.float()).abs().max().item() if actual.numel() else 0.0
    assert diff <= atol, f"{what}: max abs diff {diff:.3g} > {atol}"


@pytest.fixture(scope="module")
def flow(v1_fixture: Path) -> MaskedDiffWithXvec:
    cfg = parse_v1(read_yaml(v1_fixture / "cosyvoice.yaml"))
    return backend_for(V1).load_flow(cfg.flow, read_state_dict(v1_fixture / "flow.pt"))


@pytest.fixture(scope="module")
def goldens(v1_fixture: Path) -> dict[str, torch.Tensor]:
    return load_file(v1_fixture / "flow_goldens.safetensors")


@pytest.fixture(scope="module")
def stream(v1_fixture: Path) -> dict[str, torch.Tensor]:
    return {k.removeprefix("S1."): v for k, v in load_file(v1_fixture / "streaming_goldens.safetensors").items()}


def case_inputs(goldens: dict[str, torch.Tensor], case: str) -> tuple[torch.Tensor, ...]:
    return tuple(goldens[f"{case}.{n}"] for n in ("token", "prompt_token", "prompt_feat", "embedding"))


@pytest.mark.parametrize("case", CASES)
def test_conditioning_matches_golden(flow: MaskedDiffWithXvec, goldens: dict[str, torch.Tensor], case: str) -> None:
    c = flow.condition(*case_inputs(goldens, case))
    for name in ("encoder_proj_out", "mu", "spks", "cond"):
        assert_close(getattr(c, name), goldens[f"{case}.{name}"], ATOL[name], f"{case}.{name}")
    assert c.mel_len1 == goldens[f"{case}.prompt_feat"].shape[1]
    assert c.mel_len1 + c.mel_len2 == goldens[f"{case}.mask"].shape[2]


@pytest.mark.parametrize("case", CASES)
def test_mel_with_golden_noise(flow: MaskedDiffWithXvec, goldens: dict[str, torch.Tensor], case: str) -> None:
    mel, cache = flow.inference(*case_inputs(goldens, case), noise=goldens[f"{case}.noise"])
    assert mel.dtype == torch.float32
    assert_close(mel, goldens[f"{case}.mel"], ATOL["mel"], f"{case}.mel")
    assert cache.shape == (1, 80, goldens[f"{case}.prompt_feat"].shape[1] + 34, 2)


def test_generated_frame_count(flow: MaskedDiffWithXvec) -> None:
    # floor(n · 22050 / (50 · 256)); 120 → 206 and 50 → 86 are the streaming chunk sizes.
    assert [flow.generated_frames(n) for n in (1, 30, 45, 60, 50, 120, 256)] == [1, 51, 77, 103, 86, 206, 441]


# --- v1 streaming: two chunks chained through flow_cache ------------------------------------------

@pytest.fixture(scope="module")
def chunks(flow: MaskedDiffWithXvec, stream: dict[str, torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """tokens[0:120] with an empty cache, then tokens[100:150] with chunk 0's cache; noise from the
    manifest recipes (seeds 9100 and 9104) through our own generator path."""
    prompt = (stream["prompt_token"], stream["prompt_feat"], stream["embedding"])
    tok = stream["token"]
    mel0, cache0 = flow.inference(tok[:, :120], *prompt, flow_cache=torch.zeros(1, 80, 0, 2),
                                  generator=torch.Generator().manual_seed(9100))
    mel1, cache1 = flow.inference(tok[:, 100:150], *prompt, flow_cache=cache0,
                                  generator=torch.Generator().manual_seed(9104))
    return [(mel0, cache0), (mel1, cache1)]


def test_generator_draw_reproduces_golden_noise(stream: dict[str, torch.Tensor]) -> None:
    for i, seed in ((0, 9100), (1, 9104)):
        golden = stream[f"chunk{i}.flow_noise"]
        drawn = draw_noise(tuple(golden.shape), torch.Generator().manual_seed(seed), golden.device, golden.dtype)
        assert torch.equal(drawn, golden)


@pytest.mark.parametrize("i", [0, 1])
def test_streaming_chunk_matches_golden(chunks: list, stream: dict[str, torch.Tensor], i: int) -> None:
    mel, cache = chunks[i]
    assert_close(mel, stream[f"chunk{i}.flow_mel"], ATOL["mel"], f"chunk{i}.flow_mel")
    assert_close(cache, stream[f"chunk{i}.flow_cache_out"], ATOL["flow_cache_out"], f"chunk{i}.flow_cache_out")


def test_streaming_cache_pins_prompt_and_overlap(chunks: list, stream: dict[str, torch.Tensor]) -> None:
    """Chunk 1 reuses chunk 0's noise/mu for its first 55 frames, so both caches share the prompt part."""
    (_, cache0), (_, cache1) = chunks
    m1 = stream["prompt_feat"].shape[1]
    assert cache0.shape == cache1.shape == (1, 80, m1 + 34, 2)
    assert torch.equal(cache1[:, :, :m1], cache0[:, :, :m1])
    assert torch.equal(cache0[:, :, :m1, 0], stream["chunk0.flow_noise"][:, :, :m1])


# --- sampler rules ---------------------------------------------------------------------------------

def test_time_grid_matches_documented_values() -> None:
    doc = [0, 0.012312, 0.048943, 0.108993, 0.190983, 0.292893, 0.412215, 0.546010, 0.690983, 0.843566, 1]
    grid = time_grid(10, "cosine")
    assert grid.dtype == torch.float32
    assert_close(grid, torch.tensor(doc), 1e-6, "cosine grid")
    assert_close(time_grid(4, "linear"), torch.tensor([0, 0.25, 0.5, 0.75, 1]), 0.0, "linear grid")
    with pytest.raises(ValueError, match="cosine"):
        time_grid(10, "karras")


def test_euler_steps_walk_the_grid() -> None:
    grid = time_grid(10)
    steps = euler_steps(grid)
    assert len(steps) == 10
    assert_close(torch.stack([t for t, _ in steps]), grid[:-1], 1e-7, "step times")
    assert math.isclose(sum(dt.item() for _, dt in steps), 1.0, abs_tol=1e-6)


def short_call(flow: MaskedDiffWithXvec, goldens: dict[str, torch.Tensor], **kw) -> torch.Tensor:
    return flow.inference(*case_inputs(goldens, "F2_short"), n_timesteps=2, **kw)[0]


def test_same_generator_seed_gives_same_mel(flow: MaskedDiffWithXvec, goldens: dict[str, torch.Tensor]) -> None:
    a = short_call(flow, goldens, generator=torch.Generator().manual_seed(7))
    b = short_call(flow, goldens, generator=torch.Generator().manual_seed(7))
    c = short_call(flow, goldens, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert (a - c).abs().max() > 1e-2


def test_global_rng_is_never_used(flow: MaskedDiffWithXvec, goldens: dict[str, torch.Tensor]) -> None:
    before = torch.get_rng_state()
    a = short_call(flow, goldens)  # no generator, no noise: a fresh OS-seeded generator
    b = short_call(flow, goldens)
    assert torch.equal(torch.get_rng_state(), before)
    assert not torch.equal(a, b)


def test_guidance_is_one_batch_of_two_per_step(flow: MaskedDiffWithXvec, goldens: dict[str, torch.Tensor]) -> None:
    calls: list[tuple[torch.Tensor, ...]] = []
    hook = flow.decoder.estimator.register_forward_hook(lambda m, args, out: calls.append(args))
    try:
        flow.inference(*case_inputs(goldens, "F2_short"), n_timesteps=3, generator=torch.Generator().manual_seed(0))
    finally:
        hook.remove()
    assert len(calls) == 3
    for x, mask, mu, t, spks, cond in calls:
        assert x.shape[0] == 2 and mask is None
        assert torch.equal(x[0], x[1]) and torch.equal(t[0], t[1])
        assert mu[1].abs().max() == 0 and spks[1].abs().max() == 0 and cond[1].abs().max() == 0
    assert [c[3][0].item() for c in calls] == pytest.approx(time_grid(3)[:-1].tolist())


def test_zero_guidance_runs_the_conditional_row_only(flow: MaskedDiffWithXvec, goldens: dict[str, torch.Tensor],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    batch_sizes: list[int] = []
    hook = flow.decoder.estimator.register_forward_hook(lambda m, args, out: batch_sizes.append(args[0].shape[0]))
    monkeypatch.setattr(flow.decoder, "inference_cfg_rate", 0.0)
    try:
        mel = short_call(flow, goldens, generator=torch.Generator().manual_seed(0))
    finally:
        hook.remove()
    assert batch_sizes == [1, 1]
    assert torch.isfinite(mel).all()


# --- inputs and loading ----------------------------------------------------------------------------

def test_bad_inputs_are_rejected(flow: MaskedDiffWithXvec, goldens: dict[str, torch.Tensor]) -> None:
    token, prompt_token, prompt_feat, emb = case_inputs(goldens, "F2_short")
    with pytest.raises(ValueError, match="T2"):
        flow.inference(token[:, :0], prompt_token, prompt_feat, emb)
    with pytest.raises(ValueError, match="both empty"):
        flow.inference(token, prompt_token, prompt_feat[:, :0], emb)
    with pytest.raises(ValueError, match="shape of mu"):
        flow.inference(token, prompt_token, prompt_feat, emb, noise=torch.zeros(1, 80, 3))


def test_load_flow_rejects_a_mismatched_state_dict(v1_fixture: Path) -> None:
    cfg = parse_v1(read_yaml(v1_fixture / "cosyvoice.yaml"))
    sd = read_state_dict(v1_fixture / "flow.pt")
    sd.pop("decoder.estimator.final_proj.bias")
    with pytest.raises(CheckpointError, match="final_proj.bias"):
        backend_for(V1).load_flow(cfg.flow, sd)
