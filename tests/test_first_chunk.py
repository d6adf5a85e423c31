"""First audio sooner on v2/v3 (issue 26, item 2): the first streamed chunk may be just the flow prompt's pad to
the next chunk boundary of the flow's chunk-causal attention (at least 12 tokens), and fast mode trims the flow
prompt to the length nearest its 3 s that leaves such a pad. The short chunk stays aligned: its frames come out as
any later pass computes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from cosyvoice_ui import Mode, SynthesisRequest, load_engine
from cosyvoice_ui.cosyvoice.families import (FIRST_HOP_MIN, LOW_LATENCY_STREAMING_V3, UPSTREAM_STREAMING_V3, V2,
                                             V3)
from cosyvoice_ui.cosyvoice.precision import aligned_prompt_length
from cosyvoice_ui.cosyvoice.streaming import FlowPrompt
from cosyvoice_ui.cosyvoice.streaming_qwen import stream_with_lookahead
from cosyvoice_ui.testing.signals import voice_clip


class _Calls:
    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.calls: list[tuple[int, int, bool]] = []

    def chunk(self, tokens: torch.Tensor, offset: int, finalize: bool) -> torch.Tensor:
        self.calls.append((tokens.size(1), offset, finalize))
        return torch.zeros(1, 1)


def _schedule(spec, prompt_tokens: int, n: int = 140) -> list[tuple[int, int, bool]]:
    calls = _Calls(prompt_tokens)
    list(stream_with_lookahead(range(n), calls, spec))
    return calls.calls


def test_the_pad_alone_is_the_first_chunk_when_long_enough() -> None:
    assert V2.streaming.token_min_first_hop_len == V3.streaming.token_min_first_hop_len == FIRST_HOP_MIN == 12
    # prompt 63 tokens: 12 to the boundary at 75; then hops of 50 and 100, as upstream's after its first
    assert _schedule(LOW_LATENCY_STREAMING_V3, 63) == [(15, 0, False), (65, 12, False), (140, 62, True)]
    # upstream: the pad plus a whole 25-token hop before the first chunk
    assert _schedule(UPSTREAM_STREAMING_V3, 63) == [(40, 0, False), (90, 37, False), (140, 87, True)]
    # a pad under 12 (prompt 70: pad 5) or none (75): upstream's first chunk
    assert _schedule(LOW_LATENCY_STREAMING_V3, 70)[0] == _schedule(UPSTREAM_STREAMING_V3, 70)[0] == (33, 0, False)
    assert _schedule(LOW_LATENCY_STREAMING_V3, 75)[0] == (28, 0, False)


@pytest.mark.parametrize(("keep", "available", "expected"), [
    (75, 200, 63), (75, 75, 63), (76, 200, 88), (100, 200, 88), (75, 80, 63), (10, 10, 10), (88, 88, 88)])
def test_the_fast_prompt_length_leaves_a_pad_of_twelve(keep: int, available: int, expected: int) -> None:
    length = aligned_prompt_length(keep, available, 25, 12)
    assert length == expected
    assert length == keep or (-length) % 25 == 12


def test_a_fast_stream_starts_after_fifteen_tokens(tiny_v3: Path) -> None:
    engine = load_engine(tiny_v3, device="cpu", precision="fast")
    request = SynthesisRequest(Mode.ZERO_SHOT, text="A stream that starts sooner.", prompt_audio=voice_clip(4.0),
                               prompt_text="A prompt transcript.", seed=3, stream=True)
    model_input = engine._segment_jobs(request)[0][1]
    prompt = engine._flow_prompt(model_input)
    assert prompt.prompt_token.size(1) == 63  # 4 s of prompt (100 tokens), trimmed to about 3 s with a pad of 12

    def chunks() -> list[int]:
        return [wave.size(1) for wave, _ in engine.render_input(model_input, torch.Generator().manual_seed(1),
                                                                 stream=True, forced_tokens=70)]

    ours = chunks()
    engine.streaming_spec = UPSTREAM_STREAMING_V3
    upstream = chunks()
    assert len(ours) == 3  # 12 tokens, then 50, then the last 8
    # 13 tokens (26 mel frames of 480 samples) sooner than upstream's 25-token first hop
    assert upstream[0] - ours[0] == 13 * 2 * 480 and sum(ours) == sum(upstream)


def test_the_short_first_chunk_is_aligned_its_frames_do_not_change_later(tiny_v3: Path) -> None:
    engine = load_engine(tiny_v3, device="cpu")
    flow = engine.flow
    ratio = flow.token_mel_ratio
    g = torch.Generator().manual_seed(0)
    prompt_tokens = torch.randint(0, 100, (1, 63), generator=g)
    prompt = FlowPrompt(prompt_tokens, torch.randn(1, 63 * ratio, 80, generator=g), torch.randn(1, 192, generator=g))
    tokens = torch.randint(0, 100, (1, 70), generator=g)

    def mel(n: int) -> torch.Tensor:
        out, _ = flow.inference(tokens[:, :n], prompt.prompt_token, prompt.prompt_feat, prompt.embedding,
                                streaming=True, finalize=False, n_timesteps=2)
        return out

    first, later = mel(12 + 3), mel(62 + 3)
    frames = 12 * ratio
    torch.testing.assert_close(first[:, :, :frames], later[:, :, :frames], rtol=1e-4, atol=1e-4)
    # a chunk that ended before the boundary (10 tokens) would be computed again differently later
    early = mel(10 + 3)
    assert not torch.allclose(early[:, :, : 10 * ratio], later[:, :, : 10 * ratio], rtol=1e-4, atol=1e-4)


def test_a_whole_stream_still_sounds_like_the_offline_render(tiny_v3: Path) -> None:
    engine = load_engine(tiny_v3, device="cpu", precision="fast")
    base = dict(text="A stream that starts sooner.", prompt_audio=voice_clip(4.0), prompt_text="A prompt.", seed=3)
    streamed = np.concatenate([c.samples for c in engine.synthesize(SynthesisRequest(Mode.ZERO_SHOT, stream=True,
                                                                                       **base))])
    assert streamed.size > 0 and np.all(np.isfinite(streamed))


def _stream(engine, model_input) -> np.ndarray:
    chunks = engine.render_input(model_input, torch.Generator().manual_seed(1), stream=True, forced_tokens=70)
    return torch.cat([wave for wave, _ in chunks], dim=1)[0].numpy()


def test_stock_streams_keep_upstream_s_full_attention_last_pass_and_kept_frames_change_nothing(
        tiny_v3: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stock: kept frames (earlier passes', the voice's prompt chunks) and the windowed vocoder give the samples
    a stream that recomputes everything gives; the last pass stays upstream's full attention."""
    engine = load_engine(tiny_v3, device="cpu", precision="stock")
    assert engine.precision.flow_chunked_last_pass is False
    request = SynthesisRequest(Mode.ZERO_SHOT, text="A stream that keeps.", prompt_audio=voice_clip(4.0),
                               prompt_text="A prompt transcript.", seed=3, stream=True)
    model_input = engine._segment_jobs(request)[0][1]
    kept = _stream(engine, model_input)
    again = _stream(engine, model_input)  # the voice's prompt chunks come from the store this time
    monkeypatch.setenv("COSYVOICE_FLOW_STREAM_CACHE_MB", "0")
    recomputed = _stream(engine, model_input)
    assert engine.flow.prompt_prefixes.hits >= 1
    assert kept.shape == recomputed.shape == again.shape
    assert np.abs(kept - recomputed).max() < 1e-4 and np.abs(again - recomputed).max() < 1e-4


