"""Speech tokens → waveform for the Qwen2-LM generations (v2, v3): whole, or streamed with look-ahead.

Token schedule (cosyvoice-models.md §7.4, both generations): chunk boundaries sit on multiples of the
first hop (25 tokens) counted from the start of the flow prompt, so the first chunk takes
`hop + prompt_pad` tokens (`prompt_pad = ceil(P/25)·25 − P`); later hops grow 25 → 50 → 100. Ours
(`token_min_first_hop_len`): when the pad alone is at least that many tokens, the first chunk is just the pad,
which ends on the same boundary a hop earlier; then 50 → 100. A chunk is
rendered once `hop + pre_lookahead_len` tokens past the emitted ones wait: the flow re-runs on *all*
tokens so far with chunk-causal attention (`streaming=True, finalize=False`, the last 3 tokens being
look-ahead only), and the mel from frame `ratio · offset` on is the chunk's; v3's DiT flow keeps what each
such pass computed (`flow_dit.inference_from`), so the next computes only the frames it adds. The last call
runs every token with `finalize=True` and full attention (upstream's choice, §7.4 QUIRK). The hop is reset per segment
(upstream keeps the grown hop on the model, a quirk we do not copy).

Vocoders:
* `ChunkedVocoderStream` (v2, non-causal HiFT): the v1 way minus the mel cross-fade: the last 8 mel frames
  and 3840 source samples are re-run at the head of the next chunk and the speech is cross-faded there.
* `CausalVocoderStream` (v3, causal HiFT): upstream re-vocodes the whole mel so far each chunk (`finalize=False`
  withholds the look-ahead frames' audio, §5.8) and sends the samples not yet emitted; here f0 and the source
  run over the whole mel, the decoder only over the new frames and a causal context before them
  (`CausalHiFTGenerator.inference_from`), which gives the same samples.

Not here: the LLM, text handling, or anything about requests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from .families import StreamingSpec
from .streaming import FlowPrompt, fade_in_out


class _QwenTokenToWave:
    """Renders one segment's tokens (one instance per segment). `render(tokens, finalize, speed)` renders
    the whole list at once; `chunk(tokens, offset, finalize)` renders the mel past `offset` tokens of a
    streamed list (every token so far is passed each time)."""

    def __init__(self, flow: torch.nn.Module, hift: torch.nn.Module, spec: StreamingSpec, prompt: FlowPrompt,
                 generator: torch.Generator | None, n_timesteps: int | None = None) -> None:
        self.flow, self.hift, self.spec, self.prompt = flow, hift, spec, prompt
        self.generator = generator
        self.n_timesteps = n_timesteps
        # What this segment's chunk-causal passes keep for the next (v3's DiT flow; None: recompute all).
        new_state = getattr(flow, "new_stream_state", None)
        self.flow_state = new_state(n_timesteps) if new_state is not None else None
        # The last pass of a stream in chunk attention from the kept frames too, instead of upstream's full
        # attention over every frame (set by the engine for fast precision, `FastSettings.chunked_last_pass`).
        self.chunked_last_pass = False

    @property
    def prompt_tokens(self) -> int:
        return self.prompt.prompt_token.size(1)

    def _mel(self, tokens: torch.Tensor, offset: int, streaming: bool, finalize: bool) -> torch.Tensor:
        device = self.prompt.embedding.device
        mel, _ = self.flow.inference(tokens.to(device), self.prompt.prompt_token, self.prompt.prompt_feat,
                                     self.prompt.embedding, streaming=streaming, finalize=finalize,
                                     n_timesteps=self.n_timesteps)
        return mel[:, :, self.flow.generated_frames(offset):]

    def __call__(self, tokens: torch.Tensor, finalize: bool = True, speed: float = 1.0) -> torch.Tensor:
        """tokens [1, N] (the whole segment) → speech [1, S]."""
        mel = self._mel(tokens, 0, streaming=False, finalize=True)
        if speed != 1.0:
            mel = F.interpolate(mel, size=int(mel.shape[2] / speed), mode="linear")
        return self._vocode_whole(mel)

    def _mel_kept(self, tokens: torch.Tensor, offset: int, finalize: bool = False) -> torch.Tensor:
        """`_mel(tokens, offset, streaming=True, finalize)`, computing only frames past the kept ones."""
        device = self.prompt.embedding.device
        mel, first = self.flow.inference_from(tokens.to(device), self.prompt.prompt_token, self.prompt.prompt_feat,
                                              self.prompt.embedding, self.flow_state, n_timesteps=self.n_timesteps,
                                              finalize=finalize)
        start = self.prompt.prompt_feat.size(1) + self.flow.generated_frames(offset)
        if start < first:
            raise RuntimeError(f"the flow kept frames up to {first}, past the chunk's start {start}")
        return mel[:, :, start - first:]

    def chunk(self, tokens: torch.Tensor, offset: int, finalize: bool) -> torch.Tensor:
        """tokens [1, N]: every token so far; the speech of the mel past `offset` tokens → [1, S]."""
        # A stream of one pass (offset 0) stays a whole full-attention render, as offline.
        if self.flow_state is not None and (not finalize or (self.chunked_last_pass and offset > 0)):
            return self._vocode_chunk(self._mel_kept(tokens, offset, finalize), finalize)
        return self._vocode_chunk(self._mel(tokens, offset, streaming=not finalize, finalize=finalize), finalize)

    def _vocode_whole(self, mel: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _vocode_chunk(self, mel: torch.Tensor, finalize: bool) -> torch.Tensor:
        raise NotImplementedError


class ChunkedVocoderStream(_QwenTokenToWave):
    """v2: HiFT over each new mel slice, with the mel / NSF source cache and the speech cross-fade."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.speech_window = np.hamming(2 * self.spec.source_cache_len)
        self.cache: dict[str, torch.Tensor] | None = None

    def _vocode_whole(self, mel: torch.Tensor) -> torch.Tensor:
        speech, _ = self.hift.inference(mel, generator=self.generator)
        return speech

    def _vocode_chunk(self, mel: torch.Tensor, finalize: bool) -> torch.Tensor:
        cache_source = None
        if self.cache is not None:
            mel = torch.cat([self.cache["mel"], mel], dim=2)
            cache_source = self.cache["source"]
        speech, source = self.hift.inference(mel, cache_source=cache_source, generator=self.generator)
        if self.cache is not None:
            speech = fade_in_out(speech, self.cache["speech"], self.speech_window)
        if finalize:
            return speech
        keep = self.spec.source_cache_len
        self.cache = {"mel": mel[:, :, -self.spec.mel_cache_len:], "source": source[:, :, -keep:],
                      "speech": speech[:, -keep:]}
        return speech[:, :-keep]


