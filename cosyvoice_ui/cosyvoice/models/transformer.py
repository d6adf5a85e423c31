"""WeNet/ESPnet-style encoders with ESPnet relative positions, as used by CosyVoice v1.

Used three times in v1: the LLM's causal text encoder (Conformer layers), the LLM itself (Transformer
layers, run causally with a KV cache) and the flow's token encoder (Conformer layers, full attention).
Attribute names follow upstream so `llm.pt` / `flow.pt` load with `strict=True`.

Shapes: B batch, T new positions, K = cached + new key positions, D model width, H heads, Dk = D/H.
A layer's KV cache is a tensor [B, H, K, 2*Dk] (keys then values on the last axis), as upstream.

Not here: token embeddings, output heads, sampling (see `llm.py`) and anything flow-specific.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..config import EncoderConfig


class EspnetRelPositionTable:
    """The sinusoidal vectors PE(r) for relative distances r = K-1 ... -(K-1), computed on demand.

    PE(r)[2i] = sin(r * w_i), PE(r)[2i+1] = cos(r * w_i), w_i = 10000^(-2i/D). Not a parameter:
    upstream rebuilds it too, so it is not in the checkpoints.
    """

    def __init__(self, d_model: int, initial_len: int = 5000) -> None:
        self.d_model = d_model
        self._table = torch.empty(0)
        self._max_len = 0
        self._extend(initial_len)

    def _extend(self, max_len: int) -> None:
        # Rows cover r = max_len-1 ... -(max_len-1); row index = (max_len - 1) - r.
        r = torch.arange(max_len - 1, -max_len, -1, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / self.d_model))
        table = torch.zeros(2 * max_len - 1, self.d_model)
        # Upstream builds positive and negative halves separately as sin(±p*w), cos(±p*w).
        table[:, 0::2] = torch.sin(r * div)
        table[:, 1::2] = torch.cos(r * div)
        self._table = table
        self._max_len = max_len

    def vectors(self, key_len: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """[2K-1, D]: PE(r) for r = K-1 down to -(K-1)."""
        if key_len > self._max_len:
            self._extend(max(key_len, 2 * self._max_len))
        center = self._max_len - 1
        return self._table[center - key_len + 1 : center + key_len].to(device=device, dtype=dtype)


class KVCache:
    """Keys and values of one attention layer during incremental decoding, in preallocated buffers.

    Keys and values live in two [B, H, capacity, Dk] buffers; `append` writes the new positions in
    place and returns views of the first K. Growing a tensor cache with torch.cat instead copies all
    of it at every step, and keeping keys and values in separate contiguous buffers (rather than
    interleaved as upstream's [B, H, K, 2*Dk] cache tensor) lets the batch-1 attention products
    stream them ~1.5x faster. The capacity doubles when outgrown, so a wrong size hint costs one
    copy, not correctness.
    """

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = capacity
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v [B, H, T, Dk] of the new positions → keys and values [B, H, K, Dk] of all positions (views)."""
        end = self.length + k.size(2)
        if self._k is None or self._v is None or end > self._k.size(2):
            capacity = max(end, self.capacity, 2 * (0 if self._k is None else self._k.size(2)))
            grown = [x.new_empty(x.size(0), x.size(1), capacity, x.size(3)) for x in (k, v)]
            if self._k is not None and self._v is not None:
                grown[0][:, :, : self.length] = self._k[:, :, : self.length]
                grown[1][:, :, : self.length] = self._v[:, :, : self.length]
            self._k, self._v = grown
            self.capacity = capacity
        self._k[:, :, self.length : end] = k
        self._v[:, :, self.length : end] = v
        self.length = end
        return self._k[:, :, :end], self._v[:, :, :end]

    def view(self) -> torch.Tensor:
        """[B, H, K, 2*Dk]: the cached positions in upstream's layout (a copy, for inspection)."""
        assert self._k is not None and self._v is not None, "empty cache"
        return torch.cat([self._k[:, :, : self.length], self._v[:, :, : self.length]], dim=-1)


class RelPositionMultiHeadedAttention(nn.Module):
    """Transformer-XL style self-attention with ESPnet relative positions (`rel_selfattn`).

    score(i, j) = [(q_i + u) . k_j + (q_i + v) . p_(i-j)] / sqrt(Dk), p_r = linear_pos(PE(r)).
    """

    def __init__(self, n_head: int, n_feat: int, key_bias: bool = True) -> None:
        super().__init__()
        assert n_feat % n_head == 0, f"width {n_feat} is not divisible by {n_head} heads"
        self.h = n_head
        self.d_k = n_feat // n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat, bias=key_bias)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(self.h, self.d_k))
        # Set by `speed.fuse_qkv_projections` after loading: one [3D, D] linear replacing linear_q/k/v.
        self.linear_qkv: nn.Module | None = None

    def project_positions(self, pos_vectors: torch.Tensor) -> torch.Tensor:
        """[2K-1, D] relative-position vectors → [H, 2K-1, Dk] per-head projections p_r."""
        return self.linear_pos(pos_vectors).view(-1, self.h, self.d_k).transpose(0, 1)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.d_k).transpose(1, 2)  # [B, H, T, Dk]

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        pos_vectors: torch.Tensor | None,
        cache: KVCache | torch.Tensor | None = None,
        pos_projected: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KVCache | torch.Tensor]:
        """Args:
            x: [B, T, D] new positions.
            mask: bool [B or 1, T, K] (True = may attend) or None for full attention.
            pos_vectors: [2K-1, D] from `EspnetRelPositionTable.vectors(K)`; unused when
                `pos_projected` is given.
            cache: keys/values of earlier positions: a `KVCache` (appended to in place and
                returned), a [B, H, K-T, 2*Dk] tensor, or None.
            pos_projected: [H, K+T-1, Dk] projections p_r for r = K-1 ... -(T-1) computed
                beforehand (see `RelPositionProjections`); a longer table starting at r = K-1
                (e.g. all 2K-1 rows) is cut to size.
        Returns: output [B, T, D] and the new cache ([B, H, K, 2*Dk], or the `KVCache`).
        """
        if self.linear_qkv is not None:
            q, k, v = (self._heads(part) for part in self.linear_qkv(x).split(self.h * self.d_k, dim=-1))
        else:
            q = self._heads(self.linear_q(x))
            k = self._heads(self.linear_k(x))
            v = self._heads(self.linear_v(x))
        if isinstance(cache, KVCache):
            k, v = cache.append(k, v)
            new_cache: KVCache | torch.Tensor = cache
        else:
            new_cache = torch.cat([k, v], dim=-1)
        if isinstance(cache, torch.Tensor) and cache.size(2) > 0:
            # Grow the cache with one copy and use views of it as k and v (splitting the old cache
            # and concatenating three times copied it three times per step).
            new_cache = torch.cat([cache, new_cache], dim=2)
            k, v = new_cache.split(self.d_k, dim=-1)
        t_q, t_k = q.size(2), k.size(2)

        # Queries t_k-t_q ... t_k-1 and keys 0 ... t_k-1 are r = t_k-1 ... -(t_q-1) apart, so only the
        # first t_k+t_q-1 rows of the 2K-1 table are ever read (all of them for a full pass, the
        # non-negative half for one decoding step).
        n_rel = t_k + t_q - 1
        if pos_projected is None:
            assert pos_vectors is not None, "either pos_vectors or pos_projected is needed"
            pos_projected = self.project_positions(pos_vectors[:n_rel])
        p = pos_projected[:, :n_rel]  # [H, n_rel, Dk], rows r = t_k-1 ... -(t_q-1)
        assert p.size(1) == n_rel, f"position table has {p.size(1)} rows, {n_rel} needed"
        q_u = q + self.pos_bias_u.unsqueeze(1)
        q_v = q + self.pos_bias_v.unsqueeze(1)
        position = torch.matmul(q_v, p.transpose(-2, -1))  # [B, H, T, n_rel]
        if t_q == 1 and mask is None:
            # One decoding step: the position term is an additive score bias, so the fused attention
            # kernel does content scores, softmax and the value sum in one call (fewer passes over the
            # cached keys and values, fewer ops per step); same math, float rounding only.
            out = F.scaled_dot_product_attention(q_u, k, v, attn_mask=position / math.sqrt(self.d_k))
            return self.linear_out(out.transpose(1, 2).reshape(x.size(0), 1, self.h * self.d_k)), new_cache
        content = torch.matmul(q_u, k.transpose(-2, -1))  # [B, H, T, K]
        if t_q > 1:
            # Query i and key j are r = (t_k - t_q + i) - j apart, at row (t_q - 1 - i) + j. Gathering
            # realises upstream's pad-and-reshape "rel_shift" exactly. For a single query row j
            # already belongs to key j, so there is nothing to gather.
            rows = (t_q - 1 - torch.arange(t_q, device=x.device)).unsqueeze(1) + torch.arange(
                t_k, device=x.device).unsqueeze(0)
            position = position.gather(-1, rows.expand(position.shape[:2] + rows.shape))
        scores = (content + position) / math.sqrt(self.d_k)
        if mask is not None:
            keep = mask.unsqueeze(1)  # [B, 1, T, K]
            scores = scores.masked_fill(~keep, float("-inf"))
            attn = torch.softmax(scores, dim=-1).masked_fill(~keep, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(x.size(0), t_q, self.h * self.d_k)
        return self.linear_out(out), new_cache


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model: int, hidden: int, activation: nn.Module) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, hidden)
        self.activation = activation
        self.w_2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.activation(self.w_1(x)))


