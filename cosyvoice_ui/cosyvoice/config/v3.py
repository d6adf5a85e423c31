"""The v3 (Fun-CosyVoice3-0.5B) parser: a parsed `cosyvoice3.yaml` → `ModelConfig`.

Everything but the flow is v2's layout (`config/v2.py`): the LLM entry (`CosyVoice3LM`, v2's arguments), the
causal vocoder (`CausalHiFTGenerator`, plus `conv_pre_look_right` and a causal F0 predictor), the prompt mel
(`fmax: null`, i.e. up to 12 kHz) and `get_qwen_tokenizer` with `version: cosyvoice3` (the phoneme tokens).
The flow is `CausalMaskedDiffWithDiT`: token embedding → `pre_lookahead_layer` → DiT estimator (`DiTFlowConfig`).
"""

from __future__ import annotations

from ...errors import ConfigError
from ..families import V3
from .hyperparameters import DiTConfig
from .hyperparameters_qwen import DiTFlowConfig
from .inert_yaml import Tagged
from .model import ModelConfig
from .v1 import _args, _get, _node
from .v2 import parse_cfm, qwen_model_config


def _dit(node: Tagged, source: str) -> DiTConfig:
    est = _args(node, f"{source} flow.decoder.estimator")
    where = f"{source} flow.decoder.estimator"
    if est.get("long_skip_connection"):
        raise ConfigError(f"{where}: long_skip_connection is not supported (the official DiT has none)")
    mel_dim = int(est.get("mel_dim", 80))
    return DiTConfig(
        dim=int(_get(est, "dim", where)),
        depth=int(_get(est, "depth", where)),
        heads=int(_get(est, "heads", where)),
        dim_head=int(_get(est, "dim_head", where)),
        ff_mult=float(est.get("ff_mult", 4)),
        mel_dim=mel_dim,
        mu_dim=int(est.get("mu_dim") or mel_dim),
        spk_dim=int(est.get("spk_dim") or mel_dim),
        out_channels=int(est.get("out_channels") or mel_dim),
        static_chunk_size=int(est.get("static_chunk_size", 50)),
        num_decoding_left_chunks=int(est.get("num_decoding_left_chunks", -1)),
    )


def parse_v3(data: dict, source: str = V3.yaml_name) -> ModelConfig:
    """Build the v3 (Fun-CosyVoice3-0.5B) hyperparameters from a parsed yaml (`read_yaml`'s output);
    `source` names the file in error messages."""
    flow_node = _node(data, "flow", source)
    fa = _args(flow_node, f"{source} flow")
    where = f"{source} flow"
    if "encoder" in fa:
        raise ConfigError(f"{where}: a DiT flow has no encoder (found one); is the yaml of another generation?")
    look = _args(_get(fa, "pre_lookahead_layer", where), f"{where}.pre_lookahead_layer")
    pre_lookahead_len = int(_get(fa, "pre_lookahead_len", where, 3))
    if int(look.get("pre_lookahead_len", pre_lookahead_len)) != pre_lookahead_len:
        raise ConfigError(f"{where}: pre_lookahead_layer.pre_lookahead_len {look['pre_lookahead_len']} differs "
                          f"from the flow's {pre_lookahead_len}")
    input_size = int(_get(fa, "input_size", where))
    if int(look.get("in_channels", input_size)) != input_size:
        raise ConfigError(f"{where}: pre_lookahead_layer.in_channels {look['in_channels']} is not the token "
                          f"embedding width {input_size}")
    dec = _args(_get(fa, "decoder", where), f"{where}.decoder")
    est_node = _get(dec, "estimator", f"{where}.decoder")
    if not isinstance(est_node, Tagged):
        raise ConfigError(f"{where}.decoder: missing `estimator`")
    flow = DiTFlowConfig(
        input_size=input_size,
        output_size=int(_get(fa, "output_size", where)),
        spk_embed_dim=int(_get(fa, "spk_embed_dim", where, 192)),
        vocab_size=int(_get(fa, "vocab_size", where)),
        input_frame_rate=int(_get(fa, "input_frame_rate", where, 25)),
        token_mel_ratio=int(_get(fa, "token_mel_ratio", where, 2)),
        pre_lookahead_len=pre_lookahead_len,
        pre_lookahead_channels=int(_get(look, "channels", f"{where}.pre_lookahead_layer")),
        cfm=parse_cfm(_get(fa, "decoder", where), _dit(est_node, source), source),
    )
    return qwen_model_config(data, source, flow_node, est_node, flow, V3.sample_rate)