class CausalVocoderStream(_QwenTokenToWave):
    """v3: the causal HiFT re-run on the accumulated mel; only samples not emitted before go out."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.mel: torch.Tensor | None = None
        self.emitted = 0

    def _vocode_whole(self, mel: torch.Tensor) -> torch.Tensor:
        speech, _ = self.hift.inference(mel, True)
        return speech

    def _vocode_chunk(self, mel: torch.Tensor, finalize: bool) -> torch.Tensor:
        self.mel = mel if self.mel is None else torch.cat([self.mel, mel], dim=2)
        # Decode only the new frames and their causal context; the samples are the same. A non-final chunk
        # emits whole frames (U·(T−8) samples), so `emitted` is always a frame boundary.
        new = self.hift.inference_from(self.mel, self.emitted // self.hift.upsample_factor, finalize)
        self.emitted += new.size(1)
        return new


def stream_with_lookahead(tokens: Iterable[int], render: _QwenTokenToWave,
                          spec: StreamingSpec) -> Iterator[tuple[torch.Tensor, bool]]:
    """Drive `render.chunk` over a growing token stream with the v2/v3 schedule (module docstring).
    Yields (speech [1, S], is_last)."""
    seen: list[int] = []
    offset = 0
    base = spec.token_first_hop_len
    prompt_pad = math.ceil(render.prompt_tokens / base) * base - render.prompt_tokens
    hop_len = base
    short_first = 0 < spec.token_min_first_hop_len <= prompt_pad
    hop = prompt_pad if short_first else hop_len + prompt_pad
    for token in tokens:
        seen.append(int(token))
        if len(seen) - offset >= hop + spec.pre_lookahead_len:
            end = offset + hop + spec.pre_lookahead_len
            yield render.chunk(torch.tensor([seen[:end]], dtype=torch.long), offset, False), False
            offset += hop
            hop_len = min(spec.token_max_hop_len, max(spec.token_min_hop_len,
                                                      int(hop_len * spec.stream_scale_factor)))
            hop = hop_len
    if not seen:
        yield torch.zeros(1, 0), True
        return
    yield render.chunk(torch.tensor([seen], dtype=torch.long), offset, True), True
