"""Fitting a dub's take to its cue, measured (issue 28): the model's own speed against ffmpeg's atempo.

Usage: python benchmarks/dub_stretch.py [--model-dir DIR] [--json]

For each sentence the offline voice (or the model of --model-dir) renders a take at speed 1 through the real speech
job (`serving/jobs.py` `render_on`), its silent edges trimmed as a dub's takes are. Then, for each speed of the fit
policy's default range (0.85 and 1.2):

  model: the same request rendered again at that speed (the engine's `speed`);
  atempo: the speed-1 take stretched by `studio/dub_media.stretch` (ffmpeg atempo, WSOLA, pitch kept).

Reported per speed: the length error against the length asked for (speed-1 length / speed), in % (median and worst),
the seconds each way costs per second of speech, and the pitch change (median f0 of voiced frames, autocorrelation)
against the speed-1 take, in cents.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SENTENCES = (
    "Good morning, did you sleep well last night?",
    "Not really, the neighbours were very loud again.",
    "Then let us get some coffee before the meeting starts.",
    "早上好，你昨晚睡得好吗？",
    "那我们先去喝杯咖啡吧，会议九点才开始。",
)
SPEEDS = (0.85, 1.2)


def median_f0(samples: np.ndarray, rate: int) -> float:
    """Median f0 (Hz) of the voiced 40 ms frames: the autocorrelation peak between 70 and 400 Hz."""
    frame, hop = int(0.04 * rate), int(0.01 * rate)
    found = []
    level = float(np.sqrt(np.mean(samples ** 2))) if len(samples) else 0.0
    for begin in range(0, len(samples) - frame, hop):
        x = samples[begin:begin + frame].astype(np.float64)
        if np.sqrt(np.mean(x ** 2)) < level * 0.5:
            continue
        x = x - x.mean()
        corr = np.correlate(x, x, "full")[frame - 1:]
        low, high = int(rate / 400), int(rate / 70)
        lag = low + int(np.argmax(corr[low:high]))
        if corr[lag] > 0.5 * corr[0]:
            found.append(rate / lag)
    return float(np.median(found)) if found else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default="offline-default")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from cosyvoice_ui.audio import trim_silence
    from cosyvoice_ui.serving.backends import open_engine
    from cosyvoice_ui.serving.jobs import JobOptions, render_on
    from cosyvoice_ui.settings import LoadOptions
    from cosyvoice_ui.studio.dub_media import stretch
    from cosyvoice_ui.testing.speech import speech_jobs
    from cosyvoice_ui.types import Audio, Mode, SynthesisRequest

    root = Path(tempfile.mkdtemp(prefix="dub-stretch-"))
    engine = open_engine(args.model_dir, Path("pretrained_models"), LoadOptions(device="cpu", voices_dir=root))
    speech = speech_jobs(root, watermark=False, take_retries=0)
    info = engine.info

    def take(text: str, speed: float) -> tuple[np.ndarray, float]:
        request = SynthesisRequest(Mode.SFT, text=text, speed=speed, seed=7, speaker=info.default_speaker or None)
        job = speech.prepare(request, JobOptions(loudness=None, mode_given=False), info)
        started = time.perf_counter()
        rendered = render_on(engine, job, speech.resolver)
        spent = time.perf_counter() - started
        return trim_silence(Audio(rendered.samples, rendered.sample_rate), pad_s=0.0).samples, spent

    rows = {speed: {"model": [], "atempo": []} for speed in SPEEDS}
    for text in SENTENCES:
        base, _ = take(text, 1.0)
        seconds = len(base) / info.sample_rate
        pitch = median_f0(base, info.sample_rate)
        for speed in SPEEDS:
            wanted = seconds / speed
            samples, spent = take(text, speed)
            started = time.perf_counter()
            stretched = stretch(base, info.sample_rate, speed)
            stretched_in = time.perf_counter() - started
            for way, out, cost in (("model", samples, spent), ("atempo", stretched, stretched_in)):
                rows[speed][way].append({
                    "error_pct": 100 * (len(out) / info.sample_rate - wanted) / wanted,
                    "cost_per_s": cost / wanted,
                    "cents": 1200 * np.log2(median_f0(out, info.sample_rate) / pitch),
                })
    report = {"model": info.name, "sentences": len(SENTENCES), "speeds": {}}
    for speed, ways in rows.items():
        report["speeds"][str(speed)] = {way: {
            "length_error_pct_median": round(statistics.median(abs(r["error_pct"]) for r in found), 2),
            "length_error_pct_worst": round(max((r["error_pct"] for r in found), key=abs), 2),
            "seconds_per_second": round(statistics.median(r["cost_per_s"] for r in found), 4),
            "pitch_change_cents_median": round(statistics.median(r["cents"] for r in found), 1),
        } for way, found in ways.items()}
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
        return 0
    print(f"{report['model']}, {len(SENTENCES)} sentences")
    print(f"{'speed':>6} {'way':>7} {'|len err| med %':>16} {'worst %':>8} {'s per s':>8} {'pitch cents':>12}")
    for speed, ways in report["speeds"].items():
        for way, row in ways.items():
            print(f"{speed:>6} {way:>7} {row['length_error_pct_median']:>16} {row['length_error_pct_worst']:>8} "
                  f"{row['seconds_per_second']:>8} {row['pitch_change_cents_median']:>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
