"""Smoke test of benchmarks/gpu_v3.py: on the CPU with the tiny v3 model it runs every configuration and
reports finite numbers under every key (values are machine-dependent and never checked), and its
benchmark-side static-cache LLM decode matches the engine's; on a CUDA machine the same run captures
CUDA graphs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_v3.py"
NUMBERS = ("first_packet_s", "rtf", "offline_s", "audio_s", "llm_prefill_s", "llm_ms_per_token", "flow_s", "hift_s",
           "warmup_s", "first_chunk_audio_s")


def _bench(*flags: str, device: str = "cpu") -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", device, "--tiny", "--json", *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stdout
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measured(config: dict) -> None:
    assert "skipped" not in config, config.get("skipped")
    for key in NUMBERS:
        assert isinstance(config[key], float) and math.isfinite(config[key]) and config[key] > 0, key
    assert config["runs"] >= 1 and len(config["rtf_runs"]) == config["runs"]
    assert set(config["meets_target"]) == {"first_packet", "rtf"}


@pytest.mark.slow  # three configurations of renders and a torch.compile trace: ~10 s
def test_cpu_smoke_reports_every_configuration() -> None:
    result = _bench()
    assert result["device"]["type"] == "cpu" and result["model"]["family"] == "v3" and result["model"]["tiny"]
    assert result["comparable"] is False  # a tiny CPU run is never held against the GPU targets
    for name in ("stock_fp32", "bf16", "bf16_llm_graph", "bf16_graphs"):
        _measured(result["configs"][name])
    assert result["configs"]["stock_fp32"]["tokens"] == 60
    assert result["configs"]["bf16"]["applied"]["flow"].startswith("bf16")
    assert result["configs"]["bf16"]["applied"]["hift"].startswith("bf16")
    assert "torch.compile" in result["configs"]["bf16_graphs"]["applied"]["flow"]
    assert result["configs"]["bf16_graphs"]["cuda_graphs"] is False  # none on the CPU
    static = result["configs"]["bf16_llm_graph"]
    # The benchmark-side static-cache decode computes what the engine's decode computes (fp32 on the CPU).
    assert static["static_decode_drift"] < 1e-4 and static["llm_graph_replays"] == 0
    assert "static KV cache" in static["applied"]["llm"]
    assert [a["rtf"] for a in result["anchors"]] == [0.12, 0.109]
    assert result["target"] == {"first_packet_s": 0.2, "rtf": 0.1}
    assert any("LLM decode step" in note for note in result["notes"])


def test_spent_budget_keeps_one_run_and_skips_the_rest() -> None:
    result = _bench("--budget-s", "0", "--runs", "3")
    _measured(result["configs"]["stock_fp32"])
    assert result["configs"]["stock_fp32"]["runs"] == 1
    assert "budget" in result["configs"]["bf16"]["skipped"]
    assert "budget" in result["configs"]["bf16_graphs"]["skipped"]
    assert "budget" in result["configs"]["bf16_llm_graph"]["skipped"]
    assert result["budget_hit"] is True


@pytest.mark.slow
def test_a_failing_compile_still_reports_the_bf16_numbers() -> None:
    result = _bench("--graphs-backend", "no-such-backend", "--no-llm-graph")
    _measured(result["configs"]["bf16"])
    assert result["configs"]["bf16_llm_graph"]["skipped"] == "--no-llm-graph"
    assert "failed" in result["configs"]["bf16_graphs"]["skipped"]
    assert any(note.startswith("torch.compile of the flow estimator failed") for note in result["notes"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tiny_run_captures_cuda_graphs() -> None:
    result = _bench(device="cuda")
    assert result["device"]["type"] == "cuda" and result["device"]["name"]
    for name in ("stock_fp32", "bf16", "bf16_llm_graph", "bf16_graphs"):
        _measured(result["configs"][name])
    assert result["configs"]["bf16"]["applied"]["llm"].startswith("bf16")
    assert result["configs"]["bf16_graphs"]["cuda_graphs"] is True
    assert result["configs"]["bf16_llm_graph"]["llm_graph_replays"] > 0
    assert result["configs"]["bf16_graphs"]["llm_graph_replays"] > 0
