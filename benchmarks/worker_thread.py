"""A request on a worker thread against the same request on the thread that loaded the model, with and without the
engine letting go of idle OpenMP teams (`cosyvoice_ui/openmp.py`, `release_threads`).

    python benchmarks/worker_thread.py --family v3 --precision fast --runs 3
    python benchmarks/worker_thread.py --tiny --runs 1                       # smoke test

A server loads the model on one thread and runs each request on a worker thread. GNU OpenMP keeps a team of
workers per thread that ran a parallel region, and once the process holds more of them than the machine has cores,
every idle worker stops spinning almost at once: the hundreds of short regions of a decode step or a render each
wait for a sleeping thread. Variants, alternating in one process, each a streamed render of the workload (first
chunk and whole stream):
  loading thread                 the request on the thread that loaded the model (what the other benchmarks time)
  worker thread, teams released  the request on a new thread, as the engine now runs it
  worker thread, teams kept      the same with `release_threads` turned off and the loading thread's team alive
                                 (what a server ran before)
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for path in (REPO, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import cosyvoice_ui  # noqa: E402, F401  (sets OpenMP's spin count before torch loads, as the app does)
import torch  # noqa: E402


from workload import StreamBench, render_streaming  # noqa: E402

_RELEASING_MODULES = ("cosyvoice_ui.engine", "cosyvoice_ui.cosyvoice.engine",
                      "cosyvoice_ui.cosyvoice.models.decode_batcher", "cosyvoice_ui.cosyvoice.render_turns",
                      "workload")


@contextlib.contextmanager
def teams_kept() -> None:
    """`release_threads` turned off in the engine's modules, and this (the loading) thread's team alive."""
    modules = [sys.modules[name] for name in _RELEASING_MODULES]
    saved = [module.release_threads for module in modules]
    for module in modules:
        module.release_threads = lambda: False
    torch.ones(1 << 20).mul_(2.0)  # a parallel region: this thread's OpenMP team exists again
    try:
        yield
    finally:
        for module, release in zip(modules, saved):
            module.release_threads = release


def on_worker(fn):
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), name="request-worker")
    thread.start()
    thread.join()
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="v3", choices=("v1", "v2", "v3"))
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--precision", default="fast")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, help="speech tokens per render (default: the workload's 5 s)")
    parser.add_argument("--cache-dir", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as scratch:
        bench = StreamBench.open(args.family, args.precision, scratch, args.model_dir, args.tiny, args.cache_dir)
        folder, engine, model_input = bench.folder, bench.engine, bench.model_input
        tokens = args.tokens or (40 if args.tiny else bench.workload.output_tokens)

        def render(seed: int) -> tuple[float, float]:
            first, total, _, _ = render_streaming(engine, model_input, tokens, seed)
            return first, total

        render(0)  # warm up (and keep the voice's prompt chunks)
        variants = {"loading thread": lambda seed: render(seed),
                    "worker thread, teams released": lambda seed: on_worker(lambda: render(seed)),
                    "worker thread, teams kept": lambda seed: on_worker(lambda: render(seed))}
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for run in range(args.runs):
            for name, fn in variants.items():
                with teams_kept() if name.endswith("kept") else contextlib.nullcontext():
                    results[name].append(fn(run + 1))
        engine.close()
    print(f"{folder.name}, {args.precision}, {args.threads} threads, {tokens} tokens streamed, "
          f"{args.runs} alternating runs")
    print(f"  {'variant':<32}{'first chunk':>22}{'whole stream':>22}")
    medians = {}
    for name, runs in results.items():
        firsts, totals = [r[0] for r in runs], [r[1] for r in runs]
        medians[name] = (statistics.median(firsts), statistics.median(totals))
        print(f"  {name:<32}{medians[name][0]:>8.2f} s [{min(firsts):.2f}-{max(firsts):.2f}]"
              f"{medians[name][1]:>9.2f} s [{min(totals):.2f}-{max(totals):.2f}]")
    now, before = medians["worker thread, teams released"], medians["worker thread, teams kept"]
    print(f"  worker thread, released ÷ kept: first chunk {now[0] / before[0]:.2f}, "
          f"whole stream {now[1] / before[1]:.2f}")


if __name__ == "__main__":
    main()
