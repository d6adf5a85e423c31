"""The v1 (CosyVoice-300M / -SFT / -Instruct) parser: a parsed `cosyvoice.yaml` → `ModelConfig`.

Reads only what inference needs; unsupported options (conformer conv modules, other position
encodings) are refused with the option's name rather than silently ignored. Facts the yaml does not
hold (the mel rate upstream hard-codes, the default sample rate) come from the family's `FamilySpec`.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ..families import V1
from .hyperparameters import (CFMConfig, EncoderConfig, EstimatorConfig, FlowConfig, HiFTConfig, LLMConfig,
                              MelConfig, SamplingConfig)
from .inert_yaml import Tagged
from .model import ModelConfig


def _node(data: dict, key: str, where: str) -> Tagged:
    value = data.get(key)
    if not isinstance(value, Tagged):
        raise ConfigError(f"{where}: expected a `{key}:` entry with a !new: or !name: tag")
    return value


def _args(node: Tagged, where: str) -> dict:
    if not isinstance(node.args, dict):
        raise ConfigError(f"{where}: {node.target} has no arguments")
    return node.args


def _get(args: dict, key: str, where: str, default: Any = ...) -> Any:
    if key in args:
        return args[key]
    if default is ...:
        raise ConfigError(f"{where}: missing `{key}`")
    return default


def _encoder(node: Tagged, where: str) -> EncoderConfig:
    a = _args(node, where)
    is_conformer = node.target.endswith("ConformerEncoder")
    if not (is_conformer or node.target.endswith("TransformerEncoder")):
        raise ConfigError(f"{where}: unsupported encoder class {node.target}")
    for key, expected in (("pos_enc_layer_type", "rel_pos_espnet"), ("selfattention_layer_type", "rel_selfattn")):
        if a.get(key, expected) != expected:
            raise ConfigError(f"{where}: {key}={a.get(key)!r} is not supported (expected {expected!r})")
    if is_conformer and (a.get("use_cnn_module") or a.get("macaron_style")):
        raise ConfigError(f"{where}: conformer conv/macaron modules are not used by CosyVoice v1 and not supported")
    return EncoderConfig(
        input_size=int(_get(a, "input_size", where)),
        output_size=int(_get(a, "output_size", where, 256)),
        attention_heads=int(_get(a, "attention_heads", where, 4)),
        linear_units=int(_get(a, "linear_units", where, 2048)),
        num_blocks=int(_get(a, "num_blocks", where, 6)),
        input_layer=str(_get(a, "input_layer", where, "conv2d")),
        layer_type="conformer" if is_conformer else "transformer",
        activation=str(a.get("activation_type", "swish" if is_conformer else "relu")),
        static_chunk_size=int(a.get("static_chunk_size", 0)),
        key_bias=bool(a.get("key_bias", True)),
    )


def _pairs(value: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(x) for x in item) for item in value)


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in value)


def parse_v1(data: dict, source: str = V1.yaml_name) -> ModelConfig:
    """Build the v1 (CosyVoice-300M family) hyperparameters from a parsed yaml (`read_yaml`'s output);
    `source` names the file in error messages."""
    llm_node = _node(data, "llm", source)
    flow_node = _node(data, "flow", source)
    hift_node = _node(data, "hift", source)
    la = _args(llm_node, f"{source} llm")
    sampling_node = la.get("sampling")
    sampling = SamplingConfig(**(sampling_node.args or {})) if isinstance(sampling_node, Tagged) else SamplingConfig()
    llm = LLMConfig(
        text_token_size=int(_get(la, "text_token_size", "llm")),
        speech_token_size=int(_get(la, "speech_token_size", "llm")),
        text_encoder_input_size=int(_get(la, "text_encoder_input_size", "llm")),
        llm_input_size=int(_get(la, "llm_input_size", "llm")),
        llm_output_size=int(_get(la, "llm_output_size", "llm")),
        spk_embed_dim=int(_get(la, "spk_embed_dim", "llm", 192)),
        text_encoder=_encoder(_get(la, "text_encoder", "llm"), f"{source} llm.text_encoder"),
        llm=_encoder(_get(la, "llm", "llm"), f"{source} llm.llm"),
        sampling=sampling,
    )

    fa = _args(flow_node, f"{source} flow")
    dec = _args(_get(fa, "decoder", "flow"), f"{source} flow.decoder")
    est_node = _get(dec, "estimator", "flow.decoder")
    est = _args(est_node, f"{source} flow.decoder.estimator")
    cfm_params = _get(dec, "cfm_params", "flow.decoder")
    if isinstance(cfm_params, Tagged):  # !new:omegaconf.DictConfig {content: {...}}
        cfm_params = (cfm_params.args or {}).get("content", cfm_params.args)
    lr = _args(_get(fa, "length_regulator", "flow"), f"{source} flow.length_regulator")
    sample_rate = int(data.get("sample_rate", V1.sample_rate))
    flow = FlowConfig(
        input_size=int(_get(fa, "input_size", "flow")),
        output_size=int(_get(fa, "output_size", "flow")),
        spk_embed_dim=int(_get(fa, "spk_embed_dim", "flow", 192)),
        vocab_size=int(_get(fa, "vocab_size", "flow")),
        input_frame_rate=int(_get(fa, "input_frame_rate", "flow", 50)),
        encoder=_encoder(_get(fa, "encoder", "flow"), f"{source} flow.encoder"),
        length_regulator_channels=int(_get(lr, "channels", "flow.length_regulator")),
        sampling_ratios=_ints(_get(lr, "sampling_ratios", "flow.length_regulator")),
        cfm=CFMConfig(
            in_channels=int(_get(dec, "in_channels", "flow.decoder")),
            spk_emb_dim=int(_get(dec, "spk_emb_dim", "flow.decoder")),
            sigma_min=float(cfm_params.get("sigma_min", 1e-6)),
            t_scheduler=str(cfm_params.get("t_scheduler", "cosine")),
            inference_cfg_rate=float(cfm_params.get("inference_cfg_rate", 0.7)),
            estimator=EstimatorConfig(
                in_channels=int(_get(est, "in_channels", "estimator")),
                out_channels=int(_get(est, "out_channels", "estimator")),
                channels=_ints(_get(est, "channels", "estimator")),
                attention_head_dim=int(_get(est, "attention_head_dim", "estimator")),
                n_blocks=int(_get(est, "n_blocks", "estimator")),
                num_mid_blocks=int(_get(est, "num_mid_blocks", "estimator")),
                num_heads=int(_get(est, "num_heads", "estimator")),
                act_fn=str(est.get("act_fn", "gelu")),
            ),
        ),
        mel_rate=V1.mel_rate,  # not in the yaml: upstream hard-codes it in the v1 flow
    )

    ha = _args(hift_node, f"{source} hift")
    f0 = _args(_get(ha, "f0_predictor", "hift"), f"{source} hift.f0_predictor")
    istft = _get(ha, "istft_params", "hift")
    hift = HiFTConfig(
        in_channels=int(_get(ha, "in_channels", "hift", 80)),
        base_channels=int(_get(ha, "base_channels", "hift", 512)),
        nb_harmonics=int(_get(ha, "nb_harmonics", "hift", 8)),
        sampling_rate=int(_get(ha, "sampling_rate", "hift", sample_rate)),
        nsf_alpha=float(_get(ha, "nsf_alpha", "hift", 0.1)),
        nsf_sigma=float(_get(ha, "nsf_sigma", "hift", 0.003)),
        nsf_voiced_threshold=float(_get(ha, "nsf_voiced_threshold", "hift", 10)),
        upsample_rates=_ints(_get(ha, "upsample_rates", "hift")),
        upsample_kernel_sizes=_ints(_get(ha, "upsample_kernel_sizes", "hift")),
        istft_n_fft=int(istft["n_fft"]),
        istft_hop=int(istft["hop_len"]),
        resblock_kernel_sizes=_ints(_get(ha, "resblock_kernel_sizes", "hift")),
        resblock_dilation_sizes=_pairs(_get(ha, "resblock_dilation_sizes", "hift")),
        source_resblock_kernel_sizes=_ints(_get(ha, "source_resblock_kernel_sizes", "hift")),
        source_resblock_dilation_sizes=_pairs(_get(ha, "source_resblock_dilation_sizes", "hift")),
        lrelu_slope=float(_get(ha, "lrelu_slope", "hift", 0.1)),
        audio_limit=float(_get(ha, "audio_limit", "hift", 0.99)),
        f0_in_channels=int(_get(f0, "in_channels", "hift.f0_predictor", 80)),
        f0_cond_channels=int(_get(f0, "cond_channels", "hift.f0_predictor", 512)),
    )

    feat = _node(data, "feat_extractor", source)
    fe = _args(feat, f"{source} feat_extractor")
    mel = MelConfig(
        n_fft=int(fe["n_fft"]),
        num_mels=int(fe["num_mels"]),
        sampling_rate=int(fe["sampling_rate"]),
        hop_size=int(fe["hop_size"]),
        win_size=int(fe["win_size"]),
        fmin=float(fe.get("fmin", 0)),
        fmax=None if fe.get("fmax") is None else float(fe["fmax"]),
        center=bool(fe.get("center", False)),
    )
    tok = data.get("get_tokenizer")
    tokenizer = {"target": tok.target, **(tok.args or {})} if isinstance(tok, Tagged) else {}
    return ModelConfig(
        sample_rate=sample_rate,
        llm_class=llm_node.target,
        flow_class=flow_node.target,
        estimator_class=est_node.target,
        hift_class=hift_node.target,
        llm=llm,
        flow=flow,
        hift=hift,
        mel=mel,
        tokenizer=tokenizer,
    )
