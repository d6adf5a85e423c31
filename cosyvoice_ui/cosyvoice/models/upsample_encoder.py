"""The token encoder of the causal token-to-mel flow (`UpsampleConformerEncoder`), inference only.

Token embeddings (token rate) → `embed` (Linear + LN, ×√D) → `pre_lookahead_layer` → `encoders`
(Conformer layers, ESPnet rel-pos) → `up_layer` (nearest ×stride, left pad 2·stride, Conv1d k=2·stride+1)
→ `up_embed` → `up_encoders` (4 Conformer layers) → `after_norm`. Output at mel rate (stride × tokens).

Streaming: attention is chunk-causal, `static_chunk_size` tokens per chunk in the first stack and
stride × that many frames after the upsample, all left chunks, counted from frame 0 of the whole
(prompt + generated) sequence. Not streaming: full attention. Either way no padding mask (B = 1).

Widths: upstream hard-codes 512 for `pre_lookahead_layer` and `up_layer`; here they take the encoder's
`output_size` (identical for the official 512-wide encoder; the tiny fixtures are narrower).

Shapes: B = 1, N tokens, L look-ahead tokens, D = output_size.

Not here: the token embedding and the context split (the flow), batching with padding masks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import EncoderConfig
from .estimators.unet_causal import chunk_mask
from .lookahead import PreLookaheadLayer
from .transformer import EncoderLayer, EspnetRelPositionTable, LinearInput


class Upsample1D(nn.Module):
    """Nearest-neighbour ×stride in time, left pad 2·stride zeros, Conv1d(k = 2·stride + 1): T → stride·T,
    causal (an output frame sees no later token). Key `conv.*`."""

    def __init__(self, channels: int, out_channels: int, stride: int = 2) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(channels, out_channels, stride * 2 + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] channel-major → [B, C', stride·T]."""
        h = F.interpolate(x, scale_factor=float(self.stride), mode="nearest")
        return self.conv(F.pad(h, (self.stride * 2, 0)))


class UpsampleConformerEncoder(nn.Module):
    """See the module docstring. Attribute names follow upstream so `encoder.*` of `flow.pt` loads strictly.

    Does not: take lengths (B = 1, every position valid), cache anything between streaming calls (the
    flow re-encodes the whole token list each time).
    """

    def __init__(self, cfg: EncoderConfig, pre_lookahead_len: int = 3, upsample_stride: int = 2,
                 num_up_blocks: int = 4) -> None:
        """cfg: the yaml's encoder (conformer layers, `static_chunk_size` = streaming chunk in tokens);
        pre_lookahead_len: the flow's look-ahead tokens; upsample_stride: mel frames per token
        (`token_mel_ratio`); num_up_blocks: layers after the upsample (hard-coded 4 upstream)."""
        super().__init__()
        if cfg.input_layer != "linear":
            raise ValueError(f"input_layer {cfg.input_layer!r} is not supported (the upsample encoder uses 'linear')")
        if cfg.layer_type != "conformer":
            raise ValueError(f"the upsample encoder has conformer layers, got {cfg.layer_type!r}")
        d = cfg.output_size
        self.cfg = cfg
        self.static_chunk_size = cfg.static_chunk_size
        self.embed = LinearInput(cfg.input_size, d, legacy=False)
        self.pre_lookahead_layer = PreLookaheadLayer(d, d, pre_lookahead_len=pre_lookahead_len)
        self.encoders = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_blocks))
        self.up_layer = Upsample1D(d, d, upsample_stride)
        self.up_embed = LinearInput(d, d, legacy=False)
        self.up_encoders = nn.ModuleList(EncoderLayer(cfg) for _ in range(num_up_blocks))
        self.after_norm = nn.LayerNorm(d, eps=1e-5)
        self.pos_table = EspnetRelPositionTable(d)

    @property
    def upsample_stride(self) -> int:
        return self.up_layer.stride

    def _stack(self, x: torch.Tensor, layers: nn.ModuleList, chunk: int, streaming: bool) -> torch.Tensor:
        t = x.size(1)
        # A chunk of 0 means full attention (upstream's "no chunk mask"), as does not streaming.
        mask = chunk_mask(t, chunk, -1, x.device).unsqueeze(0) if streaming and chunk > 0 else None
        vectors = self.pos_table.vectors(t, x.device, x.dtype)
        for layer in layers:
            x = layer(x, mask, layer.self_attn.project_positions(vectors))
        return x

    def forward(self, xs: torch.Tensor, context: torch.Tensor | None = None, streaming: bool = False) -> torch.Tensor:
        """Args:
            xs: [1, N, input_size] embedded tokens that produce output.
            context: [1, L, input_size] embedded look-ahead tokens after xs (not final), or None.
            streaming: chunk-causal attention.
        Returns: [1, stride·N, D].
        """
        x = self.embed(xs)
        if context is not None and context.size(1) > 0:
            context = self.embed(context)  # the same Linear + LN + scale as the tokens it follows
        x = self.pre_lookahead_layer(x, context)
        x = self._stack(x, self.encoders, self.static_chunk_size, streaming)
        x = self.up_layer(x.transpose(1, 2)).transpose(1, 2)
        x = self.up_embed(x)
        x = self._stack(x, self.up_encoders, self.static_chunk_size * self.upsample_stride, streaming)
        return self.after_norm(x)