class EncoderLayer(nn.Module):
    """Pre-norm self-attention + feed-forward block.

    Conformer layers (no macaron, no conv module) name their norms `norm_mha`/`norm_ff`;
    Transformer layers name them `norm1`/`norm2`. The math is the same. LayerNorm eps is 1e-12.
    """

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        d = cfg.output_size
        activation = nn.SiLU() if cfg.activation == "swish" else nn.ReLU()
        self.self_attn = RelPositionMultiHeadedAttention(cfg.attention_heads, d, cfg.key_bias)
        self.feed_forward = PositionwiseFeedForward(d, cfg.linear_units, activation)
        self._conformer = cfg.layer_type == "conformer"
        if self._conformer:
            self.norm_ff = nn.LayerNorm(d, eps=1e-12)
            self.norm_mha = nn.LayerNorm(d, eps=1e-12)
        else:
            self.norm1 = nn.LayerNorm(d, eps=1e-12)
            self.norm2 = nn.LayerNorm(d, eps=1e-12)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        pos_vectors: torch.Tensor | None,
        cache: KVCache | torch.Tensor | None = None,
        pos_projected: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KVCache | torch.Tensor]:
        norm_attn, norm_ff = (self.norm_mha, self.norm_ff) if self._conformer else (self.norm1, self.norm2)
        attn_out, new_cache = self.self_attn(norm_attn(x), mask, pos_vectors, cache, pos_projected)
        x = x + attn_out
        x = x + self.feed_forward(norm_ff(x))
        return x, new_cache


