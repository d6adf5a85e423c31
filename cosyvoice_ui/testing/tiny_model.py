"""Write a tiny random CosyVoice model folder in the official on-disk format.

The folder looks exactly like an official one (HyperPyYAML `cosyvoice.yaml`, `llm.pt`, `flow.pt`,
`hift.pt` with weight-norm pairs, `campplus.onnx`, `speech_tokenizer_v1.onnx`, optional
`spk2info.pt`), only with small dimensions and random weights, so every loading and synthesis path
runs for real in seconds. Tests and the tiny benchmark build their models with it.

CLI: `python -m cosyvoice_ui.testing.tiny_model OUT_DIR --family v1|v2|v3 [--sft] [--instruct]` (v2/v3:
`tiny_qwen.py`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..cosyvoice.families import V1, V2, V3, VARIANT_FILE
from .tiny_onnx import write_campplus, write_speech_tokenizer_v1
from .tiny_qwen import FULL_SIZE_QWEN, QwenDims, write_tiny_qwen_model

QWEN_FAMILIES = {"v2": V2, "v3": V3}

SFT_SPEAKERS = ("中文女", "中文男", "英文女", "英文男", "日语男", "粤语女", "韩语女")


@dataclass(frozen=True)
class TinyDims:
    """Sizes of the tiny architecture (the official ones are in the comments)."""

    text_encoder_input: int = 16  # 512
    llm_dim: int = 64  # 1024
    llm_heads: int = 4  # 16
    llm_ff: int = 128  # 4096
    text_encoder_blocks: int = 2  # 6
    llm_blocks: int = 2  # 14
    flow_dim: int = 64  # 512
    flow_heads: int = 4  # 8
    flow_ff: int = 128  # 2048
    flow_blocks: int = 2  # 6
    decoder_channels: int = 32  # 256
    decoder_head_dim: int = 16  # 64
    decoder_blocks: int = 1  # 4
    decoder_mid_blocks: int = 2  # 12
    decoder_heads: int = 2  # 8
    hift_channels: int = 32  # 512
    f0_channels: int = 32  # 512


FULL_SIZE = TinyDims(512, 1024, 16, 4096, 6, 14, 512, 8, 2048, 6, 256, 64, 4, 12, 8, 512, 512)


def v1_yaml(d: TinyDims) -> str:
    """A CosyVoice-300M style yaml with dimensions `d` (same classes and structure as the official one)."""
    return f"""# CosyVoice v1 architecture written by cosyvoice_ui.testing.tiny_model (random weights, test use only)
__set_seed1: !apply:random.seed [1986]
__set_seed2: !apply:numpy.random.seed [1986]
__set_seed3: !apply:torch.manual_seed [1986]
__set_seed4: !apply:torch.cuda.manual_seed_all [1986]

sample_rate: 22050
text_encoder_input_size: {d.text_encoder_input}
llm_input_size: {d.llm_dim}
llm_output_size: {d.llm_dim}
spk_embed_dim: 192

llm: !new:cosyvoice.llm.llm.TransformerLM
    text_encoder_input_size: !ref <text_encoder_input_size>
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    text_token_size: 51866
    speech_token_size: 4096
    length_normalized_loss: True
    lsm_weight: 0
    spk_embed_dim: !ref <spk_embed_dim>
    text_encoder: !new:cosyvoice.transformer.encoder.ConformerEncoder
        input_size: !ref <text_encoder_input_size>
        output_size: {d.llm_dim}
        attention_heads: {d.llm_heads}
        linear_units: {d.llm_ff}
        num_blocks: {d.text_encoder_blocks}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.0
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        use_cnn_module: False
        macaron_style: False
        use_dynamic_chunk: False
        use_dynamic_left_chunk: False
        static_chunk_size: 1
    llm: !new:cosyvoice.transformer.encoder.TransformerEncoder
        input_size: !ref <llm_input_size>
        output_size: !ref <llm_output_size>
        attention_heads: {d.llm_heads}
        linear_units: {d.llm_ff}
        num_blocks: {d.llm_blocks}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.0
        input_layer: 'linear_legacy'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        static_chunk_size: 1
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1

flow: !new:cosyvoice.flow.flow.MaskedDiffWithXvec
    input_size: {d.flow_dim}
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 4096
    input_frame_rate: 50
    only_mask_loss: True
    encoder: !new:cosyvoice.transformer.encoder.ConformerEncoder
        output_size: {d.flow_dim}
        attention_heads: {d.flow_heads}
        linear_units: {d.flow_ff}
        num_blocks: {d.flow_blocks}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: {d.flow_dim}
        use_cnn_module: False
        macaron_style: False
    length_regulator: !new:cosyvoice.flow.length_regulator.InterpolateRegulator
        channels: 80
        sampling_ratios: [1, 1, 1, 1]
    decoder: !new:cosyvoice.flow.flow_matching.ConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
        estimator: !new:cosyvoice.flow.decoder.ConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [{d.decoder_channels}, {d.decoder_channels}]
            dropout: 0.0
            attention_head_dim: {d.decoder_head_dim}
            n_blocks: {d.decoder_blocks}
            num_mid_blocks: {d.decoder_mid_blocks}
            num_heads: {d.decoder_heads}
            act_fn: 'gelu'

