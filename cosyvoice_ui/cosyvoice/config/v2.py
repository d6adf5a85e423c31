"""The v2 (CosyVoice2-0.5B) parser: a parsed `cosyvoice2.yaml` → `ModelConfig`, plus the parts v3 shares.

v2 and v3 have the same top level (`ChunkingConfig`), LLM entry (`QwenLMConfig`, the Qwen2 backbone's shape
comes from `CosyVoice-BlankEN/config.json` later), vocoder arguments (`HiFTConfig`; v3's is causal), prompt
mel (`feat_extractor` → `MelConfig`) and text tokenizer entry (`get_qwen_tokenizer`, whose `version` picks the
special-token list). Only the flow differs: v2's is the causal Conformer + causal U-Net (`CausalFlowConfig`).
Unsupported options are refused with their name, as in `config/v1.py`.
"""

from __future__ import annotations

from ...errors import ConfigError
from ..families import V2
from .hyperparameters import CFMConfig, DiTConfig, EstimatorConfig, HiFTConfig, MelConfig, SamplingConfig
from .hyperparameters_qwen import CausalFlowConfig, ChunkingConfig, DiTFlowConfig, QwenLMConfig
from .inert_yaml import Tagged
from .model import ModelConfig
from .v1 import _args, _encoder, _get, _ints, _node, _pairs


def parse_chunking(data: dict, source: str) -> ChunkingConfig:
    """The yaml's top-level framing: token rate, mel frames per token, streaming chunk."""
    for key in ("token_frame_rate", "token_mel_ratio", "chunk_size"):
        if not isinstance(data.get(key), int) or data[key] <= 0:
            raise ConfigError(f"{source}: `{key}` should be a positive integer, found {data.get(key)!r}")
    return ChunkingConfig(token_frame_rate=data["token_frame_rate"], token_mel_ratio=data["token_mel_ratio"],
                          chunk_size=data["chunk_size"],
                          num_decoding_left_chunks=int(data.get("num_decoding_left_chunks", -1)))


def parse_qwen_llm(llm_node: Tagged, source: str) -> QwenLMConfig:
    """`llm: Qwen2LM` / `CosyVoice3LM` (same arguments); the backbone must be a `Qwen2Encoder`."""
    la = _args(llm_node, f"{source} llm")
    backbone = _get(la, "llm", f"{source} llm")
    if not (isinstance(backbone, Tagged) and backbone.target.endswith("Qwen2Encoder")):
        raise ConfigError(f"{source} llm.llm: expected a Qwen2Encoder backbone, found {backbone!r}")
    sampling_node = la.get("sampling")
    sampling = SamplingConfig(**(sampling_node.args or {})) if isinstance(sampling_node, Tagged) else SamplingConfig()
    mix = _ints(la.get("mix_ratio", (5, 15)))
    if len(mix) != 2:
        raise ConfigError(f"{source} llm: mix_ratio should be two integers, found {list(mix)}")
    return QwenLMConfig(
        llm_input_size=int(_get(la, "llm_input_size", f"{source} llm")),
        llm_output_size=int(_get(la, "llm_output_size", f"{source} llm")),
        speech_token_size=int(_get(la, "speech_token_size", f"{source} llm")),
        sampling=sampling,
        mix_ratio=(mix[0], mix[1]),
    )


def parse_cfm(dec_node: Tagged, estimator: EstimatorConfig | DiTConfig, source: str) -> CFMConfig:
    """`decoder: CausalConditionalCFM` with `estimator` (the estimator's record, already built)."""
    dec = _args(dec_node, f"{source} flow.decoder")
    params = _get(dec, "cfm_params", f"{source} flow.decoder")
    if isinstance(params, Tagged):  # !new:omegaconf.DictConfig {content: {...}}
        params = (params.args or {}).get("content", params.args)
    if not isinstance(params, dict):
        raise ConfigError(f"{source} flow.decoder: cfm_params should be a mapping")
    if params.get("solver", "euler") != "euler":
        raise ConfigError(f"{source} flow.decoder: solver {params['solver']!r} is not supported (expected 'euler')")
    return CFMConfig(
        in_channels=int(_get(dec, "in_channels", f"{source} flow.decoder")),
        spk_emb_dim=int(_get(dec, "spk_emb_dim", f"{source} flow.decoder")),
        sigma_min=float(params.get("sigma_min", 1e-6)),
        t_scheduler=str(params.get("t_scheduler", "cosine")),
        inference_cfg_rate=float(params.get("inference_cfg_rate", 0.7)),
        estimator=estimator,
    )


