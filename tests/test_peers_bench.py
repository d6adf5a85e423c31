"""The pure logic of benchmarks/peers.py (the peers themselves are an optional extra, never built or run here):
vox's stage clocks from its stats, the derived per-run numbers, the min-max spans and within-batch ratios, and the
README table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peers.py"


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("peers_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["peers_bench"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("peers_bench", None)


# The "backend" section of engine.stats() as vox-tts 0.19.5 returns it (running totals), before and after a render.
STATS_BEFORE = {"backend": {"device": "cpu", "flow_device": "cpu", "flow_ms": 34394.87885, "gemm": "",
                            "hift_ms": 392.367986, "llm_device": "cpu", "llm_ms": 4834.55076}, "threads": 2}
STATS_AFTER = {"backend": {"device": "cpu", "flow_device": "cpu", "flow_ms": 61394.87885, "gemm": "",
                           "hift_ms": 2392.367986, "llm_device": "cpu", "llm_ms": 11834.55076}, "threads": 2}


def test_vox_stage_clocks_are_the_differences_of_its_running_totals(peers) -> None:
    run = peers.vox_stage_delta(STATS_BEFORE, STATS_AFTER, samples=120000, sample_rate=24000)
    assert run["llm_s"] == pytest.approx(7.0) and run["flow_s"] == pytest.approx(27.0)
    assert run["hift_s"] == pytest.approx(2.0)
    assert run["tokens"] == 125 and run["audio_s"] == 5.0  # 25 tokens a second
    assert peers.vox_stage_delta(STATS_BEFORE, STATS_AFTER, samples=118080, sample_rate=24000)["tokens"] == 123


def test_derived_numbers_with_and_without_a_separate_prefill(peers) -> None:
    split = peers.derive({"llm_prefill_s": 0.5, "llm_decode_s": 3.1, "tokens": 125, "flow_s": 20.0, "hift_s": 2.0,
                          "total_s": 25.6, "audio_s": 5.0})
    assert split["llm_s"] == pytest.approx(3.6)
    assert split["llm_ms_per_token"] == pytest.approx(3600 / 125)
    assert split["decode_ms_per_token"] == pytest.approx(3100 / 124)
    assert split["rtf"] == pytest.approx(25.6 / 5.0)
    whole = peers.derive({"llm_s": 7.04, "tokens": 125, "flow_s": 19.9, "hift_s": 2.1, "total_s": 29.3,
                          "audio_s": 5.0})
    assert whole["llm_ms_per_token"] == pytest.approx(56.32)
    assert whole["decode_ms_per_token"] is None and whole["llm_prefill_s"] is None


def test_a_driver_line_gives_the_audio_from_its_samples(peers) -> None:
    # one answer of benchmarks/peers_cosyvoice_cpp.cpp, as printed
    line = ('{"llm_prefill_s": 0.6025, "llm_decode_s": 3.4941, "tokens": 125, "flow_s": 40.7338, "hift_s": 1.4683, '
            '"total_s": 46.2988, "samples": 120000, "sample_rate": 24000}')
    run = peers.derive(json.loads(line))
    assert run["audio_s"] == 5.0 and run["rtf"] == pytest.approx(46.2988 / 5.0)
    assert run["decode_ms_per_token"] == pytest.approx(3494.1 / 124)


def _run(llm_ms: float, flow: float, total: float) -> dict:
    return {"llm_s": llm_ms * 125 / 1e3, "tokens": 125, "flow_s": flow, "hift_s": 1.0, "total_s": total,
            "audio_s": 5.0}


def test_ratios_are_taken_within_each_batch(peers) -> None:
    engines = ["ours stock", "ours fast", "peer f16"]
    batches = [
        {"ours stock": peers.derive(_run(40, 20, 30)), "ours fast": peers.derive(_run(20, 2, 5)),
         "peer f16": peers.derive(_run(30, 30, 45))},
        # a slower machine in batch 2 moves every engine: the ratios stay, the spans of raw numbers widen
        {"ours stock": peers.derive(_run(80, 40, 60)), "ours fast": peers.derive(_run(40, 4, 10)),
         "peer f16": peers.derive(_run(60, 60, 90))},
    ]
    summary = peers.summarize(batches, engines, ["peer f16"])
    assert summary["stages"]["ours stock"]["rtf"] == (6.0, 12.0)
    assert summary["stages"]["peer f16"]["decode_ms_per_token"] is None
    to_stock = summary["ratios"]["peer f16"]["ours stock"]
    assert to_stock["rtf"] == pytest.approx((1.5, 1.5))
    assert to_stock["llm_ms_per_token"] == pytest.approx((0.75, 0.75))
    assert summary["ratios"]["peer f16"]["ours fast"]["flow_s"] == pytest.approx((15.0, 15.0))

    table = peers.markdown_table(summary, engines, ["peer f16"]).splitlines()
    assert table[0].startswith("| engine | LLM ms/token |") and len(table) == 2 + len(engines)
    assert table[2] == "| ours stock | 40.0–80.0 | 20.0–40.0 | 1.00 | 30.0–60.0 | 6.00–12.00 |  |  |"
    assert table[4].endswith("| 1.50× | 9.00× |")
    ratios = peers.ratio_table(summary, ["peer f16"]).splitlines()
    assert ratios[2] == "| peer f16 ÷ ours stock | 0.75 | 1.50 | 1.00 | 1.50 | 1.50 |"


def test_spans_skip_unknown_values(peers) -> None:
    assert peers.span([None, 2.0, 1.0]) == (1.0, 2.0)
    assert peers.span([None]) is None
    assert peers.fmt_span(None) == "-"
    assert peers.fmt_span((1.234, 1.236)) == "1.23–1.24"
    assert peers.fmt_span((1.231, 1.234)) == "1.23"
