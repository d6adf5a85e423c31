"""Streaming chunk schedules and the audio at chunk joins: v1's (upstream's and our shorter first hop, cosyvoice-models.md
§7.3) and v2/v3's (§7.4: chunk ends on multiples of 25 tokens counted from the flow prompt's start, 3 look-ahead
tokens past each, hops 25 → 50 → 100, all tokens re-sent every call). What every generation does alike (no tokens,
a segment too short to stream) is one parametrised test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from cosyvoice_ui import load_engine
from cosyvoice_ui.cosyvoice.families import (LOW_LATENCY_STREAMING_V1, UPSTREAM_STREAMING_V1, V1, V2, V3, FamilySpec,
                                             StreamingSpec)
from cosyvoice_ui.cosyvoice.streaming import stream_tokens
from cosyvoice_ui.cosyvoice.streaming_qwen import stream_with_lookahead
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Mode

HOP_SAMPLES = 256  # one mel frame of audio


def _chunk_sizes(spec: StreamingSpec, n_tokens: int) -> list[tuple[int, bool]]:
    sizes: list[tuple[int, bool]] = []

    def render(tokens: torch.Tensor, finalize: bool) -> torch.Tensor:
        sizes.append((tokens.shape[1], finalize))
        return torch.zeros(1, 1)

    list(stream_tokens(range(n_tokens), render, spec))
    return sizes


def test_upstream_schedule_is_kept_for_parity() -> None:
    # cosyvoice-models.md §7.3: hop 100 + overlap 20 tokens, 34 mel frames overlap, 20 frames / 5120 samples cached.
    assert UPSTREAM_STREAMING_V1 == StreamingSpec(token_min_hop_len=100, token_max_hop_len=200, token_overlap_len=20,
                                                  mel_overlap_len=34, mel_cache_len=20, source_cache_len=5120,
                                                  stream_scale_factor=1.0, token_first_hop_len=100,
                                                  pre_lookahead_len=0)
    assert V1.upstream_streaming is UPSTREAM_STREAMING_V1
    assert _chunk_sizes(UPSTREAM_STREAMING_V1, 300) == [(120, False), (120, False), (100, True)]


def test_default_schedule_sends_a_short_first_chunk_then_upstream_hops() -> None:
    assert V1.streaming is LOW_LATENCY_STREAMING_V1
    first = LOW_LATENCY_STREAMING_V1.token_first_hop_len
    assert first < UPSTREAM_STREAMING_V1.token_min_hop_len
    # 0..51 first; then 100-token hops from token 32 on (20 overlap each), the rest at the end.
    assert _chunk_sizes(LOW_LATENCY_STREAMING_V1, 300) == [(first + 20, False), (120, False), (120, False),
                                                            (300 - first - 200, True)]


# --- v2 and v3: the look-ahead schedule ------------------------------------------------------------------


class FakeRender:
    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.calls: list[tuple[int, int, bool]] = []  # (tokens passed, offset, finalize)

    def chunk(self, tokens: torch.Tensor, offset: int, finalize: bool) -> torch.Tensor:
        self.calls.append((tokens.size(1), offset, finalize))
        return torch.zeros(1, 10)


@pytest.mark.parametrize("prompt", [0, 7, 25, 60])
def test_chunk_boundaries_sit_on_multiples_of_25_from_the_prompt(prompt: int) -> None:
    render = FakeRender(prompt)
    out = list(stream_with_lookahead(range(400), render, V2.streaming))
    assert [last for _, last in out] == [False] * (len(out) - 1) + [True]
    offsets = [offset for _, offset, _ in render.calls]
    assert offsets[0] == 0 and render.calls[-1] == (400, offsets[-1], True)
    ends = offsets[1:]  # where each chunk ended (the next one's offset)
    assert all((prompt + end) % 25 == 0 for end in ends)
    hops = [b - a for a, b in zip(offsets, offsets[1:])]
    assert hops[1:4] == [50, 100, 100]
    for (sent, offset, final), hop in zip(render.calls, hops):
        assert not final and sent == offset + hop + V2.streaming.pre_lookahead_len


# --- every generation -----------------------------------------------------------------------------------


def _schedule(family: FamilySpec, n_tokens: int) -> tuple[list, list[tuple[int, bool]]]:
    """(the chunks streamed, each render call's (tokens passed, finalize)) for `n_tokens` under the family's
    default schedule."""
    if family is V1:
        calls: list[tuple[int, bool]] = []

        def render(tokens: torch.Tensor, finalize: bool) -> torch.Tensor:
            calls.append((tokens.shape[1], finalize))
            return torch.zeros(1, 1)

        return list(stream_tokens(range(n_tokens), render, family.streaming)), calls
    fake = FakeRender(0)
    out = list(stream_with_lookahead(range(n_tokens), fake, family.streaming))
    return out, [(sent, final) for sent, _, final in fake.calls]


@pytest.mark.parametrize("family", [V1, V2, V3], ids=["v1", "v2", "v3"])
def test_no_tokens_is_one_empty_last_chunk(family: FamilySpec) -> None:
    out, _ = _schedule(family, 0)
    assert len(out) == 1 and out[0][1] and out[0][0].numel() == 0


@pytest.mark.parametrize(("family", "tokens"), [(V1, 40), (V2, 27), (V3, 27)], ids=["v1", "v2", "v3"])
def test_a_segment_too_short_to_stream_is_rendered_once_finally(family: FamilySpec, tokens: int) -> None:
    """v1: shorter than the first hop and its overlap; v2/v3: 25 + 3 look-ahead never reached."""
    _, calls = _schedule(family, tokens)
    assert calls == [(tokens, True)]


# --- v1's audio at the joins, on a tiny model ------------------------------------------------------------


@pytest.fixture(scope="module")
def engine_and_input(tiny_base: Path):
    engine = load_engine(tiny_base, device="cpu")
    features = engine.encode_voice(voice_clip(4.0))
    model_input = engine.recipe.assemble(Mode.ZERO_SHOT, engine.tokenizer.encode("How are you today, my friend?"),
                                         prompt_text_ids=engine.tokenizer.encode("A short prompt."), prompt=features)
    return engine, model_input


def _render(engine, model_input, stream: bool, tokens: int) -> list[np.ndarray]:
    generator = torch.Generator().manual_seed(1)
    return [w.reshape(-1).numpy() for w, _ in engine.render_input(model_input, generator, stream, tokens)]


@pytest.mark.parametrize("tokens", [150, 260])
def test_chunked_audio_matches_whole_length_and_joins_without_spikes(engine_and_input, tokens: int) -> None:
    engine, model_input = engine_and_input
    whole = np.concatenate(_render(engine, model_input, False, tokens))
    chunks = _render(engine, model_input, True, tokens)
    streamed = np.concatenate(chunks)
    assert len(chunks) >= 2
    # Each chunk's mel is rounded down to whole frames: at most one frame per join apart.
    assert abs(len(streamed) - len(whole)) <= HOP_SAMPLES * (len(chunks) - 1)
    # Same level overall (a doubled or dropped overlap would change it).
    assert 0.8 < streamed.std() / whole.std() < 1.25
    jumps = np.abs(np.diff(streamed))
    typical = np.percentile(jumps, 99.9)
    level = streamed.std()
    for join in np.cumsum([len(c) for c in chunks])[:-1]:
        # No click: the biggest sample step near a join is an ordinary one for this signal.
        assert jumps[join - HOP_SAMPLES : join + HOP_SAMPLES].max() <= 1.2 * typical, f"spike at sample {join}"
        # No dropout or boost across the cross-fade.
        for side in (streamed[join - 1024 : join], streamed[join : join + 1024]):
            assert 0.5 < side.std() / level < 2.0, f"level jump at sample {join}"


def test_forced_tokens_give_exactly_that_much_audio(engine_and_input) -> None:
    engine, model_input = engine_and_input
    for tokens in (45, 120):
        wave = np.concatenate(_render(engine, model_input, False, tokens))
        assert len(wave) == int(tokens / 50 * 22050 / 256) * HOP_SAMPLES  # EOS ignored: always `tokens` tokens
