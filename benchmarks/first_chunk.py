"""Time to the first streamed chunk, now against upstream's first hop, alternating in one process.

    python benchmarks/first_chunk.py --family v3 --precision fast --runs 5
    python benchmarks/first_chunk.py --tiny                                    # smoke test

"now" is the engine as it loads (v2/v3: a first chunk of the flow prompt's pad when it is at least 12 tokens, and
fast mode's prompt trimmed to leave that pad; v3: the voice's prompt chunks kept from its earlier streams, so the
first pass computes only the chunk the speech starts in); "now, nothing kept" is the same without kept frames
(`COSYVOICE_FLOW_STREAM_CACHE_MB=0`: what a voice's first stream costs); "upstream hop" is the engine with
upstream's schedule and nothing kept (the pad plus a whole 25-token hop; fast mode's prompt cut at exactly its
seconds). Each run streams bench_engine's workload
until the first chunk is out, and splits that time into waiting for the chunk's tokens (prefill + decode) and
rendering it (flow + vocoder). Printed: medians [min-max] and now ÷ upstream.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for path in (REPO, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import cosyvoice_ui  # noqa: E402, F401  (sets OpenMP's spin count before torch loads, as the app does)
import torch  # noqa: E402


from workload import (StreamBench, estimator_swapped, fbgemm_rows, has_onednn_rows,  # noqa: E402
                      int8_estimator_copy, kept_frames)


class _TokenClock:
    """Wraps the engine's token decoder to note when each token arrives."""

    def __init__(self, decoder) -> None:
        self.decoder, self.times = decoder, []

    def inference(self, *args, **kwargs):
        for token in self.decoder.inference(*args, **kwargs):
            self.times.append(time.perf_counter())
            yield token


def first_chunk(engine, model_input, spec, tokens: int, seed: int) -> tuple[float, float]:
    """(seconds to the first chunk, of which waiting for its tokens)."""
    engine.streaming_spec = spec
    decoder = engine.token_decoder  # the LLM, or (fast on a CPU) the batcher that decodes ahead of the renders
    clock = _TokenClock(decoder)
    engine.token_decoder = clock
    start = time.perf_counter()
    chunks = engine.render_input(model_input, torch.Generator().manual_seed(seed), stream=True,
                                 forced_tokens=tokens)
    next(chunks)
    first = time.perf_counter() - start
    chunks.close()
    engine.token_decoder = decoder
    tokens_done = clock.times[-1] - start if clock.times else 0.0
    return first, tokens_done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="v3", choices=("v2", "v3"))
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--precision", default="fast")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cache-dir", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as scratch:
        bench = StreamBench.open(args.family, args.precision, scratch, args.model_dir, args.tiny, args.cache_dir)
        folder, engine, family, model_input = bench.folder, bench.engine, bench.family, bench.model_input
        # name: (schedule, keep frames, estimator (None: the engine's), prefill rows on fbgemm)
        variants = {"now": (family.streaming, True, None, False),
                    "now, nothing kept": (family.streaming, False, None, False),
                    "upstream hop": (family.upstream_streaming, False, None, False)}
        # Where the CPU has AMX: what fast ran without it, timed too (the int8 estimator, fbgemm prefills).
        int8 = int8_estimator_copy(engine)
        if int8 is not None:
            variants["now, int8 estimator"] = (family.streaming, True, int8, False)
            with estimator_swapped(engine, int8):
                first_chunk(engine, model_input, family.streaming, 60, seed=0)
        if has_onednn_rows(engine):
            variants["now, fbgemm prefill"] = (family.streaming, True, None, True)
        if int8 is not None and has_onednn_rows(engine):
            variants["now, neither (before)"] = (family.streaming, True, int8, True)
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        first_chunk(engine, model_input, family.streaming, 60, seed=0)  # warm up (and keep the voice's prompt)
        for run in range(args.runs):
            for name, (spec, keep, estimator, fbgemm) in variants.items():
                with kept_frames(keep), estimator_swapped(engine, estimator), fbgemm_rows(engine, fbgemm):
                    results[name].append(first_chunk(engine, model_input, spec, 60, seed=run))
    print(f"{folder.name}, {args.precision}, {args.threads} threads, {args.runs} alternating runs each")
    print(f"  {'variant':<24}{'first chunk':>22}{'of which tokens':>22}{'render':>9}")
    medians = {}
    for name, runs in results.items():
        firsts, waits = [r[0] for r in runs], [r[1] for r in runs]
        medians[name] = statistics.median(firsts)
        print(f"  {name:<24}{medians[name]:>8.2f} s [{min(firsts):.2f}-{max(firsts):.2f}]"
              f"{statistics.median(waits):>14.2f} s{medians[name] - statistics.median(waits):>9.2f} s")
    print(f"  now ÷ upstream hop: {medians['now'] / medians['upstream hop']:.2f}; now ÷ nothing kept: "
          f"{medians['now'] / medians['now, nothing kept']:.2f}"
          + "".join(f"; now ÷ {name[5:]}: {medians['now'] / medians[name]:.2f}" for name in medians
                    if name.startswith(("now, int8", "now, fbgemm", "now, neither"))))


if __name__ == "__main__":
    main()
