"""The causal token-to-mel flow (`CausalMaskedDiffWithXvec`): speech tokens → 80-bin mel, streamable.

Pipeline (B = 1): embed prompt + generated tokens → `UpsampleConformerEncoder` (token rate → mel rate
by its ×token_mel_ratio upsample; no length regulator) → `encoder_proj` (→ 80) = mu; speaker x-vector →
L2-normalise → `spk_embed_affine_layer` = spks; prompt mel in the first M1 frames = cond; then
`decoder` (`CausalConditionalCFM`, fixed noise) samples prompt + generated frames; the prompt frames
are dropped.

Streaming semantics (`inference(streaming, finalize)`): `streaming` makes every attention chunk-causal
(encoder and estimator); `finalize=False` means the token list is still growing: its last
`pre_lookahead_len` tokens are only look-ahead context for the pre-lookahead conv and produce no mel.
Each call re-encodes the whole list; the fixed noise keeps earlier frames consistent across calls.

Shapes: T1/T2 prompt/generated tokens, N = T1 + T2 (− L when not final), M1 = prompt mel frames
(= ratio · T1), M2 = ratio · N − M1, F = 80, D = encoder width.

Not here: which tokens go into which streaming call (the chunker), mel cross-fades, the vocoder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..config import CausalFlowConfig
from .cfm_causal import CausalConditionalCFM
from .flow import FlowConditioning
from .upsample_encoder import UpsampleConformerEncoder

log = logging.getLogger(__name__)


class CausalMaskedDiffWithXvec(nn.Module):
    """Causal token-to-mel flow. Attribute names follow upstream so `flow.pt` loads strictly.

    Does not: batch utterances (B = 1, no padding masks), decide chunk boundaries, or choose its estimator
    (passed in: the registry picks it).
    """

    def __init__(self, cfg: CausalFlowConfig, estimator: Callable[..., nn.Module]) -> None:
        """estimator: the velocity-network class (the causal U-Net), called as
        `estimator(cfg.cfm.estimator, static_chunk_size=…, num_decoding_left_chunks=…)`."""
        super().__init__()
        self.cfg = cfg
        self.pre_lookahead_len = cfg.pre_lookahead_len
        self.token_mel_ratio = cfg.token_mel_ratio
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.encoder = UpsampleConformerEncoder(cfg.encoder, cfg.pre_lookahead_len, cfg.token_mel_ratio)
        self.encoder_proj = nn.Linear(cfg.encoder.output_size, cfg.output_size)
        net = estimator(cfg.cfm.estimator, static_chunk_size=cfg.estimator_chunk_size,
                        num_decoding_left_chunks=cfg.num_decoding_left_chunks)
        self.decoder = CausalConditionalCFM(cfg.cfm, net, mel_bins=cfg.output_size)

    @property
    def estimator(self) -> nn.Module:
        """The CFM's velocity network (`decoder.estimator`), for its inference transforms (`to_bf16`)."""
        return self.decoder.estimator

    def generated_frames(self, n_tokens: int, finalize: bool = True) -> int:
        """M2 for n generated tokens (prompt excluded): ratio · n, less the look-ahead when not final."""
        return self.token_mel_ratio * (n_tokens - (0 if finalize else self.pre_lookahead_len))

    @torch.inference_mode()
    def condition(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
                  embedding: torch.Tensor, streaming: bool = False, finalize: bool = True) -> FlowConditioning:
        """Encode tokens and build mu / spks / cond. Arguments as for `inference`."""
        self._check(token, prompt_token, prompt_feat, embedding, finalize)
        weight = self.spk_embed_affine_layer.weight
        spks = self.spk_embed_affine_layer(F.normalize(embedding.to(weight), dim=1))

        ids = torch.cat([prompt_token, token], dim=1).to(device=weight.device, dtype=torch.long).clamp(min=0)
        x = self.input_embedding(ids)
        context = None
        if not finalize:  # the last L tokens are look-ahead only (upstream keeps token_len: mask stays all ones)
            x, context = x[:, : -self.pre_lookahead_len], x[:, -self.pre_lookahead_len:]
        h = self.encoder_proj(self.encoder(x, context, streaming=streaming))
        mel_len1 = prompt_feat.size(1)
        mel_len2 = h.size(1) - mel_len1
        if mel_len2 < 1:
            raise ValueError(f"{token.size(1)} tokens give no mel frame past the {mel_len1}-frame prompt")
        mu = h.transpose(1, 2).contiguous()
        cond = torch.zeros(1, self.cfg.output_size, h.size(1), device=mu.device, dtype=mu.dtype)
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
            token: [1, T2] speech token ids generated so far (T2 > L when not final).
            prompt_token: [1, T1] prompt speech token ids (T1 may be 0).
            prompt_feat: [1, M1, F] prompt mel, time-major; M1 = ratio · T1.
            embedding: [1, 192] speaker x-vector (normalised here).
            streaming: chunk-causal attention everywhere (every call of a streamed utterance but the
                last, which upstream runs with full attention).
            finalize: the token list is complete; False: its last L tokens are look-ahead context only.
            noise: [1, F, M1+M2] a draw to use instead of the fixed buffer.
            n_timesteps: Euler steps (default from the config, 10).
        Returns: mel [1, F, M2] float32, and None (no cache: the fixed noise keeps chunks consistent;
            the second value keeps the flows' `(mel, cache)` shape).
        """
        c = self.condition(token, prompt_token, prompt_feat, embedding, streaming, finalize)
        log.debug("causal flow: %d prompt + %d tokens → %d prompt + %d mel frames (streaming=%s, finalize=%s)",
                  prompt_token.size(1), token.size(1), c.mel_len1, c.mel_len2, streaming, finalize)
        mel = self.decoder(c.mu, c.spks, c.cond, mask=None, n_timesteps=n_timesteps, streaming=streaming,
                           noise=noise)
        return mel[:, :, c.mel_len1:], None

    def _check(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
               embedding: torch.Tensor, finalize: bool) -> None:
        least = 1 if finalize else self.pre_lookahead_len + 1
        if token.dim() != 2 or token.size(0) != 1 or token.size(1) < least:
            raise ValueError(f"token must be [1, T2] with T2 ≥ {least} (batch 1), got {tuple(token.shape)}")
        if prompt_token.dim() != 2 or prompt_token.size(0) != 1:
            raise ValueError(f"prompt_token must be [1, T1] (T1 may be 0), got {tuple(prompt_token.shape)}")
        if prompt_feat.dim() != 3 or prompt_feat.size(0) != 1 or prompt_feat.size(2) != self.cfg.output_size:
            raise ValueError(f"prompt_feat must be [1, M1, {self.cfg.output_size}], got {tuple(prompt_feat.shape)}")
        if prompt_feat.size(1) != self.token_mel_ratio * prompt_token.size(1):
            raise ValueError(f"prompt_feat must have {self.token_mel_ratio} frames per prompt token: got "
                             f"{prompt_feat.size(1)} frames for {prompt_token.size(1)} tokens")
        if embedding.shape != (1, self.cfg.spk_embed_dim):
            raise ValueError(f"embedding must be [1, {self.cfg.spk_embed_dim}], got {tuple(embedding.shape)}")
