"""The DiT flow-matching velocity estimator (F5-TTS style `DiT`), used by the token-to-mel DiT flow.

Upstream builds it from F5-TTS modules and x-transformers' rotary embedding; here every block is written
out with the same attribute names, so the `decoder.estimator.*` keys of `flow.pt` load strictly.

Forward (time-major inside): t → sinusoids (256) → `time_embed.time_mlp` = temb [B, D];
`[x, cond, mu, spks]` → `input_embed.proj` → + causal ConvPos; N `DiTBlock`s (AdaLayerNormZero, attention
with partial rotary, tanh-GELU FF, both gated); `norm_out` (AdaLayerNormZero_Final); `proj_out`.

Shapes: B batch (2 under classifier-free guidance), T mel frames, F = 80 mel bins, D = `dim`,
H heads of `dim_head` (H·dh = inner width of q/k/v).

Quirk reproduced: the rotary table is `dim_head` wide but is applied to the full-width q and k *before*
the head split, so only the first `dim_head` channels (head 0) carry RoPE; the other heads have no
positional signal but the conv position embedding.

Not here: the ODE solver and guidance (the CFM), mu/cond/spks (the flow).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ...config import DiTConfig
from ..conv_layout import Conv1d, pad_time, use_time_major
from ..linears import quantize_linears_int8, unpack_linears
from .unet import SinusoidalPosEmb
from .dit_stream import DiTStepState
from .unet_causal import chunk_mask


class TimestepEmbedding(nn.Module):
    """Sinusoids of t (scale 1000) → `time_mlp` (Linear → SiLU → Linear), keys `time_mlp.0/2`."""

    def __init__(self, dim: int, freq_dim: int = 256) -> None:
        super().__init__()
        self.time_embed = SinusoidalPosEmb(freq_dim)  # same formula as the U-Net's (F5-TTS copied it)
        self.time_mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """t [B] → [B, D]."""
        return self.time_mlp(self.time_embed(t))


class CausalConvPositionEmbedding(nn.Module):
    """Two stages of [left pad k−1 → grouped Conv1d(k) → Mish], keys `conv1.0`, `conv2.0`. Causal, so a
    frame's position signal never depends on later frames (what makes streaming chunks consistent)."""

    def __init__(self, dim: int, kernel_size: int = 31, groups: int = 16) -> None:
        super().__init__()
        self.pad = kernel_size - 1
        self.conv1 = nn.Sequential(Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())
        self.conv2 = nn.Sequential(Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())

    def use_time_major(self) -> int:
        """Run both convolutions time-major (`conv_layout`): [B, T, D] is already that layout of [B, D, T], so
        nothing is reordered or transposed in memory (0.6x the convolutions' time in bf16, 0.67x in float32).
        Returns how many layers."""
        return use_time_major(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, D] → [B, T, D]."""
        h = x.transpose(1, 2)
        if self.conv1[0].time_major:
            h = self.conv1(pad_time(h, self.pad))
            return self.conv2(pad_time(h, self.pad)).transpose(1, 2)
        h = self.conv1(F.pad(h, (self.pad, 0)))
        h = self.conv2(F.pad(h, (self.pad, 0)))
        return h.transpose(1, 2)


class InputEmbedding(nn.Module):
    """proj(cat[x, cond, mu, spks over T]) plus its causal conv position embedding. The feature order
    differs from the U-Net's ([x, mu, spks, cond]); the weights expect this one. spk_dim 0: no spks."""

    def __init__(self, mel_dim: int, mu_dim: int, spk_dim: int, dim: int, kernel_size: int, groups: int) -> None:
        super().__init__()
        self.spk_dim = spk_dim
        self.proj = nn.Linear(2 * mel_dim + mu_dim + spk_dim, dim)
        self.conv_pos_embed = CausalConvPositionEmbedding(dim, kernel_size, groups)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor) -> torch.Tensor:
        """x, cond [B, T, F], mu [B, T, F_mu], spks [B, F_spk] → [B, T, D]."""
        parts = [x, cond, mu]
        if self.spk_dim > 0:
            parts.append(spks.unsqueeze(1).expand(-1, x.size(1), -1))
        h = self.proj(torch.cat(parts, dim=-1))
        return self.conv_pos_embed(h) + h


