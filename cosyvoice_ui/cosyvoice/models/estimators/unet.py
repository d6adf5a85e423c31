"""The v1 flow-matching velocity estimator: a 1-D U-Net with transformer blocks (`ConditionalDecoder`).

Upstream builds it from Matcha-TTS blocks and diffusers 0.29 attention; here every block is written
out with the same attribute names, so the `decoder.estimator.*` keys of `flow.pt` load strictly.

Shapes: B batch (2 under classifier-free guidance), T mel frames, C channels, F = 80 mel bins.
A `mask` is float or bool [B, 1, T] with 1/True at valid frames, or None when every frame is valid
(B=1 inference): then every mask multiply and the attention mask are skipped, which is exact
because upstream multiplies by ones there.

Not here: the ODE solver and guidance (see `models/cfm.py`), the token encoder (see `models/flow.py`),
the causal v2 variant, v3's DiT (each estimator has its own file here; `registry.py` picks one per family).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...config import EstimatorConfig
from ..linears import unpack_linears


def _masked(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else x * mask


class SinusoidalPosEmb(nn.Module):
    """Timestep → [sin(1000·t·f_j) ..., cos(1000·t·f_j) ...], f_j = exp(-j·ln(1e4)/(half-1)). No weights."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        assert dim % 2 == 0, f"sinusoidal embedding width must be even, got {dim}"
        self.dim = dim

    def forward(self, t: torch.Tensor, scale: float = 1000.0) -> torch.Tensor:
        """t [B] in [0, 1] → [B, dim]."""
        if t.ndim < 1:
            t = t.unsqueeze(0)
        half = self.dim // 2
        step = math.log(10000) / (half - 1)
        freqs = torch.exp(torch.arange(half, device=t.device).float() * -step)
        # Same operation order as upstream ((scale·t)·f) so float32 rounding agrees.
        args = scale * t.unsqueeze(1) * freqs.unsqueeze(0)
        return torch.cat((args.sin(), args.cos()), dim=-1).to(t.dtype)


class TimestepEmbedding(nn.Module):
    """linear_1 → SiLU → linear_2 (diffusers naming)."""

    def __init__(self, in_channels: int, time_embed_dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, time_embed_dim)
        self.act = nn.SiLU()
        self.linear_2 = nn.Linear(time_embed_dim, time_embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(x)))


class Block1D(nn.Module):
    """Conv1d(k3, same) → GroupNorm(8) → Mish on masked input, output masked again.

    GroupNorm statistics run over every frame of the tensor, padded ones included (as upstream),
    so padding a sequence changes its valid outputs slightly.
    """

    def __init__(self, dim: int, dim_out: int, groups: int = 8) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Conv1d(dim, dim_out, 3, padding=1), nn.GroupNorm(groups, dim_out), nn.Mish())

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return _masked(self.block(_masked(x, mask)), mask)


class ResnetBlock1D(nn.Module):
    """block1 → + Linear(Mish(temb)) → block2, plus a 1x1 `res_conv` shortcut."""

    def __init__(self, dim: int, dim_out: int, time_emb_dim: int, groups: int = 8) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_emb_dim, dim_out))  # keys mlp.1.*
        self.block1 = Block1D(dim, dim_out, groups)
        self.block2 = Block1D(dim_out, dim_out, groups)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, temb: torch.Tensor) -> torch.Tensor:
        """x [B, C_in, T], temb [B, E] → [B, C_out, T]."""
        h = self.block1(x, mask) + self.mlp(temb).unsqueeze(-1)
        h = self.block2(h, mask)
        return h + self.res_conv(_masked(x, mask))


