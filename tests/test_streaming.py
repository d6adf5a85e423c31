"""Streaming chunk schedule (upstream's and our shorter first hop) and the audio at chunk joins."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from cosyvoice_ui import load_engine
from cosyvoice_ui.cosyvoice.families import LOW_LATENCY_STREAMING_V1, UPSTREAM_STREAMING_V1, V1, StreamingSpec
from cosyvoice_ui.cosyvoice.streaming import stream_tokens
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
    assert _chunk_sizes(LOW_LATENCY_STREAMING_V1, 40) == [(40, True)]  # too short to stream: one chunk


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
