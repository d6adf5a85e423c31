"""The v2/v3 yaml parsers on the fixture yamls (cosyvoice-models.md §1.3): the records the models read."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.cosyvoice.config import (CausalFlowConfig, DiTConfig, DiTFlowConfig, EstimatorConfig, QwenLMConfig,
                                           parse_v1, parse_v2, parse_v3, read_yaml)
from cosyvoice_ui.cosyvoice.frontend.qwen_tokenizer import ADDED_SPECIALS, QwenTokenizer
from cosyvoice_ui.errors import ConfigError

from .conftest import fixture_dir


@pytest.fixture(scope="module")
def v2_yaml() -> Path:
    return fixture_dir("cosyvoice2-tiny") / "cosyvoice2.yaml"


@pytest.fixture(scope="module")
def v3_yaml() -> Path:
    return fixture_dir("cosyvoice3-tiny") / "cosyvoice3.yaml"


def _shared_checks(cfg) -> None:
    assert cfg.sample_rate == 24000
    chunking = cfg.chunking
    assert (chunking.token_frame_rate, chunking.token_mel_ratio, chunking.chunk_size,
            chunking.num_decoding_left_chunks) == (25, 2, 25, -1)
    assert isinstance(cfg.llm, QwenLMConfig) and cfg.llm.speech_token_size == 6561 and cfg.llm.mix_ratio == (5, 15)
    assert (cfg.llm.sampling.top_p, cfg.llm.sampling.top_k, cfg.llm.sampling.win_size, cfg.llm.sampling.tau_r) == (
        0.8, 25, 10, 0.1)
    assert cfg.llm.qwen is None  # filled from CosyVoice-BlankEN/config.json at load time
    mel = cfg.mel
    assert (mel.n_fft, mel.num_mels, mel.sampling_rate, mel.hop_size, mel.win_size, mel.fmin, mel.center) == (
        1920, 80, 24000, 480, 1920, 0.0, False)
    cfm = cfg.flow.cfm
    assert (cfm.in_channels, cfm.spk_emb_dim, cfm.sigma_min, cfm.t_scheduler, cfm.inference_cfg_rate,
            cfm.n_timesteps) == (240, 80, 1e-6, "cosine", 0.7, 10)
    assert cfg.flow.vocab_size == 6561 and cfg.flow.token_mel_ratio == 2 and cfg.flow.pre_lookahead_len == 3
    assert cfg.flow.input_frame_rate == 25 and cfg.flow.output_size == 80 and cfg.flow.spk_embed_dim == 192
    hift = cfg.hift
    assert hift.sampling_rate == 24000 and hift.upsample_rates == (8, 5, 3)
    assert hift.upsample_kernel_sizes == (16, 11, 7) and (hift.istft_n_fft, hift.istft_hop) == (16, 4)
    assert hift.source_resblock_kernel_sizes == (7, 7, 11) and hift.source_resblock_dilation_sizes == ((1, 3, 5),) * 3
    assert hift.base_channels == 32 and hift.f0_cond_channels == 32  # shrunk in the fixture (real: 512)
    assert cfg.tokenizer["target"].endswith("get_qwen_tokenizer") and cfg.tokenizer["skip_special_tokens"] is True


def test_v2_yaml(v2_yaml: Path) -> None:
    cfg = parse_v2(read_yaml(v2_yaml), v2_yaml.name)
    _shared_checks(cfg)
    assert cfg.llm_class == "cosyvoice.llm.llm.Qwen2LM"
    assert cfg.flow_class == "cosyvoice.flow.flow.CausalMaskedDiffWithXvec"
    assert cfg.estimator_class == "cosyvoice.flow.decoder.CausalConditionalDecoder"
    assert cfg.hift_class == "cosyvoice.hifigan.generator.HiFTGenerator"
    assert cfg.mel.fmax == 8000.0  # v2's prompt mel stops at 8 kHz
    assert (cfg.llm.llm_input_size, cfg.llm.llm_output_size) == (48, 48)
    flow = cfg.flow
    assert isinstance(flow, CausalFlowConfig) and flow.input_size == 48
    enc = flow.encoder
    assert (enc.input_size, enc.output_size, enc.attention_heads, enc.linear_units, enc.num_blocks) == (
        48, 48, 4, 128, 2)
    assert enc.layer_type == "conformer" and enc.static_chunk_size == 25 and enc.input_layer == "linear"
    est = flow.cfm.estimator
    assert isinstance(est, EstimatorConfig) and est.channels == (32,) and est.in_channels == 320
    assert (est.attention_head_dim, est.n_blocks, est.num_mid_blocks, est.num_heads) == (16, 1, 2, 2)
    assert flow.estimator_chunk_size == 50 and flow.num_decoding_left_chunks == -1  # chunk_size · token_mel_ratio
    assert cfg.hift.conv_pre_look_right == 0 and cfg.hift.f0_predictor_class.endswith(".ConvRNNF0Predictor")
    assert "version" not in cfg.tokenizer  # upstream's default list (cosyvoice2)


def test_v3_yaml(v3_yaml: Path) -> None:
    cfg = parse_v3(read_yaml(v3_yaml), v3_yaml.name)
    _shared_checks(cfg)
    assert cfg.llm_class == "cosyvoice.llm.llm.CosyVoice3LM"
    assert cfg.flow_class == "cosyvoice.flow.flow.CausalMaskedDiffWithDiT"
    assert cfg.estimator_class == "cosyvoice.flow.DiT.dit.DiT"
    assert cfg.hift_class == "cosyvoice.hifigan.generator.CausalHiFTGenerator"
    assert cfg.mel.fmax is None  # fmax: null → Nyquist (12 kHz)
    assert (cfg.llm.llm_input_size, cfg.llm.llm_output_size) == (8, 8)
    flow = cfg.flow
    assert isinstance(flow, DiTFlowConfig) and flow.input_size == 80 and flow.pre_lookahead_channels == 64
    dit = flow.cfm.estimator
    assert isinstance(dit, DiTConfig)
    assert (dit.dim, dit.depth, dit.heads, dit.dim_head, dit.ff_mult) == (64, 2, 4, 16, 2.0)
    assert (dit.mel_dim, dit.mu_dim, dit.spk_dim, dit.out_channels) == (80, 80, 80, 80)
    assert dit.static_chunk_size == 50 and dit.num_decoding_left_chunks == -1
    assert cfg.hift.conv_pre_look_right == 4 and cfg.hift.f0_predictor_class.endswith(".CausalConvRNNF0Predictor")
    assert cfg.tokenizer["version"] == "cosyvoice3"


def test_the_tokenizer_list_comes_from_the_yaml(v2_yaml: Path, v3_yaml: Path, tmp_path: Path) -> None:
    for path, expected in ((v2_yaml, ADDED_SPECIALS["cosyvoice2"]), (v3_yaml, ADDED_SPECIALS["cosyvoice3"])):
        cfg = (parse_v2 if path == v2_yaml else parse_v3)(read_yaml(path), path.name)
        assert QwenTokenizer.for_model(tmp_path, cfg.tokenizer).added_specials == expected


def test_a_yaml_of_another_generation_is_refused(v2_yaml: Path, v3_yaml: Path) -> None:
    with pytest.raises(ConfigError, match="encoder"):
        parse_v2(read_yaml(v3_yaml), v3_yaml.name)
    with pytest.raises(ConfigError, match="no encoder"):
        parse_v3(read_yaml(v2_yaml), v2_yaml.name)
    v1_yaml = fixture_dir("cosyvoice1-tiny") / "cosyvoice.yaml"
    with pytest.raises(ConfigError):
        parse_v2(read_yaml(v1_yaml), v1_yaml.name)
    with pytest.raises(ConfigError):
        parse_v1(read_yaml(v2_yaml), v2_yaml.name)


def test_mel_framing_must_give_the_token_ratio(v2_yaml: Path, tmp_path: Path) -> None:
    text = v2_yaml.read_text(encoding="utf-8")
    broken = tmp_path / "cosyvoice2.yaml"
    broken.write_text(text.replace("token_mel_ratio: 2", "token_mel_ratio: 3"), encoding="utf-8")
    with pytest.raises(ConfigError, match="mel frames per"):
        parse_v2(read_yaml(broken), broken.name)
    broken.write_text(text.replace("solver: 'euler'", "solver: 'midpoint'"), encoding="utf-8")
    with pytest.raises(ConfigError, match="solver"):
        parse_v2(read_yaml(broken), broken.name)
