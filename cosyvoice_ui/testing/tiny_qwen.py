"""Tiny random CosyVoice2-0.5B / Fun-CosyVoice3-0.5B folders in the official on-disk format.

Like `tiny_model.py` does for v1: the yaml has the official classes and structure (`cosyvoice2.yaml`,
`cosyvoice3.yaml`, shrunk as the shared cosyvoice2-tiny / cosyvoice3-tiny fixtures are), `llm.pt`,
`flow.pt`, `hift.pt` are our modules' random weights under the official keys (hift.pt with weight-norm
pairs), `campplus.onnx` and `speech_tokenizer_v2.onnx` / `_v3.onnx` are tiny ONNX stand-ins, and
`CosyVoice-BlankEN/` holds a Qwen2 `config.json` and a small trained byte-level BPE vocabulary
(`qwen_vocab.py`) padded to the official id layout, so the real special ids (`<|endofprompt|>` 151646, ...)
are what the tokenizer produces. Used through `tiny_model.write_tiny_model(..., family="v2" | "v3")`.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..cosyvoice.families import V2, V3, VARIANT_FILE, FamilySpec
from .qwen_vocab import write_qwen_vocab
from .tiny_onnx import write_campplus, write_speech_tokenizer_v2

QWEN_VOCAB = 151936  # the official Qwen2 embedding rows (BPE ids, specials and spare rows)

_HEAD = """# {title} architecture written by cosyvoice_ui.testing.tiny_model (random weights, test use only)
__set_seed1: !apply:random.seed [1986]
__set_seed2: !apply:numpy.random.seed [1986]
__set_seed3: !apply:torch.manual_seed [1986]
__set_seed4: !apply:torch.cuda.manual_seed_all [1986]

sample_rate: 24000
llm_input_size: {llm_dim}
llm_output_size: {llm_dim}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: 25
num_decoding_left_chunks: -1

llm: !new:cosyvoice.llm.llm.{llm_class}
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 6561
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1
"""

_CFM = """    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
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
"""

_V2_FLOW = """
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithXvec
    input_size: {flow_dim}
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: {flow_dim}
        attention_heads: {flow_heads}
        linear_units: {flow_ff}
        num_blocks: {flow_blocks}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: {flow_dim}
        use_cnn_module: False
        macaron_style: False
        static_chunk_size: !ref <chunk_size>
""" + _CFM + """        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [{decoder_channels}]
            dropout: 0.0
            attention_head_dim: {decoder_head_dim}
            n_blocks: {decoder_blocks}
            num_mid_blocks: {decoder_mid_blocks}
            num_heads: {decoder_heads}
            act_fn: 'gelu'
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>
"""

_V3_FLOW = """
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: {lookahead_channels}
        pre_lookahead_len: 3
""" + _CFM + """        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: {dit_dim}
            depth: {dit_depth}
            heads: {dit_heads}
            dim_head: {dit_head_dim}
            ff_mult: 2
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            out_channels: 80
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>
"""

_HIFT = """
hift: !new:cosyvoice.hifigan.generator.{hift_class}
    in_channels: 80
    base_channels: {hift_channels}
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
{hift_extra}    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.{f0_class}
        num_class: 1
        in_channels: 80
        cond_channels: {f0_channels}

get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True
{tokenizer_extra}allowed_special: 'all'
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: {fmax}
    center: False