class LinearInput(nn.Module):
    """`input_layer: linear` (Linear + LayerNorm) or `linear_legacy` (Linear + LayerNorm + ReLU).

    The output is scaled by sqrt(D) (upstream does this in its positional module, `xscale`).
    """

    def __init__(self, in_dim: int, out_dim: int, legacy: bool) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(in_dim, out_dim), nn.LayerNorm(out_dim, eps=1e-5), nn.Identity()]
        if legacy:
            layers.append(nn.ReLU())
        self.out = nn.Sequential(*layers)  # keys: out.0 (Linear), out.1 (LayerNorm)
        self.xscale = math.sqrt(out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) * self.xscale


def causal_mask(t: int, device: torch.device) -> torch.Tensor:
    """[1, T, T] lower-triangular (True = may attend)."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril().unsqueeze(0)


def padding_mask(lengths: torch.Tensor, t: int) -> torch.Tensor:
    """[B, 1, T] True at valid positions."""
    return (torch.arange(t, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(1)


class Encoder(nn.Module):
    """Input layer → N layers → `after_norm` (LayerNorm eps 1e-5).

    `static_chunk_size == 1` makes self-attention causal (the v1 text encoder and LLM); 0 is full
    attention (the v1 flow encoder).
    """

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        if cfg.input_layer not in ("linear", "linear_legacy"):
            raise ValueError(f"input_layer {cfg.input_layer!r} is not used by CosyVoice v1")
        if cfg.static_chunk_size not in (0, 1):
            raise ValueError(f"static_chunk_size {cfg.static_chunk_size} is not used by CosyVoice v1")
        self.cfg = cfg
        self.embed = LinearInput(cfg.input_size, cfg.output_size, legacy=cfg.input_layer == "linear_legacy")
        self.encoders = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_blocks))
        self.after_norm = nn.LayerNorm(cfg.output_size, eps=1e-5)
        self.pos_table = EspnetRelPositionTable(cfg.output_size)

    @property
    def causal(self) -> bool:
        return self.cfg.static_chunk_size == 1

    def forward(self, xs: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Encode whole sequences. xs [B, T, input_size], lengths [B] (None = all valid) → [B, T, D]."""
        t = xs.size(1)
        mask = None
        if lengths is not None:
            mask = padding_mask(lengths, t)  # [B, 1, T] → broadcast over queries
            mask = mask.expand(-1, t, -1)
        if self.causal:
            tri = causal_mask(t, xs.device)
            mask = tri if mask is None else mask & tri
        x = self.embed(xs)
        pos = self.pos_table.vectors(t, x.device, x.dtype)
        for layer in self.encoders:
            x, _ = layer(x, mask, pos)
        return self.after_norm(x)

    def forward_step(
        self,
        xs: torch.Tensor,
        caches: list[KVCache] | None,
        positions: RelPositionProjections | None = None,
        reserve: int = 0,
    ) -> tuple[torch.Tensor, list[KVCache]]:
        """Causal incremental encoding for decoding (B = 1).

        xs [1, T, input_size] new positions; caches: one `KVCache` per layer from the previous call,
        or None to start; positions: this decode's `RelPositionProjections` (None recomputes them on
        every call); reserve: expected total positions, to size new caches (a hint, not a limit).
        Returns the new positions' outputs [1, T, D] and the caches (appended to in place).
        """
        t_new = xs.size(1)
        t_old = 0 if not caches else caches[0].length
        t_k = t_old + t_new
        if t_new == 1:
            mask = None  # a single new query may attend to every key: nothing to mask
        else:
            # New queries see every cached key plus the new keys up to themselves.
            mask = torch.ones(t_new, t_k, dtype=torch.bool, device=xs.device)
            mask[:, t_old:] = torch.ones(t_new, t_new, dtype=torch.bool, device=xs.device).tril()
            mask = mask.unsqueeze(0)
        if not caches:
            caches = [KVCache(max(reserve, t_k)) for _ in self.encoders]
        x = self.embed(xs)
        pos = None if positions is not None else self.pos_table.vectors(t_k, x.device, x.dtype)
        for i, layer in enumerate(self.encoders):
            projected = positions.get(i, t_k, t_new) if positions is not None else None
            x, _ = layer(x, mask, pos, caches[i], projected)
        return self.after_norm(x), caches


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

    def __init__(self, encoder: Encoder) -> None:
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
        return [layer.self_attn.project_positions(vectors).contiguous() for layer in self._encoder.encoders]
