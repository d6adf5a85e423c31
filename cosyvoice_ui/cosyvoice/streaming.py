"""Speech tokens → waveform for one text segment, whole or in streamed chunks: the v1 scheme, and the
`Chunker` record by which the registry hands each family's scheme to the engine.

v1 streaming (cosyvoice-models.md §7.3; our default first hop is shorter, see families.py): once
100 + 20 unconsumed tokens exist, the flow renders
tokens[0:120] with a noise/mu cache for the overlap; the last 34 mel frames are held back and
cross-faded into the next chunk (Hamming 68), the vocoder re-runs the last 20 mel frames with the
cached NSF source and the first 5120 samples are cross-faded with the previous tail (Hamming 10240).
The first 100 tokens are then dropped (the 20 overlap tokens stay at the head).

The v2/v3 schemes (re-running the flow with look-ahead tokens, §7.4-7.5) are in `streaming_qwen.py`.

Not here: the LLM, text handling, or anything about requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from .families import StreamingSpec


def fade_in_out(fade_in: torch.Tensor, fade_out: torch.Tensor, window: np.ndarray) -> torch.Tensor:
    """Cross-fade the first len(window)/2 values of `fade_in` with the last ones of `fade_out`.

    Like upstream, the blend is computed against a float64 numpy window and stored back as float32.
    """
    half = len(window) // 2
    out = fade_in.clone()
    head = fade_in[..., :half].double() * torch.from_numpy(window[:half]).to(fade_in.device)
    tail = fade_out[..., -half:].double() * torch.from_numpy(window[half:]).to(fade_in.device)
    out[..., :half] = (head + tail).to(fade_in.dtype)
    return out


@dataclass
class FlowPrompt:
    """The flow's conditioning for one segment (batch 1)."""

    prompt_token: torch.Tensor  # [1, T1] int64 (may be empty)
    prompt_feat: torch.Tensor  # [1, mel_len1, 80] (may be empty)
    embedding: torch.Tensor  # [1, 192]


class ScriptedDraws(Protocol):
    """Supplies the random draws of each render call instead of the generator (golden parity)."""

    def flow_noise(self, call: int, shape: tuple[int, ...]) -> torch.Tensor: ...

    def nsf_noise(self, call: int, harmonics: int, length: int): ...


