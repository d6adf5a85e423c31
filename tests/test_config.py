"""The official yaml is read as inert data (tags become records, references resolve, nothing runs), and each
generation's parser builds the records its models read (cosyvoice-models.md §1.3), from the fixture yamls.
One file for the three generations: what they share is one parametrised test."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.cosyvoice.config import (CausalFlowConfig, DiTConfig, DiTFlowConfig, EstimatorConfig, QwenLMConfig,
                                           Ref, Tagged, parse_v1, parse_v2, parse_v3, read_yaml)
from cosyvoice_ui.cosyvoice.families import V1, V2, V3
from cosyvoice_ui.cosyvoice.frontend.qwen_tokenizer import ADDED_SPECIALS, QwenTokenizer
from cosyvoice_ui.errors import ConfigError
from cosyvoice_ui.testing.tiny_model import FULL_SIZE, v1_yaml

from .conftest import fixture_dir

# family → (its golden folder, its yaml's name, its parser, its spec)
FAMILIES = {"v1": ("cosyvoice1-tiny", "cosyvoice.yaml", parse_v1, V1),
            "v2": ("cosyvoice2-tiny", "cosyvoice2.yaml", parse_v2, V2),
            "v3": ("cosyvoice3-tiny", "cosyvoice3.yaml", parse_v3, V3)}
# The upstream classes each fixture yaml names: (llm, flow, estimator, vocoder)
UPSTREAM_CLASSES = {
    "v1": ("cosyvoice.llm.llm.TransformerLM", "cosyvoice.flow.flow.MaskedDiffWithXvec",
           "cosyvoice.flow.decoder.ConditionalDecoder", "cosyvoice.hifigan.generator.HiFTGenerator"),
    "v2": ("cosyvoice.llm.llm.Qwen2LM", "cosyvoice.flow.flow.CausalMaskedDiffWithXvec",
           "cosyvoice.flow.decoder.CausalConditionalDecoder", "cosyvoice.hifigan.generator.HiFTGenerator"),
    "v3": ("cosyvoice.llm.llm.CosyVoice3LM", "cosyvoice.flow.flow.CausalMaskedDiffWithDiT",
           "cosyvoice.flow.DiT.dit.DiT", "cosyvoice.hifigan.generator.CausalHiFTGenerator"),
}


def yaml_path(family: str) -> Path:
    folder, name, _, _ = FAMILIES[family]
    return fixture_dir(folder) / name


def parsed(family: str):
    path = yaml_path(family)
    return FAMILIES[family][2](read_yaml(path), path.name)


@pytest.fixture(scope="module")
def v2_yaml() -> Path:
    return yaml_path("v2")


@pytest.fixture(scope="module")
def v3_yaml() -> Path:
    return yaml_path("v3")


# --- the inert reader -------------------------------------------------------------------------------------------


def test_tags_become_records_and_refs_resolve(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "__seed: !apply:torch.manual_seed [1986]\n"
        "chunk_size: 25\nratio: 2\n"
        "lookahead: !ref <chunk_size> * <ratio>\n"
        "tok: !name:whisper.tokenizer.get_tokenizer\n  multilingual: True\n"
        "opener: !name:pkg.open\n"
        "model: !new:pkg.Model\n  size: !ref <chunk_size>\n  tok: !ref <tok>\n  eps: 1e-06\n",
        encoding="utf-8")
    data = read_yaml(tmp_path / "c.yaml")
    assert "__seed" not in data  # !apply entries are dropped, never executed
    assert data["lookahead"] == 50
    assert data["opener"] == Tagged("name", "pkg.open", None)
    model = data["model"]
    assert isinstance(model, Tagged) and model.kind == "new" and model.target == "pkg.Model"
    assert model.args["size"] == 25 and model.args["eps"] == pytest.approx(1e-6)
    assert model.args["tok"].args == {"multilingual": True}
    assert not any(isinstance(v, Ref) for v in model.args.values())


def test_apply_is_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "c.yaml").write_text(f"x: !apply:pathlib.Path.touch ['{marker}']\ny: 1\n", encoding="utf-8")
    assert read_yaml(tmp_path / "c.yaml") == {"y": 1}
    assert not marker.exists()


def test_bad_reference_and_bad_yaml_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("x: !ref <missing>\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="missing"):
        read_yaml(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text("x: [1, 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid yaml"):
        read_yaml(tmp_path / "b.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        read_yaml(tmp_path / "absent.yaml")


# --- every generation --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_fixture_yaml_names_the_upstream_classes(family: str) -> None:
    cfg = parsed(family)
    assert (cfg.llm_class, cfg.flow_class, cfg.estimator_class, cfg.hift_class) == UPSTREAM_CLASSES[family]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_facts_the_yaml_lacks_come_from_the_family(family: str) -> None:
    cfg = parsed(family)
    spec = FAMILIES[family][3]
    assert cfg.sample_rate == spec.sample_rate and cfg.mel.sampling_rate == spec.sample_rate
    if family == "v1":  # the v1 flow takes its mel rate from the family; v2/v3 count mel frames per token
        assert cfg.flow.mel_rate == spec.mel_rate
    else:
        assert cfg.chunking.token_frame_rate * cfg.chunking.token_mel_ratio == spec.mel_rate


# --- v1 ---------------------------------------------------------------------------------------------------------


def test_full_size_yaml_gives_the_official_hyperparameters(tmp_path: Path) -> None:
    (tmp_path / "cosyvoice.yaml").write_text(v1_yaml(FULL_SIZE), encoding="utf-8")
    cfg = parse_v1(read_yaml(tmp_path / "cosyvoice.yaml"))
    assert cfg.llm.llm.num_blocks == 14 and cfg.llm.llm.output_size == 1024 and cfg.llm.llm.attention_heads == 16
    assert cfg.llm.text_encoder.static_chunk_size == 1 and cfg.llm.llm.input_layer == "linear_legacy"
    assert cfg.llm.llm.layer_type == "transformer" and cfg.llm.text_encoder.layer_type == "conformer"
    assert cfg.flow.encoder.static_chunk_size == 0 and cfg.flow.cfm.inference_cfg_rate == 0.7
    assert cfg.flow.cfm.estimator.channels == (256, 256) and cfg.flow.cfm.estimator.num_mid_blocks == 12
    assert cfg.hift.upsample_rates == (8, 8) and cfg.hift.istft_n_fft == 16
    assert cfg.mel.fmax == 8000 and cfg.mel.hop_size == 256
    assert cfg.llm.sampling.top_k == 25 and cfg.llm.sampling.top_p == pytest.approx(0.8)


def test_the_v1_fixture_is_shrunk() -> None:
    cfg = parsed("v1")
    assert cfg.llm.llm.num_blocks == 3 and cfg.flow.cfm.estimator.channels == (32, 32)


def test_unsupported_encoder_options_are_named(tmp_path: Path) -> None:
    text = v1_yaml(FULL_SIZE).replace("macaron_style: False", "macaron_style: True", 1)
    assert text != v1_yaml(FULL_SIZE)
    (tmp_path / "cosyvoice.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="macaron"):
        parse_v1(read_yaml(tmp_path / "cosyvoice.yaml"))


# --- v2 and v3 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["v2", "v3"])
def test_the_qwen_families_share_their_framing_and_vocoder_layout(family: str) -> None:
    """What v2 and v3 share (the Qwen2 LM, 25 Hz tokens, the 24 kHz mel and the CFM's settings)."""
    cfg = parsed(family)
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
