"""Smoke test of benchmarks/watermark.py in its CI size (`--quick`): it runs and reports every number with the
right type (the numbers themselves are the README's, from the full run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cosyvoice_ui.audio import ffmpeg_path
from cosyvoice_ui.serving import watermarking

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    watermarking.shared().problem() is not None or ffmpeg_path() is None,
    reason="needs resemble-perth==1.0.1 (requirements-offline.txt) and ffmpeg")]


def test_quick_run_reports_every_number() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "watermark.py"), "--quick", "--json",
                           "--threads", "1"], cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["attacks"][0] == "none" and "MP3 128k" in result["attacks"]
    for table in ("detection", "false_alarms"):
        for attack in result["attacks"]:
            cell = result[table]["all"][attack]
            assert cell["clips"] > 0 and 0.0 <= cell["rate"] <= 1.0
    assert result["detection"]["all"]["none"]["rate"] == 1.0  # untouched marked clips are all found
    assert all(row["lsd_db"] > 0 and row["snr_db"] > 0 for row in result["audibility"].values())
    assert result["cost"]["mark_ms_per_s"] > 0 and result["cost"]["check_ms_per_s"] > 0
    assert "| source |" in done.stdout
