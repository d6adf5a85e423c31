"""WeNet/ESPnet-style encoders with ESPnet relative positions, as used by CosyVoice v1.

Used three times in v1: the LLM's causal text encoder (Conformer layers), the LLM itself (Transformer
layers, run causally with a KV cache) and the flow's token encoder (Conformer layers, full attention).
Attribute names follow upstream so `llm.pt` / `flow.pt` load with `strict=True`.

Shapes: B batch, T new positions, K = cached + new key positions, D model width, H heads, Dk = D/H.

Not here: token embeddings, output heads, sampling (see `llm.py`), anything flow-specific, and the
decoding caches (`decode_cache.py`: keys/values and projected positions kept between steps).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..config import EncoderConfig
from .decode_cache import DecodeCache, KVCache


class EspnetRelPositionTable:
    """The sinusoidal vectors PE(r) for relative distances r = K-1 ... -(K-1), computed on demand.

    PE(r)[2i] = sin(r * w_i), PE(r)[2i+1] = cos(r * w_i), w_i = 10000^(-2i/D). Not a parameter:
    upstream rebuilds it too, so it is not in the checkpoints. Upstream precomputes 5000 positions
    (9999 rows: 40 MB at D = 1024, three such tables in v1, never freed); this one starts small and
    doubles when a longer input asks, and a row's values do not depend on the table's size.
    """

    def __init__(self, d_model: int, initial_len: int = 256) -> None:
        self.d_model = d_model
        # (table, max_len) swapped as one object, so a reader on another thread never pairs a new length
        # with an old table while one grows. Inside a tuple, the table is not a tensor attribute: a prepared
        # copy (prepared.py) does not store what this rebuilds in microseconds.
        self._state = self._build(initial_len)

    def _build(self, max_len: int) -> tuple[torch.Tensor, int]:
        # Rows cover r = max_len-1 ... -(max_len-1); row index = (max_len - 1) - r.
        r = torch.arange(max_len - 1, -max_len, -1, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / self.d_model))
        table = torch.zeros(2 * max_len - 1, self.d_model)
        # Upstream builds positive and negative halves separately as sin(±p*w), cos(±p*w).
        table[:, 0::2] = torch.sin(r * div)
        table[:, 1::2] = torch.cos(r * div)
        return table, max_len

    @property
    def max_len(self) -> int:
        """Key lengths up to this are served without growing the table."""
        return self._state[1]

    def vectors(self, key_len: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """[2K-1, D]: PE(r) for r = K-1 down to -(K-1)."""
        table, max_len = self._state
        if key_len > max_len or table.is_meta:  # meta: the module was built without values (prepared.py)
            table, max_len = self._state = self._build(max_len if key_len <= max_len else max(key_len, 2 * max_len))
        center = max_len - 1
        return table[center - key_len + 1 : center + key_len].to(device=device, dtype=dtype)


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
        # Set by `fuse_qkv()` after loading: one [3D, D] linear replacing linear_q/k/v.
        self.linear_qkv: nn.Module | None = None
        # Set by `SpeechTokenLM.attention_on_kernel()`: a decoding step's attention on the project's own kernel.
        self.kernel_attention = False

    def project_positions(self, pos_vectors: torch.Tensor) -> torch.Tensor:
        """[R, D] relative-position vectors → [H, R, Dk] per-head projections p_r."""
        return self.linear_pos(pos_vectors).view(-1, self.h, self.d_k).transpose(0, 1)

    def fuse_qkv(self) -> bool:
        """Replace `linear_q`/`linear_k`/`linear_v` by one `linear_qkv` ([3D, D] weight: q rows, then k,
        then v), in place; False when already fused.

        Run after the strict state-dict load (the checkpoint keeps upstream's three projections, so the
        fused module is not loadable). One call instead of three: batch-1 decoding pays a fixed cost per
        kernel call, and a taller matrix streams at a better rate. A missing key bias (`key_bias=False`)
        becomes zeros, which adds exactly nothing. Outputs match the separate projections up to float
        summation order.
        """
        if self.linear_qkv is not None:
            return False
        parts = (self.linear_q, self.linear_k, self.linear_v)
        weight = torch.cat([p.weight.detach() for p in parts])
        bias = torch.cat([p.bias.detach() if p.bias is not None else weight.new_zeros(p.out_features) for p in parts])
        linear = nn.utils.skip_init(nn.Linear, parts[0].in_features, weight.size(0), device=weight.device,
                                    dtype=weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
        linear.requires_grad_(False)
        self.linear_qkv = linear
        del self.linear_q, self.linear_k, self.linear_v  # the fused copy replaces them (no double memory)
        return True

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.d_k).transpose(1, 2)  # [B, H, T, Dk]

    def _project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, D] → q, k, v [B, H, T, Dk] (one fused call once `fuse_qkv` ran)."""
        if self.linear_qkv is not None:
            q, k, v = self.linear_qkv(x).split(self.h * self.d_k, dim=-1)
            return self._heads(q), self._heads(k), self._heads(v)
        return self._heads(self.linear_q(x)), self._heads(self.linear_k(x)), self._heads(self.linear_v(x))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor,
                cache: KVCache | None = None) -> torch.Tensor:
        """Args:
            x: [B, T, D] new positions.
            mask: bool [B or 1, T, K] (True = may attend) or None for full attention.
            pos: [H, >= K+T-1, Dk] projections p_r for r = K-1 ... -(T-1) (`project_positions`, or a
                decode's `RelPositionProjections`); rows past K+T-1 are not read. Under a causal mask (no
                query sees a later key) K rows, r = K-1 ... 0, are enough: the negative distances are masked.
            cache: keys/values of earlier positions (a decode), appended to in place; None: no history.
        Returns: output [B, T, D].
        """
        q, k, v = self._project_qkv(x)
        if cache is not None:
            k, v = cache.append(k, v)
        t_q, t_k = q.size(2), k.size(2)
        # Queries t_k-t_q ... t_k-1 and keys 0 ... t_k-1 are r = t_k-1 ... -(t_q-1) apart: only the first
        # t_k+t_q-1 rows are ever read (all 2K-1 for a full pass, the non-negative half for one step, and
        # for a causal mask, whose negative distances are all masked).
        n_rel = t_k if self._is_causal(mask, t_q, t_k) else t_k + t_q - 1
        p = pos[:, :n_rel]
        assert p.size(1) == n_rel, f"position table has {p.size(1)} rows, {n_rel} needed"
        return self._attend_and_project(q, k, v, p, mask)

    @staticmethod
    def _is_causal(mask: torch.Tensor | None, t_q: int, t_k: int) -> bool:
        """True when several queries come with a mask that hides every key after each query's own position
        (r < 0): then their position products need only r >= 0, half the rows of a prefill's (issue 26)."""
        return mask is not None and t_q > 1 and not bool(mask.triu(t_k - t_q + 1).any())

    def step(self, x: torch.Tensor, pos: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """One new position of one decode: x [1, 1, D]; pos [H, K, Dk] (`RelPositionProjections.get(layer, K,
        1)`); keys/values [1, H, K, Dk]: the cached positions plus the new one (`KVCache.views_with_next`), whose
        last slot this fills. The ops `forward` runs for one query after `KVCache.append`, so the same numbers;
        tensors in and out only, for `torch.jit.trace` (step_graph.py)."""
        q, k, v = self._project_qkv(x)
        keys[:, :, -1:] = k
        values[:, :, -1:] = v
        return self._attend_and_project(q, keys, values, pos, None)

    def _attend_and_project(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: torch.Tensor,
                            mask: torch.Tensor | None) -> torch.Tensor:
        """q [B, H, T, Dk], every key/value [B, H, K, Dk], p [H, K+T-1, Dk] → output [B, T, D]."""
        t_q, t_k = q.size(2), k.size(2)
        q_u = q + self.pos_bias_u.unsqueeze(1)
        q_v = q + self.pos_bias_v.unsqueeze(1)
        if t_q == 1 and q.size(0) == 1 and mask is None:  # a decoding step
            out = self._attend_one_query(q_u, q_v, k, v, p)
        else:
            k, v, p = k.to(q.dtype), v.to(q.dtype), p.to(q.dtype)  # a cache kept in bf16 (`Encoder.keep_cache_in`)
            position = torch.matmul(q_v, p.transpose(-2, -1))  # [B, H, T, K+T-1]
            out = self._attend(q_u, k, v, self._rel_shift(position, t_k), mask)
        return self.linear_out(out.transpose(1, 2).reshape(q.size(0), t_q, self.h * self.d_k))

    def _attend_one_query(self, q_u: torch.Tensor, q_v: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          p: torch.Tensor) -> torch.Tensor:
        """One query of one sequence seeing every key: q_u, q_v [1, H, 1, Dk], k/v [1, H, K, Dk], p [H, K, Dk]
        (r = K-1 ... 0, already key j's row: no shift) → [1, H, 1, Dk].

        Each score product is a batched matrix-times-column over the heads, the form that streams a decoding
        step's cached keys and positions at about the rate of reading them: for v1's 16 heads at 310-560 keys
        the fused kernel with the position term as a bias took 1.2-1.4x as long, a row-times-matrix score
        product 1.3x (issue 26, twelfth pass). The two products are scaled by 1/sqrt(Dk) as they
        are summed, exactly upstream's (content + position) / sqrt(Dk) when Dk is a power of 4 (v1: 64).
        With `kernel_attention` the project's kernel computes the same sums in one pass over the keys, positions
        and values (`kernels/decode_attention.cpp`; issue 26, sixteenth pass).
        """
        scale = 1.0 / math.sqrt(self.d_k)
        if self.kernel_attention:  # the same sums in one pass over keys, positions and values (kernels/)
            out = torch.ops.cosyvoice_kernels.decode_attention(q_u[0, :, 0], k[0], v[0], q_v[0, :, 0], p, scale)
            return out.view(1, self.h, 1, self.d_k)
        k, v, p = k.to(q_u.dtype), v.to(q_u.dtype), p.to(q_u.dtype)  # a cache kept in bf16 (`Encoder.keep_cache_in`)
        scores = torch.bmm(k[0], q_u[0].transpose(1, 2))  # [H, K, 1]
        scores = torch.baddbmm(scores, p, q_v[0].transpose(1, 2), beta=scale, alpha=scale)
        weights = torch.softmax(scores.transpose(1, 2), dim=-1)  # [H, 1, K]
        return torch.bmm(weights, v[0]).unsqueeze(0)

    @staticmethod
    def _rel_shift(position: torch.Tensor, t_k: int) -> torch.Tensor:
        """[B, H, T, T+K-1] scores by relative distance → [B, H, T, K] scores by key.

        Query i and key j are r = (K - T + i) - j apart, at row (T - 1 - i) + j. Gathering realises
        upstream's pad-and-reshape "rel_shift" exactly. For a single query row j already belongs to
        key j, so there is nothing to gather. With only the K rows r >= 0 (a causal mask), the pairs at
        r < 0 read row K-1 instead: any finite value, since the mask hides them.
        """
        t_q = position.size(2)
        if t_q == 1:
            return position
        rows = (t_q - 1 - torch.arange(t_q, device=position.device)).unsqueeze(1) + torch.arange(
            t_k, device=position.device).unsqueeze(0)
        rows = rows.clamp_(max=position.size(-1) - 1)  # a no-op with all K+T-1 rows
        return position.gather(-1, rows.expand(position.shape[:2] + rows.shape))

    def _attend(self, q_u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, position: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        """softmax((q_u · kᵀ + position) / sqrt(Dk)) · v, masked: [B, H, T, Dk]."""
        keep = None if mask is None else mask.unsqueeze(1)  # [B, 1, T, K]
        if keep is None or bool(keep.any(-1).all()):
            # Every query sees a key: the position term and the mask as one additive bias of the fused kernel
            # (scores, softmax and the value sum in one pass: v1's whole prefill 0.86-0.90x in stock, issue 26;
            # a decoding step's single query has its own form, `_attend_one_query`). Float rounding only: the
            # content scores are scaled before the bias is added.
            bias = position / math.sqrt(self.d_k)
            if keep is not None:
                bias.masked_fill_(~keep, float("-inf"))
            return F.scaled_dot_product_attention(q_u, k, v, attn_mask=bias)
        # A query with no key to see (padding): upstream's explicit form, whose second fill gives it zeros.
        scores = (torch.matmul(q_u, k.transpose(-2, -1)) + position) / math.sqrt(self.d_k)
        attn = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1).masked_fill(~keep, 0.0)
        return torch.matmul(attn, v)


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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor,
                cache: KVCache | None = None) -> torch.Tensor:
        """x [B, T, D] → [B, T, D]; mask, pos and cache as for `RelPositionMultiHeadedAttention.forward`."""
        return self._block(x, lambda h: self.self_attn(h, mask, pos, cache))

    def step(self, x: torch.Tensor, pos: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """`forward` for one new position of one decode (`RelPositionMultiHeadedAttention.step`'s arguments)."""
        return self._block(x, lambda h: self.self_attn.step(h, pos, keys, values))

    def _block(self, x: torch.Tensor, attend) -> torch.Tensor:
        """x + attend(norm(x)), then the feed-forward residual."""
        norm_attn, norm_ff = (self.norm_mha, self.norm_ff) if self._conformer else (self.norm1, self.norm2)
        x = x + attend(norm_attn(x))
        return x + self.feed_forward(norm_ff(x))


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
        # The recorded one-position decoding step (step_graph.py sets it under the key 1, as a Qwen2 backbone's
        # table). It holds the layers as recorded, so a re-layout drops it (`drop_step`).
        self.step_graphs: dict = {}
        # What a decode keeps its keys, values and projected positions in (None: the weights' dtype): `keep_cache_in`.
        self.cache_dtype: torch.dtype | None = None

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
        vectors = self.pos_table.vectors(t, x.device, x.dtype)  # r = t-1 ... -(t-1): all a full pass reads
        if self.causal:
            vectors = vectors[:t]  # r = t-1 ... 0: the mask hides every later key
        for layer in self.encoders:
            x = layer(x, mask, layer.self_attn.project_positions(vectors))
        return self.after_norm(x)

    def fuse_qkv(self) -> int:
        """Fuse every layer's q/k/v projections (`RelPositionMultiHeadedAttention.fuse_qkv`); returns how
        many layers were fused now (0 when already done)."""
        fused = sum(layer.self_attn.fuse_qkv() for layer in self.encoders)
        if fused:
            self.drop_step()
        return fused

    def drop_step(self) -> None:
        """Forget the recorded step (the layers are about to change); steps run eagerly until recorded again."""
        self.step_graphs = {}

    def cache_bytes_per_position(self) -> int:
        """What a decode keeps per position in float32: each layer's key, value and projected position rows (v1:
        14 layers x 3 x 1024 floats, 168 KiB)."""
        return sum(3 * layer.self_attn.h * layer.self_attn.d_k * 4 for layer in self.encoders)

    def keep_cache_in(self, dtype: torch.dtype | None) -> None:
        """Decodes started from now on keep their keys, values and projected positions in `dtype` (None: the
        weights'); the attention upcasts what torch's ops read, the kernel reads bf16 as it is. Drops the recorded
        step (its example caches had the old dtype)."""
        self.cache_dtype = dtype
        self.drop_step()

    def new_cache(self, reserve: int = 0) -> DecodeCache:
        """The caches of one decode through this encoder, sized for `reserve` positions (they grow if outgrown)."""
        return DecodeCache(self, reserve)

    def forward_step(self, xs: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """Causal incremental encoding for decoding (B = 1).

        xs [1, T, input_size] the new positions; cache: this decode's `DecodeCache` (start one with
        `new_cache(reserve)`), appended to in place. Returns the new positions' outputs [1, T, D].
        """
        t_new = xs.size(1)
        t_old = cache.length
        t_k = t_old + t_new
        if t_new == 1 and t_old > 0:  # one position after the prefill: `step_rows`, recorded where it was
            views = [layer.views_with_next() for layer in cache.layers]
            pos = [cache.positions.get(i, t_k, 1) for i in range(len(self.encoders))]
            graph = self.step_graphs.get(1)
            step = graph if graph is not None and graph.usable(xs) else self.step_rows
            out = step(xs, pos, [k for k, _ in views], [v for _, v in views])
            for layer in cache.layers:
                layer.advance()
            return out
        if t_new == 1:
            mask = None  # a single new query may attend to every key: nothing to mask
        else:
            # New queries see every cached key plus the new keys up to themselves.
            mask = torch.ones(t_new, t_k, dtype=torch.bool, device=xs.device)
            mask[:, t_old:] = torch.ones(t_new, t_new, dtype=torch.bool, device=xs.device).tril()
            mask = mask.unsqueeze(0)
        x = self.embed(xs)
        for i, layer in enumerate(self.encoders):
            # The mask is causal: distances r >= 0 only (one query's rows), no negative half to project.
            x = layer(x, mask, cache.positions.get(i, t_k, 1), cache.layers[i])
        return self.after_norm(x)

    def step_rows(self, xs: torch.Tensor, pos: list[torch.Tensor], keys: list[torch.Tensor],
                  values: list[torch.Tensor]) -> torch.Tensor:
        """One new position of one decode, xs [1, 1, input_size] → [1, 1, D]: the input layer, every layer's
        `step` (per layer its projected positions and its key/value views with the new slot, which it fills) and
        the output norm. What step_graph.py records; `forward_step` prepares the arguments and advances the cache."""
        x = self.embed(xs)
        for i, layer in enumerate(self.encoders):
            x = layer.step(x, pos[i], keys[i], values[i])
        return self.after_norm(x)
