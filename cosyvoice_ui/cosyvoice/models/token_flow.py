"""What the token-to-mel flows share (v1 `MaskedDiffWithXvec`, v2 `CausalMaskedDiffWithXvec`, v3
`CausalMaskedDiffWithDiT`): the token embedding and speaker projection, the checks of a call's inputs and the
conditioning record; and, for the two causal flows, the whole call around their encoders.

Every flow: embed prompt + generated tokens → (the flow's own encoder) → mu; speaker x-vector → L2-normalise →
`spk_embed_affine_layer` = spks; prompt mel in the first M1 frames, zeros after = cond; the CFM samples the mel
over prompt + generated frames and the prompt frames are dropped.

The causal flows' calls (`CausalTokenFlow`): `streaming` makes every attention chunk-causal; `finalize=False`
means the token list is still growing and its last L = `pre_lookahead_len` tokens are look-ahead context only
(they produce no mel). Each call re-encodes the whole list; the CFM's fixed noise keeps earlier frames the same
across calls. Shapes: T1/T2 prompt/generated tokens, N = T1 + T2 (− L when not final), r = token_mel_ratio,
M1 = prompt mel frames (= r·T1), M2 = r·N − M1, F mel bins.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlowConditioning:
    """Everything the ODE is conditioned on for one call (B = 1), before any streaming cache.

    encoder_proj_out: [1, T1+T2, F] token encoding (v3: the pre-lookahead output); mu: [1, F, M1+M2];
    spks: [1, F]; cond: [1, F, M1+M2] (prompt mel, then zeros).
    """

    encoder_proj_out: torch.Tensor
    mu: torch.Tensor
    spks: torch.Tensor
    cond: torch.Tensor
    mel_len1: int
    mel_len2: int


class TokenToMelFlow(nn.Module):
    """The parts every flow has. Subclasses build their encoder and `decoder` (the CFM) after calling this
    constructor, so the modules are made in upstream's order (seeded random initialisations stay put)."""

    decoder: Any

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)

    @property
    def estimator(self) -> nn.Module:
        """The CFM's velocity network (`decoder.estimator`), for its inference transforms (`to_bf16`)."""
        return self.decoder.estimator

    def speaker(self, embedding: torch.Tensor) -> torch.Tensor:
        """x-vector [1, spk_embed_dim] → spks [1, F]."""
        weight = self.spk_embed_affine_layer.weight
        return self.spk_embed_affine_layer(F.normalize(embedding.to(weight), dim=1))

    def embed_tokens(self, prompt_token: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """[1, T1] and [1, T2] ids → [1, T1+T2, input_size] (negative ids, upstream's padding, read as 0)."""
        weight = self.spk_embed_affine_layer.weight
        ids = torch.cat([prompt_token, token], dim=1).to(device=weight.device, dtype=torch.long).clamp(min=0)
        return self.input_embedding(ids)

    def prompt_condition(self, mu: torch.Tensor, prompt_feat: torch.Tensor) -> torch.Tensor:
        """cond [1, F, M1+M2]: the prompt mel [1, M1, F] in the first M1 frames, zeros after."""
        cond = torch.zeros(mu.shape, device=mu.device, dtype=mu.dtype)
        cond[:, :, : prompt_feat.size(1)] = prompt_feat.to(mu).transpose(1, 2)
        return cond

    def check_prompt_lengths(self, prompt_token: torch.Tensor, prompt_feat: torch.Tensor) -> None:
        """Raise ValueError when the prompt's tokens and mel frames do not belong together."""

    def check_inputs(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
                     embedding: torch.Tensor, least_tokens: int = 1, why: str = "") -> None:
        """Raise ValueError for inputs of the wrong shape (batch 1, at least `least_tokens` tokens: `why`)."""
        if token.dim() != 2 or token.size(0) != 1 or token.size(1) < least_tokens:
            raise ValueError(f"token must be [1, T2] with T2 ≥ {least_tokens} (batch 1{why}), "
                             f"got {tuple(token.shape)}")
        if prompt_token.dim() != 2 or prompt_token.size(0) != 1:
            raise ValueError(f"prompt_token must be [1, T1] (T1 may be 0), got {tuple(prompt_token.shape)}")
        if prompt_feat.dim() != 3 or prompt_feat.size(0) != 1 or prompt_feat.size(2) != self.cfg.output_size:
            raise ValueError(f"prompt_feat must be [1, M1, {self.cfg.output_size}], got {tuple(prompt_feat.shape)}")
        self.check_prompt_lengths(prompt_token, prompt_feat)
        if embedding.shape != (1, self.cfg.spk_embed_dim):
            raise ValueError(f"embedding must be [1, {self.cfg.spk_embed_dim}], got {tuple(embedding.shape)}")


class CausalTokenFlow(TokenToMelFlow):
    """A causal flow (v2, v3): `condition` and `inference` around the subclass's `encode`, which turns the
    embedded tokens (and the look-ahead context, when not final) into the encoding and mu."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.pre_lookahead_len = cfg.pre_lookahead_len
        self.token_mel_ratio = cfg.token_mel_ratio

    def encode(self, x: torch.Tensor, context: torch.Tensor | None,
               streaming: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """x [1, N, input_size] frames that produce mel, context [1, L, input_size] look-ahead or None →
        (the encoding [1, N', *], mu [1, F, M1+M2])."""
        raise NotImplementedError

    def generated_frames(self, n_tokens: int, finalize: bool = True) -> int:
        """M2 for n generated tokens (prompt excluded): r · n, less the look-ahead when not final."""
        return self.token_mel_ratio * (n_tokens - (0 if finalize else self.pre_lookahead_len))

    def check_prompt_lengths(self, prompt_token: torch.Tensor, prompt_feat: torch.Tensor) -> None:
        if prompt_feat.size(1) != self.token_mel_ratio * prompt_token.size(1):
            raise ValueError(f"prompt_feat must have {self.token_mel_ratio} mel frames per prompt token, got "
                             f"{prompt_feat.size(1)} frames for {prompt_token.size(1)} tokens")

    @torch.inference_mode()
    def condition(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
                  embedding: torch.Tensor, streaming: bool = False, finalize: bool = True) -> FlowConditioning:
        """Encode tokens and build mu / spks / cond. Arguments as for `inference`."""
        look = 0 if finalize else self.pre_lookahead_len
        self.check_inputs(token, prompt_token, prompt_feat, embedding, least_tokens=look + 1,
                          why=f"; a call that is not final needs more than its {look} look-ahead tokens" if look else "")
        spks = self.speaker(embedding)
        x = self.embed_tokens(prompt_token, token)
        context = None
        if not finalize:  # the last L tokens are look-ahead only (upstream keeps token_len: the mask stays ones)
            x, context = x[:, : -self.pre_lookahead_len], x[:, -self.pre_lookahead_len:]
        h, mu = self.encode(x, context, streaming)
        mel_len1 = prompt_feat.size(1)
        mel_len2 = mu.size(2) - mel_len1
        if mel_len2 < 1:
            raise ValueError(f"{token.size(1)} tokens give no mel frame past the {mel_len1}-frame prompt")
        return FlowConditioning(h, mu, spks, self.prompt_condition(mu, prompt_feat), mel_len1, mel_len2)

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
            token: [1, T2] speech token ids generated so far (T2 > L when not final).
            prompt_token: [1, T1] prompt speech token ids (T1 may be 0).
            prompt_feat: [1, M1, F] prompt mel, time-major; M1 = r · T1.
            embedding: [1, spk_embed_dim] speaker x-vector (normalised here).
            streaming: chunk-causal attention everywhere (every call of a streamed utterance but the
                last, which upstream runs with full attention).
            finalize: the token list is complete; False: its last L tokens are look-ahead context only.
            noise: [1, F, M1+M2] a draw to use instead of the fixed buffer.
            n_timesteps: Euler steps (default from the config, 10).
        Returns: mel [1, F, M2] float32, and None (no cache: the fixed noise keeps chunks consistent;
            the second value keeps the flows' `(mel, cache)` shape).
        """
        c = self.condition(token, prompt_token, prompt_feat, embedding, streaming, finalize)
        log.debug("%s: %d prompt + %d tokens → %d prompt + %d mel frames (streaming=%s, finalize=%s)",
                  type(self).__name__, prompt_token.size(1), token.size(1), c.mel_len1, c.mel_len2, streaming,
                  finalize)
        mel = self.decoder(c.mu, c.spks, c.cond, mask=None, n_timesteps=n_timesteps, streaming=streaming,
                           noise=noise)
        return mel[:, :, c.mel_len1:], None