class RotaryEmbedding(nn.Module):
    """x-transformers `RotaryEmbedding(dim_head)`: angle(pos, i) = pos · inv_freq_i, interleaved
    [a0, a0, a1, a1, …]. `inv_freq` is a persistent buffer (it is in `flow.pt`)."""

    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, t: int) -> torch.Tensor:
        """[1, T, dim] angles for positions 0…T−1."""
        pos = torch.arange(t, device=self.inv_freq.device).type_as(self.inv_freq)
        freqs = pos.unsqueeze(1) * self.inv_freq.unsqueeze(0)
        return torch.stack((freqs, freqs), dim=-1).flatten(-2).unsqueeze(0)


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """(x_{2i}, x_{2i+1}) → (−x_{2i+1}, x_{2i}) (the interleaved / GPT-J convention)."""
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


class Rotation(NamedTuple):
    """cos and sin of the rotary angles [1, T, r], computed once per estimator call: every block's queries and keys
    use the same ones (computed per use they were 88 cos/sin passes a call)."""

    cos: torch.Tensor
    sin: torch.Tensor

    @classmethod
    def of(cls, freqs: torch.Tensor) -> Rotation:
        return cls(freqs.cos(), freqs.sin())


def apply_partial_rotary(x: torch.Tensor, freqs: torch.Tensor | Rotation) -> torch.Tensor:
    """Rotate the first r channels of x [B, T, C] by the angles freqs [1, T, r] (or their `Rotation`); the rest
    pass through (upstream computes this in float32 and casts back)."""
    cos, sin = freqs if isinstance(freqs, Rotation) else Rotation.of(freqs)
    r = cos.size(-1)
    head, rest = x[..., :r], x[..., r:]
    head = head * cos + rotate_pairs(head) * sin
    # Cast the rotated part alone: the rest would round-trip through float32 unchanged (in bf16 that copy of the
    # full width cost more than the rotation).
    return torch.cat((head.to(x.dtype), rest), dim=-1)


