"""The contention run: the engine's workload (bench_engine.py) quiet, then while other processes keep cores busy,
alternating, in fresh processes; prints each precision's RTF and decode ms/token, and the busy ÷ quiet ratio.

    python benchmarks/contention.py --family v3 --precision fast stock     # full-size random weights, 2 threads
    python benchmarks/contention.py --tiny --precision fast                # seconds: a smoke run (no timing checks)
    python benchmarks/contention.py --family v3 --env OMP_WAIT_POLICY=ACTIVE   # how the engine fares with spinning

A shared server always has neighbours (the UI process, transcription, a second replica), so each precision should
slow down in proportion to the cores it loses: with one of 2 cores busy, about 2× (the issue's target: ≤ 2.2×).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def bench(args: argparse.Namespace, precision: str, busy: int) -> dict:
    command = [sys.executable, str(HERE / "bench_engine.py"), "--family", args.family, "--precision", precision,
               "--threads", str(args.threads), "--runs", str(args.runs), "--stream-runs", str(args.stream_runs),
               "--busy-cores", str(busy), "--json"]
    if args.tiny:
        command.append("--tiny")
    env = {**os.environ, **dict(item.split("=", 1) for item in args.env)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench_engine failed ({precision}, busy {busy}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ms_per_token(result: dict) -> float:
    rate = result["llm_tokens_per_s"]
    return 1e3 / rate if rate else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", default="v3", choices=["v1", "v2", "v3"])
    p.add_argument("--precision", nargs="+", default=["fast", "stock"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--busy-cores", type=int, default=1)
    p.add_argument("--batches", type=int, default=2, help="quiet/busy pairs per precision (alternating)")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--stream-runs", type=int, default=0)
    p.add_argument("--tiny", action="store_true", help="the tiny random model (seconds; no meaning for speed)")
    p.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE", help="environment for the engine runs")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    report = {}
    for precision in args.precision:
        quiet, busy = [], []
        for _ in range(args.batches):
            quiet.append(bench(args, precision, 0))
            busy.append(bench(args, precision, args.busy_cores))
        rtf_q, rtf_b = [r["rtf"] for r in quiet], [r["rtf"] for r in busy]
        tok_q, tok_b = [ms_per_token(r) for r in quiet], [ms_per_token(r) for r in busy]
        report[precision] = {"quiet_rtf": rtf_q, "busy_rtf": rtf_b, "quiet_ms_per_token": tok_q,
                             "busy_ms_per_token": tok_b,
                             "rtf_ratio": statistics.median(rtf_b) / statistics.median(rtf_q),
                             "decode_ratio": statistics.median(tok_b) / statistics.median(tok_q)}
    if args.json:
        print(json.dumps(report))
        return 0
    env = " ".join(args.env) or "the engine's own thread settings"
    print(f"{args.family} · {args.threads} threads · {args.busy_cores} core(s) kept busy · {env} · "
          f"{args.batches} alternating batches")
    print(f"  {'precision':<12}{'quiet RTF':>16}{'busy RTF':>16}{'ratio':>7}{'quiet ms/tok':>18}{'busy ms/tok':>18}"
          f"{'ratio':>7}")
    for precision, r in report.items():
        def span(values):
            return f"{min(values):.2f}–{max(values):.2f}"
        print(f"  {precision:<12}{span(r['quiet_rtf']):>16}{span(r['busy_rtf']):>16}{r['rtf_ratio']:7.2f}"
              f"{span(r['quiet_ms_per_token']):>18}{span(r['busy_ms_per_token']):>18}{r['decode_ratio']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
