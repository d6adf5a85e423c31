"""The DiT token-to-mel flow (`CausalMaskedDiffWithDiT`): speech tokens → 80-bin mel, causal.

Pipeline (B = 1): embed prompt + generated tokens (width = mel bins, no scaling, no encoder) →
`pre_lookahead_layer` (each token sees the next L; when the token list is not final its last L tokens are
look-ahead context only and produce no frames) → repeat every frame `token_mel_ratio` times = mu; speaker
x-vector → L2-normalise → `spk_embed_affine_layer` = spks; prompt mel in the first M1 frames = cond; then
`decoder` (`CausalConditionalCFM`, fixed noise) samples the mel over prompt + generated frames with the
DiT estimator (chunk attention when streaming) and the prompt frames are dropped.

Shapes: T1/T2 prompt/generated tokens, N = T1 + T2 (finalize) or T1 + T2 − L (not), r = token_mel_ratio,
M1 = prompt mel frames (= r·T1), M2 = r·N − M1, F = 80 mel bins.

Not here: streaming orchestration (which tokens go into which call, slicing the accumulated mel), the
vocoder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..config import DiTConfig, DiTFlowConfig
from .cfm_causal import CausalConditionalCFM
from .flow import FlowConditioning
from .lookahead import PreLookaheadLayer

log = logging.getLogger(__name__)


class CausalMaskedDiffWithDiT(nn.Module):
    """DiT token-to-mel flow. Attribute names follow upstream so `flow.pt` loads strictly.

    Does not: batch several utterances (B = 1, so no padding masks are built), decide which tokens a
    streaming call gets, or choose its estimator (passed in: the registry picks it).
    """

    def __init__(self, cfg: DiTFlowConfig, estimator: Callable[[DiTConfig], nn.Module]) -> None:
        """estimator: the family's velocity-network class (`DiT`), built here from `cfg.cfm.estimator`."""
        super().__init__()
        if cfg.input_size != cfg.output_size:
            raise ValueError("the DiT flow uses the token embedding as mu directly, so input_size must equal "
                             f"output_size, got {cfg.input_size} and {cfg.output_size}")
        self.cfg = cfg
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.pre_lookahead_layer = PreLookaheadLayer(cfg.input_size, cfg.pre_lookahead_channels,
                                                     pre_lookahead_len=cfg.pre_lookahead_len)
        self.decoder = CausalConditionalCFM(cfg.cfm, estimator(cfg.cfm.estimator), mel_bins=cfg.output_size)

    @property
    def estimator(self) -> nn.Module:
        """The CFM's velocity network (`decoder.estimator`)."""
        return self.decoder.estimator

    def generated_frames(self, n_tokens: int, finalize: bool = True) -> int:
        """M2 for T2 generated tokens: r·T2, less r·L when the last L tokens are look-ahead only."""
        return self.cfg.token_mel_ratio * (n_tokens - (0 if finalize else self.cfg.pre_lookahead_len))

    @torch.inference_mode()
    def condition(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
                  embedding: torch.Tensor, streaming: bool = False, finalize: bool = True) -> FlowConditioning:
        """Embed tokens and build mu / spks / cond. Arguments as for `inference` (the same as the causal
        flow's `condition`; `streaming` changes nothing here: no attention runs before the estimator).
        There is no encoder: the record's `encoder_proj_out` is the pre-lookahead output [1, N, F] that mu
        repeats."""
        self._check(token, prompt_token, prompt_feat, embedding, finalize)
        weight = self.spk_embed_affine_layer.weight
        spks = self.spk_embed_affine_layer(F.normalize(embedding.to(weight), dim=1))

        ids = torch.cat([prompt_token, token], dim=1).to(device=weight.device, dtype=torch.long).clamp(min=0)
        x = self.input_embedding(ids)  # upstream's padding-mask multiply is by ones at B = 1
        if finalize:
            h = self.pre_lookahead_layer(x)
        else:
            look = self.cfg.pre_lookahead_len
            h = self.pre_lookahead_layer(x[:, :-look], context=x[:, -look:])
        mu = h.repeat_interleave(self.cfg.token_mel_ratio, dim=1).transpose(1, 2).contiguous()

        mel_len1 = prompt_feat.size(1)
        mel_len2 = mu.size(2) - mel_len1
        cond = torch.zeros_like(mu)
        cond[:, :, :mel_len1] = prompt_feat.to(mu).transpose(1, 2)
        return FlowConditioning(h, mu, spks, cond, mel_len1, mel_len2)

    @torch.inference_mode()
    def inference(
        self,
        token: torch.Tensor,
        prompt_token: torch.Tensor,
        prompt_feat: torch.Tensor,
        embedding: torch.Tensor,
        streaming: bool = False,
        finalize: bool = True,
        noise: torch.Tensor | None = None,
        n_timesteps: int | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Synthesise the mel of `token`, conditioned on a prompt.

        Args:
            token: [1, T2] speech token ids (T2 ≥ 1; T2 > L when not finalize).
            prompt_token: [1, T1] prompt speech token ids (T1 may be 0).
            prompt_feat: [1, M1, F] prompt mel, time-major (M1 = r·T1; 0 exactly when T1 = 0).
            embedding: [1, spk_embed_dim] speaker x-vector (normalised here).
            streaming: chunk attention in the estimator (a frame never sees later chunks).
            finalize: the token list is complete; if not, its last L tokens are look-ahead only.
            noise: [1, F, M1+M2] a draw to use instead of the fixed noise buffer.
            n_timesteps: Euler steps (default from the config, 10).
        Returns: mel [1, F, M2] float32, and None (no cache: the fixed noise keeps calls consistent; the
            second value keeps the flows' `(mel, cache)` shape).
        """
        c = self.condition(token, prompt_token, prompt_feat, embedding, streaming, finalize)
        log.debug("dit flow: %d prompt + %d tokens (finalize=%s, streaming=%s) → %d prompt + %d mel frames",
                  prompt_token.size(1), token.size(1), finalize, streaming, c.mel_len1, c.mel_len2)
        mel = self.decoder(c.mu, c.spks, c.cond, mask=None, n_timesteps=n_timesteps, streaming=streaming,
                           noise=noise)
        return mel[:, :, c.mel_len1:], None

    def _check(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
               embedding: torch.Tensor, finalize: bool) -> None:
        look = self.cfg.pre_lookahead_len
        if token.dim() != 2 or token.size(0) != 1 or token.size(1) == 0:
            raise ValueError(f"token must be [1, T2] with T2 ≥ 1 (batch 1), got {tuple(token.shape)}")
        if not finalize and token.size(1) <= look:
            raise ValueError(f"a call that is not final needs more than the {look} look-ahead tokens, "
                             f"got {token.size(1)}")
        if prompt_token.dim() != 2 or prompt_token.size(0) != 1:
            raise ValueError(f"prompt_token must be [1, T1] (T1 may be 0), got {tuple(prompt_token.shape)}")
        if prompt_feat.dim() != 3 or prompt_feat.size(0) != 1 or prompt_feat.size(2) != self.cfg.output_size:
            raise ValueError(f"prompt_feat must be [1, M1, {self.cfg.output_size}], got {tuple(prompt_feat.shape)}")
        if prompt_feat.size(1) != self.cfg.token_mel_ratio * prompt_token.size(1):
            raise ValueError(f"prompt_feat must have {self.cfg.token_mel_ratio} mel frames per prompt token, got "
                             f"{prompt_feat.size(1)} frames for {prompt_token.size(1)} tokens")
        if embedding.shape != (1, self.cfg.spk_embed_dim):
            raise ValueError(f"embedding must be [1, {self.cfg.spk_embed_dim}], got {tuple(embedding.shape)}")