class Attention(nn.Module):
    """Self-attention with biased q/k/v, `to_out.0`, scale 1/sqrt(dim_head), boolean mask (True = attend)."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])  # upstream's to_out.1 is a parameter-free dropout
        # Set by `DiT.to_bf16` / `DiT.to_int8`: matmul-softmax-matmul instead of SDPA (whose CPU kernel is
        # slow in bf16), in `attention_dtype` (None: the dtype of the activations).
        self.matmul_attention = False
        self.attention_dtype: torch.dtype | None = None
        # The dtype a stream keeps this layer's keys/values in between passes (None: as computed); bf16 halves
        # what a kept frame costs, so a stream's memory budget holds twice the frames (`flow_dit.py`).
        self.kept_dtype: torch.dtype | None = None

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, rope: torch.Tensor) -> torch.Tensor:
        """x [B, T, D]; attn_mask bool [B, 1, T, T] or None (all frames see all); rope [1, T, dh]."""
        b, t, _ = x.shape
        q, k, v = self._heads(x, rope)
        out = self.to_out[0](self._attend(q, k, v, attn_mask, x.dtype).transpose(1, 2).reshape(b, t, -1))
        if attn_mask is not None:
            # Upstream zeroes the output rows of keys the last query may not see (a padding-mask idiom).
            out = out.masked_fill(~attn_mask[:, 0, -1].unsqueeze(-1), 0.0)
        return out

    def forward_from(self, x: torch.Tensor, attn_mask: torch.Tensor, rope: torch.Tensor, state: DiTStepState,
                     index: int) -> torch.Tensor:
        """New frames x [B, T, D] attending to layer `index`'s kept keys/values in `state` and to each other
        (attn_mask bool [1, 1, T, K + T]); their keys/values go to the state's pending lists. The last query
        of a chunk-causal pass sees every key, so upstream's row-zeroing above never fires here."""
        b, t, _ = x.shape
        q, k, v = self._heads(x, rope)
        state.pending_keys.append(k)
        state.pending_values.append(v)
        if index < len(state.keys):
            k = torch.cat([state.keys[index].to(k), k], dim=2)
            v = torch.cat([state.values[index].to(v), v], dim=2)
        return self.to_out[0](self._attend(q, k, v, attn_mask, x.dtype).transpose(1, 2).reshape(b, t, -1))

    def _heads(self, x: torch.Tensor, rope: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x [B, T, D] → q, k, v [B, H, T, dh], q and k rotated."""
        b, t, _ = x.shape
        q = apply_partial_rotary(self.to_q(x), rope)  # the quirk: full width, before the head split
        k = apply_partial_rotary(self.to_k(x), rope)
        v = self.to_v(x)
        return tuple(y.view(b, t, self.heads, -1).transpose(1, 2) for y in (q, k, v))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
        """[B, H, T, dh] queries over [B, H, K, dh] keys/values → [B, H, T, dh] in `dtype`."""
        if self.matmul_attention:
            low = self.attention_dtype or q.dtype
            q, k, v = (q * q.size(-1) ** -0.5).to(low), k.to(low), v.to(low)
            scores = torch.matmul(q, k.transpose(-2, -1))  # [B, H, T, K]
            if attn_mask is not None:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            return torch.matmul(torch.softmax(scores, dim=-1), v).to(dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)


class AdaLayerNormZero(nn.Module):
    """linear(SiLU(temb)) → 6 chunks (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp);
    returns the modulated LayerNorm (eps 1e-6, no affine) of x and the other four chunks."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.silu = nn.SiLU()
        self.linear = nn.Linear(dim, dim * 6)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def modulation(self, temb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The six chunks [B, D] (they depend on the flow time alone, so `DiT` keeps them per time)."""
        return self.linear(self.silu(temb)).chunk(6, dim=1)

    def forward(self, x: torch.Tensor, temb: torch.Tensor,
                modulation: tuple[torch.Tensor, ...] | None = None) -> tuple[torch.Tensor, ...]:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = modulation or self.modulation(temb)
        # addcmul: the modulation in one pass over [B, T, D] instead of two (upstream: norm · (1 + scale) + shift)
        modulated = torch.addcmul(shift_msa[:, None], self.norm(x), 1 + scale_msa[:, None])
        return modulated, gate_msa, shift_mlp, scale_mlp, gate_mlp


class AdaLayerNormZeroFinal(nn.Module):
    """linear(SiLU(temb)) → (scale, shift) — scale first, unlike the block norm; LN eps 1e-6, no affine."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.silu = nn.SiLU()
        self.linear = nn.Linear(dim, dim * 2)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def modulation(self, temb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.linear(self.silu(temb)).chunk(2, dim=1)

    def forward(self, x: torch.Tensor, temb: torch.Tensor,
                modulation: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
        scale, shift = modulation or self.modulation(temb)
        return self.norm(x) * (1 + scale)[:, None, :] + shift[:, None, :]


class FeedForward(nn.Module):
    """ff.0 = (Linear(D → mult·D), tanh-GELU), ff.1 = dropout (identity here), ff.2 = Linear back."""

    def __init__(self, dim: int, mult: float) -> None:
        super().__init__()
        inner = int(dim * mult)
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")),
                                nn.Identity(), nn.Linear(inner, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(x)


class DiTBlock(nn.Module):
    """h += gate_msa · attn(adaLN(h)); h += gate_mlp · ff(LN(h)·(1 + scale_mlp) + shift_mlp)."""

    def __init__(self, dim: int, heads: int, dim_head: int, ff_mult: float) -> None:
        super().__init__()
        self.attn_norm = AdaLayerNormZero(dim)
        self.attn = Attention(dim, heads, dim_head)
        self.ff_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ff = FeedForward(dim, ff_mult)

    def forward(self, h: torch.Tensor, temb: torch.Tensor, attn_mask: torch.Tensor | None,
                rope: torch.Tensor, modulation: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
        """h [B, T, D], temb [B, D] → [B, T, D]. modulation: `attn_norm.modulation(temb)`, if already known."""
        norm, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.attn_norm(h, temb, modulation)
        h = torch.addcmul(h, gate_msa.unsqueeze(1), self.attn(norm, attn_mask, rope))  # h + gate · attn, one pass
        f = torch.addcmul(shift_mlp[:, None], self.ff_norm(h), 1 + scale_mlp[:, None])
        return torch.addcmul(h, gate_mlp.unsqueeze(1), self.ff(f))

    def forward_from(self, h: torch.Tensor, temb: torch.Tensor, attn_mask: torch.Tensor, rope: torch.Tensor,
                     state: DiTStepState, index: int,
                     modulation: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
        """`forward` for new frames only, attending to block `index`'s kept keys/values in `state`."""
        norm, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.attn_norm(h, temb, modulation)
        h = torch.addcmul(h, gate_msa.unsqueeze(1), self.attn.forward_from(norm, attn_mask, rope, state, index))
        f = torch.addcmul(shift_mlp[:, None], self.ff_norm(h), 1 + scale_mlp[:, None])
        return torch.addcmul(h, gate_mlp.unsqueeze(1), self.ff(f))


class DiT(nn.Module):
    """DiT velocity field v(x, t | mu, spks, cond), called like the U-Net estimators:
    `estimator(x, mask, mu, t, spks, cond, streaming)`.

    `streaming` selects chunk attention (`static_chunk_size` frames, every left chunk visible), so a frame
    never attends to later chunks; otherwise attention is full.

    Does not: draw noise, apply guidance, mask its output (upstream does not either), or skip-connect
    long range (`long_skip_connection` is off in every release).
    """

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        if cfg.long_skip_connection:
            raise ValueError("DiT long_skip_connection is not supported (no CosyVoice release uses it)")
        if cfg.static_chunk_size < 1:
            raise ValueError(f"static_chunk_size must be at least 1 frame, got {cfg.static_chunk_size}")
        mel = cfg.mel_dim
        mu_dim = mel if cfg.mu_dim is None else cfg.mu_dim
        spk_dim = 0 if cfg.spk_dim is None else cfg.spk_dim
        self.cfg = cfg
        self.time_embed = TimestepEmbedding(cfg.dim, cfg.time_freq_dim)
        self.input_embed = InputEmbedding(mel, mu_dim, spk_dim, cfg.dim, cfg.conv_pos_kernel, cfg.conv_pos_groups)
        self.rotary_embed = RotaryEmbedding(cfg.dim_head)
        self.transformer_blocks = nn.ModuleList(
            DiTBlock(cfg.dim, cfg.heads, cfg.dim_head, cfg.ff_mult) for _ in range(cfg.depth))
        self.norm_out = AdaLayerNormZeroFinal(cfg.dim)
        self.proj_out = nn.Linear(cfg.dim, mel)  # mel_dim, not out_channels: upstream ignores the latter
        # What the blocks compute in; inputs are cast to it and the velocity returned as float32.
        self.compute_dtype = torch.float32
        # The adaLN modulations by flow time (see `_modulations`): every pass of a stream, and every utterance,
        # runs the same few Euler times, and each block's modulation linear is a weight read per call.
        self._modulation_cache: dict[tuple, tuple[list[tuple[torch.Tensor, ...]], tuple[torch.Tensor, ...]]] = {}

    def to_bf16(self, matmul_attention: bool = True) -> None:
        """Run in bfloat16 from now on (in place), except the time embedding (t·1000 sinusoids would be off
        by up to ~1 rad) and the rotary angles (positions · inv_freq reach thousands of rad); the rotation
        itself runs in float32. `forward` still takes and returns float32. matmul_attention: attention as
        matmul-softmax-matmul instead of SDPA (faster in bf16 on CPU)."""
        self._modulation_cache.clear()
        unpack_linears(self)  # stock's oneDNN-packed linears (if any) back to plain ones, which cast
        for name, child in self.named_children():
            if name not in ("time_embed", "rotary_embed"):
                child.to(torch.bfloat16)
        for module in self.modules():
            if isinstance(module, Attention):
                module.matmul_attention = matmul_attention
                module.kept_dtype = torch.bfloat16  # what its keys/values are computed in
        self.compute_dtype = torch.bfloat16

    def use_time_major(self) -> int:
        """The input embedding's two position convolutions time-major (`CausalConvPositionEmbedding`), in place;
        returns how many. Any precision on a CPU (`precision.flow_run_time`); the same numbers in bf16, float32
        rounding apart."""
        return self.input_embed.conv_pos_embed.use_time_major()

    def to_int8(self, bf16_attention: bool = False, kept_dtype: torch.dtype | None = None) -> int:
        """int8 dynamic linears (per-channel int8 weights, activations quantised per call; CPU only) in
        every block and head, float32 elsewhere. The DiT is nearly all linears, so on CPU this beats `to_bf16`
        (fbgemm's int8 GEMMs run ~1.5x the bf16 rate); the time embedding stays float32. The attention stays
        float32 SDPA (its flash kernel fuses the softmax: as fast as bf16 matmuls over a whole render and 1.3-2.2x
        faster over a streamed chunk's few queries, issue 26), or runs as bf16 matmuls when `bf16_attention`.
        kept_dtype: what a stream keeps the keys/values in between passes (None: float32, or bf16 with
        `bf16_attention`). Returns how many linears were replaced."""
        self._modulation_cache.clear()  # its linears are replaced (a freed one's id could come back)
        unpack_linears(self)  # stock's oneDNN-packed linears (if any) back to plain ones to quantise
        count = quantize_linears_int8(self, skip=("time_embed",))
        for module in self.modules():
            if isinstance(module, Attention):
                module.matmul_attention = bf16_attention
                module.attention_dtype = torch.bfloat16 if bf16_attention else None
                module.kept_dtype = torch.bfloat16 if bf16_attention else kept_dtype
        return count

    def attention_mask(self, mask: torch.Tensor | None, t: int, streaming: bool,
                       device: torch.device) -> torch.Tensor | None:
        """bool [B, 1, T, T] (True = attend), or None for full attention over all-valid frames.
        mask: [B, 1, T] valid frames, or None (all valid)."""
        if not streaming:
            return None if mask is None else mask.bool().expand(-1, t, -1).unsqueeze(1)
        # Every left chunk, whatever num_decoding_left_chunks says (upstream passes -1 here).
        chunks = chunk_mask(t, self.cfg.static_chunk_size, -1, device)
        if mask is None:
            return chunks[None, None]
        return (chunks.unsqueeze(0) & mask.bool()).unsqueeze(1)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        mu: torch.Tensor,
        t: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
        streaming: bool = False,
    ) -> torch.Tensor:
        """Args:
            x: [B, F, T] current ODE state.
            mask: [B, 1, T] valid frames (float 0/1 or bool), or None when all frames are valid.
            mu: [B, F_mu, T] frame-aligned token encoding.
            t: [B] (or 0-d) flow time in [0, 1].
            spks: [B, F_spk] projected speaker embedding.
            cond: [B, F, T] prompt mel (zeros outside the prompt).
            streaming: chunk attention instead of full attention.
        Returns: velocity [B, mel_dim, T] float32.
        """
        b, _, frames = x.shape
        if t.ndim == 0:
            t = t.repeat(b)
        low = self.compute_dtype  # casts are no-ops in float32
        temb = self.time_embed(t.float()).to(low)
        blocks_mod, out_mod = self._modulations(t, temb)
        x, mu, spks, cond = x.to(low), mu.to(low), spks.to(low), cond.to(low)
        h = self.input_embed(x.transpose(1, 2), cond.transpose(1, 2), mu.transpose(1, 2), spks)
        rope = Rotation.of(self.rotary_embed(frames))
        if mask is not None and bool(mask.all()):
            # Every frame valid (one utterance, or rows of one length): no pass over every layer's [B, H, T, T]
            # scores (and outputs) that masks nothing. The same numbers.
            mask = None
        attn_mask = self.attention_mask(mask, frames, streaming, x.device)
        for block, modulation in zip(self.transformer_blocks, blocks_mod):
            h = block(h, temb, attn_mask, rope, modulation)
        return self.proj_out(self.norm_out(h, temb, out_mod)).transpose(1, 2).float()

    def forward_from(self, x: torch.Tensor, mu: torch.Tensor, t: torch.Tensor, spks: torch.Tensor,
                     cond: torch.Tensor, start: int, state: DiTStepState) -> torch.Tensor:
        """The streaming (chunk-causal) velocity of frames [start, start + T) only, given `state`: the keys,
        values and convolution contexts of frames [0, start) at this Euler step (`dit_stream.py`). `start`
        is a multiple of `static_chunk_size`. What this pass computes is left in the state's pending fields.
        x, mu, cond [B, F, T] of the new frames; t [B] or 0-d; spks [B, F_spk]. Returns [B, mel_dim, T]
        float32: what `forward(..., streaming=True)` over frames [0, start + T) returns for these frames."""
        b, _, frames = x.shape
        chunk = self.cfg.static_chunk_size
        if start % chunk:
            raise ValueError(f"a pass starts on a chunk boundary; {start} is not a multiple of {chunk}")
        if t.ndim == 0:
            t = t.repeat(b)
        low = self.compute_dtype
        temb = self.time_embed(t.float()).to(low)
        blocks_mod, out_mod = self._modulations(t, temb)
        x, mu, spks, cond = x.to(low), mu.to(low), spks.to(low), cond.to(low)
        h = self._embed_from(x.transpose(1, 2), cond.transpose(1, 2), mu.transpose(1, 2), spks, state)
        rope = Rotation.of(self.rotary_embed(start + frames)[:, start:])
        # Cached keys lie in earlier chunks (all visible); the new keys follow the chunk rule among themselves.
        new = chunk_mask(frames, chunk, -1, x.device)  # start is a chunk boundary, so chunks line up
        mask = torch.cat([torch.ones(frames, start, dtype=torch.bool, device=x.device), new], dim=1)[None, None]
        state.pending_keys, state.pending_values = [], []
        for index, (block, modulation) in enumerate(zip(self.transformer_blocks, blocks_mod)):
            h = block.forward_from(h, temb, mask, rope, state, index, modulation)
        return self.proj_out(self.norm_out(h, temb, out_mod)).transpose(1, 2).float()

    def _modulations(self, t: torch.Tensor, temb: torch.Tensor) -> tuple[list, tuple | list]:
        """Every block's adaLN chunks and the output norm's, for temb = time_embed(t). They depend on t alone, so
        they are kept per t (and per weights: a converted or reloaded linear is another key) where no gradient
        is wanted; the same numbers, without reading 22 modulation linears (v3: ~0.3 GB in bf16) per call."""
        if torch.is_grad_enabled():
            return [None] * len(self.transformer_blocks), None
        linears = [block.attn_norm.linear for block in self.transformer_blocks] + [self.norm_out.linear]
        weights = tuple((id(linear), getattr(getattr(linear, "weight", None), "_version", 0)) for linear in linears)
        key = (tuple(t.tolist()), temb.dtype, temb.device, weights)
        found = self._modulation_cache.get(key)
        if found is None:
            found = ([block.attn_norm.modulation(temb) for block in self.transformer_blocks],
                     self.norm_out.modulation(temb))
            while len(self._modulation_cache) >= 32:  # a stock solve uses 10 times, fast 2; batches add rows
                self._modulation_cache.pop(next(iter(self._modulation_cache)))
            self._modulation_cache[key] = found
        return found

    def _embed_from(self, x: torch.Tensor, cond: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor,
                    state: DiTStepState) -> torch.Tensor:
        """`InputEmbedding` of the new frames, its two causal convolutions reading the kept contexts."""
        embed = self.input_embed
        parts = [x, cond, mu]
        if embed.spk_dim > 0:
            parts.append(spks.unsqueeze(1).expand(-1, x.size(1), -1))
        proj = embed.proj(torch.cat(parts, dim=-1))
        pos = embed.conv_pos_embed
        if state.proj_context is None:
            state.proj_context = proj.new_zeros(proj.size(0), pos.pad, proj.size(2))
            state.conv_context = proj.new_zeros(proj.size(0), pos.pad, proj.size(2))
        state.pending_proj = torch.cat([state.proj_context.to(proj), proj], dim=1)
        first = pos.conv1(state.pending_proj.transpose(1, 2)).transpose(1, 2)
        state.pending_conv = torch.cat([state.conv_context.to(first), first], dim=1)
        second = pos.conv2(state.pending_conv.transpose(1, 2)).transpose(1, 2)
        return second + proj