class TokenToWave:
    """Renders one segment's tokens with the v1 caches (flow noise/mu, mel overlap, vocoder tail).

    Each instance serves exactly one segment; create a new one per segment.
    """

    def __init__(self, flow: torch.nn.Module, hift: torch.nn.Module, spec: StreamingSpec, prompt: FlowPrompt,
                 generator: torch.Generator | None, n_timesteps: int | None = None,
                 draws: ScriptedDraws | None = None, trace: list[dict] | None = None) -> None:
        self.flow, self.hift, self.spec, self.prompt = flow, hift, spec, prompt
        self.generator = generator
        self.n_timesteps = n_timesteps
        self.draws = draws  # test seam: scripted noise instead of `generator`
        self.trace = trace  # when a list, each call appends its intermediates (parity diagnostics)
        self.calls = 0
        self.mel_window = np.hamming(2 * spec.mel_overlap_len)
        self.speech_window = np.hamming(2 * spec.source_cache_len)
        self.flow_cache: torch.Tensor | None = None
        self.mel_overlap: torch.Tensor | None = None
        self.hift_cache: dict[str, torch.Tensor] | None = None

    def __call__(self, tokens: torch.Tensor, finalize: bool, speed: float = 1.0) -> torch.Tensor:
        """tokens [1, N] → speech [1, S] (float32, on the model device). Mirrors upstream token2wav."""
        device = self.prompt.embedding.device
        call, self.calls = self.calls, self.calls + 1
        flow_noise = None
        if self.draws is not None:
            frames = self.prompt.prompt_feat.size(1) + self.flow.generated_frames(tokens.size(1))
            flow_noise = self.draws.flow_noise(call, (1, self.prompt.prompt_feat.size(2), frames))
        mel, self.flow_cache = self.flow.inference(
            tokens.to(device), self.prompt.prompt_token, self.prompt.prompt_feat, self.prompt.embedding,
            flow_cache=self.flow_cache, generator=self.generator, noise=flow_noise, n_timesteps=self.n_timesteps,
        )
        record = {"flow_mel": mel, "flow_cache_out": self.flow_cache}
        if self.mel_overlap is not None:
            mel = fade_in_out(mel, self.mel_overlap, self.mel_window)
        if self.hift_cache is not None:
            mel = torch.cat([self.hift_cache["mel"], mel], dim=2)
            cache_source = self.hift_cache["source"]
        else:
            cache_source = None
        if not finalize:
            self.mel_overlap = mel[:, :, -self.spec.mel_overlap_len :]
            mel = mel[:, :, : -self.spec.mel_overlap_len]
            speech, source = self._vocode(mel, cache_source, call, record)
            if self.hift_cache is not None:
                speech = fade_in_out(speech, self.hift_cache["speech"], self.speech_window)
            keep = self.spec.source_cache_len
            self.hift_cache = {"mel": mel[:, :, -self.spec.mel_cache_len :], "source": source[:, :, -keep:],
                               "speech": speech[:, -keep:]}
            return self._emit(speech[:, :-keep], record)
        if speed != 1.0:
            if self.hift_cache is not None:
                raise ValueError("speed change needs the whole segment at once (not chunked streaming)")
            mel = F.interpolate(mel, size=int(mel.shape[2] / speed), mode="linear")
        speech, _ = self._vocode(mel, cache_source, call, record)
        if self.hift_cache is not None:
            speech = fade_in_out(speech, self.hift_cache["speech"], self.speech_window)
        return self._emit(speech, record)

    def _vocode(self, mel: torch.Tensor, cache_source: torch.Tensor | None, call: int,
                record: dict) -> tuple[torch.Tensor, torch.Tensor]:
        noise = None
        if self.draws is not None:
            noise = self.draws.nsf_noise(call, self.hift.m_source.harmonics, mel.size(2) * self.hift.upsample_factor)
        speech, source = self.hift.inference(mel, cache_source=cache_source, generator=self.generator, noise=noise)
        record.update(hift_mel=mel, source=source, hift_speech=speech)
        return speech, source

    def _emit(self, speech: torch.Tensor, record: dict) -> torch.Tensor:
        if self.trace is not None:
            record["speech"] = speech
            self.trace.append(record)
        return speech


def stream_tokens(tokens: Iterable[int], render: Callable[[torch.Tensor, bool], torch.Tensor],
                  spec: StreamingSpec) -> Iterator[tuple[torch.Tensor, bool]]:
    """Drive `render(tokens, finalize)` over a growing token stream with the v1 hop schedule.

    Yields (speech [1, S], is_last) as soon as hop + overlap tokens are available, then the rest
    (is_last True), so callers can mark the last chunk without waiting for another one.
    """
    pending: list[int] = []
    hop = spec.token_first_hop_len
    for token in tokens:
        pending.append(int(token))
        if len(pending) >= hop + spec.token_overlap_len:
            chunk = torch.tensor([pending[: hop + spec.token_overlap_len]], dtype=torch.long)
            yield render(chunk, False), False
            del pending[:hop]
            # Upstream: hop = min(max, hop * scale). The max(min_hop, ...) only matters after a shorter
            # first hop; with first hop == min hop (and scale >= 1) it is upstream's rule exactly.
            hop = min(spec.token_max_hop_len, max(spec.token_min_hop_len, int(hop * spec.stream_scale_factor)))
    if not pending:  # no token at all: nothing to render
        yield torch.zeros(1, 0), True
        return
    yield render(torch.tensor([pending], dtype=torch.long), True), True


RenderChunk = Callable[[torch.Tensor, bool], torch.Tensor]


@dataclass(frozen=True)
class Chunker:
    """A family's way from speech tokens to wave chunks (the registry picks it).

    renderer: renders one segment's tokens, whole or chunk by chunk with its caches; built per segment as
        `renderer(flow, hift, spec, prompt, generator, n_timesteps)`, then called as
        `render(tokens [1, N], finalize, speed=1.0)` → speech [1, S].
    schedule: decides which tokens go into which chunk: `schedule(tokens, render, spec)` yields
        (speech [1, S], is_last).
    """

    renderer: Callable[..., RenderChunk]  # `TokenToWave` (v1), `streaming_qwen`'s renderers (v2, v3)
    schedule: Callable[[Iterable[int], Any, StreamingSpec], Iterator[tuple[torch.Tensor, bool]]]
