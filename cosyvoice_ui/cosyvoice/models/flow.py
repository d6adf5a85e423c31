"""The v1 flow (`MaskedDiffWithXvec`): speech tokens → 80-bin mel at the family's mel rate.

Pipeline (B = 1): embed prompt + generated tokens → Conformer `encoder` → `encoder_proj` (→ 80) →
`length_regulator` (token rate → mel rate) = mu; speaker x-vector → L2-normalise →
`spk_embed_affine_layer` = spks; prompt mel in the first M1 frames = cond; then `decoder`
(`ConditionalCFM`) samples the mel over prompt + generated frames and the prompt frames are dropped.

Shapes: T1/T2 prompt/generated tokens, M1 = prompt mel frames, M2 = int(T2 / token rate · mel rate)
generated frames (v1: 50 Hz tokens, 22050/256 Hz mel), F = 80 mel bins, D = encoder width.

Not here: streaming orchestration (which tokens go into which chunk, mel cross-fades) and the
vocoder; v2/v3 flows. The embedding, speaker projection, cond and input checks are `token_flow.TokenToMelFlow`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

from ..config import EstimatorConfig, FlowConfig
from .cfm import ConditionalCFM
from .length_regulator import InterpolateRegulator, edge_frames
from .token_flow import FlowConditioning, TokenToMelFlow
from .transformer import Encoder

log = logging.getLogger(__name__)


class MaskedDiffWithXvec(TokenToMelFlow):
    """v1 token-to-mel flow. Attribute names follow upstream so `flow.pt` loads strictly.

    Does not: batch several utterances (inference is B = 1, so no padding masks are built), decide
    streaming chunk boundaries, cross-fade chunks, or choose its estimator (passed in: the registry picks
    it); it does apply and return the v1 `flow_cache`.
    """

    def __init__(self, cfg: FlowConfig, estimator: Callable[[EstimatorConfig], nn.Module]) -> None:
        """estimator: the family's velocity-network class (v1: `ConditionalDecoder`), built here from
        `cfg.cfm.estimator` with the CFM (last: seeded random initialisations do not move)."""
        if cfg.encoder.static_chunk_size != 0:
            raise ValueError("the v1 flow encoder uses full attention (static_chunk_size 0), "
                             f"got {cfg.encoder.static_chunk_size}")
        super().__init__(cfg)
        self.encoder = Encoder(cfg.encoder)
        self.encoder_proj = nn.Linear(cfg.encoder.output_size, cfg.output_size)
        self.length_regulator = InterpolateRegulator(
            cfg.length_regulator_channels, cfg.sampling_ratios, cfg.input_frame_rate, cfg.mel_rate
        )
        self.decoder = ConditionalCFM(cfg.cfm, estimator(cfg.cfm.estimator),
                                      overlap_frames=edge_frames(cfg.input_frame_rate, cfg.mel_rate))

    def generated_frames(self, n_tokens: int) -> int:
        """M2 for n generated tokens: int(n / token rate · mel rate) (v1: 206 for 120 tokens)."""
        return int(n_tokens / self.cfg.input_frame_rate * self.cfg.mel_rate)

    @torch.inference_mode()
    def condition(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
                  embedding: torch.Tensor) -> FlowConditioning:
        """Encode tokens and build mu / spks / cond. Arguments as for `inference`."""
        self.check_inputs(token, prompt_token, prompt_feat, embedding)
        t1, t2 = prompt_token.size(1), token.size(1)
        mel_len1, mel_len2 = prompt_feat.size(1), self.generated_frames(t2)
        spks = self.speaker(embedding)
        h = self.encoder_proj(self.encoder(self.embed_tokens(prompt_token, token)))
        mu = self.length_regulator.inference(h[:, :t1], h[:, t1:], mel_len1, mel_len2)
        return FlowConditioning(h, mu, spks, self.prompt_condition(mu, prompt_feat), mel_len1, mel_len2)

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

    def check_prompt_lengths(self, prompt_token: torch.Tensor, prompt_feat: torch.Tensor) -> None:
        # The length regulator stretches the prompt's tokens to any frame count, but not none to some.
        if (prompt_token.size(1) == 0) != (prompt_feat.size(1) == 0):
            raise ValueError("prompt_token and prompt_feat must be both empty or both non-empty, got "
                             f"{prompt_token.size(1)} tokens and {prompt_feat.size(1)} mel frames")
