"""The v2/v3 token schedule (cosyvoice-models.md §7.4): chunk ends on multiples of 25 tokens counted from the
flow prompt's start, 3 look-ahead tokens past each, hops 25 → 50 → 100, all tokens re-sent every call."""

from __future__ import annotations

import pytest
import torch

from cosyvoice_ui.cosyvoice.families import V2, V3
from cosyvoice_ui.cosyvoice.streaming_qwen import stream_with_lookahead


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


def test_no_tokens_is_one_empty_last_chunk() -> None:
    out = list(stream_with_lookahead([], FakeRender(10), V3.streaming))
    assert len(out) == 1 and out[0][1] and out[0][0].numel() == 0


def test_short_segments_render_once_finally() -> None:
    render = FakeRender(0)
    list(stream_with_lookahead(range(27), render, V3.streaming))  # 25 + 3 look-ahead never reached
    assert render.calls == [(27, 0, True)]
