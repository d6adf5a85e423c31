"""The flow's estimator and the vocoder on other runtimes: one call each, against the kernels the engine uses.

    python benchmarks/estimator_backends.py --family v3 --runs 5          # full-size random weights
    python benchmarks/estimator_backends.py --tiny --runs 2                # smoke test

Issue 26 asked whether a compiled graph beats today's layers for the parts after the LLM: the DiT estimator
(called 2× per fast render, on a guidance batch of two) and HiFT's convolution stack. Each variant gets the same
inputs and is timed per call, alternating variants inside each run so that a neighbour's load falls on all of
them alike. Printed per variant: median [min-max] ms per call, ÷ the engine's fast layers, the one-off cost to
build it (export or compile, plus the first call), and its largest difference from float32 eager.

Variants (each skipped with its reason when it cannot be built here):
  DiT:  fp32 eager (stock) · int8 linears + bf16 attention (fast on a CPU without AMX) · bf16 eager (fast where
        the CPU has AMX) · torch.compile of fp32, of bf16, and of bf16 one block at a time (one graph that every
        block reuses: a shorter compile) · ONNX Runtime fp32 and its int8 dynamic quantisation
  HiFT: the conv stack only (f0, source and the STFTs stay in torch for every variant): fp32 eager (stock) ·
        bf16 convolutions (fast today) · torch.compile fp32 · ONNX Runtime fp32
Shapes: the DiT at the fast whole render (guidance batch 2, 3 s prompt + 5 s output = 400 frames) and at a first
chunk (2 × 176 frames); HiFT on 5 s of mel (250 frames).
"""

from __future__ import annotations

import argparse
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

import cosyvoice_ui  # noqa: E402, F401  (OpenMP's spin count before torch loads, as the app sets it)
import torch  # noqa: E402
from torch import nn  # noqa: E402

DIT_SHAPES = {"whole render": 400, "first chunk": 176}
HIFT_FRAMES = 250


class DiTCall(nn.Module):
    """The estimator with the engine's fixed arguments bound (all frames valid, full attention): what an
    exporter or compiler sees."""

    def __init__(self, estimator: nn.Module) -> None:
        super().__init__()
        self.estimator = estimator

    def forward(self, x, mu, t, spks, cond):
        return self.estimator(x, None, mu, t, spks, cond, False)


class HiFTStack(nn.Module):
    """HiFT's network part (`_fuse_stages` after `conv_pre`): mel + the source's STFT → conv_post output."""

    def __init__(self, hift: nn.Module) -> None:
        super().__init__()
        self.hift = hift

    def forward(self, mel, s_stft):
        low = self.hift.decode_dtype
        return self.hift._fuse_stages(self.hift.conv_pre(mel.to(low)), s_stft.to(low))


