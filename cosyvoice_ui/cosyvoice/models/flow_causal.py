"""The causal token-to-mel flow (`CausalMaskedDiffWithXvec`): speech tokens → 80-bin mel, streamable.

Pipeline (B = 1): embed prompt + generated tokens → `UpsampleConformerEncoder` (token rate → mel rate
by its ×token_mel_ratio upsample; no length regulator) → `encoder_proj` (→ 80) = mu; speaker x-vector →
L2-normalise → `spk_embed_affine_layer` = spks; prompt mel in the first M1 frames = cond; then
`decoder` (`CausalConditionalCFM`, fixed noise) samples prompt + generated frames; the prompt frames
are dropped.

Streaming semantics and shapes are the causal flows' (`token_flow.CausalTokenFlow`, which holds the call:
`condition`, `inference`); here is only what this flow encodes with. `streaming` also makes the encoder's
attention chunk-causal.

Not here: which tokens go into which streaming call (the chunker), mel cross-fades, the vocoder.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..config import CausalFlowConfig
from .cfm_causal import CausalConditionalCFM
from .token_flow import CausalTokenFlow
from .upsample_encoder import UpsampleConformerEncoder


class CausalMaskedDiffWithXvec(CausalTokenFlow):
    """Causal token-to-mel flow. Attribute names follow upstream so `flow.pt` loads strictly.

    Does not: batch utterances (B = 1, no padding masks), decide chunk boundaries, or choose its estimator
    (passed in: the registry picks it).
    """

    def __init__(self, cfg: CausalFlowConfig, estimator: Callable[..., nn.Module]) -> None:
        """estimator: the velocity-network class (the causal U-Net), called as
        `estimator(cfg.cfm.estimator, static_chunk_size=…, num_decoding_left_chunks=…)`."""
        super().__init__(cfg)
        self.encoder = UpsampleConformerEncoder(cfg.encoder, cfg.pre_lookahead_len, cfg.token_mel_ratio)
        self.encoder_proj = nn.Linear(cfg.encoder.output_size, cfg.output_size)
        net = estimator(cfg.cfm.estimator, static_chunk_size=cfg.estimator_chunk_size,
                        num_decoding_left_chunks=cfg.num_decoding_left_chunks)
        self.decoder = CausalConditionalCFM(cfg.cfm, net, mel_bins=cfg.output_size)

    def encode(self, x: torch.Tensor, context: torch.Tensor | None,
               streaming: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The upsampling Conformer (token rate → mel rate, ×r) and `encoder_proj`: h [1, M1+M2, F] = mu's frames."""
        h = self.encoder_proj(self.encoder(x, context, streaming=streaming))
        return h, h.transpose(1, 2).contiguous()
