"""Many voices at once: throughput and first-chunk latency of N concurrent streamed requests on one engine, whose
LLM steps run as one batch of width N (continuous batching, `cosyvoice/models/decode_batcher.py`; v1 decodes each
request alone).

    python benchmarks/concurrency.py --family v3 --precision fast               # 1, 2, 4, 8 requests
    python benchmarks/concurrency.py --family v2 --concurrency 1 4 --threads 2
    python benchmarks/concurrency.py --tiny --json                                # smoke test (CI), seconds

Each request is bench_engine's workload (zero-shot, 5 s prompt, exactly 5 s of output), streamed, with its own
seed; N requests start together in N threads. Printed per N: wall time, throughput (seconds of audio per second)
and its ratio to one request's, first chunk p50 / p95 / max, and the mean number of rows per batched LLM step.
The engine is loaded once; the batch width is set per N.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for path in (REPO, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import cosyvoice_ui  # noqa: E402, F401  (sets OpenMP's spin count before torch loads, as the app does)
import torch  # noqa: E402

from cosyvoice_ui.cosyvoice.models.decode_batcher import DecodeBatcher, batches  # noqa: E402

from workload import StreamBench, render_streaming  # noqa: E402


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_level(engine, model_input, tokens: int, n: int, audio_s: float, ahead: bool = False) -> dict:
    """N streamed requests at once; their first chunks and the wall time. ahead: one request's LLM decodes on
    the batcher's own thread while its chunks render (LLM and flow/vocoder overlapped), as N > 1 always does."""
    engine.set_batch_width(n)  # as the server's --concurrency sets it: batched LLM steps, renders taking turns
    engine.wait_for_recorded_steps()  # its steps of several rows, recorded on a thread of their own
    if ahead and n == 1 and batches(engine.llm):
        engine.token_decoder = DecodeBatcher(engine.llm, 1, tick=engine.thread_fit.tick if engine.thread_fit else None)
    results: list[tuple[float, float] | None] = [None] * n
    errors: list[BaseException] = []
    go = threading.Barrier(n)

    def one(i: int) -> None:
        try:
            go.wait()
            first, total, _, _ = render_streaming(engine, model_input, tokens, seed=100 + i)
            results[i] = (first, total)
        except BaseException as exc:  # noqa: BLE001  (reported after the run)
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    firsts = [r[0] for r in results if r is not None]
    decoder = engine.token_decoder
    rows = decoder.rows / decoder.steps if isinstance(decoder, DecodeBatcher) and decoder.steps else 1.0
    return {"requests": n, "ahead": ahead and n == 1, "wall_s": wall, "throughput": n * audio_s / wall,
            "first_chunk_p50_s": statistics.median(firsts), "first_chunk_p95_s": _percentile(firsts, 0.95),
            "first_chunk_max_s": max(firsts), "mean_rows_per_step": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="v3", choices=("v1", "v2", "v3"))
    parser.add_argument("--model-dir", type=Path, help="a real model folder instead of the random full-size one")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke test)")
    parser.add_argument("--precision", default="fast")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--tokens", type=int, help="output tokens per request (default: 5 s of speech)")
    parser.add_argument("--cache-dir", type=Path, help="where the full-size random folders are (bench_engine's)")
    parser.add_argument("--ahead", action="store_true",
                        help="also run one request with its LLM decoding ahead on its own thread (overlap), "
                             "alternating with the plain single request --runs times")
    parser.add_argument("--runs", type=int, default=1, help="times each level runs (alternating levels)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as scratch:
        bench = StreamBench.open(args.family, args.precision, scratch, args.model_dir, args.tiny, args.cache_dir)
        folder, engine, family, model_input = bench.folder, bench.engine, bench.family, bench.model_input
        tokens = args.tokens or (40 if args.tiny else bench.workload.output_tokens)
        audio_s = tokens / family.token_rate
        # Warm up past the first chunk, so that the voice's prompt chunks are kept (as for any voice used before).
        render_streaming(engine, model_input, min(tokens, 40), seed=1)
        plan = [(n, False) for n in args.concurrency] + ([(1, True)] if args.ahead else [])
        levels = [run_level(engine, model_input, tokens, n, audio_s, ahead)
                  for _ in range(args.runs) for n, ahead in plan]
        batched = batches(engine.llm)
        engine.close()
    single = next((level["throughput"] for level in levels if level["requests"] == 1 and not level["ahead"]), None)
    result = {"model": folder.name, "family": args.family, "precision": args.precision, "threads": args.threads,
              "tokens_per_request": tokens, "audio_s_per_request": audio_s, "batches": batched,
              "levels": levels, "single_throughput": single}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{folder.name}, {args.precision}, {args.threads} threads, {tokens} tokens ({audio_s:.1f} s) per request, "
          f"LLM steps {'batched' if result['batches'] else 'one request at a time (this family)'}")
    print(f"  {'requests':>8}{'wall s':>9}{'audio s/s':>11}{'vs 1':>7}{'first chunk p50':>17}{'p95':>7}{'max':>7}"
          f"{'rows/step':>11}")
    for level in levels:
        ratio = f"{level['throughput'] / single:.2f}x" if single else "-"
        name = f"{level['requests']}" + (" ahead" if level["ahead"] else "")
        print(f"  {name:>8}{level['wall_s']:>9.2f}{level['throughput']:>11.2f}{ratio:>7}"
              f"{level['first_chunk_p50_s']:>15.2f} s{level['first_chunk_p95_s']:>6.2f}s"
              f"{level['first_chunk_max_s']:>6.2f}s{level['mean_rows_per_step']:>11.2f}")


if __name__ == "__main__":
    main()
