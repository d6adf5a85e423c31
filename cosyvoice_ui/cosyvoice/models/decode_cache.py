"""What one incremental decode keeps between steps: each layer's keys and values, and the projected
relative positions, so a decoding step computes only what its new position adds.

Shapes: B batch, H heads, K cached + new key positions, Dk head width, T new (query) positions.
A `DecodeCache` lives for one decode (one call of `TransformerLM.inference`); nothing here is a
parameter or part of a checkpoint.

Not here: the attention itself (`transformer.py`), which reads these caches.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn


class CachedEncoder(Protocol):
    """What these caches read of the encoder they serve (`transformer.Encoder`, which imports this module):
    its layers (each `self_attn.project_positions`), its relative-position table, its output norm (whose
    weight says the device and dtype) and the dtype its decodes keep (None: the weights')."""

    encoders: nn.ModuleList
    pos_table: Any
    after_norm: nn.LayerNorm
    cache_dtype: torch.dtype | None


class KVCache:
    """Keys and values of one attention layer during incremental decoding, in preallocated buffers.

    Keys and values live in two [B, H, capacity, Dk] buffers; `append` writes the new positions in
    place and returns views of the first K. Growing a tensor cache with torch.cat instead copies all
    of it at every step, and keeping keys and values in separate contiguous buffers (rather than
    interleaved as upstream's [B, H, K, 2*Dk] cache tensor) lets the batch-1 attention products
    stream them ~1.5x faster. The capacity doubles when outgrown, so a wrong size hint costs one
    copy, not correctness.
    """

    def __init__(self, capacity: int = 0, dtype: torch.dtype | None = None) -> None:
        """capacity: positions to hold before growing (a hint); dtype: what the buffers keep (None: the dtype of the
        first keys appended; fast mode's bf16 caches: `SpeechTokenLM.attention_on_kernel`)."""
        self.capacity = capacity
        self.dtype = dtype
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v [B, H, T, Dk] of the new positions → keys and values [B, H, K, Dk] of all positions (views, in the
        cache's dtype)."""
        end = self.length + k.size(2)
        self._hold(end, k, v)
        self._k[:, :, self.length : end] = k
        self._v[:, :, self.length : end] = v
        self.length = end
        return self._k[:, :, :end], self._v[:, :, :end]

    def views_with_next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, H, K + 1, Dk] (views) of the cached positions plus the next one, whose slot the
        caller fills (then `advance`); the buffers grow as `append` grows them. The same views `append` returns
        for one new position, so a step that writes them computes the same numbers. Needs a first `append` (the
        buffers' shape comes from it)."""
        if self._k is None or self._v is None:
            raise ValueError("an empty cache: append the prefill's positions first")
        end = self.length + 1
        self._hold(end, self._k, self._v)
        return self._k[:, :, :end], self._v[:, :, :end]

    def _hold(self, end: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Buffers for `end` positions, shaped like k and v [B, H, *, Dk]: the capacity doubles when outgrown."""
        if self._k is not None and self._v is not None and end <= self._k.size(2):
            return
        capacity = max(end, self.capacity, 2 * (0 if self._k is None else self._k.size(2)))
        grown = [x.new_empty(x.size(0), x.size(1), capacity, x.size(3), dtype=self.dtype or x.dtype) for x in (k, v)]
        if self._k is not None and self._v is not None:
            grown[0][:, :, : self.length] = self._k[:, :, : self.length]
            grown[1][:, :, : self.length] = self._v[:, :, : self.length]
        self._k, self._v = grown
        self.capacity = capacity

    def advance(self) -> None:
        """Count the position a caller wrote through `views_with_next`."""
        self.length += 1

    def view(self) -> torch.Tensor:
        """[B, H, K, 2*Dk]: the cached positions in upstream's layout (a copy, for inspection)."""
        assert self._k is not None and self._v is not None, "empty cache"
        return torch.cat([self._k[:, :, : self.length], self._v[:, :, : self.length]], dim=-1)


class RelPositionProjections:
    """Per-layer `linear_pos(PE)` tables for one incremental decode, each row projected once.

    Each decoding step needs p_r = linear_pos(PE(r)) in every layer for the relative distances r of
    its queries to all keys. Those rows depend only on r and the weights, so recomputing a
    [2K-1, D] x [D, D] product per layer and step (as upstream does) is wasted work that grows with
    K. This object keeps the rows r = R+ ... -R- (R+ >= K-1 for every key length K asked for,
    R- >= T-1 for every query count T: the prefill needs both halves, a one-query step only r >= 0)
    and, when asked for more, projects only the missing rows (at least `GROW_ROWS` at a time, so
    growth is rare). It lives for one decode only, so later weight or device changes cannot make it
    stale. Outputs match the uncached path to float rounding (~1e-7).
    """

    GROW_ROWS = 128

    def __init__(self, encoder: CachedEncoder) -> None:
        self._encoder = encoder
        self._tables: list[torch.Tensor] = []  # per layer [H, R+ + R- + 1, Dk], rows r = R+ ... -R-
        self._r_pos = -1  # nothing projected yet
        self._r_neg = 0

    def get(self, layer: int, key_len: int, query_len: int) -> torch.Tensor:
        """[H, K+T-1, Dk] projections for r = K-1 ... -(T-1) of `layer` (K keys, the last T queried)."""
        if not self._tables:
            self._r_pos, self._r_neg = key_len - 1, query_len - 1
            self._tables = self._project(self._r_pos, -self._r_neg)
        if key_len - 1 > self._r_pos:
            top = max(key_len - 1, self._r_pos + max(self.GROW_ROWS, self._r_pos // 2))
            new = self._project(top, self._r_pos + 1)
            self._tables = [torch.cat([n, t], dim=1) for n, t in zip(new, self._tables)]
            self._r_pos = top
        if query_len - 1 > self._r_neg:
            new = self._project(-self._r_neg - 1, -(query_len - 1))
            self._tables = [torch.cat([t, n], dim=1) for n, t in zip(new, self._tables)]
            self._r_neg = query_len - 1
        start = self._r_pos - (key_len - 1)
        return self._tables[layer][:, start : start + key_len + query_len - 1]

    def _project(self, r_high: int, r_low: int) -> list[torch.Tensor]:
        """Per layer [H, r_high - r_low + 1, Dk]: p_r for r = r_high ... r_low (descending)."""
        weight = self._encoder.after_norm.weight
        half = max(abs(r_high), abs(r_low)) + 1
        vectors = self._encoder.pos_table.vectors(half, weight.device, weight.dtype)  # r = half-1 ... -(half-1)
        vectors = vectors[half - 1 - r_high : half - r_low]
        # Contiguous per head: each step reads K rows of every head's table, and strided rows stream slower.
        dtype = self._encoder.cache_dtype or weight.dtype  # kept as the keys are
        return [layer.self_attn.project_positions(vectors).to(dtype).contiguous() for layer in self._encoder.encoders]


class DecodeCache:
    """The caches of one incremental decode through an `Encoder`: one `KVCache` per layer, sized for
    `reserve` positions (a hint: they grow when outgrown), and the `RelPositionProjections`."""

    def __init__(self, encoder: CachedEncoder, reserve: int = 0) -> None:
        self.layers = [KVCache(reserve, encoder.cache_dtype) for _ in encoder.encoders]
        self.positions = RelPositionProjections(encoder)

    @property
    def length(self) -> int:
        """Positions decoded so far (cached keys per layer)."""
        return self.layers[0].length if self.layers else 0