def test_fast_streams_run_the_last_pass_in_chunk_attention_from_the_kept_frames(tiny_v3: Path) -> None:
    engine = load_engine(tiny_v3, device="cpu", precision="fast")
    assert engine.precision.flow_chunked_last_pass is True
    request = SynthesisRequest(Mode.ZERO_SHOT, text="A stream that keeps.", prompt_audio=voice_clip(4.0),
                               prompt_text="A prompt transcript.", seed=3, stream=True)
    model_input = engine._segment_jobs(request)[0][1]
    calls = []
    original = engine.flow.inference_from

    def spy(*args, **kwargs):
        calls.append(kwargs.get("finalize", False))
        return original(*args, **kwargs)

    engine.flow.inference_from = spy
    chunked = _stream(engine, model_input)
    assert calls == [False, False, True]  # every pass, the last one included, computes only its new frames
    engine.flow.inference_from = original
    engine.precision = type(engine.precision)(**{**engine.precision.__dict__, "flow_chunked_last_pass": False})
    full = _stream(engine, model_input)
    assert chunked.shape == full.shape
    # Only the last pass's mel differs (the same frames, seen in chunk instead of full attention); the vocoder
    # reads 7 frames past each sample (f0 3 + conv_pre 4), and a non-final chunk holds back its last 8 frames.
    first_two = ((12 + 50) * 2 - 8) * 480
    assert np.abs(chunked[:first_two] - full[:first_two]).max() < 1e-5
    assert np.abs(chunked[first_two:] - full[first_two:]).max() > 0
