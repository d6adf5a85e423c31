"""The vocoder's layouts and Snake kernel against the plain vocoder, alternating in one process.

    python benchmarks/vocoder.py --family v3 --precision fast --rounds 4
    python benchmarks/vocoder.py --family v1 --precision stock --rounds 4
    python benchmarks/vocoder.py --tiny --rounds 1 --json        # smoke test (CI)

Loads the family's folder at the precision (the vocoder as it loads here: time-major convolutions on a CPU, and in
fast mode the one-pass Snake kernel where `kernels/` is built) and makes from it, in the same process:
- "plain": the same weights in torch's own layout ([B, C, T] signals, every Snake as torch's element-wise ops), the
  vocoder as it ran before issue 26's seventeenth pass;
- "time-major": time-major convolutions (`models/conv_layout.py`), torch's Snake;
- "as loaded": the engine's own vocoder.
Rounds, per variant in rotating order: the vocoder alone on the workload's mel (5 s of audio; `--alone-rounds`), then
whole offline renders with the engine's vocoder swapped for it (`--rounds`). Printed: medians [min-max] of each, each
variant ÷ plain per round (median [min-max]), and the largest difference of each variant's wave from plain's (bf16: the kernel rounds once where torch
rounds after each op; float32: summation order).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
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

from cosyvoice_ui.cosyvoice.models.conv_layout import TimeMajorConv  # noqa: E402
from cosyvoice_ui.cosyvoice.models.hift import Snake  # noqa: E402

from workload import StreamBench, render_offline  # noqa: E402


def plain_copy(hift, time_major: bool):
    """A copy of the loaded vocoder with torch's Snake, and time-major convolutions only when asked."""
    other = copy.deepcopy(hift)
    for activation in other.modules():
        if isinstance(activation, Snake):
            activation.kernel = False
    if not time_major:
        for layer in other.modules():
            if isinstance(layer, TimeMajorConv):
                layer.weight.data = layer.weight.data.contiguous()
                layer.time_major = False
        other.time_major = False
    elif not other.time_major:
        other.use_time_major()
    return other.eval()


@contextlib.contextmanager
def vocoder_swapped(engine, hift):
    saved = engine.hift
    engine.hift = hift
    try:
        yield
    finally:
        engine.hift = saved


def vocoder_alone(hift, mel: torch.Tensor) -> tuple[float, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    with torch.inference_mode():
        if hasattr(hift, "inference_from"):  # v3's causal vocoder: fixed noise, no generator
            wave = hift.inference(mel)[0]
        else:
            wave = hift.inference(mel, generator=generator)[0]
    return time.perf_counter() - start, wave


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="v3", choices=("v1", "v2", "v3"))
    parser.add_argument("--precision", default="fast", choices=("stock", "fast", "extra-fast"))
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of whole renders (0: the vocoder alone only)")
    parser.add_argument("--alone-rounds", type=int, default=None,
                        help="rounds of the vocoder alone (default: 3x --rounds; each takes well under a second)")
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--json", action="store_true", help="also print the numbers as one JSON line")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as scratch:
        bench = StreamBench.open(args.family, args.precision, scratch, args.model_dir, args.tiny, args.cache_dir)
        engine = bench.engine
        tokens = bench.workload.output_tokens
        variants = {"plain": plain_copy(engine.hift, time_major=False),
                    "time-major": plain_copy(engine.hift, time_major=True), "as loaded": engine.hift}
        mel_frames = int(round(bench.workload.prompt_seconds * bench.family.mel_rate))
        mel = torch.randn(1, 80, mel_frames, generator=torch.Generator().manual_seed(1)) - 5.0
        alone = {name: [] for name in variants}
        renders = {name: [] for name in variants}
        waves = {}
        for name, hift in variants.items():  # warm-up, and each variant's wave
            waves[name] = vocoder_alone(hift, mel)[1]
            if args.rounds:
                with vocoder_swapped(engine, hift):
                    render_offline(engine, bench.model_input, tokens, 0)
        names = list(variants)
        alone_rounds = args.alone_rounds if args.alone_rounds is not None else 3 * args.rounds
        for round_index in range(alone_rounds):
            order = names[round_index % len(names):] + names[:round_index % len(names)]
            for name in order:
                alone[name].append(vocoder_alone(variants[name], mel)[0])
        for round_index in range(args.rounds):
            order = names[round_index % len(names):] + names[:round_index % len(names)]
            for name in order:
                with vocoder_swapped(engine, variants[name]):
                    wall, times, _ = render_offline(engine, bench.model_input, tokens, 0)
                renders[name].append((wall, times.hift_s))

    audio_s = waves["plain"].numel() / engine.info.sample_rate
    report = {"family": args.family, "precision": args.precision, "hift": engine.info.precision.hift,
              "audio_s": audio_s, "rounds": args.rounds, "alone_rounds": alone_rounds, "variants": {}}
    print(f"{bench.folder.name}, {args.precision}, {args.threads} threads, {alone_rounds} alternating rounds of the "
          f"vocoder alone, {args.rounds} of renders; "
          f"the engine's vocoder: {engine.info.precision.hift}")
    for name in names:
        per_round = [a / b for a, b in zip(alone[name], alone["plain"])]
        render_rtf = [wall / audio_s for wall, _ in renders[name]] or [float("nan")]  # --rounds 0: none
        render_hift = [h for _, h in renders[name]] or [float("nan")]
        difference = (waves[name] - waves["plain"]).abs().max().item()
        report["variants"][name] = {"alone_s": spread(alone[name]), "alone_ratio": per_round,
                                    "render_rtf": spread(render_rtf), "render_hift_s": spread(render_hift),
                                    "max_wave_difference": difference}
        s, r, h = spread(alone[name]), spread(render_rtf), spread(render_hift)
        ratio = spread(per_round)
        print(f"  {name:<11} alone {s['median']:.3f} s [{s['min']:.3f}-{s['max']:.3f}]  "
              f"÷ plain per round {ratio['median']:.2f} [{ratio['min']:.2f}-{ratio['max']:.2f}]  "
              f"in a render {h['median']:.3f} s (RTF {r['median']:.3f})  wave vs plain {difference:.2e}")
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
