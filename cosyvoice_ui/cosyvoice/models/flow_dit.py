"""The DiT token-to-mel flow (`CausalMaskedDiffWithDiT`): speech tokens → 80-bin mel, causal.

Pipeline (B = 1): embed prompt + generated tokens (width = mel bins, no scaling, no encoder) →
`pre_lookahead_layer` (each token sees the next L; when the token list is not final its last L tokens are
look-ahead context only and produce no frames) → repeat every frame `token_mel_ratio` times = mu; speaker
x-vector → L2-normalise → `spk_embed_affine_layer` = spks; prompt mel in the first M1 frames = cond; then
`decoder` (`CausalConditionalCFM`, fixed noise) samples the mel over prompt + generated frames with the
DiT estimator (chunk attention when streaming) and the prompt frames are dropped.

Shapes and the call (`condition`, `inference`) are the causal flows' (`token_flow.CausalTokenFlow`); here is
only what this flow encodes with.

Not here: streaming orchestration (which tokens go into which call, slicing the accumulated mel), the
vocoder.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..config import DiTConfig, DiTFlowConfig
from .cfm_causal import CausalConditionalCFM
from .lookahead import PreLookaheadLayer
from .token_flow import CausalTokenFlow


class CausalMaskedDiffWithDiT(CausalTokenFlow):
    """DiT token-to-mel flow. Attribute names follow upstream so `flow.pt` loads strictly.

    Does not: batch several utterances (B = 1, so no padding masks are built), decide which tokens a
    streaming call gets, or choose its estimator (passed in: the registry picks it).
    """

    def __init__(self, cfg: DiTFlowConfig, estimator: Callable[[DiTConfig], nn.Module]) -> None:
        """estimator: the family's velocity-network class (`DiT`), built here from `cfg.cfm.estimator`."""
        if cfg.input_size != cfg.output_size:
            raise ValueError("the DiT flow uses the token embedding as mu directly, so input_size must equal "
                             f"output_size, got {cfg.input_size} and {cfg.output_size}")
        super().__init__(cfg)
        self.pre_lookahead_layer = PreLookaheadLayer(cfg.input_size, cfg.pre_lookahead_channels,
                                                     pre_lookahead_len=cfg.pre_lookahead_len)
        self.decoder = CausalConditionalCFM(cfg.cfm, estimator(cfg.cfm.estimator), mel_bins=cfg.output_size)

    def encode(self, x: torch.Tensor, context: torch.Tensor | None,
               streaming: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """No encoder: the pre-lookahead conv, each frame repeated r times = mu; the encoding returned is the
        conv's output [1, N, F]. `streaming` changes nothing here: no attention runs before the estimator."""
        # upstream's padding-mask multiply of the embedding is by ones at B = 1
        h = self.pre_lookahead_layer(x, context=context)
        return h, h.repeat_interleave(self.token_mel_ratio, dim=1).transpose(1, 2).contiguous()
