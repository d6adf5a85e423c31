"""The causal flow-matching U-Net (`CausalConditionalDecoder`) of the causal token-to-mel flow.

The layout of `unet.ConditionalDecoder` (same attribute names, same transformer blocks and time
embedding), with causal pieces so a frame never depends on later chunks:

* every k=3 conv of the blocks, and the stride-1 "down"/"up" convs, left-pad 2 zeros (`CausalConv1d`);
* the blocks normalise with a LayerNorm over channels per frame (`CausalBlock1D`, key `block.2`) instead
  of GroupNorm, whose statistics would mix every frame of the sequence;
* when streaming, attention is chunk-causal: frame i sees frame j iff j < (⌊i/C⌋+1)·C, C =
  `static_chunk_size` (50 frames), with all left chunks (or `num_decoding_left_chunks` of them); not
  streaming, every frame sees every valid frame.

Shapes: B batch (2 under guidance), T frames, C channels, F = 80 mel bins. `mask` is [B, 1, T] or None
(all valid: the multiplies and the padding part of the attention mask are skipped; exact at B = 1).

Not here: the sampler (`models/cfm_causal.py`), the strided down/up sampling convs of a multi-entry
`channels` (reused non-causal from `unet.py`, as upstream; the official config has one entry).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...config import EstimatorConfig
from .unet import (BasicTransformerBlock, ConditionalDecoder, Downsample1D, SinusoidalPosEmb, TimestepEmbedding,
                   Upsample1D, _masked)


class CausalConv1d(nn.Conv1d):
    """Stride-1 Conv1d that left-pads kernel−1 zeros: output frame t sees inputs t−k+1 … t."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__(in_channels, out_channels, kernel_size)
        self.causal_padding = kernel_size - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.causal_padding, 0)))


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of a channel-major [B, C, T] tensor (upstream: Transpose, LN, Transpose)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class CausalBlock1D(nn.Module):
    """CausalConv1d(k3) → LayerNorm over channels → Mish on masked input, output masked again.

    `block` keeps upstream's indices (0 conv, 1/3 the transposes, 2 LayerNorm, 4 Mish) so keys are
    `block.0.*` and `block.2.*`; the transposes live inside `ChannelLayerNorm`, 1 and 3 are identities.
    """

    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        self.block = nn.Sequential(CausalConv1d(dim, dim_out, 3), nn.Identity(), ChannelLayerNorm(dim_out),
                                   nn.Identity(), nn.Mish())

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return _masked(self.block(_masked(x, mask)), mask)


class CausalResnetBlock1D(nn.Module):
    """block1 → + Linear(Mish(temb)) → block2, plus a 1x1 `res_conv` shortcut (causal blocks)."""

    def __init__(self, dim: int, dim_out: int, time_emb_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_emb_dim, dim_out))  # keys mlp.1.*
        self.block1 = CausalBlock1D(dim, dim_out)
        self.block2 = CausalBlock1D(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, temb: torch.Tensor) -> torch.Tensor:
        """x [B, C_in, T], temb [B, E] → [B, C_out, T]."""
        h = self.block1(x, mask) + self.mlp(temb).unsqueeze(-1)
        h = self.block2(h, mask)
        return h + self.res_conv(_masked(x, mask))


def chunk_mask(frames: int, chunk: int, left_chunks: int = -1, device: torch.device | None = None) -> torch.Tensor:
    """bool [T, T]: query i may see key j iff j < (⌊i/chunk⌋+1)·chunk and, when left_chunks ≥ 0,
    j ≥ (⌊i/chunk⌋ − left_chunks)·chunk (WeNet's `subsequent_chunk_mask`)."""
    i = torch.arange(frames, device=device).unsqueeze(1)
    j = torch.arange(frames, device=device).unsqueeze(0)
    block = torch.div(i, chunk, rounding_mode="floor")
    keep = j < (block + 1) * chunk
    if left_chunks >= 0:
        keep = keep & (j >= (block - left_chunks) * chunk)
    return keep