def parse_hift(hift_node: Tagged, source: str, sample_rate: int) -> HiFTConfig:
    """`hift: HiFTGenerator` (v2) / `CausalHiFTGenerator` (v3): the 24 kHz NSF + iSTFT vocoder."""
    ha = _args(hift_node, f"{source} hift")
    f0_node = _get(ha, "f0_predictor", f"{source} hift")
    f0 = _args(f0_node, f"{source} hift.f0_predictor")
    istft = _get(ha, "istft_params", f"{source} hift")
    where = f"{source} hift"
    return HiFTConfig(
        in_channels=int(_get(ha, "in_channels", where, 80)),
        base_channels=int(_get(ha, "base_channels", where, 512)),
        nb_harmonics=int(_get(ha, "nb_harmonics", where, 8)),
        sampling_rate=int(_get(ha, "sampling_rate", where, sample_rate)),
        nsf_alpha=float(_get(ha, "nsf_alpha", where, 0.1)),
        nsf_sigma=float(_get(ha, "nsf_sigma", where, 0.003)),
        nsf_voiced_threshold=float(_get(ha, "nsf_voiced_threshold", where, 10)),
        upsample_rates=_ints(_get(ha, "upsample_rates", where)),
        upsample_kernel_sizes=_ints(_get(ha, "upsample_kernel_sizes", where)),
        istft_n_fft=int(istft["n_fft"]),
        istft_hop=int(istft["hop_len"]),
        resblock_kernel_sizes=_ints(_get(ha, "resblock_kernel_sizes", where)),
        resblock_dilation_sizes=_pairs(_get(ha, "resblock_dilation_sizes", where)),
        source_resblock_kernel_sizes=_ints(_get(ha, "source_resblock_kernel_sizes", where)),
        source_resblock_dilation_sizes=_pairs(_get(ha, "source_resblock_dilation_sizes", where)),
        lrelu_slope=float(_get(ha, "lrelu_slope", where, 0.1)),
        audio_limit=float(_get(ha, "audio_limit", where, 0.99)),
        f0_in_channels=int(_get(f0, "in_channels", f"{where}.f0_predictor", 80)),
        f0_cond_channels=int(_get(f0, "cond_channels", f"{where}.f0_predictor", 512)),
        conv_pre_look_right=int(ha.get("conv_pre_look_right", 0)),
        f0_predictor_class=f0_node.target,
    )


def parse_mel(data: dict, source: str) -> MelConfig:
    """`feat_extractor` (Matcha's `mel_spectrogram`): the prompt mel the flow is conditioned on (§2.6)."""
    fe = _args(_node(data, "feat_extractor", source), f"{source} feat_extractor")
    where = f"{source} feat_extractor"
    return MelConfig(
        n_fft=int(_get(fe, "n_fft", where)),
        num_mels=int(_get(fe, "num_mels", where)),
        sampling_rate=int(_get(fe, "sampling_rate", where)),
        hop_size=int(_get(fe, "hop_size", where)),
        win_size=int(_get(fe, "win_size", where)),
        fmin=float(fe.get("fmin", 0)),
        fmax=None if fe.get("fmax") is None else float(fe["fmax"]),
        center=bool(fe.get("center", False)),
    )


def parse_tokenizer(data: dict, source: str) -> dict:
    """The `get_tokenizer` entry's target and arguments (`token_path`, `skip_special_tokens`, `version`)."""
    tok = data.get("get_tokenizer")
    if not (isinstance(tok, Tagged) and tok.target.endswith("get_qwen_tokenizer")):
        raise ConfigError(f"{source}: expected `get_tokenizer: !name:...get_qwen_tokenizer`, found {tok!r}")
    return {"target": tok.target, **(tok.args or {})}