def dit_inputs(estimator: nn.Module, frames: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    cfg = estimator.cfg
    g = torch.Generator().manual_seed(seed)
    mu_dim = cfg.mel_dim if cfg.mu_dim is None else cfg.mu_dim
    x = torch.randn(2, cfg.mel_dim, frames, generator=g)
    mu = torch.randn(2, mu_dim, frames, generator=g)
    mu[1] = 0  # the unconditional row, as cfm.guidance_batch builds it
    spks = torch.randn(2, cfg.spk_dim or 0, generator=g)
    spks[1] = 0
    cond = torch.zeros(2, cfg.mel_dim, frames)
    cond[0, :, : frames // 3] = torch.randn(cfg.mel_dim, frames // 3, generator=g)
    t = torch.full((2,), 0.37)
    return x, mu, t, spks, cond


def hift_inputs(hift: nn.Module, frames: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mel = torch.randn(1, 80, frames, generator=g) * 0.5 - 5.0
    with torch.inference_mode():
        source = hift.source(hift.predict_f0(mel), g)
        s_stft = hift._stft(source)
    return mel, s_stft


# --- building the variants -------------------------------------------------------------------------------

class Variant:
    def __init__(self, name: str, call, build_s: float, note: str = "") -> None:
        self.name, self.call, self.build_s, self.note = name, call, build_s, note


INT8_DIT, BF16_DIT = "int8 + fp32 sdpa", "bf16 eager"


def plain_copy(estimator: nn.Module) -> nn.Module:
    """A copy of the engine's estimator with plain float32 linears (the stock engine packs them for oneDNN), to
    convert or compile."""
    from cosyvoice_ui.cosyvoice.models.linears import unpack_linears

    module = copy.deepcopy(estimator)
    unpack_linears(module)
    return module


def fast_dit_name() -> str:
    """The variant the engine's fast mode runs on this CPU (bf16 where it has AMX, else int8)."""
    from cosyvoice_ui.cosyvoice.precision import bf16_matrix_units

    return BF16_DIT if bf16_matrix_units() else INT8_DIT


def compiled_blocks(name: str, estimator: nn.Module, example: tuple) -> Variant:
    """bf16, each transformer block compiled on its own (`nn.Module.compile`): the blocks share one graph, their
    weights being its inputs, so it compiles once for all of them."""
    module = plain_copy(estimator)
    module.to_bf16(matmul_attention=True)
    for block in module.transformer_blocks:
        block.compile(dynamic=True)
    variant = compiled(name, DiTCall(module), example, dynamic=None)
    variant.note = "inductor, one graph for every block"
    return variant


def eager(name: str, module: nn.Module) -> Variant:
    module.eval()

    def call(*args):
        with torch.inference_mode():
            return module(*args)
    return Variant(name, call, 0.0)


def compiled(name: str, module: nn.Module, example: tuple, dynamic: bool | None) -> Variant:
    module.eval()
    start = time.perf_counter()
    fn = module if dynamic is None else torch.compile(module, dynamic=dynamic)  # None: compiled inside already

    def call(*args):
        with torch.inference_mode():
            return fn(*args)
    call(*example)  # the compile happens at the first call
    return Variant(name, call, time.perf_counter() - start, "inductor" + (", dynamic shapes" if dynamic else ""))


def onnx_session(name: str, module: nn.Module, example: tuple, names: list[str], dynamic_axes: dict,
                 scratch: Path, threads: int, quantize: bool = False) -> Variant:
    import onnxruntime as ort

    start = time.perf_counter()
    path = scratch / f"{name.replace(' ', '_')}.onnx"
    with torch.no_grad():
        torch.onnx.export(module.eval(), example, str(path), input_names=names, output_names=["out"],
                          dynamic_axes=dynamic_axes, opset_version=17, dynamo=False)
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantized = path.with_suffix(".int8.onnx")
        quantize_dynamic(str(path), str(quantized), weight_type=QuantType.QInt8, per_channel=True)
        path = quantized
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def call(*args):
        out = session.run(None, {n: a.numpy() for n, a in zip(names, args)})[0]
        return torch.from_numpy(out)
    call(*example)
    return Variant(name, call, time.perf_counter() - start, "onnxruntime " + ort.__version__)


def try_build(builder, *args, **kwargs) -> Variant | str:
    try:
        return builder(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001  a variant this machine cannot build is reported, not fatal
        return f"{args[0]}: not built ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"


# --- timing ------------------------------------------------------------------------------------------------

def time_variants(variants: list[Variant], inputs: tuple, runs: int, calls: int) -> dict[str, list[float]]:
    """ms per call for each variant, alternating variants inside each run."""
    for v in variants:
        v.call(*inputs)  # warm
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    for _ in range(runs):
        for v in variants:
            start = time.perf_counter()
            for _ in range(calls):
                v.call(*inputs)
            times[v.name].append((time.perf_counter() - start) / calls * 1000)
    return times


def max_diff(variants: list[Variant], inputs: tuple, reference: str) -> dict[str, float]:
    ref = next(v for v in variants if v.name == reference).call(*inputs).float()
    scale = ref.abs().max().item() or 1.0
    return {v.name: (v.call(*inputs).float() - ref).abs().max().item() / scale for v in variants}


def summarise(times: dict[str, list[float]], baseline: str, variants: list[Variant],
              diffs: dict[str, float]) -> list[dict]:
    base = statistics.median(times[baseline])
    rows = []
    for v in variants:
        t = times[v.name]
        rows.append({"variant": v.name, "ms_median": round(statistics.median(t), 2), "ms_min": round(min(t), 2),
                     "ms_max": round(max(t), 2), "vs_fast": round(statistics.median(t) / base, 3),
                     "build_s": round(v.build_s, 1), "max_rel_diff_vs_fp32": float(f"{diffs[v.name]:.3g}"),
                     "note": v.note})
    return rows


# --- the two parts -------------------------------------------------------------------------------------------

def dit_variants(estimator: nn.Module, frames: int, scratch: Path, threads: int, skip: set[str]) -> tuple:
    inputs = dit_inputs(estimator, frames)
    fp32 = DiTCall(estimator)
    int8 = plain_copy(estimator)
    int8.to_int8()
    int8_bf16_attention = plain_copy(estimator)
    int8_bf16_attention.to_int8(bf16_attention=True)  # issue 14's fast DiT, before issue 26's eighth pass
    bf16_eager = plain_copy(estimator)
    bf16_eager.to_bf16(matmul_attention=True)
    variants: list[Variant | str] = [eager("fp32 eager (stock)", fp32), eager(INT8_DIT, DiTCall(int8)),
                                     eager("int8 + bf16 attn", DiTCall(int8_bf16_attention)),
                                     eager(BF16_DIT, DiTCall(bf16_eager))]
    if "compile" not in skip:
        variants.append(try_build(compiled, "compile fp32", DiTCall(plain_copy(estimator)), inputs, True))
        bf16 = plain_copy(estimator)
        bf16.to_bf16(matmul_attention=True)
        variants.append(try_build(compiled, "compile bf16", DiTCall(bf16), inputs, True))
        variants.append(try_build(compiled_blocks, "compile bf16 per block", estimator, inputs))
    if "onnx" not in skip:
        names = ["x", "mu", "t", "spks", "cond"]
        axes = {n: {2: "frames"} for n in ("x", "mu", "cond")} | {"out": {2: "frames"}}
        for quantize in (False, True):
            variants.append(try_build(onnx_session, "onnxruntime " + ("int8 dynamic" if quantize else "fp32"),
                                      DiTCall(plain_copy(estimator)), inputs, names, axes, scratch, threads,
                                      quantize=quantize))
    return inputs, variants


def hift_variants(hift: nn.Module, scratch: Path, threads: int, skip: set[str]) -> tuple:
    inputs = hift_inputs(hift, HIFT_FRAMES)
    bf16 = copy.deepcopy(hift)
    bf16.set_conv_dtype(torch.bfloat16)
    variants: list[Variant | str] = [eager("fp32 eager (stock)", HiFTStack(hift)),
                                     eager("bf16 convs (fast)", HiFTStack(bf16))]
    if "compile" not in skip:
        variants.append(try_build(compiled, "compile fp32", HiFTStack(copy.deepcopy(hift)), inputs, False))
    if "onnx" not in skip:
        axes = {"mel": {2: "frames"}, "s_stft": {2: "stft_frames"}, "out": {2: "stft_frames"}}
        variants.append(try_build(onnx_session, "onnxruntime fp32", HiFTStack(copy.deepcopy(hift)), inputs,
                                  ["mel", "s_stft"], axes, scratch, threads))
    return inputs, variants


def measure(label: str, inputs: tuple, built: list, baseline: str, runs: int, calls: int) -> dict:
    variants = [v for v in built if isinstance(v, Variant)]
    skipped = [v for v in built if isinstance(v, str)]
    times = time_variants(variants, inputs, runs, calls)
    diffs = max_diff(variants, inputs, variants[0].name)
    return {"part": label, "rows": summarise(times, baseline, variants, diffs), "skipped": skipped}


def format_report(result: dict) -> str:
    lines = [f"{result['family']} ({result['weights']}), {result['threads']} threads, torch {torch.__version__}, "
             f"{result['runs']} runs alternating", ""]
    for part in result["parts"]:
        lines.append(f"{part['part']}: ms per call, median [min-max], ÷ the engine's fast layers, build cost, "
                     "max |diff| ÷ max |fp32|")
        for r in part["rows"]:
            lines.append(f"  {r['variant']:<28} {r['ms_median']:8.1f} [{r['ms_min']:.1f}-{r['ms_max']:.1f}]  "
                         f"{r['vs_fast']:5.2f}x  build {r['build_s']:6.1f} s  diff {r['max_rel_diff_vs_fp32']:.2g}"
                         + (f"  ({r['note']})" if r["note"] else ""))
        for s in part["skipped"]:
            lines.append(f"  {s}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model-dir", type=Path, help="a real model folder (default: full-size random weights)")
    src.add_argument("--tiny", action="store_true", help="a tiny random model (smoke test)")
    p.add_argument("--family", default="v3", choices=["v3"], help="the DiT family (v1/v2 use a U-Net estimator)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--calls", type=int, default=2, help="calls per timed run")
    p.add_argument("--skip", default="", help="comma-separated: compile, onnx")
    p.add_argument("--parts", default="dit,hift")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "cosyvoice_ui_bench"))
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    skip = {s for s in args.skip.split(",") if s}

    from bench_engine import full_size_folder, tiny_folder

    from cosyvoice_ui.cosyvoice.engine import load_engine

    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        if args.model_dir:
            folder, weights = args.model_dir, "real weights"
        elif args.tiny:
            folder, weights = tiny_folder(scratch, args.family), "tiny random"
        else:
            folder, weights = full_size_folder(Path(args.cache_dir), args.family), "full-size random"
        engine = load_engine(folder, device="cpu", precision="stock", threads=args.threads)
        estimator, hift = engine.flow.decoder.estimator, engine.hift
        parts = []
        wanted = set(args.parts.split(","))
        if "dit" in wanted:
            for label, frames in DIT_SHAPES.items():
                inputs, built = dit_variants(estimator, frames, scratch, args.threads, skip)
                parts.append(measure(f"DiT estimator, {label} (2 x {frames} frames)", inputs, built,
                                     fast_dit_name(), args.runs, args.calls))
        if "hift" in wanted:
            inputs, built = hift_variants(hift, scratch, args.threads, skip)
            parts.append(measure(f"HiFT conv stack, {HIFT_FRAMES} mel frames", inputs, built, "bf16 convs (fast)",
                                 args.runs, args.calls))
    result = {"family": args.family, "weights": weights, "threads": args.threads, "runs": args.runs, "parts": parts}
    print(format_report(result))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
