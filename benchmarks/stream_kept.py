"""v3 streams whose flow passes keep what earlier passes computed, against passes that recompute every frame:
flow time per stream, and how far the streamed mel moves.

    python benchmarks/stream_kept.py --precision fast --runs 3      # full-size random v3 weights
    python benchmarks/stream_kept.py --tiny --runs 1                 # smoke test

One stream = the benchmark workload's 125 speech tokens (5 s) through the engine's own chunk schedule, prompt
and Euler steps: the first chunk, the growing hops, then the final pass (full attention, as upstream; never
kept). Only the flow runs (the vocoder's time is the same either way). Each run alternates: nothing kept; kept,
the voice new (its prompt chunks computed and stored); kept, the voice seen before.

Deviation: the streamed mel (every chunk's new frames, joined) with kept frames against the same stream with
nothing kept, as mel L1 ÷ the noise-seed spread (the same stream with the fixed flow noise drawn from another
seed), the scale `benchmarks/deviation.py` uses. In stock the two agree up to float summation order; in fast,
int8 dynamic linears quantise each call's activations with their own scale, which a shorter pass changes.
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

import cosyvoice_ui  # noqa: E402, F401  (OpenMP's spin count before torch loads, as the app sets it)
import torch  # noqa: E402

from cosyvoice_ui.cosyvoice.models.cfm_causal import fixed_noise  # noqa: E402
from cosyvoice_ui.cosyvoice.streaming_qwen import _QwenTokenToWave, stream_with_lookahead  # noqa: E402

from workload import StreamBench, estimator_swapped, int8_estimator_copy, kept_frames  # noqa: E402


class MelOnly(_QwenTokenToWave):
    """The engine's streamed flow passes, returning each chunk's mel instead of vocoding it."""

    def _vocode_chunk(self, mel: torch.Tensor, finalize: bool) -> torch.Tensor:
        return mel


def stream_mel(engine, model_input, tokens: list[int], chunked_last: bool = False) -> tuple[torch.Tensor, float, int]:
    """(the streamed mel [1, F, M2], flow seconds, passes)."""
    render = MelOnly(engine.flow, engine.hift, engine.streaming_spec, engine._flow_prompt(model_input), None,
                     engine.n_timesteps)
    render.chunked_last_pass = chunked_last
    start = time.perf_counter()
    with torch.inference_mode():
        chunks = [mel for mel, _ in stream_with_lookahead(tokens, render, engine.streaming_spec)]
    return torch.cat(chunks, dim=2), time.perf_counter() - start, len(chunks)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model-dir", type=Path)
    src.add_argument("--tiny", action="store_true")
    p.add_argument("--precision", default="fast")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cache-dir", type=Path)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as scratch:
        bench = StreamBench.open("v3", args.precision, scratch, args.model_dir, args.tiny, args.cache_dir)
        folder, engine, workload, model_input = bench.folder, bench.engine, bench.workload, bench.model_input
        g = torch.Generator().manual_seed(7)
        tokens = torch.randint(0, engine.flow.cfg.vocab_size - 3, (workload.output_tokens,), generator=g).tolist()
        store = engine.flow.prompt_prefixes

        times: dict[str, list[float]] = {"nothing kept": [], "kept, new voice": [], "kept, voice seen": [],
                                         "kept, chunked last pass": []}
        int8 = int8_estimator_copy(engine)  # where the CPU has bf16 matrix units: the int8 estimator, timed too
        if int8 is not None:
            times["as last, int8 estimator"] = []
        mels: dict[str, torch.Tensor] = {}
        passes = 0
        for run in range(args.runs):
            for name in times:
                if name == "kept, new voice":
                    store.clear()
                with kept_frames(name != "nothing kept"), estimator_swapped(engine, int8 if "int8" in name else None):
                    mel, seconds, passes = stream_mel(engine, model_input, tokens,
                                                      chunked_last=name.endswith(("last pass", "int8 estimator")))
                times[name].append(seconds)
                mels.setdefault(name, mel)
        decoder = engine.flow.decoder
        saved = decoder.rand_noise
        decoder.rand_noise = fixed_noise(saved.size(1), saved.size(2), seed=1)
        try:
            with kept_frames(False):
                other_seed, _, _ = stream_mel(engine, model_input, tokens)
        finally:
            decoder.rand_noise = saved

    base = mels["nothing kept"]
    spread = (other_seed - base).abs().mean().item()
    print(f"{folder.name}, {args.precision}, {args.threads} threads, {len(tokens)} tokens in {passes} passes, "
          f"{args.runs} alternating runs")
    print(f"  {'variant':<24}{'flow s per stream':>24}{'÷ nothing kept':>16}{'mel L1 ÷ seed spread':>24}")
    reference = statistics.median(times["nothing kept"])
    for name, values in times.items():
        median = statistics.median(values)
        deviation = (mels[name] - base).abs().mean().item() / spread if spread else float("nan")
        print(f"  {name:<24}{median:>10.2f} s [{min(values):.2f}-{max(values):.2f}]{median / reference:>12.2f}"
              f"{deviation:>20.4f}")
    print(f"  noise-seed spread (mel L1): {spread:.4f}; kept prompt chunks: {store.hits} hits, {store.misses} misses")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
