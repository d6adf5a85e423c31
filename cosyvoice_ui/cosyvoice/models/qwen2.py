"""A Qwen2 decoder of our own (no `transformers`), the backbone of the Qwen-based speech-token LLMs.

Legend: B batch (always 1 when decoding), T new positions, K cached + new key positions, D hidden size,
H query heads, G key/value heads (grouped-query attention: each serves H / G query heads), Dh head width.

Module and attribute names follow Hugging Face's `Qwen2ForCausalLM` (`model.embed_tokens`,
`model.layers.{i}.self_attn.q_proj`, ..., `model.norm`, `lm_head`) so the official `llm.pt` keys
(`llm.model.model.*`, `llm.model.lm_head.weight`) load strictly under upstream's `Qwen2Encoder` wrapper.
The architecture comes from the model folder's `CosyVoice-BlankEN/config.json` (`config.Qwen2Config`).

Not here: tokenizers, the speech-token layout and decoding policy (`llm_qwen.py`), sliding-window
attention (off in every CosyVoice config), batching, training.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..config import Qwen2Config
from .decode_cache import KVCache


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight, computed in float32 as Qwen2 does (then cast back)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class RotaryEmbedding(nn.Module):
    """Rotary position tables for absolute positions ("rotate-half": channel i pairs with i + Dh/2).

    `inv_freq` is a non-persistent buffer: it is not in `llm.pt`, and is rebuilt from θ and Dh.
    """

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        # Same expression as HF (float32 exponent, python-float base), so the tables agree bitwise.
        exponent = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        self.register_buffer("inv_freq", 1.0 / (theta ** exponent), persistent=False)

    def forward(self, start: int, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [length, Dh] for positions start .. start+length-1."""
        positions = torch.arange(start, start + length, device=self.inv_freq.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq.float()[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.size(-1) // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, Dh] with cos/sin [T, Dh] → rotated x."""
    return x * cos + _rotate_half(x) * sin


class Qwen2Attention(nn.Module):
    """Grouped-query self-attention with rotary positions; q/k/v projections carry a bias, o_proj none."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_width
        d = cfg.hidden_size
        self.q_proj = nn.Linear(d, self.n_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=True)
        self.v_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=False)
        # Set by `fuse_qkv()` after loading: one [(H + 2G)·Dh, D] linear replacing q/k/v_proj.
        self.qkv_proj: nn.Module | None = None
        # Set by `SpeechTokenLM.attention_on_kernel()`: a decoding step's attention on the project's own kernel.
        self.kernel_attention = False

    def fuse_qkv(self) -> bool:
        """Replace `q_proj`/`k_proj`/`v_proj` by one `qkv_proj` (q rows, then k, then v), in place;
        False when already fused. Run after the strict load: the fused module no longer loads `llm.pt`.
        One GEMV per step instead of three; same numbers up to summation order."""
        if self.qkv_proj is not None:
            return False
        parts = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight.detach() for p in parts])
        linear = nn.Linear(weight.size(1), weight.size(0), bias=True, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(weight)
            linear.bias.copy_(torch.cat([p.bias.detach() for p in parts]))
        linear.requires_grad_(False)
        self.qkv_proj = linear
        del self.q_proj, self.k_proj, self.v_proj  # the fused copy replaces them (no double memory)
        return True

    def _project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, D] → q [B, H, T, Dh], k and v [B, G, T, Dh]."""
        b, t, _ = x.shape
        if self.qkv_proj is not None:
            q, k, v = self.qkv_proj(x).split([self.n_heads * self.head_dim, self.n_kv * self.head_dim,
                                              self.n_kv * self.head_dim], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return (q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2),
                k.view(b, t, self.n_kv, self.head_dim).transpose(1, 2),
                v.view(b, t, self.n_kv, self.head_dim).transpose(1, 2))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """x [B, T, D]; cos/sin [T, Dh] of the new positions; cache: this layer's keys/values so far
        (appended to in place), or None for a full causal pass. Returns [B, T, D]."""
        b, t, _ = x.shape
        q, k, v = self._project_qkv(x)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        past = 0 if cache is None else cache.length
        if cache is not None:
            # The cache keeps only the G key/value heads: H/G times less memory than repeating them.
            k, v = cache.append(k, v)
        mask = None
        causal = False
        if t > 1:
            if past == 0:
                causal = True
            else:  # new queries see every cached key plus the new keys up to themselves
                mask = torch.ones(t, past + t, dtype=torch.bool, device=x.device)
                mask[:, past:] = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        if t == 1 and b == 1:
            out = self._one_query(q, k, v)
        else:  # (a cache kept in bf16 is read in the queries' dtype: `Qwen2Encoder.keep_cache_in`)
            out = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask, is_causal=causal,
                                                 enable_gqa=self.n_heads != self.n_kv)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))

    def _one_query(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """One query per head seeing every key: q [1, H, 1, Dh], keys/values [1, G, K, Dh] → [1, H, 1, Dh].
        On the project's kernel (`kernels/decode_attention.cpp`: one pass over the keys for each group of heads
        that shares them) when `kernel_attention`: alone 0.57-0.6x SDPA's time over v3's 24 layers at 250-440 keys,
        in a whole step even (v3) to 0.95x (v2), the cache being small (issue 26, sixteenth pass)."""
        if self.kernel_attention:
            out = torch.ops.cosyvoice_kernels.decode_attention(q[0, :, 0], keys[0], values[0], None, None,
                                                               self.head_dim ** -0.5)
            return out.view(1, self.n_heads, 1, self.head_dim)
        return F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype),
                                              enable_gqa=self.n_heads != self.n_kv)


    def forward_rows(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: list[torch.Tensor],
                     values: list[torch.Tensor]) -> torch.Tensor:
        """One new position for each of B separate decodes: x [B, 1, D]; cos/sin [B, 1, Dh] (each row at its
        own position); keys/values: each row's cached positions plus the new one (`KVCache.views_with_next`),
        whose last slot this fills. The projections run on all rows at once (one read of the weights); attention
        runs per row over its own keys. Returns [B, 1, D]. Written for `torch.jit.trace` too (step_graph.py):
        tensors and lists in, no cache objects."""
        b = x.size(0)
        q, k, v = self._project_qkv(x)
        q, k = apply_rotary(q, cos[:, None], sin[:, None]), apply_rotary(k, cos[:, None], sin[:, None])
        rows = []
        for i, (row_keys, row_values) in enumerate(zip(keys, values)):
            row_keys[:, :, -1:] = k[i : i + 1]  # the new position's slot (what KVCache.append writes)
            row_values[:, :, -1:] = v[i : i + 1]
            rows.append(self._one_query(q[i : i + 1], row_keys, row_values))
        out = torch.cat(rows)
        return self.o_proj(out.transpose(1, 2).reshape(b, 1, self.n_heads * self.head_dim))


