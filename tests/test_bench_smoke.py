"""Smoke test of benchmarks/bench_engine.py on the tiny model: it runs and reports every key with the
right type (values are machine-dependent and never checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_engine.py"
NUMBERS = ("rtf", "first_chunk_s", "load_s", "peak_rss_mb", "llm_tokens_per_s", "floor_rtf", "ratio_to_floor")


def _bench(*flags: str) -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--json", *flags], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tiny_benchmark_reports_every_key() -> None:
    result = _bench()
    for key in NUMBERS:
        assert isinstance(result[key], float) and result[key] > 0, key
    assert result["precision"] == "stock" and result["engine"]["mode"] == "stock"
    assert result["prompt_cache_hit"] is True  # the same voice twice skips the frontend
    assert result["tokens"] == 60 and result["model"]["tiny"] is True
    for stage in ("llm_prefill_s", "llm_decode_s", "flow_s", "hift_s", "total_s"):
        assert set(result["stages"][stage]) == {"min", "median", "max"}
    assert result["floor"]["flow_flops"] > 0 and result["floor"]["hift_flops"] > 0
    assert 0 < result["weights_in_memory_mb"] < result["peak_rss_mb"]
    assert result["streaming"]["chunks"] >= 2


@pytest.mark.slow  # ~10 s each; fast mode is covered by tests/test_fast_mode.py, the report by test_deviation.py
@pytest.mark.parametrize(("family", "precision"), [("v1", "fast"), ("v3", "extra-fast")])
def test_tiny_benchmark_fast_mode_and_deviation(family: str, precision: str) -> None:
    from cosyvoice_ui.cosyvoice.precision import settings_for

    result = _bench("--family", family, "--precision", precision, "--deviation", "--stream-runs", "0")
    assert result["precision"] == precision and result["engine"]["mode"] == precision
    assert result["engine"]["llm"].startswith("int8" if precision == "fast" else "int4 grouped")
    assert result["floor"]["llm_bytes_per_token"] > 0
    assert result["engine"]["flow_steps"] == settings_for(precision).n_timesteps
    assert result["engine"]["flow_guidance"] is (precision == "fast")
    assert result["first_chunk_s"] is None  # streaming skipped
    deviation = result["deviation_fast_vs_stock"]
    assert deviation["family"] == family
    rows = deviation["token_to_wave"]
    assert {"stock, other noise seed", "fast (all token-to-wave changes)", "extra-fast (all, no guidance)"} <= set(rows)
    for numbers in rows.values():
        assert isinstance(numbers["mel_l1"], float) and isinstance(numbers["wave_snr_db"], float)
        assert numbers["verdict"] in ("scale", "fast", "extra-fast only")
    assert 0.0 <= deviation["llm_int8"]["top1_agreement"] <= 1.0
    assert 0.0 <= deviation["llm_int4"]["top1_agreement"] <= 1.0


@pytest.mark.parametrize("family", ["v2", "v3"])
def test_tiny_benchmark_runs_the_qwen_families(family: str) -> None:
    result = _bench("--family", family, "--runs", "1", "--stream-runs", "1")
    assert result["model"]["family"] == family
    # The workload is the v2/v3 one: a 5 s prompt is 125 tokens at 25 Hz and 250 mel frames at 50 Hz.
    assert "5 s prompt (125 tokens, 250 mel frames)" in result["workload"]
    assert result["tokens"] <= 60 and result["audio_s"] > 0
    for key in NUMBERS:
        assert isinstance(result[key], float) and result[key] > 0, key
    # Per-token bytes leave out the Qwen text table (151936 rows): the tiny LLM reads far less than it.
    assert result["floor"]["llm_bytes_per_token"] < 151936 * 32 * 4
    assert result["streaming"]["chunks"] >= 2


@pytest.mark.parametrize("family", ["v1", "v3"])
def test_tiny_concurrency_benchmark_reports_each_level(family: str) -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "concurrency.py"), "--tiny", "--json",
                           "--family", family, "--concurrency", "1", "3"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert [level["requests"] for level in result["levels"]] == [1, 3]
    assert result["batches"] is (family == "v3")
    three = result["levels"][1]
    assert three["throughput"] > 0 and three["first_chunk_p95_s"] >= three["first_chunk_p50_s"] > 0
    assert (three["mean_rows_per_step"] > 1.5) is (family == "v3")  # v1 decodes alone


@pytest.mark.parametrize("kernel,other", [("int8", "fbgemm"), ("attention", "torch"), ("bf16-cache", "fp32-cache")])
def test_tiny_own_kernels_benchmark_compares_the_two_engines(kernel: str, other: str) -> None:
    from cosyvoice_ui.cosyvoice import kernels

    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "own_kernels.py"), "--kernel", kernel, "--tiny",
                           "--rounds", "1", "--position", "40", "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not kernels.built():  # it says why and times nothing
        assert result == {"available": False, "reason": result["reason"]} and result["reason"]
        return
    assert (result["compared"], result["other"]) == (kernel, other)
    for engine in ("kernel", other):
        for key in ("decode_ms_per_token", "rtf", "prefill_s", "step_ms"):
            assert 0 < result[engine][key]["min"] <= result[engine][key]["median"] <= result[engine][key]["max"]
    assert len(result["decode_ratio_per_round"]) == 1 and result["step_ratio"] > 0
