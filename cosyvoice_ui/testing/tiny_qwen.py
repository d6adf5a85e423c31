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

import json
import tempfile
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
    input_size: 48
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: 48
        attention_heads: 4
        linear_units: 128
        num_blocks: 2
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: 48
        use_cnn_module: False
        macaron_style: False
        static_chunk_size: !ref <chunk_size>
""" + _CFM + """        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [32]
            dropout: 0.0
            attention_head_dim: 16
            n_blocks: 1
            num_mid_blocks: 2
            num_heads: 2
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
        channels: 64
        pre_lookahead_len: 3
""" + _CFM + """        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: 64
            depth: 2
            heads: 4
            dim_head: 16
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
    base_channels: 32
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
        cond_channels: 32

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

LLM_DIM = 32


def qwen_yaml(family: FamilySpec) -> str:
    """The tiny yaml of `family` (V2 or V3)."""
    if family is V2:
        return (_HEAD.format(title=V2.title, llm_dim=LLM_DIM, llm_class="Qwen2LM") + _V2_FLOW
                + _HIFT.format(hift_class="HiFTGenerator", hift_extra="", f0_class="ConvRNNF0Predictor",
                               tokenizer_extra="", fmax=8000))
    return (_HEAD.format(title=V3.title, llm_dim=LLM_DIM, llm_class="CosyVoice3LM") + _V3_FLOW
            + _HIFT.format(hift_class="CausalHiFTGenerator", hift_extra="    conv_pre_look_right: 4\n",
                           f0_class="CausalConvRNNF0Predictor", tokenizer_extra="    version: cosyvoice3\n",
                           fmax="null"))


def qwen_backbone_config(vocab_size: int = QWEN_VOCAB) -> dict:
    """A tiny Qwen2 `config.json` (the official keys; 2 layers, 32 wide, grouped-query attention)."""
    return {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
            "hidden_size": LLM_DIM, "initializer_range": 0.02, "intermediate_size": 64,
            "max_position_embeddings": 32768, "max_window_layers": 2, "model_type": "qwen2",
            "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
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
                          seed: int = 0) -> Path:
    """Write a random `family` (V2 or V3) folder to `out_dir` and return its path. speakers: preset speakers
    to put in `spk2info.pt` (none: no file)."""
    from ..cosyvoice.config import read_yaml
    from ..cosyvoice.frontend.qwen_tokenizer import QWEN_FOLDER
    from ..cosyvoice.models.hift import unfold_weight_norm, weight_norm_names
    from ..cosyvoice.registry import backend_for

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = qwen_yaml(family)
    (out / family.yaml_name).write_text(text, encoding="utf-8")
    qwen_dir = write_qwen_vocab(out / QWEN_FOLDER)
    (qwen_dir / "config.json").write_text(json.dumps(qwen_backbone_config(), indent=2), encoding="utf-8")
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