class Qwen2MLP(nn.Module):
    """down(SiLU(gate(x)) ⊙ up(x)), no biases."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen2DecoderLayer(nn.Module):
    """Pre-norm block: x += attn(norm(x)); x += mlp(norm(x))."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.self_attn = Qwen2Attention(cfg)
        self.mlp = Qwen2MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_rows(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: list[torch.Tensor],
                     values: list[torch.Tensor]) -> torch.Tensor:
        x = x + self.self_attn.forward_rows(self.input_layernorm(x), cos, sin, keys, values)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2DecodeCache:
    """Keys/values of one incremental decode through a `Qwen2Model`: one preallocated `KVCache` per
    layer (G heads each), sized for `reserve` positions (a hint: they grow when outgrown). The number
    of cached positions is also the absolute position of the next input (rotary positions continue)."""

    def __init__(self, model: Qwen2Model, reserve: int = 0) -> None:
        self.layers = [KVCache(reserve, model.cache_dtype) for _ in model.layers]

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0


class Qwen2Model(nn.Module):
    """Token embedding table, decoder layers and the final RMSNorm (HF `Qwen2Model`)."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Qwen2DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(cfg.head_width, cfg.rope_theta)
        # What a decode keeps its keys and values in (None: the activations' dtype): `Qwen2Encoder.keep_cache_in`.
        self.cache_dtype: torch.dtype | None = None

    def forward(self, inputs_embeds: torch.Tensor, cache: Qwen2DecodeCache | None = None) -> torch.Tensor:
        """inputs_embeds [B, T, D] → last hidden state [B, T, D] after the final norm.

        Without a cache: one causal pass over positions 0..T-1. With one: the T new positions follow
        the cached ones (positions cache.length ..), and their keys/values are appended to it (B = 1).
        """
        start = 0 if cache is None else cache.length
        cos, sin = self.rotary_emb(start, inputs_embeds.size(1), inputs_embeds.dtype)
        x = inputs_embeds
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if cache is None else cache.layers[i])
        return self.norm(x)


    def forward_rows(self, inputs_embeds: torch.Tensor, caches: list[Qwen2DecodeCache],
                     step: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
        """One new position for each of B separate decodes (continuous batching): inputs_embeds [B, 1, D], row
        i following caches[i]'s positions (each cache at its own length, holding at least a prefill). Returns
        [B, 1, D]; every row equals what `forward(row, cache)` returns, up to the summation order of a B-row
        matrix product. step: `step_rows` as a recorded graph (step_graph.py), the same numbers."""
        tables = [self.rotary_emb(cache.length, 1, inputs_embeds.dtype) for cache in caches]
        cos, sin = torch.stack([c for c, _ in tables]), torch.stack([s for _, s in tables])
        keys, values = [], []  # per layer, then per row
        for i in range(len(self.layers)):
            for cache in caches:
                k, v = cache.layers[i].views_with_next()
                keys.append(k)
                values.append(v)
        out = (step or self.step_rows)(inputs_embeds, cos, sin, keys, values)
        for cache in caches:
            for layer_cache in cache.layers:
                layer_cache.advance()
        return out

    def step_rows(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: list[torch.Tensor],
                  values: list[torch.Tensor]) -> torch.Tensor:
        """The layers and the final norm for one new position of each of B rows (`forward_rows` prepares the
        arguments): keys/values per layer, then per row. What step_graph.py records."""
        rows = x.size(0)
        for i, layer in enumerate(self.layers):
            x = layer.forward_rows(x, cos, sin, keys[i * rows : (i + 1) * rows], values[i * rows : (i + 1) * rows])
        return self.norm(x)


class Qwen2ForCausalLM(nn.Module):
    """`Qwen2Model` plus `lm_head`, kept only because `llm.pt` holds its weight (the speech LLMs use
    their own decoder head). Tied to `embed_tokens` when the config says so, as HF does, so the
    151936-row table is stored once."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.model = Qwen2Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight


