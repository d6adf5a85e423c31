"""The v1 flow (`MaskedDiffWithXvec`): speech tokens → 80-bin mel at the family's mel rate.

Pipeline (B = 1): embed prompt + generated tokens → Conformer `encoder` → `encoder_proj` (→ 80) →
`length_regulator` (token rate → mel rate) = mu; speaker x-vector → L2-normalise →
`spk_embed_affine_layer` = spks; prompt mel in the first M1 frames = cond; then `decoder`
(`ConditionalCFM`) samples the mel over prompt + generated frames and the prompt frames are dropped.

Shapes: T1/T2 prompt/generated tokens, M1 = prompt mel frames, M2 = int(T2 / token rate · mel rate)
generated frames (v1: 50 Hz tokens, 22050/256 Hz mel), F = 80 mel bins, D = encoder width.

Not here: streaming orchestration (which tokens go into which chunk, mel cross-fades) and the
vocoder; v2/v3 flows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import EstimatorConfig, FlowConfig
from .cfm import ConditionalCFM
from .length_regulator import InterpolateRegulator, edge_frames
from .transformer import Encoder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlowConditioning:
    """Everything the ODE is conditioned on for one call (B = 1), before any streaming cache.

    encoder_proj_out: [1, T1+T2, F] token encoding; mu: [1, F, M1+M2]; spks: [1, F];
    cond: [1, F, M1+M2] (prompt mel, then zeros).
    """

    encoder_proj_out: torch.Tensor
    mu: torch.Tensor
    spks: torch.Tensor
    cond: torch.Tensor
    mel_len1: int
    mel_len2: int


class MaskedDiffWithXvec(nn.Module):
    """v1 token-to-mel flow. Attribute names follow upstream so `flow.pt` loads strictly.

    Does not: batch several utterances (inference is B = 1, so no padding masks are built), decide
    streaming chunk boundaries, cross-fade chunks, or choose its estimator (passed in: the registry picks
    it); it does apply and return the v1 `flow_cache`.
    """

    def __init__(self, cfg: FlowConfig, estimator: Callable[[EstimatorConfig], nn.Module]) -> None:
        """estimator: the family's velocity-network class (v1: `ConditionalDecoder`), built here from
        `cfg.cfm.estimator` with the CFM (last: seeded random initialisations do not move)."""
        super().__init__()
        if cfg.encoder.static_chunk_size != 0:
            raise ValueError("the v1 flow encoder uses full attention (static_chunk_size 0), "
                             f"got {cfg.encoder.static_chunk_size}")
        self.cfg = cfg
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.encoder = Encoder(cfg.encoder)
        self.encoder_proj = nn.Linear(cfg.encoder.output_size, cfg.output_size)
        self.length_regulator = InterpolateRegulator(
            cfg.length_regulator_channels, cfg.sampling_ratios, cfg.input_frame_rate, cfg.mel_rate
        )
        self.decoder = ConditionalCFM(cfg.cfm, estimator(cfg.cfm.estimator),
                                      overlap_frames=edge_frames(cfg.input_frame_rate, cfg.mel_rate))

    @property
    def estimator(self) -> nn.Module:
        """The CFM's velocity network (`decoder.estimator`), for its inference transforms (`to_bf16`)."""
        return self.decoder.estimator

    def generated_frames(self, n_tokens: int) -> int:
        """M2 for n generated tokens: int(n / token rate · mel rate) (v1: 206 for 120 tokens)."""
        return int(n_tokens / self.cfg.input_frame_rate * self.cfg.mel_rate)

    @torch.inference_mode()
    def condition(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
                  embedding: torch.Tensor) -> FlowConditioning:
        """Encode tokens and build mu / spks / cond. Arguments as for `inference`."""
        self._check(token, prompt_token, prompt_feat, embedding)
        t1, t2 = prompt_token.size(1), token.size(1)
        mel_len1, mel_len2 = prompt_feat.size(1), self.generated_frames(t2)
        weight = self.spk_embed_affine_layer.weight
        spks = self.spk_embed_affine_layer(F.normalize(embedding.to(weight), dim=1))

        ids = torch.cat([prompt_token, token], dim=1).to(device=weight.device, dtype=torch.long).clamp(min=0)
        h = self.encoder_proj(self.encoder(self.input_embedding(ids)))
        mu = self.length_regulator.inference(h[:, :t1], h[:, t1:], mel_len1, mel_len2)

        cond = torch.zeros(1, self.cfg.output_size, mel_len1 + mel_len2, device=mu.device, dtype=mu.dtype)
        cond[:, :, :mel_len1] = prompt_feat.to(mu).transpose(1, 2)
        return FlowConditioning(h, mu, spks, cond, mel_len1, mel_len2)

    @torch.inference_mode()
    def inference(
        self,
        token: torch.Tensor,
        prompt_token: torch.Tensor,
        prompt_feat: torch.Tensor,
        embedding: torch.Tensor,
        flow_cache: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
        n_timesteps: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Synthesise the mel of `token`, conditioned on a prompt.

        Args:
            token: [1, T2] speech token ids to synthesise (T2 ≥ 1).
            prompt_token: [1, T1] prompt speech token ids (T1 may be 0).
            prompt_feat: [1, M1, F] prompt mel, time-major (M1 = 0 exactly when T1 = 0).
            embedding: [1, 192] speaker x-vector (normalised here).
            flow_cache: [1, F, C, 2] cache returned by the previous streaming chunk, or None.
            generator: per-call source of the initial noise (the global RNG is never used).
            noise: [1, F, M1+M2] the standard-normal draw to use instead of sampling.
            n_timesteps: Euler steps (default from the config, 10).
        Returns: mel [1, F, M2] float32 and the new flow cache [1, F, M1 + 34, 2].
        """
        c = self.condition(token, prompt_token, prompt_feat, embedding)
        log.debug("flow: %d prompt + %d tokens → %d prompt + %d mel frames, cache in %s", prompt_token.size(1),
                  token.size(1), c.mel_len1, c.mel_len2, None if flow_cache is None else tuple(flow_cache.shape))
        mel, cache = self.decoder(
            c.mu, c.spks, c.cond, mask=None, n_timesteps=n_timesteps, prompt_len=c.mel_len1,
            cache=flow_cache, generator=generator, noise=noise,
        )
        return mel[:, :, c.mel_len1:], cache

    def _check(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
               embedding: torch.Tensor) -> None:
        if token.dim() != 2 or token.size(0) != 1 or token.size(1) == 0:
            raise ValueError(f"token must be [1, T2] with T2 ≥ 1 (batch 1), got {tuple(token.shape)}")
        if prompt_token.dim() != 2 or prompt_token.size(0) != 1:
            raise ValueError(f"prompt_token must be [1, T1] (T1 may be 0), got {tuple(prompt_token.shape)}")
        if prompt_feat.dim() != 3 or prompt_feat.size(0) != 1 or prompt_feat.size(2) != self.cfg.output_size:
            raise ValueError(f"prompt_feat must be [1, M1, {self.cfg.output_size}], got {tuple(prompt_feat.shape)}")
        if (prompt_token.size(1) == 0) != (prompt_feat.size(1) == 0):
            raise ValueError("prompt_token and prompt_feat must be both empty or both non-empty, got "
                             f"{prompt_token.size(1)} tokens and {prompt_feat.size(1)} mel frames")
        if embedding.shape != (1, self.cfg.spk_embed_dim):
            raise ValueError(f"embedding must be [1, {self.cfg.spk_embed_dim}], got {tuple(embedding.shape)}")
