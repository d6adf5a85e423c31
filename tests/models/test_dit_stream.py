"""Streamed DiT passes that keep what earlier passes computed (`DiTStreamState`, `flow_dit.inference_from`):
each pass computes only its new frames, yet gives the frames a full chunk-causal pass gives; the upstream golden of
a streamed first chunk still holds; voices' prompt chunks are kept and reused; the memory cap holds."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cosyvoice_ui.cosyvoice.checkpoint import load_strict, read_state_dict
from cosyvoice_ui.cosyvoice.config import parse_v3, read_yaml
from cosyvoice_ui.cosyvoice.models.estimators.dit import DiT
from cosyvoice_ui.cosyvoice.models.estimators.dit_stream import DiTStreamState
from cosyvoice_ui.cosyvoice.models.flow_dit import CausalMaskedDiffWithDiT, PromptPrefixes
from ..conftest import fixture_dir

PASS_ENDS = (20, 45, 95, 120)  # growing token lists, as a stream's chunks give them


@pytest.fixture(scope="module")
def v3_fixture() -> Path:
    return fixture_dir("cosyvoice3-tiny")


@pytest.fixture()
def flow(v3_fixture: Path) -> CausalMaskedDiffWithDiT:
    model = CausalMaskedDiffWithDiT(parse_v3(read_yaml(v3_fixture / "cosyvoice3.yaml")).flow, DiT)
    load_strict(model, read_state_dict(v3_fixture / "flow.pt"), "flow.pt")
    return model.eval()


def voice(flow: CausalMaskedDiffWithDiT, prompt_tokens: int = 40, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    prompt_token = torch.randint(0, flow.cfg.vocab_size, (1, prompt_tokens), generator=g)
    prompt_feat = torch.randn(1, prompt_tokens * flow.token_mel_ratio, flow.cfg.output_size, generator=g)
    embedding = torch.randn(1, flow.cfg.spk_embed_dim, generator=g)
    tokens = torch.randint(0, flow.cfg.vocab_size, (1, max(PASS_ENDS)), generator=g)
    return tokens, prompt_token, prompt_feat, embedding


def full_pass(flow, tokens, prompt_token, prompt_feat, embedding, n_timesteps=None) -> torch.Tensor:
    """Every frame of a chunk-causal pass, prompt frames included (the reference a kept pass must give)."""
    c = flow.condition(tokens, prompt_token, prompt_feat, embedding, streaming=True, finalize=False)
    return flow.decoder(c.mu, c.spks, c.cond, n_timesteps=n_timesteps, streaming=True)


def stream(flow, state, tokens, prompt_token, prompt_feat, embedding, n_timesteps=None, ends=PASS_ENDS):
    """(first frame, kept pass mel, reference mel from that frame) for each pass."""
    out = []
    for end in ends:
        reference = full_pass(flow, tokens[:, :end], prompt_token, prompt_feat, embedding, n_timesteps)
        mel, first = flow.inference_from(tokens[:, :end], prompt_token, prompt_feat, embedding, state,
                                         n_timesteps=n_timesteps)
        out.append((first, mel, reference[:, :, first:]))
    return out


def test_each_pass_computes_only_new_frames_and_equals_the_full_pass(flow) -> None:
    inputs = voice(flow)
    state = flow.new_stream_state()
    firsts = []
    for first, mel, reference in stream(flow, state, *inputs):
        assert mel.shape == reference.shape
        assert (mel - reference).abs().max().item() < 1e-5
        firsts.append(first)
    chunk = flow.decoder.estimator.cfg.static_chunk_size
    # 40 prompt tokens = 80 frames; the look-ahead leaves 74 prompt-only frames → one whole chunk kept per voice.
    assert firsts[0] == chunk
    assert firsts == sorted(firsts) and all(f % chunk == 0 for f in firsts)
    m1 = inputs[2].size(1)
    for first, previous_end in zip(firsts[1:], PASS_ENDS):
        # never past the frames the previous pass emitted, where this pass's new speech starts
        assert first <= m1 + flow.generated_frames(previous_end, finalize=False)


def test_the_upstream_golden_of_a_streamed_first_chunk_holds(flow, v3_fixture: Path) -> None:
    goldens = load_file(v3_fixture / "flow_goldens.safetensors")
    case = "F2_stream_chunk0"
    token, prompt_token, prompt_feat, embedding = (goldens[f"{case}.{n}"]
                                                    for n in ("token", "prompt_token", "prompt_feat", "embedding"))
    state = flow.new_stream_state()
    mel, first = flow.inference_from(token, prompt_token, prompt_feat, embedding, state)
    golden = goldens[f"{case}.mel"]  # generated frames only
    m1 = prompt_feat.size(1)
    assert first <= m1
    assert (mel[:, :, m1 - first:] - golden).abs().max().item() <= 1e-3  # the fixture README's mel tolerance


def test_a_voice_s_prompt_chunks_are_kept_and_reused(flow) -> None:
    inputs = voice(flow)
    store = flow.prompt_prefixes
    store.clear()
    first_stream = stream(flow, flow.new_stream_state(), *inputs, ends=PASS_ENDS[:1])
    assert (store.misses, store.hits) == (1, 0)
    again = stream(flow, flow.new_stream_state(), *inputs, ends=PASS_ENDS[:1])
    assert store.hits == 1
    assert torch.equal(first_stream[0][1], again[0][1])
    other = voice(flow, seed=1)  # another voice: its own prompt chunks
    stream(flow, flow.new_stream_state(), *other, ends=PASS_ENDS[:1])
    assert (store.misses, store.hits) == (2, 1)


def test_a_swapped_estimator_does_not_reuse_kept_prompt_chunks(flow) -> None:
    inputs = voice(flow)
    flow.prompt_prefixes.clear()
    stream(flow, flow.new_stream_state(), *inputs, ends=PASS_ENDS[:1])
    flow.decoder.estimator = copy.deepcopy(flow.decoder.estimator)
    stream(flow, flow.new_stream_state(), *inputs, ends=PASS_ENDS[:1])
    assert flow.prompt_prefixes.hits == 0


def test_the_memory_cap_keeps_fewer_frames_and_the_result_is_unchanged(flow) -> None:
    inputs = voice(flow)
    chunk = flow.decoder.estimator.cfg.static_chunk_size
    cfg = flow.decoder.estimator.cfg
    per_frame_bytes = cfg.depth * 2 * flow.decoder.n_timesteps * 2 * cfg.heads * cfg.dim_head * 4  # keys + values
    capped = flow.new_stream_state(max_bytes=int(per_frame_bytes * 2 * chunk) + 1)
    assert capped.max_frames == 2 * chunk
    for first, mel, reference in stream(flow, capped, *inputs):
        assert first <= 2 * chunk
        assert (mel - reference).abs().max().item() < 1e-5
    assert capped.frames == 2 * chunk
    assert flow.new_stream_state(max_bytes=int(per_frame_bytes * chunk) - 1) is None


def test_fewer_euler_steps_and_no_guidance_are_kept_per_step(flow) -> None:
    inputs = voice(flow)
    flow.decoder.inference_cfg_rate = 0.0
    state = flow.new_stream_state(n_timesteps=2)
    assert (state.steps, state.rows) == (2, 1)
    for _, mel, reference in stream(flow, state, *inputs, n_timesteps=2):
        assert (mel - reference).abs().max().item() < 1e-5
    with pytest.raises(ValueError, match="steps"):
        flow.inference_from(inputs[0][:, :PASS_ENDS[-1]], *inputs[1:], state, n_timesteps=3)


@pytest.mark.parametrize("bf16_attention", [False, True], ids=["fp32-sdpa", "bf16-matmul"])
def test_fast_s_int8_estimator_stays_close_to_its_full_pass(flow, bf16_attention: bool) -> None:
    """int8 dynamic linears quantise each call's activations with their own scale, so a pass over fewer
    frames rounds differently: close, not equal (benchmarks/deviation.py measures it on full-size weights).
    Fast's float32 attention keeps a stream's keys/values in bf16 too (half the memory a kept frame costs)."""
    estimator = flow.decoder.estimator
    estimator.to_int8(bf16_attention=bf16_attention, kept_dtype=torch.bfloat16)
    inputs = voice(flow)
    state = flow.new_stream_state(n_timesteps=2)
    assert state.kv_dtype == torch.bfloat16
    for _, mel, reference in stream(flow, state, *inputs, n_timesteps=2):
        spread = reference.abs().mean().item()
        assert (mel - reference).abs().mean().item() < 0.05 * spread


def test_a_kept_frame_in_bf16_costs_half_the_budget(flow) -> None:
    attentions = [block.attn for block in flow.decoder.estimator.transformer_blocks]
    budget = 2**22
    float32 = flow.new_stream_state(n_timesteps=2, max_bytes=budget)
    for attention in attentions:
        attention.kept_dtype = torch.bfloat16
    bf16 = flow.new_stream_state(n_timesteps=2, max_bytes=budget)
    chunk = flow.decoder.estimator.cfg.static_chunk_size
    assert float32.kv_dtype is None and bf16.kv_dtype == torch.bfloat16
    assert float32.max_frames >= chunk and bf16.max_frames >= 2 * float32.max_frames - chunk


def test_commit_keeps_whole_chunks_only() -> None:
    state = DiTStreamState(steps=1, rows=1, chunk=4)
    step = state.step(0)
    step.proj_context = step.conv_context = torch.zeros(1, 2, 3)
    step.pending_keys = step.pending_values = [torch.randn(1, 2, 7, 5)]
    step.pending_proj = step.pending_conv = torch.randn(1, 9, 3)
    assert state.commit(7) == 4
    assert step.keys[0].shape[2] == 4 and not step.pending_keys
    copy = state.copy()
    assert copy.frames == 4 and copy.step(0).keys[0] is step.keys[0]  # shared, never written
    assert copy.step(0).keys is not step.keys  # its own lists: a commit on one leaves the other as it is


def test_the_prompt_store_drops_the_least_recent_voice() -> None:
    store = PromptPrefixes(voices=2)
    states = []
    for _ in range(3):
        state = DiTStreamState(steps=1, rows=1, chunk=4)
        states.append(state)
    for name, state in zip("abc", states):
        store.put(name, state)
    assert store.get("a") is None and store.get("b") is not None and store.get("c") is not None
    assert PromptPrefixes.key(torch.ones(2), 1) != PromptPrefixes.key(torch.ones(3), 1)
    assert PromptPrefixes.key(torch.ones(2), 1) == PromptPrefixes.key(torch.ones(2), 1)
