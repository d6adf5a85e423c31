"""Read the official CosyVoice yaml as inert data and turn it into frozen hyperparameter records.

The official files are HyperPyYAML: `!new:pkg.Class` (construct), `!name:pkg.func` (partial),
`!apply:func` (call at load time) and `!ref <key>` (reference, with simple arithmetic). We parse
them with a *safe* YAML loader where each tag becomes a plain `Tagged` record; nothing is imported
or executed (the `!apply:` seed calls are ignored). The class paths are only used as a family check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError


@dataclass(frozen=True)
class Tagged:
    """A HyperPyYAML tagged node: `kind` is "new", "name" or "apply"; `target` the dotted path."""

    kind: str
    target: str
    args: Any  # dict for mappings, list for sequences, None for empty nodes


@dataclass(frozen=True)
class Ref:
    expression: str  # e.g. "<chunk_size> * <token_mel_ratio>"


class _InertLoader(yaml.SafeLoader):
    """SafeLoader that records HyperPyYAML tags instead of acting on them."""


def _construct_tagged(kind: str):
    def construct(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Tagged:
        if isinstance(node, yaml.MappingNode):
            args: Any = loader.construct_mapping(node, deep=True)
        elif isinstance(node, yaml.SequenceNode):
            args = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_scalar(node)
            args = None if value in ("", None) else value
        return Tagged(kind=kind, target=suffix, args=args)

    return construct


def _construct_ref(loader: yaml.SafeLoader, node: yaml.Node) -> Ref:
    return Ref(str(loader.construct_scalar(node)))


for _kind in ("new", "name", "apply"):
    _InertLoader.add_multi_constructor(f"!{_kind}:", _construct_tagged(_kind))
_InertLoader.add_constructor("!ref", _construct_ref)
# YAML 1.1 does not read "1e-06" (no dot) as a float; HyperPyYAML does. Match it.
_InertLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)

_REF_KEY = re.compile(r"<([^<>]+)>")
_ARITHMETIC = re.compile(r"^[0-9eE+\-*/(). ]+$")


def _lookup(root: dict, key: str) -> Any:
    """Resolve `a`, `a[b]` or `a.b` inside the top-level mapping."""
    parts = [p for p in re.split(r"[\[\].]", key) if p]
    value: Any = root
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"yaml reference <{key}> points to nothing")
        value = value[part]
    return value


def _resolve(value: Any, root: dict, depth: int = 0) -> Any:
    if depth > 50:
        raise ConfigError("yaml references are circular")
    if isinstance(value, Ref):
        expr = value.expression.strip()
        whole = _REF_KEY.fullmatch(expr)
        if whole:
            return _resolve(_lookup(root, whole.group(1)), root, depth + 1)
        # Arithmetic such as "<chunk_size> * <token_mel_ratio>": substitute scalars, then evaluate
        # with a whitelist of characters (digits and operators only, never names).
        def scalar(match: re.Match) -> str:
            target = _resolve(_lookup(root, match.group(1)), root, depth + 1)
            if not isinstance(target, (int, float)):
                raise ConfigError(f"yaml arithmetic {expr!r} uses non-number <{match.group(1)}>")
            return repr(target)

        text = _REF_KEY.sub(scalar, expr)
        if not _ARITHMETIC.match(text):
            raise ConfigError(f"yaml reference {expr!r} is not simple arithmetic")
        return eval(text, {"__builtins__": {}}, {})  # noqa: S307 - digits and operators only
    if isinstance(value, Tagged):
        return Tagged(value.kind, value.target, _resolve(value.args, root, depth + 1))
    if isinstance(value, dict):
        return {k: _resolve(v, root, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, root, depth + 1) for v in value]
    return value


def read_yaml(path: str | Path, overrides: dict | None = None) -> dict:
    """Parse a HyperPyYAML file into plain data with references resolved. Executes nothing."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    try:
        root = yaml.load(text, Loader=_InertLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path.name} is not valid yaml: {exc}") from exc
    if not isinstance(root, dict):
        raise ConfigError(f"{path.name} should be a mapping of settings, found {type(root).__name__}")
    root = {k: v for k, v in root.items() if not (isinstance(v, Tagged) and v.kind == "apply")}
    root.update(overrides or {})
    return {k: _resolve(v, root) for k, v in root.items()}


# ---------------------------------------------------------------------------------------------
# Hyperparameter records (v1). Built from the parsed yaml; the models take these, never the yaml.


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
class CFMConfig:
    in_channels: int
    spk_emb_dim: int
    sigma_min: float
    t_scheduler: str
    inference_cfg_rate: float
    estimator: EstimatorConfig
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
    mel_rate: float  # mel frames per second, 22050/256 for v1 (hard-coded upstream)


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


@dataclass(frozen=True)
class ModelConfig:
    """Everything the engine needs from one official yaml."""

    sample_rate: int
    llm_class: str
    flow_class: str
    hift_class: str
    llm: LLMConfig
    flow: FlowConfig
    hift: HiFTConfig
    mel: MelConfig
    tokenizer: dict  # the get_tokenizer arguments (e.g. multilingual, num_languages)


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


def parse_v1(data: dict, source: str = "cosyvoice.yaml") -> ModelConfig:
    """Build the v1 (CosyVoice-300M family) hyperparameters from a parsed yaml."""
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
    est = _args(_get(dec, "estimator", "flow.decoder"), f"{source} flow.decoder.estimator")
    cfm_params = _get(dec, "cfm_params", "flow.decoder")
    if isinstance(cfm_params, Tagged):  # !new:omegaconf.DictConfig {content: {...}}
        cfm_params = (cfm_params.args or {}).get("content", cfm_params.args)
    lr = _args(_get(fa, "length_regulator", "flow"), f"{source} flow.length_regulator")
    sample_rate = int(data.get("sample_rate", 22050))
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
        # Upstream hard-codes 22050/256 mel frames per second for the v1 flow.
        mel_rate=22050 / 256,
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
        hift_class=hift_node.target,
        llm=llm,
        flow=flow,
        hift=hift,
        mel=mel,
        tokenizer=tokenizer,
    )