class Qwen2Encoder(nn.Module):
    """Upstream's wrapper name: holds the HF-shaped model as `model`, so keys read `model.model.*`.

    `forward` is the full causal pass (teacher forcing), `forward_step` the cached incremental one;
    both return the hidden state after the final norm, as upstream takes `hidden_states[-1]`.
    """

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Qwen2ForCausalLM(cfg)
        # Recorded decoding steps by row count (step_graph.py sets them). They hold the layers as recorded, so a
        # re-layout drops them (`drop_step`).
        self.step_graphs: dict = {}

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.model.model.embed_tokens

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        """xs [B, T, D] → [B, T, D], causal, positions 0..T-1."""
        return self.model.model(xs)

    def fuse_qkv(self) -> int:
        """Fuse every layer's q/k/v projections (`Qwen2Attention.fuse_qkv`); returns how many layers were
        fused now (0 when already done)."""
        fused = sum(layer.self_attn.fuse_qkv() for layer in self.model.model.layers)
        if fused:
            self.drop_step()
        return fused

    def drop_step(self) -> None:
        """Forget recorded steps (their layers are about to change); steps run eagerly until recorded again."""
        self.step_graphs = {}

    def cache_bytes_per_position(self) -> int:
        """What a decode keeps per position in float32: each layer's key and value rows of its shared key heads
        (v2/v3: 24 layers x 2 x 2 heads x 64 floats, 24 KiB)."""
        return sum(2 * layer.self_attn.n_kv * layer.self_attn.head_dim * 4 for layer in self.model.model.layers)

    def keep_cache_in(self, dtype: torch.dtype | None) -> None:
        """Decodes started from now on keep their keys and values in `dtype` (None: as computed); the attention
        upcasts what torch's ops read, the kernel reads bf16 as it is. Drops the recorded steps (their example caches
        had the old dtype)."""
        self.model.model.cache_dtype = dtype
        self.drop_step()

    def new_cache(self, reserve: int = 0) -> Qwen2DecodeCache:
        return Qwen2DecodeCache(self.model.model, reserve)

    def forward_step(self, xs: torch.Tensor, cache: Qwen2DecodeCache) -> torch.Tensor:
        """xs [1, T, D] new positions → their outputs [1, T, D]; the cache is appended to in place. One position
        after a prefill takes the recorded step where there is one (step_graph.py), with the same numbers."""
        graph = self.step_graphs.get(1)
        if graph is not None and cache.length > 0 and graph.usable(xs):
            return self.model.model.forward_rows(xs, [cache], step=graph)
        return self.model.model(xs, cache)

    def forward_rows(self, xs: torch.Tensor, caches: list[Qwen2DecodeCache]) -> torch.Tensor:
        """xs [B, 1, D], one new position per decode → [B, 1, D] (`Qwen2Model.forward_rows`), through the recorded
        step for B rows where there is one (step_graph.py), with the same numbers."""
        graph = self.step_graphs.get(xs.size(0))
        return self.model.model.forward_rows(xs, caches, step=graph if graph is not None and graph.usable(xs) else None)
