"""Fast mode with one of the project's own kernels against the same engine without it, alternating in one process.

    python benchmarks/own_kernels.py --kernel int8 --family v3 --rounds 6       # int8 linears: kernel vs fbgemm
    python benchmarks/own_kernels.py --kernel attention --family v1 --rounds 6  # decoding attention: kernel vs torch
    python benchmarks/own_kernels.py --kernel bf16-cache --family v1 --rounds 6  # its caches: bf16 vs float32
    python benchmarks/own_kernels.py --kernel attention --tiny --rounds 1 --json  # smoke test (CI)

Loads the family's folder twice in fast mode: as it loads here (the kernel on, where `kernels/` is built) and with
the kernel's `FastSettings` switch off (`kernel_int8_llm`: fbgemm's linears; `kernel_attention`: torch's attention
ops; `bf16_decode_cache`: the attention kernel over float32 caches), renders the benchmark workload once with each
as a warm-up, then alternates whole renders, the order swapped every round. Also times one-row decoding steps of each engine's LLM alone (after a `--position`-row prefill, 40
steps, alternating). Printed: medians [min-max] of decode ms/token, RTF and prefill seconds per engine, the
kernel ÷ other ratio of each round's decode, and of the step medians. On a machine where the kernel is not
available it says why and times nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
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

from cosyvoice_ui.cosyvoice import kernels  # noqa: E402
from cosyvoice_ui.cosyvoice.engine import load_engine  # noqa: E402
from cosyvoice_ui.cosyvoice import precision  # noqa: E402
from cosyvoice_ui.cosyvoice.precision import settings_for  # noqa: E402
from cosyvoice_ui.testing.signals import voice_clip  # noqa: E402

from workload import Workload, bench_folder, build_input, render_offline  # noqa: E402


# --kernel: (its FastSettings switch, the other engine's name, the record field that says it is on, what that field
# then holds, its availability). "bf16-cache": the attention kernel on both sides, its caches bf16 or float32.
KERNELS = {"int8": ("kernel_int8_llm", "fbgemm", "llm_rows", "own int8 kernel", kernels.int8_linear_available),
           "attention": ("kernel_attention", "torch", "llm_attention", "own kernel", kernels.decode_attention_available),
           "bf16-cache": ("bf16_decode_cache", "fp32-cache", "llm_attention", "bf16 cache",
                          kernels.decode_attention_available)}


def step_ms(engine, steps: int, position: int) -> float:
    """Median ms of `steps` one-row decoding steps of the engine's LLM after a `position`-row prefill."""
    llm = engine.llm.llm
    width = engine.llm.speech_embedding.weight.size(1)
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        cache = llm.new_cache(reserve=position + steps + 8)
        llm.forward_step(torch.randn(1, position, width, generator=generator) * 0.1, cache)
        one = torch.randn(1, 1, width, generator=generator) * 0.1
        for _ in range(3):
            llm.forward_step(one, cache)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            llm.forward_step(one, cache)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default="int8", choices=sorted(KERNELS))
    parser.add_argument("--family", default="v3", choices=("v1", "v2", "v3"))
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--position", type=int, default=300, help="prefill rows before the timed one-row steps")
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--json", action="store_true", help="also print the numbers as one JSON line")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    switch, other, field, marker, available = KERNELS[args.kernel]
    if not available():
        reason = kernels.why_not_built() or "its build failed or its probe disagreed (see the log)"
        print(f"the {args.kernel} kernel is not available here: {reason}; nothing to compare")
        if args.json:
            print(json.dumps({"available": False, "reason": reason}))
        return

    from bench_engine import FAMILIES

    if args.kernel in ("attention", "bf16-cache"):
        precision.LARGE_CACHE_BYTES = 0  # measured on any family, whatever its cache size (fast's rule: v1 only)
    forced = args.kernel == "int8" and precision.int8_matrix_units()
    if forced:  # fast mode there keeps fbgemm and oneDNN's prefills: measured anyway, both engines without oneDNN
        precision.int8_matrix_units = lambda: False
        print("note: this CPU has int8 matrix units (AMX), where fast mode keeps fbgemm for decoding and oneDNN for "
              "prefills; both engines here run without the oneDNN rows")
    with tempfile.TemporaryDirectory() as scratch:
        folder = bench_folder(args.family, scratch, args.model_dir, args.tiny, args.cache_dir)
        without = dataclasses.replace(settings_for("fast"), **{switch: False})
        engines = {"kernel": load_engine(folder, device="cpu", precision="fast", threads=args.threads),
                   other: load_engine(folder, device="cpu", precision="fast", threads=args.threads, fast=without)}
        assert marker in getattr(engines["kernel"].info.precision, field), "the kernel was not applied"
        assert marker not in getattr(engines[other].info.precision, field), f"the {other} engine took the kernel"
        spec = FAMILIES[args.family]
        workload = Workload.for_family(spec.token_rate, spec.mel_rate)
        inputs = {name: build_input(e, e.encode_voice(voice_clip(workload.prompt_seconds, rate=16000)), workload)
                  for name, e in engines.items()}
        tokens = workload.output_tokens
        for name, engine in engines.items():  # warm-up
            render_offline(engine, inputs[name], tokens, seed=0)
        runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in engines}
        for round_ in range(args.rounds):
            for name in (("kernel", other) if round_ % 2 == 0 else (other, "kernel")):
                wall, times, wave = render_offline(engines[name], inputs[name], tokens, seed=round_)
                audio_s = wave.numel() / engines[name].info.sample_rate
                runs[name].append((times.llm_decode_s / tokens * 1000, wall / audio_s, times.llm_prefill_s))
        steps: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(3):
            for name, engine in engines.items():
                steps[name].append(step_ms(engine, 40, args.position))
    report = {"available": True, "compared": args.kernel, "other": other, "forced_past_amx": forced,
              "folder": folder.name, "threads": args.threads, "rounds": args.rounds}
    print(f"{folder.name}, fast, {args.kernel} kernel against {other}, {args.threads} threads, {args.rounds} "
          "alternating rounds of whole renders")
    for name, rows in runs.items():
        decode, rtf, prefill = (spread([row[i] for row in rows]) for i in range(3))
        step = spread(steps[name])
        report[name] = {"decode_ms_per_token": decode, "rtf": rtf, "prefill_s": prefill, "step_ms": step}
        print(f"  {name:<10} decode {decode['median']:6.1f} ms/token [{decode['min']:.1f}-{decode['max']:.1f}]"
              f"  RTF {rtf['median']:.3f} [{rtf['min']:.3f}-{rtf['max']:.3f}]  prefill {prefill['median']:.3f} s"
              f"  one step {step['median']:.2f} ms (after {args.position} rows)")
    ratios = [k[0] / f[0] for k, f in zip(runs["kernel"], runs[other])]
    report["decode_ratio_per_round"] = ratios
    report["step_ratio"] = report["kernel"]["step_ms"]["median"] / report[other]["step_ms"]["median"]
    print(f"  kernel ÷ {other}, decode per round: " + " ".join(f"{r:.2f}" for r in ratios)
          + f"; one step: {report['step_ratio']:.2f}")
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