def qwen_model_config(data: dict, source: str, flow_node: Tagged, estimator_node: Tagged,
                      flow: CausalFlowConfig | DiTFlowConfig, default_rate: int) -> ModelConfig:
    """The `ModelConfig` of a Qwen2-LM generation around its own flow record (`flow`)."""
    llm_node, hift_node = _node(data, "llm", source), _node(data, "hift", source)
    sample_rate = int(data.get("sample_rate", default_rate))
    chunking = parse_chunking(data, source)
    mel = parse_mel(data, source)
    if mel.sampling_rate != sample_rate or mel.hop_size * chunking.token_frame_rate * chunking.token_mel_ratio != (
            sample_rate):
        raise ConfigError(f"{source}: feat_extractor framing ({mel.sampling_rate} Hz, hop {mel.hop_size}) does not "
                          f"give {chunking.token_mel_ratio} mel frames per {chunking.token_frame_rate} Hz token")
    return ModelConfig(
        sample_rate=sample_rate,
        llm_class=llm_node.target,
        flow_class=flow_node.target,
        estimator_class=estimator_node.target,
        hift_class=hift_node.target,
        llm=parse_qwen_llm(llm_node, source),
        flow=flow,
        hift=parse_hift(hift_node, source, sample_rate),
        mel=mel,
        tokenizer=parse_tokenizer(data, source),
        chunking=chunking,
    )


def parse_v2(data: dict, source: str = V2.yaml_name) -> ModelConfig:
    """Build the v2 (CosyVoice2-0.5B) hyperparameters from a parsed yaml (`read_yaml`'s output);
    `source` names the file in error messages."""
    flow_node = _node(data, "flow", source)
    fa = _args(flow_node, f"{source} flow")
    encoder_node = _get(fa, "encoder", f"{source} flow")
    if not (isinstance(encoder_node, Tagged) and encoder_node.target.endswith("UpsampleConformerEncoder")):
        raise ConfigError(f"{source} flow.encoder: expected an UpsampleConformerEncoder, found {encoder_node!r}")
    dec = _args(_get(fa, "decoder", f"{source} flow"), f"{source} flow.decoder")
    est_node = _get(dec, "estimator", f"{source} flow.decoder")
    est = _args(est_node, f"{source} flow.decoder.estimator")
    where = f"{source} flow.decoder.estimator"
    estimator = EstimatorConfig(
        in_channels=int(_get(est, "in_channels", where)),
        out_channels=int(_get(est, "out_channels", where)),
        channels=_ints(_get(est, "channels", where)),
        attention_head_dim=int(_get(est, "attention_head_dim", where)),
        n_blocks=int(_get(est, "n_blocks", where)),
        num_mid_blocks=int(_get(est, "num_mid_blocks", where)),
        num_heads=int(_get(est, "num_heads", where)),
        act_fn=str(est.get("act_fn", "gelu")),
    )
    where = f"{source} flow"
    flow = CausalFlowConfig(
        input_size=int(_get(fa, "input_size", where)),
        output_size=int(_get(fa, "output_size", where)),
        spk_embed_dim=int(_get(fa, "spk_embed_dim", where, 192)),
        vocab_size=int(_get(fa, "vocab_size", where)),
        input_frame_rate=int(_get(fa, "input_frame_rate", where, 25)),
        token_mel_ratio=int(_get(fa, "token_mel_ratio", where, 2)),
        pre_lookahead_len=int(_get(fa, "pre_lookahead_len", where, 3)),
        encoder=_encoder(encoder_node, f"{source} flow.encoder"),
        cfm=parse_cfm(_get(fa, "decoder", where), estimator, source),
        estimator_chunk_size=int(est.get("static_chunk_size", 0)),
        num_decoding_left_chunks=int(est.get("num_decoding_left_chunks", -1)),
    )
    return qwen_model_config(data, source, flow_node, est_node, flow, V2.sample_rate)
