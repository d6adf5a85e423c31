"""Smoke test of benchmarks/bad_takes.py --quick: it runs on tiny models and reports a row per family,
language and kind; forced repeats (a doubled token stream, a looped block) are always caught, and the first retry
recovers them (no second retry: the count behind the default of one retry)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bad_takes.py"


def test_quick_benchmark_reports_catch_and_false_positive_rates() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "false positives on normal takes:" in done.stdout
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result["measured"]) >= {"en", "zh"}
    rows = {(r["source"], r["family"], r["language"], r["kind"]): r for r in result["rows"]}
    for family in ("v1", "v3"):
        for language in ("en", "zh"):
            for kind in ("normal", "past_eos", "loop", "doubled", "early_eos"):
                row = rows[("tiny", family, language, kind)]
                assert row["runs"] >= 1 and 0 <= row["flagged"] <= row["runs"]
            for kind in ("loop", "doubled"):  # verbatim repeated tokens: the repeat check cannot miss them
                assert rows[("tiny", family, language, kind)]["rate"] == 1.0
                retry = rows[("retry", family, language, kind)]
                assert retry["rate"] == 1.0 and retry["retried"] == retry["runs"]
                assert retry["second_retry"] == 0  # the normal retake passed: one retry was enough
    assert "segments retried" in done.stdout and "needed a second retry" in done.stdout