hift: !new:cosyvoice.hifigan.generator.HiFTGenerator
    in_channels: 80
    base_channels: {d.hift_channels}
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 8]
    upsample_kernel_sizes: [16, 16]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.ConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: {d.f0_channels}

get_tokenizer: !name:whisper.tokenizer.get_tokenizer
    multilingual: True
    num_languages: 100
    language: 'en'
    task: 'transcribe'
allowed_special: 'all'
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1024
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 256
    win_size: 1024
    fmin: 0
    fmax: 8000
    center: False
"""


def build_v1_modules(yaml_text: str, seed: int = 0):
    """Instantiate (llm, flow, hift, config) for a v1 yaml with seeded random weights.

    The global RNG is forked, so callers' random state is left untouched.
    """
    import tempfile

    from ..cosyvoice.config import read_yaml
    from ..cosyvoice.registry import backend_for

    backend = backend_for(V1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / V1.yaml_name
        path.write_text(yaml_text, encoding="utf-8")
        config = backend.parse_config(read_yaml(path), V1.yaml_name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        llm, flow, hift = backend.build_llm(config.llm), backend.build_flow(config.flow), backend.build_vocoder(config.hift)
        _make_speakable(llm, hift)
    return llm, flow, hift, config


def _make_speakable(llm, hift) -> None:
    """Nudge random weights so test runs look like speech bookkeeping-wise: a sharper LLM output
    (so sampling is not uniform over 4097 ids) and an F0 predictor giving voiced 80-300 Hz frames."""
    with torch.no_grad():
        llm.llm_decoder.weight.mul_(8.0)
        llm.llm_decoder.bias.mul_(8.0)
        classifier = hift.f0_predictor.classifier
        classifier.weight.mul_(20.0)
        classifier.bias.fill_(160.0)


def write_tiny_model(out_dir: str | Path, family: str = "v1", sft: bool = False, instruct: bool = False,
                     seed: int = 0, dims: TinyDims | QwenDims | None = None, legacy_weight_norm: bool = False) -> Path:
    """Write a random model folder of `family` ("v1", "v2" or "v3") to `out_dir` and return its path.

    sft: add `spk2info.pt` with the 7 usual preset speakers. instruct: an -Instruct variant (v1 only; implies
    preset speakers; marked in `cosyvoice_ui.json` since official folders are told apart by name). dims: the
    architecture's sizes (`TinyDims` for v1, `tiny_qwen.QwenDims` for v2/v3; default tiny). legacy_weight_norm:
    v1 only.
    """
    if family in QWEN_FAMILIES:
        if instruct or legacy_weight_norm or (dims is not None and not isinstance(dims, QwenDims)):
            raise ValueError(f"--instruct and --legacy-weight-norm are v1 options (family {family})")
        return write_tiny_qwen_model(out_dir, QWEN_FAMILIES[family], SFT_SPEAKERS if sft else (), seed,
                                     dims or QwenDims())
    if family != "v1":
        raise ValueError(f"unknown family {family!r}; tiny models can be written for v1, v2 and v3")
    from ..cosyvoice.models.hift import unfold_weight_norm, weight_norm_names

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = v1_yaml(dims or TinyDims())
    (out / V1.yaml_name).write_text(text, encoding="utf-8")
    llm, flow, hift, _ = build_v1_modules(text, seed)
    torch.save(llm.state_dict(), out / "llm.pt")
    torch.save(flow.state_dict(), out / "flow.pt")
    hift_sd = unfold_weight_norm(hift.state_dict(), weight_norm_names(hift), legacy=legacy_weight_norm)
    torch.save(hift_sd, out / "hift.pt")
    write_campplus(out / "campplus.onnx", seed=seed)
    write_speech_tokenizer_v1(out / "speech_tokenizer_v1.onnx", seed=seed)
    if sft or instruct:
        g = torch.Generator().manual_seed(seed + 7)
        speakers = {name: {"embedding": torch.randn(1, 192, generator=g)} for name in SFT_SPEAKERS}
        torch.save(speakers, out / "spk2info.pt")
    (out / VARIANT_FILE).write_text(json.dumps({"instruct": bool(instruct), "tiny_random": True}), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cosyvoice_ui.testing.tiny_model",
                                     description="Write a tiny random CosyVoice model folder (official format).")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--family", default="v1", choices=["v1", *QWEN_FAMILIES])
    parser.add_argument("--sft", action="store_true", help="add spk2info.pt with preset speakers")
    parser.add_argument("--instruct", action="store_true", help="write an -Instruct variant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--legacy-weight-norm", action="store_true", help="hift.pt with weight_g/weight_v keys")
    parser.add_argument("--full-size", action="store_true",
                        help="official dimensions (CosyVoice-300M ≈1.7 GB; CosyVoice2/3-0.5B ≈2.5-3 GB)")
    args = parser.parse_args(argv)
    full = FULL_SIZE_QWEN if args.family in QWEN_FAMILIES else FULL_SIZE
    path = write_tiny_model(args.out_dir, args.family, args.sft, args.instruct, args.seed,
                            full if args.full_size else None, args.legacy_weight_norm)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
