"""CosyVoice v1 `TransformerLM`: text token ids → discrete speech tokens (50 Hz, 4096 codes).

Legend: Tt text ids to speak, Tp prompt-text ids, Ts prompt speech tokens, L assembled sequence
length, D model width (`llm_input_size`), V = speech_token_size + 1 (the last id is EOS).

Sequence fed to the LLM (all [1, *, D]):
    [SOS] [speaker]? [text_encoder(prompt_text ⧺ text)] [TASK] [speech_embedding(prompt speech)]
SOS/TASK are rows 0/1 of `llm_embedding`; the speaker slot is absent (not zero) without an
embedding (v1 instruct). The text encoder and the LLM are both causal. The layout's assembly, the
decoding loop and teacher forcing are `speech_lm.SpeechTokenLM`'s, shared with the Qwen2-based LLMs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import LLMConfig
from .speech_lm import SpeechTokenLM
from .transformer import Encoder


class TransformerLM(SpeechTokenLM):
    """The v1 speech-token language model: a causal text encoder and a causal Transformer LLM, V = S + 1 (the
    last id is EOS), a speaker slot from the x-vector. Decoding is `SpeechTokenLM`'s.

    Attribute names follow upstream so `llm.pt` loads strictly.
    """

    # Read as a weight (its dtype and device pick the embedding's), so the fast layouts leave it an nn.Linear.
    KEEP_LINEARS = ("spk_embed_affine_layer",)

    def __init__(self, cfg: LLMConfig) -> None:
        super().__init__(cfg)
        self.text_embedding = nn.Embedding(cfg.text_token_size, cfg.text_encoder_input_size)
        self.text_encoder = Encoder(cfg.text_encoder)
        self.text_encoder_affine_layer = nn.Linear(cfg.text_encoder.output_size, cfg.llm_input_size)
        self.llm_embedding = nn.Embedding(2, cfg.llm_input_size)
        self.llm = Encoder(cfg.llm)
        self.llm_decoder = nn.Linear(cfg.llm_output_size, cfg.speech_token_size + 1)
        self.speech_embedding = nn.Embedding(cfg.speech_token_size, cfg.llm_input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.llm_input_size)

    def fuse_qkv(self) -> int:
        """Fuse the q/k/v projections of every attention layer (text encoder and LLM) into one linear
        each; returns how many layers were fused now. Same numbers up to summation order."""
        return self.text_encoder.fuse_qkv() + self.llm.fuse_qkv()

    def encode_text(self, text_ids: torch.Tensor) -> torch.Tensor:
        """[1, T] ids (prompt text already prepended) → [1, T, D] through the causal text encoder."""
        emb = self.text_embedding(self._ids(text_ids, "text ids"))
        return self.text_encoder_affine_layer(self.text_encoder(emb))

    def speaker_slot(self, embedding: torch.Tensor | None) -> torch.Tensor:
        """x-vector [1, 192] → [1, 1, D]; an empty [0, 192] gives [1, 0, D] (no slot)."""
        weight = self.spk_embed_affine_layer.weight
        assert embedding is not None and embedding.dim() == 2 and embedding.size(0) in (0, 1), (
            f"embedding should be [1, {self.cfg.spk_embed_dim}] or [0, {self.cfg.spk_embed_dim}], "
            f"got {None if embedding is None else tuple(embedding.shape)}"
        )
        if embedding.size(0) == 0:
            return weight.new_zeros(1, 0, self.cfg.llm_input_size)
        embedding = F.normalize(embedding.to(device=weight.device, dtype=weight.dtype), dim=1)
        return self.spk_embed_affine_layer(embedding).unsqueeze(1)