class CausalConditionalDecoder(ConditionalDecoder):
    """Causal U-Net velocity field v(x, t | mu, spks, cond); see the module docstring.

    A `ConditionalDecoder` for its inference transforms (`to_bf16`); its own blocks are built here.
    Does not: draw noise, apply guidance, or know about prompts — see `CausalConditionalCFM`.
    """

    def __init__(self, cfg: EstimatorConfig, static_chunk_size: int, num_decoding_left_chunks: int = -1) -> None:
        """static_chunk_size: attention chunk in frames when streaming (token chunk × token_mel_ratio);
        num_decoding_left_chunks: left chunks each chunk sees when streaming (< 0: all)."""
        nn.Module.__init__(self)  # the parent's non-causal blocks are not built
        if cfg.act_fn != "gelu":
            raise ValueError(f"estimator act_fn {cfg.act_fn!r} is not supported (the causal U-Net uses 'gelu')")
        if static_chunk_size < 1:
            raise ValueError(f"static_chunk_size must be at least 1 frame, got {static_chunk_size}")
        channels = tuple(cfg.channels)
        heads, head_dim = cfg.num_heads, cfg.attention_head_dim
        self.cfg = cfg
        self.static_chunk_size = static_chunk_size
        self.num_decoding_left_chunks = num_decoding_left_chunks
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
            down: nn.Module = CausalConv1d(c, c, 3) if last else Downsample1D(c)
            self.down_blocks.append(nn.ModuleList([CausalResnetBlock1D(c_in, c, time_dim), transformer_stack(c), down]))

        self.mid_blocks = nn.ModuleList(
            nn.ModuleList([CausalResnetBlock1D(channels[-1], channels[-1], time_dim), transformer_stack(channels[-1])])
            for _ in range(cfg.num_mid_blocks)
        )

        up_channels = channels[::-1] + (channels[0],)
        self.up_blocks = nn.ModuleList()
        for i in range(len(up_channels) - 1):
            c_in, c = up_channels[i] * 2, up_channels[i + 1]
            last = i == len(up_channels) - 2
            up: nn.Module = CausalConv1d(c, c, 3) if last else Upsample1D(c)
            self.up_blocks.append(nn.ModuleList([CausalResnetBlock1D(c_in, c, time_dim), transformer_stack(c), up]))

        self.final_block = CausalBlock1D(up_channels[-1], up_channels[-1])
        self.final_proj = nn.Conv1d(up_channels[-1], cfg.out_channels, 1)
        self.compute_dtype = torch.float32

    def attention_mask(self, mask: torch.Tensor | None, frames: int, streaming: bool,
                       device: torch.device) -> torch.Tensor | None:
        """bool, broadcastable to [B, H, T, T] (True = attend), or None for full attention."""
        keep = None if mask is None else mask.bool().unsqueeze(1)  # [B, 1, 1, T] valid keys
        if streaming:
            chunks = chunk_mask(frames, self.static_chunk_size, self.num_decoding_left_chunks, device)
            keep = chunks if keep is None else keep & chunks
        return keep

    def _stage(self, h: torch.Tensor, resnet: nn.Module, blocks: nn.ModuleList, mask: torch.Tensor | None,
               temb: torch.Tensor, streaming: bool) -> torch.Tensor:
        """resnet, then the transformer stack (time-major, one contiguous copy) on channel-major h."""
        h = resnet(h, mask, temb)
        attn_mask = self.attention_mask(mask, h.size(-1), streaming, h.device)
        h = h.transpose(1, 2).contiguous()
        for block in blocks:
            h = block(h, attn_mask)
        return h.transpose(1, 2)

    def forward(  # type: ignore[override]  # adds `streaming`
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        mu: torch.Tensor,
        t: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
        streaming: bool = False,
    ) -> torch.Tensor:
        """Args as `ConditionalDecoder.forward`, plus streaming: chunk-causal attention.
        Returns: velocity [B, out_channels, T] float32 (zero at masked frames)."""
        low = self.compute_dtype  # casts are no-ops in float32
        x, mu, spks, cond = x.to(low), mu.to(low), spks.to(low), cond.to(low)
        if mask is not None:
            mask = mask.to(low)
        temb = self.time_mlp(self.time_embeddings(t.float())).to(low)
        h = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, x.size(-1)), cond], dim=1)

        skips: list[torch.Tensor] = []
        masks: list[torch.Tensor | None] = [mask]
        for resnet, blocks, down in self.down_blocks:
            m = masks[-1]
            h = self._stage(h, resnet, blocks, m, temb, streaming)
            skips.append(h)
            h = down(_masked(h, m))
            masks.append(None if m is None else m[:, :, ::2])
        masks.pop()  # the mask after the last (stride-1) stage is never used

        m = masks[-1]
        for resnet, blocks in self.mid_blocks:
            h = self._stage(h, resnet, blocks, m, temb, streaming)

        for resnet, blocks, up in self.up_blocks:
            m = masks.pop()
            skip = skips.pop()
            h = torch.cat([h[:, :, : skip.size(-1)], skip], dim=1)
            h = self._stage(h, resnet, blocks, m, temb, streaming)
            h = up(_masked(h, m))
        h = self.final_block(h, m)
        return _masked(self.final_proj(_masked(h, m)), mask).float()
