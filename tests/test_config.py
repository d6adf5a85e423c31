"""The official yaml is read as inert data: tags become records, references resolve, nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.cosyvoice.config import Ref, Tagged, parse_v1, read_yaml
from cosyvoice_ui.errors import ConfigError
from cosyvoice_ui.testing.tiny_model import FULL_SIZE, v1_yaml


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


def test_fixture_yaml_parses(v1_fixture: Path) -> None:
    cfg = parse_v1(read_yaml(v1_fixture / "cosyvoice.yaml"))
    assert cfg.llm_class == "cosyvoice.llm.llm.TransformerLM"
    assert cfg.llm.llm.num_blocks == 3 and cfg.flow.cfm.estimator.channels == (32, 32)


def test_facts_the_yaml_lacks_come_from_the_family(v1_fixture: Path) -> None:
    from cosyvoice_ui.cosyvoice.families import V1

    cfg = parse_v1(read_yaml(v1_fixture / "cosyvoice.yaml"))
    assert cfg.flow.mel_rate == V1.mel_rate and cfg.sample_rate == V1.sample_rate
    assert cfg.estimator_class == "cosyvoice.flow.decoder.ConditionalDecoder"
    assert cfg.flow_class == "cosyvoice.flow.flow.MaskedDiffWithXvec"


def test_unsupported_encoder_options_are_named(tmp_path: Path) -> None:
    text = v1_yaml(FULL_SIZE).replace("macaron_style: False", "macaron_style: True", 1)
    assert text != v1_yaml(FULL_SIZE)
    (tmp_path / "cosyvoice.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="macaron"):
        parse_v1(read_yaml(tmp_path / "cosyvoice.yaml"))
