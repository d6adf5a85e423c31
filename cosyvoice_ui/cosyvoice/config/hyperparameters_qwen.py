"""Frozen hyperparameter records of the Qwen2-LM generations (CosyVoice2-0.5B, Fun-CosyVoice3-0.5B), built by
`config/v2.py` and `config/v3.py` from the official yaml (cosyvoice-models.md §1.3); the models take these.

What the two share with v1 stays in `hyperparameters.py` (`SamplingConfig`, `EncoderConfig`, the estimators'
`EstimatorConfig` and `DiTConfig`, `CFMConfig`, `HiFTConfig`, `MelConfig`); `ModelConfig` is in `model.py`. Field
names are upstream's yaml argument names; values the yaml leaves out take upstream's class defaults. The Qwen2
backbone's own shape is not in the yaml: it comes from `CosyVoice-BlankEN/config.json` (`qwen2.Qwen2Config`) and
is filled into `QwenLMConfig.qwen` when the folder is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .hyperparameters import CFMConfig, EncoderConfig, SamplingConfig
from .qwen2 import Qwen2Config


@dataclass(frozen=True)
class ChunkingConfig:
    """The yaml's top-level token/mel framing and streaming chunk (same in both generations)."""

    token_frame_rate: int  # speech tokens per second (25)
    token_mel_ratio: int  # mel frames per speech token (2): prompt tokens and mel are aligned to it (§2.7)
    chunk_size: int  # streaming chunk in tokens (25); the estimators' attention chunk is chunk_size · ratio
    num_decoding_left_chunks: int  # < 0: every left chunk is visible


@dataclass(frozen=True)
class QwenLMConfig:
    """`llm: Qwen2LM` (v2) / `CosyVoice3LM` (v3): text ids → speech tokens on a Qwen2 backbone.

    `qwen` is the backbone's `config.json` (None until the folder's `CosyVoice-BlankEN/` is read).
    """

    llm_input_size: int
    llm_output_size: int
    speech_token_size: int
    qwen: Qwen2Config | None = None
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    min_token_text_ratio: float = 2.0  # upstream's inference constants (code, not yaml)
    max_token_text_ratio: float = 20.0
    mix_ratio: tuple[int, int] = (5, 15)  # text:speech interleave of bi-streaming input (§3.7)


@dataclass(frozen=True)
class CausalFlowConfig:
    """`flow: CausalMaskedDiffWithXvec` (v2): the causal Conformer flow with its causal U-Net estimator.

    The encoder (`UpsampleConformerEncoder`) hard-codes a PreLookaheadLayer (lookahead `pre_lookahead_len`),
    a ×2 upsample and 4 more Conformer blocks after it, all `encoder.output_size` wide in the official model.
    """

    input_size: int
    output_size: int
    spk_embed_dim: int
    vocab_size: int
    input_frame_rate: int
    token_mel_ratio: int
    pre_lookahead_len: int
    encoder: EncoderConfig  # static_chunk_size = the streaming chunk in tokens
    cfm: CFMConfig  # estimator: the causal U-Net's `EstimatorConfig`
    estimator_chunk_size: int  # the estimator's streaming attention chunk in mel frames
    num_decoding_left_chunks: int = -1  # < 0: every left chunk


@dataclass(frozen=True)
class DiTFlowConfig:
    """`flow: CausalMaskedDiffWithDiT` (v3): token embedding (mel-wide) → pre-lookahead conv → repeat ×ratio → CFM.
    `cfm.estimator` is a `DiTConfig`; `pre_lookahead_channels` is the `pre_lookahead_layer`'s hidden width."""

    input_size: int
    output_size: int
    spk_embed_dim: int
    vocab_size: int
    input_frame_rate: int
    token_mel_ratio: int
    pre_lookahead_len: int
    pre_lookahead_channels: int
    cfm: CFMConfig