"""

@dataclass(frozen=True)
class QwenDims:
    """Sizes of the v2/v3 architecture: the shared fixtures' tiny ones, the official ones in the comments
    (`FULL_SIZE_QWEN`, what `bench_engine.py --family v2|v3` runs on random weights)."""

    llm_dim: int = 32  # 896
    llm_ff: int = 64  # 4864
    llm_layers: int = 2  # 24
    llm_heads: int = 4  # 14
    llm_kv_heads: int = 2  # 2
    flow_dim: int = 48  # 512 (v2 encoder)
    flow_heads: int = 4  # 8
    flow_ff: int = 128  # 2048
    flow_blocks: int = 2  # 6
    decoder_channels: int = 32  # 256 (v2 causal U-Net)
    decoder_head_dim: int = 16  # 64
    decoder_blocks: int = 1  # 4
    decoder_mid_blocks: int = 2  # 12
    decoder_heads: int = 2  # 8
    lookahead_channels: int = 64  # 1024 (v3)
    dit_dim: int = 64  # 1024
    dit_depth: int = 2  # 22
    dit_heads: int = 4  # 16
    dit_head_dim: int = 16  # 64
    hift_channels: int = 32  # 512
    f0_channels: int = 32  # 512


FULL_SIZE_QWEN = QwenDims(896, 4864, 24, 14, 2, 512, 8, 2048, 6, 256, 64, 4, 12, 8, 1024, 1024, 22, 16, 64, 512, 512)


def qwen_yaml(family: FamilySpec, dims: QwenDims = QwenDims()) -> str:
    """The yaml of `family` (V2 or V3) at `dims` (default: tiny)."""
    sizes = dataclasses.asdict(dims)
    if family is V2:
        return (_HEAD.format(title=V2.title, llm_class="Qwen2LM", **sizes) + _V2_FLOW.format(**sizes)
                + _HIFT.format(hift_class="HiFTGenerator", hift_extra="", f0_class="ConvRNNF0Predictor",
                               tokenizer_extra="", fmax=8000, **sizes))
    return (_HEAD.format(title=V3.title, llm_class="CosyVoice3LM", **sizes) + _V3_FLOW.format(**sizes)
            + _HIFT.format(hift_class="CausalHiFTGenerator", hift_extra="    conv_pre_look_right: 4\n",
                           f0_class="CausalConvRNNF0Predictor", tokenizer_extra="    version: cosyvoice3\n",
                           fmax="null", **sizes))


def qwen_backbone_config(vocab_size: int = QWEN_VOCAB, dims: QwenDims = QwenDims()) -> dict:
    """A Qwen2 `config.json` with the official keys at `dims` (tiny: 2 layers, 32 wide, grouped-query attention)."""
    return {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
            "hidden_size": dims.llm_dim, "initializer_range": 0.02, "intermediate_size": dims.llm_ff,
            "max_position_embeddings": 32768, "max_window_layers": dims.llm_layers, "model_type": "qwen2",
            "num_attention_heads": dims.llm_heads, "num_hidden_layers": dims.llm_layers,
            "num_key_value_heads": dims.llm_kv_heads, "rms_norm_eps": 1e-06,
            "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
            "torch_dtype": "float32", "use_cache": True, "use_sliding_window": False, "vocab_size": vocab_size}


def _make_speakable(llm, hift) -> None:
    """A sharper LLM output (sampling not uniform over 6561 ids) whose special ids (EOS, ...) score 0, so
    top-k sampling rarely stops early, and an F0 predictor giving voiced frames."""
    with torch.no_grad():
        llm.llm_decoder.weight.mul_(8.0)
        llm.llm_decoder.weight[llm.speech_token_size:].zero_()
        classifier = hift.f0_predictor.classifier
        classifier.weight.mul_(20.0)
        classifier.bias.fill_(160.0)


def write_tiny_qwen_model(out_dir: str | Path, family: FamilySpec, speakers: tuple[str, ...] = (),
                          seed: int = 0, dims: QwenDims = QwenDims()) -> Path:
    """Write a random `family` (V2 or V3) folder to `out_dir` and return its path. speakers: preset speakers
    to put in `spk2info.pt` (none: no file). dims: FULL_SIZE_QWEN for the official sizes (about 2-3 GB)."""
    from ..cosyvoice.config import read_yaml
    from ..cosyvoice.frontend.qwen_tokenizer import QWEN_FOLDER
    from ..cosyvoice.models.hift import unfold_weight_norm, weight_norm_names
    from ..cosyvoice.registry import backend_for

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = qwen_yaml(family, dims)
    (out / family.yaml_name).write_text(text, encoding="utf-8")
    qwen_dir = write_qwen_vocab(out / QWEN_FOLDER)
    (qwen_dir / "config.json").write_text(json.dumps(qwen_backbone_config(dims=dims), indent=2), encoding="utf-8")
    backend = backend_for(family)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / family.yaml_name
        path.write_text(text, encoding="utf-8")
        config = backend.parse_config(read_yaml(path), family.yaml_name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        llm = backend.build_llm(config.llm, out)
        flow = backend.build_flow(config.flow)
        hift = backend.build_vocoder(config.hift)
        _make_speakable(llm, hift)
    torch.save(llm.state_dict(), out / "llm.pt")
    torch.save(flow.state_dict(), out / "flow.pt")
    torch.save(unfold_weight_norm(hift.state_dict(), weight_norm_names(hift)), out / "hift.pt")
    write_campplus(out / "campplus.onnx", seed=seed)
    write_speech_tokenizer_v2(out / family.speech_tokenizer_file, seed=seed)
    if speakers:
        g = torch.Generator().manual_seed(seed + 7)
        torch.save({name: {"embedding": torch.randn(1, 192, generator=g)} for name in speakers}, out / "spk2info.pt")
    (out / VARIANT_FILE).write_text(json.dumps({"instruct": False, "tiny_random": True}), encoding="utf-8")
    return out
