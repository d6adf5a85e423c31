"""benchmarks/deviation.py on the tiny models of every family: the report has every row with finite numbers,
a variant equal to stock deviates by nothing, another noise seed by something, the engine is left as it
was, and the verdict follows the quarter-of-the-seed-spread rule."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cosyvoice_ui.cosyvoice.engine import load_engine
from cosyvoice_ui.cosyvoice.precision import FastSettings, bf16_is_native, bf16_matrix_units, settings_for
from cosyvoice_ui.testing.signals import voice_clip

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))  # the benchmark scripts import each other as top-level modules

import deviation  # noqa: E402
from bench_engine import build_parser, format_deviation  # noqa: E402
from workload import Workload, build_input  # noqa: E402

TOKENS = 12  # output tokens: enough frames for the vocoders, few enough to stay fast


@pytest.fixture(scope="module", params=["v1", "v2", "v3"])
def setup(request, tiny_base: Path, tiny_v2: Path, tiny_v3: Path):
    folder = {"v1": tiny_base, "v2": tiny_v2, "v3": tiny_v3}[request.param]
    engine = load_engine(folder, device="cpu", precision="stock")
    family = engine.folder.family
    # A 5 s prompt: longer than fast mode's 3 s flow prompt, so that change is really made.
    model_input = build_input(engine, engine.encode_voice(voice_clip(5.0)),
                              Workload.for_family(family.token_rate, family.mel_rate, TOKENS))
    vocab = engine.flow.cfg.vocab_size
    tokens = [(37 * i + 5) % vocab for i in range(TOKENS)]
    return request.param, engine, model_input, tokens


@pytest.fixture(scope="module")
def report(setup):
    _, engine, model_input, tokens = setup
    return deviation.fast_deviation(engine, model_input, tokens, settings_for("fast"), settings_for("extra-fast"))


def _expected_rows(family: str, fast: FastSettings, extra: FastSettings) -> set[str]:
    rows = {deviation.SEED_ROW, f"{fast.n_timesteps} flow steps", f"{extra.n_timesteps} flow steps",
            f"flow prompt {fast.flow_prompt_seconds:g} s", "no classifier-free guidance", deviation.FAST_ROW,
            deviation.EXTRA_ROW}
    if family == "v3" and not bf16_matrix_units():  # the DiT takes int8 linears (float32 attention)
        rows.add("int8 estimator")
    elif bf16_is_native():  # the U-Nets, and the DiT where the CPU has bf16 matrix units
        rows.add("bf16 estimator, matmul attention")
    if bf16_is_native():
        rows.add(deviation.hift_row(fast))
    return rows


def test_report_has_every_row_with_finite_numbers(setup, report) -> None:
    family = setup[0]
    assert report["family"] == family
    rows = report["token_to_wave"]
    assert set(rows) == _expected_rows(family, settings_for("fast"), settings_for("extra-fast"))
    assert bool(report["skipped"]) is not bf16_is_native()
    for name, row in rows.items():
        for key in ("mel_l1", "mel_max_abs", "seed_ratio", "wave_snr_db", "wave_logspec_l1", "logspec_seed_ratio"):
            assert math.isfinite(row[key]), (name, key)
        assert row["mel_l1"] <= row["mel_max_abs"]
    assert report["settings"]["extra-fast"]["guidance"] is False


def test_other_noise_seed_is_the_scale_and_changes_mel_and_wave(report) -> None:
    seed = report["token_to_wave"][deviation.SEED_ROW]
    assert seed["mel_l1"] > 0 and seed["wave_logspec_l1"] > 0 and seed["wave_snr_db"] < 40
    assert seed["seed_ratio"] == 1.0 and seed["verdict"] == "scale"


def test_every_change_moves_something_and_guidance_moves_the_mel(report) -> None:
    rows = report["token_to_wave"]
    for name, row in rows.items():
        assert row["wave_logspec_l1"] > 0, name  # no variant is a silent no-op
    assert rows["no classifier-free guidance"]["mel_l1"] > 0
    assert rows[deviation.EXTRA_ROW]["mel_l1"] > 0
    if bf16_is_native():  # a vocoder-only change leaves the mel exactly as it was
        assert rows[deviation.hift_row(settings_for("fast"))]["mel_l1"] == 0.0


def test_verdict_follows_the_seed_ratio(report) -> None:
    for name, row in report["token_to_wave"].items():
        if name != deviation.SEED_ROW:
            assert row["verdict"] == ("fast" if row["seed_ratio"] <= 0.25 else "extra-fast only"), name


def test_int8_llm_agreement_is_measured(report) -> None:
    assert report["llm_int4"]["mean_kl"] != report["llm_int8"]["mean_kl"]  # int4 really runs 4-bit weights
    for key in ("llm_int8", "llm_int4"):  # fast's int8 LLM and extra-fast's int4 one
        q = report[key]
        assert 0.0 <= q["top1_agreement"] <= 1.0 and q["top1_agreement"] > 0.5, key
        assert math.isfinite(q["mean_kl"]) and q["mean_kl"] > -1e-6, key
        assert q["steps"] == TOKENS + 1  # one row per forced token and the one after the last


def test_a_variant_equal_to_stock_deviates_by_nothing(setup) -> None:
    _, engine, model_input, tokens = setup
    steps = engine.flow.decoder.n_timesteps
    variants = {"stock again": deviation.Change(),
                # the stock values spelled out: the yaml's steps, a cap longer than the prompt, guidance on
                "stock, explicit": deviation.Change(n_timesteps=steps, flow_prompt_seconds=60.0, guidance=True),
                "other seed": deviation.Change(seed_offset=1)}
    rows = deviation.token_to_wave_deviation(engine, model_input, tokens, variants)
    for name in ("stock again", "stock, explicit"):
        assert rows[name]["mel_l1"] == 0.0 and rows[name]["mel_max_abs"] == 0.0, name
        assert rows[name]["wave_logspec_l1"] == 0.0 and rows[name]["wave_snr_db"] == math.inf, name
    assert rows["other seed"]["mel_l1"] > 0


def test_the_flow_steps_row_uses_the_settings_given(setup) -> None:
    _, engine, model_input, tokens = setup
    fast = replace(settings_for("fast"), n_timesteps=3, bf16_estimator=False, int8_estimator=False, bf16_hift=False,
                   int8_llm=False)
    extra = replace(fast, guidance=False)
    result = deviation.fast_deviation(engine, model_input, tokens, fast, extra)
    assert [name for name in result["token_to_wave"] if name.endswith("flow steps")] == ["3 flow steps"]
    assert result["token_to_wave"]["3 flow steps"]["mel_l1"] > 0
    assert result["llm_int8"] == {} and result["llm_int4"] == {}  # neither mode quantises the LLM here
    assert result["settings"]["fast"]["n_timesteps"] == 3


class _Broken(torch.nn.Module):
    def forward(self, *args, **kwargs):
        raise RuntimeError("estimator failed")


def _state(engine) -> tuple:
    return (engine.n_timesteps, engine.flow_prompt_seconds, engine.flow.decoder.estimator, engine.hift,
            engine.flow.decoder.inference_cfg_rate)


def test_the_engine_is_left_as_it_was_even_when_a_variant_fails(setup, report) -> None:
    _, engine, model_input, tokens = setup
    before = _state(engine)
    assert before[4] > 0  # stock guides
    failing = deviation.Change(n_timesteps=2, flow_prompt_seconds=1.0, estimator=_Broken(),
                               hift=torch.nn.Identity(), guidance=False)
    with pytest.raises(RuntimeError, match="estimator failed"):
        deviation.token_to_wave_deviation(engine, model_input, tokens, {"broken": failing})
    after = _state(engine)
    assert after[0] == before[0] and after[1] == before[1] and after[4] == before[4]
    assert after[2] is before[2] and after[3] is before[3]


def test_fixed_draws_cut_the_flow_noise_from_the_end_and_match_each_vocoder(setup) -> None:
    family, engine, _, _ = setup
    draws = deviation.FixedDraws(3, 40, 80)
    # A shorter flow prompt takes the last frames, so the generated frames (at the end) see the same noise.
    assert torch.equal(draws.flow_noise(25), draws.noise[..., 15:])
    nsf = draws.nsf_noise(engine.hift, 960)
    assert tuple(nsf.sine.shape) == (1, engine.hift.m_source.harmonics, 960)
    assert torch.equal(nsf.sine, deviation.FixedDraws(3, 40, 80).nsf_noise(engine.hift, 960).sine)
    if family == "v3":  # the causal source's noise is a uniform [0, 1) buffer, not Gaussian draws
        assert float(nsf.sine.min()) >= 0.0 and float(nsf.sine.max()) < 1.0
    else:
        assert float(nsf.sine.min()) < 0.0


def test_seed_ratio_and_verdict() -> None:
    assert deviation.verdict(0.0) == "fast" and deviation.verdict(0.25) == "fast"
    assert deviation.verdict(0.2501) == "extra-fast only" and deviation.verdict(math.inf) == "extra-fast only"
    assert deviation.seed_ratio(0.5, 2.0) == 0.25
    assert deviation.seed_ratio(0.0, 0.0) == 0.0 and deviation.seed_ratio(0.1, 0.0) == math.inf
    rows = deviation.with_verdicts({deviation.SEED_ROW: {"mel_l1": 2.0, "wave_logspec_l1": 1.0},
                                    "small": {"mel_l1": 0.4, "wave_logspec_l1": 0.1},
                                    "large": {"mel_l1": 0.6, "wave_logspec_l1": 0.1}})
    assert [rows[n]["verdict"] for n in rows] == ["scale", "fast", "extra-fast only"]
    assert rows["large"]["seed_ratio"] == pytest.approx(0.3) and rows["small"]["logspec_seed_ratio"] == 0.1


def test_the_bench_prints_the_table_and_takes_every_precision(report) -> None:
    args = build_parser().parse_args(["--family", "v3", "--precision", "extra-fast", "--deviation"])
    assert args.precision == "extra-fast" and args.deviation
    lines = format_deviation(report)
    text = "\n".join(lines)
    for name, row in report["token_to_wave"].items():
        assert any(line.strip().startswith(name) and row["verdict"] in line for line in lines), name
    assert "top-1 agreement" in text and report["family"] in lines[0]