class Downsample1D(nn.Module):
    """Stride-2 Conv1d(k3, p1): T → ceil(T/2)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, 3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class Upsample1D(nn.Module):
    """ConvTranspose1d(k4, s2, p1): T → 2T."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(dim, dim, 4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class Attention(nn.Module):
    """Multi-head self-attention: bias-free q/k/v projections, `to_out.0` with bias, scale 1/sqrt(d_head)."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])  # upstream's to_out.1 is a parameter-free dropout
        # Set by `ConditionalDecoder.to_bf16`: plain matmul-softmax-matmul instead of SDPA, whose CPU flash
        # kernel runs bf16 at a fraction of the GEMM rate at these lengths.
        self.matmul_attention = False

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        """x [B, T, C]; attn_mask bool broadcastable to [B, H, T, T] (True = attend) or None."""
        b, t, _ = x.shape
        q, k, v = (proj(x).view(b, t, self.heads, -1).transpose(1, 2) for proj in (self.to_q, self.to_k, self.to_v))
        if self.matmul_attention:
            scores = torch.matmul(q * q.size(-1) ** -0.5, k.transpose(-2, -1))  # [B, H, T, T]
            if attn_mask is not None:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            out = torch.matmul(torch.softmax(scores, dim=-1), v)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.to_out[0](out.transpose(1, 2).reshape(b, t, -1))


class GELU(nn.Module):
    """Linear `proj` followed by the exact (erf) GELU."""

    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


class FeedForward(nn.Module):
    """net.0 = GELU(dim → 4·dim), net.1 = (dropout, identity at inference), net.2 = Linear(4·dim → dim)."""

    def __init__(self, dim: int, mult: int = 4) -> None:
        super().__init__()
        self.net = nn.ModuleList([GELU(dim, dim * mult), nn.Identity(), nn.Linear(dim * mult, dim)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.net:
            x = layer(x)
        return x


class BasicTransformerBlock(nn.Module):
    """Pre-norm block: h += attn1(norm1(h)); h += ff(norm3(h)). No cross-attention (so no norm2)."""

    def __init__(self, dim: int, num_heads: int, head_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = Attention(dim, num_heads, head_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim)

    def forward(self, h: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        """h [B, T, C] → [B, T, C]."""
        h = h + self.attn1(self.norm1(h), attn_mask)
        return h + self.ff(self.norm3(h))


def _key_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """[B, 1, T] frame mask → bool [B, 1, 1, T]: every query may see every valid key.

    Upstream adds a 0 / -1e10 bias built from the same key mask; both give exactly zero weight to
    padded keys in float32.
    """
    return None if mask is None else mask.bool().unsqueeze(1)


class ConditionalDecoder(nn.Module):
    """U-Net velocity field v(x, t | mu, spks, cond) for the v1 flow.

    Input channels are `[x, mu, spks broadcast over T, cond]` (4 × 80 = 320). Down path: one
    (ResnetBlock1D, transformer blocks, down-conv) stage per entry of `channels` (stride-2 conv
    except for the last entry); `num_mid_blocks` (resnet, transformer blocks) stages at the lowest
    resolution; up path mirroring the down path with skip concatenation; `final_block` + `final_proj`.

    Does not: draw noise, apply guidance, or know about prompts — see `ConditionalCFM`.
    """

    def __init__(self, cfg: EstimatorConfig) -> None:
        super().__init__()
        channels = tuple(cfg.channels)
        heads, head_dim = cfg.num_heads, cfg.attention_head_dim
        if cfg.act_fn != "gelu":
            raise ValueError(f"estimator act_fn {cfg.act_fn!r} is not supported (CosyVoice v1 uses 'gelu')")
        self.cfg = cfg
        self.time_embeddings = SinusoidalPosEmb(cfg.in_channels)
        time_dim = channels[0] * 4
        self.time_mlp = TimestepEmbedding(cfg.in_channels, time_dim)

        def transformer_stack(dim: int) -> nn.ModuleList:
            return nn.ModuleList(BasicTransformerBlock(dim, heads, head_dim) for _ in range(cfg.n_blocks))

        self.down_blocks = nn.ModuleList()
        c_out = cfg.in_channels
        for i, c in enumerate(channels):
            c_in, c_out = c_out, c
            last = i == len(channels) - 1
            down: nn.Module = nn.Conv1d(c, c, 3, padding=1) if last else Downsample1D(c)
            self.down_blocks.append(nn.ModuleList([ResnetBlock1D(c_in, c, time_dim), transformer_stack(c), down]))

        self.mid_blocks = nn.ModuleList(
            nn.ModuleList([ResnetBlock1D(channels[-1], channels[-1], time_dim), transformer_stack(channels[-1])])
            for _ in range(cfg.num_mid_blocks)
        )

        up_channels = channels[::-1] + (channels[0],)
        self.up_blocks = nn.ModuleList()
        for i in range(len(up_channels) - 1):
            c_in, c = up_channels[i] * 2, up_channels[i + 1]
            last = i == len(up_channels) - 2
            up: nn.Module = nn.Conv1d(c, c, 3, padding=1) if last else Upsample1D(c)
            self.up_blocks.append(nn.ModuleList([ResnetBlock1D(c_in, c, time_dim), transformer_stack(c), up]))

        self.final_block = Block1D(up_channels[-1], up_channels[-1])
        self.final_proj = nn.Conv1d(up_channels[-1], cfg.out_channels, 1)
        # What the network computes in; inputs are cast to it and the velocity returned as float32.
        self.compute_dtype = torch.float32

    def to_bf16(self, matmul_attention: bool = True) -> None:
        """Run in bfloat16 from now on (in place, no float32 copy kept): every block except `time_mlp`,
        whose t·1000 sinusoids would be off by up to ~1 rad in bf16. `forward` still takes and returns
        float32. matmul_attention: attention as matmul-softmax-matmul instead of SDPA (faster in bf16 on CPU).
        """
        unpack_linears(self)  # stock's oneDNN-packed linears (if any) back to plain ones, which cast
        for name, child in self.named_children():
            if name != "time_mlp":
                child.to(torch.bfloat16)
        for module in self.modules():
            if isinstance(module, Attention):
                module.matmul_attention = matmul_attention
        self.compute_dtype = torch.bfloat16

    @staticmethod
    def _transformers(x: torch.Tensor, blocks: nn.ModuleList, mask: torch.Tensor | None) -> torch.Tensor:
        """Run a transformer stack on channel-major x [B, C, T] (blocks work time-major)."""
        attn_mask = _key_mask(mask)
        # One copy into time-major memory: a transposed view would make every residual add keep the
        # channel-major layout, so each LayerNorm copied and each add ran strided.
        h = x.transpose(1, 2).contiguous()
        for block in blocks:
            h = block(h, attn_mask)
        return h.transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        mu: torch.Tensor,
        t: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
    ) -> torch.Tensor:
        """Args:
            x: [B, F, T] current ODE state.
            mask: [B, 1, T] valid frames (float 0/1 or bool), or None when all frames are valid.
            mu: [B, F, T] frame-aligned token encoding.
            t: [B] flow time in [0, 1].
            spks: [B, F] projected speaker embedding.
            cond: [B, F, T] prompt mel (zeros outside the prompt).
        Returns: velocity [B, out_channels, T] float32 (zero at masked frames).
        """
        low = self.compute_dtype  # casts are no-ops in float32
        x, mu, spks, cond = x.to(low), mu.to(low), spks.to(low), cond.to(low)
        if mask is not None:
            mask = mask.to(low)
        temb = self.time_mlp(self.time_embeddings(t.float())).to(low)  # time_mlp stays float32 (see to_bf16)
        h = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, x.size(-1)), cond], dim=1)

        skips: list[torch.Tensor] = []
        masks: list[torch.Tensor | None] = [mask]
        for resnet, blocks, down in self.down_blocks:
            m = masks[-1]
            h = self._transformers(resnet(h, m, temb), blocks, m)
            skips.append(h)
            h = down(_masked(h, m))
            masks.append(None if m is None else m[:, :, ::2])
        masks.pop()  # the mask after the last (stride-1) stage is never used

        m = masks[-1]
        for resnet, blocks in self.mid_blocks:
            h = self._transformers(resnet(h, m, temb), blocks, m)

        for resnet, blocks, up in self.up_blocks:
            m = masks.pop()
            skip = skips.pop()
            # The transposed conv yields 2·ceil(T/2) frames; crop to the skip's length (odd T).
            h = torch.cat([h[:, :, : skip.size(-1)], skip], dim=1)
            h = self._transformers(resnet(h, m, temb), blocks, m)
            h = up(_masked(h, m))
        h = self.final_block(h, m)
        return _masked(self.final_proj(_masked(h, m)), mask).float()
