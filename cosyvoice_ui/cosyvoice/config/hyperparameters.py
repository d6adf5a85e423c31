"""Frozen hyperparameter records built from an official yaml; the models take these, never the yaml.

The records are v1's (CosyVoice-300M) and the parts the later generations share (the CFM and both kinds of
estimator it runs: U-Net and DiT); the Qwen2-LM generations' own records (their LLM, causal and DiT flows, the
chunking) are in `hyperparameters_qwen.py`, the whole-yaml `ModelConfig` in `model.py`, and each family's parser
builds its records (see `config/v1.py`, `v2.py`, `v3.py`). Nothing here imports another config module.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EncoderConfig:
    """A WeNet/ESPnet-style encoder (used as the v1 text encoder, LLM and flow encoder)."""

    input_size: int
    output_size: int
    attention_heads: int
    linear_units: int
    num_blocks: int
    input_layer: str  # "linear" (Linear+LN) or "linear_legacy" (Linear+LN+ReLU)
    layer_type: str  # "conformer" (norm_mha/norm_ff names, SiLU) or "transformer" (norm1/norm2, ReLU)
    activation: str  # "swish" or "relu"
    static_chunk_size: int  # 1 = causal, 0 = full attention
    pos_enc_layer_type: str = "rel_pos_espnet"
    selfattention_layer_type: str = "rel_selfattn"
    key_bias: bool = True


@dataclass(frozen=True)
class SamplingConfig:
    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1


@dataclass(frozen=True)
class LLMConfig:
    text_token_size: int
    speech_token_size: int
    text_encoder_input_size: int
    llm_input_size: int
    llm_output_size: int
    spk_embed_dim: int
    text_encoder: EncoderConfig
    llm: EncoderConfig
    sampling: SamplingConfig
    min_token_text_ratio: float = 2.0
    max_token_text_ratio: float = 20.0


@dataclass(frozen=True)
class EstimatorConfig:
    """The flow-matching U-Net (`ConditionalDecoder`)."""

    in_channels: int
    out_channels: int
    channels: tuple[int, ...]
    attention_head_dim: int
    n_blocks: int
    num_mid_blocks: int
    num_heads: int
    act_fn: str = "gelu"


@dataclass(frozen=True)
class DiTConfig:
    """`estimator: DiT` (v3), F5-TTS style. `static_chunk_size` is in mel frames (chunk tokens · token_mel_ratio);
    `num_decoding_left_chunks` < 0 means every left chunk is visible. Sizes left None default to `mel_dim`."""

    dim: int
    depth: int
    heads: int
    dim_head: int
    ff_mult: float = 4
    mel_dim: int = 80
    mu_dim: int | None = None
    spk_dim: int | None = None
    out_channels: int | None = None
    static_chunk_size: int = 50
    num_decoding_left_chunks: int = -1
    long_skip_connection: bool = False  # the parser refuses it; the estimator checks it too
    time_freq_dim: int = 256  # sinusoid width before time_mlp (upstream class constant)
    conv_pos_kernel: int = 31  # upstream class constants of the conv position embedding
    conv_pos_groups: int = 16


@dataclass(frozen=True)
class CFMConfig:
    in_channels: int
    spk_emb_dim: int
    sigma_min: float
    t_scheduler: str
    inference_cfg_rate: float
    estimator: EstimatorConfig | DiTConfig  # the U-Net's (v1, v2's causal one) or the DiT's (v3)
    n_timesteps: int = 10  # upstream passes 10 from flow.inference; not in the yaml


@dataclass(frozen=True)
class FlowConfig:
    input_size: int
    output_size: int
    spk_embed_dim: int
    vocab_size: int
    input_frame_rate: int
    encoder: EncoderConfig
    length_regulator_channels: int
    sampling_ratios: tuple[int, ...]
    cfm: CFMConfig
    mel_rate: float  # mel frames per second (the family's `FamilySpec.mel_rate`; not in the yaml)


@dataclass(frozen=True)
class HiFTConfig:
    in_channels: int
    base_channels: int
    nb_harmonics: int
    sampling_rate: int
    nsf_alpha: float
    nsf_sigma: float
    nsf_voiced_threshold: float
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    istft_n_fft: int
    istft_hop: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    source_resblock_kernel_sizes: tuple[int, ...]
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    lrelu_slope: float
    audio_limit: float
    f0_in_channels: int
    f0_cond_channels: int
    conv_pre_look_right: int = 0  # frames of right context of the causal vocoder's conv_pre (v3: 4)
    f0_predictor_class: str = ""  # the yaml's F0 predictor class path (the causal vocoder has a causal one)


@dataclass(frozen=True)
class MelConfig:
    """Matcha-style log-mel used for the flow's prompt features."""

    n_fft: int
    num_mels: int
    sampling_rate: int
    hop_size: int
    win_size: int
    fmin: float
    fmax: float | None
    center: bool = False
