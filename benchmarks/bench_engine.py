"""Benchmark the CosyVoice engine on a fixed workload, per stage, against a floor measured on this machine.

    python benchmarks/bench_engine.py                      # full-size CosyVoice-300M, random weights
    python benchmarks/bench_engine.py --family v3          # full-size Fun-CosyVoice3-0.5B (v2: CosyVoice2-0.5B)
    python benchmarks/bench_engine.py --precision fast --deviation   # any family; extra-fast too
    python benchmarks/bench_engine.py --model-dir pretrained_models/CosyVoice-300M
    python benchmarks/bench_engine.py --tiny --json        # seconds; what CI runs (no timing checks)

Model: the official architecture and file format of the family (v1 CosyVoice-300M, v2 CosyVoice2-0.5B, v3
Fun-CosyVoice3-0.5B) with random weights (same bytes and FLOPs as the real model), written once to
--cache-dir and loaded through the real loader (torch.load + strict load_state_dict), so `load_s` is the
real load path; or a real folder with --model-dir.

Workload (performance-facts.md §7 and §12; 5 s from a 5 s prompt at the family's token rate): see
workload.py. Reported per stage (medians, with min/max):
frontend (once, then again for the same voice: a cache hit), LLM prefill, LLM decode tokens/s, flow,
HiFT; overall RTF, streaming first-chunk latency, load time, peak RSS.

Floor: LLM weight bytes per decoded token × tokens ÷ memory read bandwidth, plus the flow and HiFT
FLOPs counted on this very workload (torch.utils.flop_counter, matmul/conv/attention) ÷ the GEMM
rate, both measured on this machine in the same run (machine.py, in a child process, before and after
the engine runs; the better of the two is kept). `ratio_to_floor` = RTF ÷ floor RTF. The LLM prefill
and the KV/position reads are not in the floor (it is a lower bound).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import logging
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script from any directory, without installing the package

import cosyvoice_ui  # noqa: E402, F401  (first: it sets OpenMP's spin count before torch loads, as the app does)
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear  # noqa: E402

from cosyvoice_ui.cosyvoice.engine import load_engine  # noqa: E402
from cosyvoice_ui.cosyvoice.families import V1, V2, V3, VARIANT_FILE  # noqa: E402
from cosyvoice_ui.cosyvoice.models.int8_kernel_linear import KernelInt8Linear  # noqa: E402
from cosyvoice_ui.cosyvoice.models.linears import (Int4Linear, Int8RowsOnOneDNN, PackedLinear,  # noqa: E402
                                                   RowBlocksLinear)
from cosyvoice_ui.cosyvoice.precision import PRECISIONS, settings_for  # noqa: E402
from cosyvoice_ui.testing.signals import voice_clip  # noqa: E402

from workload import Workload, build_input, render_offline, render_streaming  # noqa: E402

log = logging.getLogger("bench_engine")
HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "cosyvoice_ui_bench"


# --- model folders ---------------------------------------------------------------------------------

FAMILIES = {"v1": V1, "v2": V2, "v3": V3}
FULL_SIZE_NAMES = {"v1": "CosyVoice-300M", "v2": "CosyVoice2-0.5B", "v3": "Fun-CosyVoice3-0.5B"}


def full_size_folder(cache_dir: Path, family: str = "v1", seed: int = 0) -> Path:
    """A full-size random folder of `family` (v1 ≈1.7 GB, v2 ≈2.6 GB, v3 ≈3.4 GB), written once (in a child
    process, so its build does not count towards this process's peak RSS) and reused."""
    folder = cache_dir / f"{FULL_SIZE_NAMES[family]}-random-seed{seed}"
    if (folder / VARIANT_FILE).is_file():
        return folder
    partial = cache_dir / (folder.name + ".partial")
    cache_dir.mkdir(parents=True, exist_ok=True)
    log.warning("writing the full-size random model to %s (once; about a minute)", folder)
    subprocess.run([sys.executable, "-m", "cosyvoice_ui.testing.tiny_model", str(partial), "--full-size",
                    "--family", family, "--seed", str(seed)], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    partial.rename(folder)
    return folder


def tiny_folder(scratch: Path, family: str = "v1") -> Path:
    from cosyvoice_ui.testing.tiny_model import write_tiny_model

    return write_tiny_model(scratch / f"tiny-{family}", family=family)


def is_random(folder: Path) -> bool:
    marker = folder / VARIANT_FILE
    return marker.is_file() and bool(json.loads(marker.read_text(encoding="utf-8")).get("tiny_random"))


# --- machine and floor -----------------------------------------------------------------------------

def measure_machine(threads: int | None, small: bool) -> dict[str, float]:
    cmd = [sys.executable, str(HERE / "machine.py"), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    if small:
        cmd += ["--buffer-mb", "64", "--gemm-n", "512", "--repeats", "2"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def llm_bytes_per_token(llm: nn.Module) -> int:
    """Weight bytes one decoding step reads: the LLM's layers and output head. Left out: v1's `linear_pos`
    (its projections are computed once per decode, not per token), and the Qwen2 backbone's text table and
    tied `lm_head` (a step reads one embedding row, and the speech head is `llm_decoder`)."""
    total = 0
    for part in (llm.llm, llm.llm_decoder):
        # An Int4Linear's int8 copy only serves prefills (several rows): a decoding step never reads it.
        prefill_only = tuple(f"{name}.rows" for name, module in part.named_modules() if isinstance(module, Int4Linear))
        for name, module in part.named_modules():
            if name.endswith(("linear_pos", "embed_tokens", "lm_head")) or name.startswith(prefill_only or ("\0",)):
                continue
            for p in module.parameters(recurse=False):
                total += p.numel() * p.element_size()
            if isinstance(module, Int4Linear):  # packed nibbles, then a (scale, zero) pair per group
                total += module.weight_packed.numel() * module.weight_packed.element_size()
                total += module.scales_and_zeros.numel() * module.scales_and_zeros.element_size()
                total += 0 if module.bias is None else module.bias.numel() * 4
            if isinstance(module, PackedLinear):  # weights outside the parameter list
                total += module.in_features * module.out_features * 4
                total += 0 if module.bias is None else module.bias.numel() * 4
            if isinstance(module, KernelInt8Linear):  # int8 blocks (padding included), a scale and a sum per row
                total += module.weight_blocks.numel() + module.weight_scale.numel() * 8
                total += 0 if module.bias is None else module.bias.numel() * 4
            if isinstance(module, RowBlocksLinear):  # the same, with the padding rows a decoding step reads too
                total += module.weight_blocks.numel() * 4
                total += 0 if module.bias is None else module.bias.numel() * 4
            weight = getattr(module, "weight", None)
            if callable(weight) and not isinstance(weight, torch.Tensor):  # dynamic-quantised Linear
                w = weight()
                total += w.numel() * w.element_size()
                bias = module.bias()
                total += 0 if bias is None else bias.numel() * bias.element_size()
    return total


def weight_bytes_in_memory(engine) -> int:
    """Bytes of every model tensor the loaded engine holds (LLM, flow, vocoder): parameters, buffers and
    the layouts kept outside them (oneDNN-packed, fbgemm-packed int8, packed int4), each storage once.
    The fixed noise of the v2/v3 flows counts too (it lives in memory like a weight)."""
    seen: set[int] = set()
    held: list[torch.Tensor] = []  # fbgemm's weight() builds a new tensor per call: keep each alive, or a
    total = 0                     # freed one's address is reused by the next and looks "already seen"

    def add(t: torch.Tensor | None) -> None:
        nonlocal total
        if t is None or not isinstance(t, torch.Tensor):
            return
        held.append(t)
        try:
            key = t.untyped_storage().data_ptr()
            size = t.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):  # opaque (mkldnn) tensors have no plain storage
            key, size = id(t), t.numel() * t.element_size()
        if key not in seen:
            seen.add(key)
            total += size

    for model in (engine.llm, engine.flow, engine.hift):
        for module in model.modules():
            for t in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
                add(t)
            if isinstance(module, Int4Linear):
                add(module.weight_packed)
                add(module.scales_and_zeros)
                add(module.bias)
            if isinstance(module, DynamicQuantLinear):
                add(module.weight())
                add(module.bias())
            if isinstance(module, Int8RowsOnOneDNN):  # its second, oneDNN-packed copy of the int8 weights
                add(module.weight_packed)
            add(getattr(module, "rand_noise", None))
    return total


def _sdpa_cpu_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """Q·Kᵀ and A·V of the CPU flash-attention kernel, which flop_counter does not know."""
    b, h, t_q, d = query_shape
    return 4 * b * h * t_q * key_shape[-2] * d


def count_flops(engine, model_input, tokens: list[int], seed: int) -> tuple[int, int]:
    """FLOPs of one whole-utterance flow call and HiFT call on these tokens (matmul, conv, attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    mapping = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flops}
    prompt = engine._flow_prompt(model_input)
    generator = torch.Generator().manual_seed(seed)

    def seeded(fn) -> dict:  # v1 and the 24 kHz HiFT draw noise from a generator; v2/v3 flows use fixed noise
        return {"generator": generator} if "generator" in inspect.signature(fn).parameters else {}

    # fbgemm's int8 dynamic linears and oneDNN's packed ones (the stock estimator) are opaque to the counter:
    # count their 2·rows·in·out with hooks.
    opaque_flops = [0]

    def count_opaque(module, args, output) -> None:
        opaque_flops[0] += 2 * (args[0].numel() // module.in_features) * module.in_features * module.out_features

    hooks = [m.register_forward_hook(count_opaque) for m in engine.flow.modules()
             if isinstance(m, (DynamicQuantLinear, PackedLinear))]
    try:
        with torch.inference_mode():
            with FlopCounterMode(display=False, custom_mapping=mapping) as flow_counter:
                mel, _ = engine.flow.inference(torch.tensor([tokens]), prompt.prompt_token, prompt.prompt_feat,
                                               prompt.embedding, n_timesteps=engine.n_timesteps,
                                               **seeded(engine.flow.inference))
    finally:
        for hook in hooks:
            hook.remove()
    # The vocoder's whole pass: its windows' overlapping context (a few % more convolution) is our overhead,
    # not work the floor should grant.
    windows, engine.hift.window_frames = engine.hift.window_frames, 0
    try:
        with torch.inference_mode():
            with FlopCounterMode(display=False, custom_mapping=mapping) as hift_counter:
                engine.hift.inference(mel, **seeded(engine.hift.inference))
    finally:
        engine.hift.window_frames = windows
    return flow_counter.get_total_flops() + opaque_flops[0], hift_counter.get_total_flops()


def floor_estimate(machine: dict, llm_bytes: int, tokens: int, flow_flops: int, hift_flops: int,
                   bf16_flow: bool, bf16_hift: bool = False, int8_flow: bool = False) -> dict[str, float]:
    bf16_rate = machine.get("bf16_gflop_s")
    gemm = bf16_rate if bf16_flow and bf16_rate else machine["fp32_gflop_s"]
    if int8_flow and machine.get("int8_gflop_s"):  # all of its FLOPs at the int8 rate: still a lower bound
        gemm = max(machine["int8_gflop_s"], gemm)
    llm_s = llm_bytes * tokens / (machine["read_gb_s"] * 1e9)
    flow_s = flow_flops / (gemm * 1e9)
    hift_s = hift_flops / ((bf16_rate if bf16_hift and bf16_rate else machine["fp32_gflop_s"]) * 1e9)
    return {"llm_bytes_per_token": llm_bytes, "llm_s": llm_s, "flow_flops": flow_flops, "flow_s": flow_s,
            "flow_gemm_gflop_s": gemm, "hift_flops": hift_flops, "hift_s": hift_s,
            "total_s": llm_s + flow_s + hift_s}


# --- the benchmark ---------------------------------------------------------------------------------

@contextlib.contextmanager
def busy_neighbours(cores: int):
    """`cores` other processes, each spinning one core at 100 % (a neighbour on a shared server), while the block
    runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        if spinners:
            time.sleep(0.5)  # they are running before the measurement starts
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def first_hop_tokens(engine, model_input) -> int:
    """Tokens of speech in the first streamed chunk for this input (v2/v3: after the flow prompt's trim)."""
    spec = engine.streaming_spec
    if not spec.pre_lookahead_len:  # v1's schedule: a fixed first hop
        return spec.token_first_hop_len
    prompt = engine._flow_prompt(model_input).prompt_token.size(1)
    pad = -prompt % spec.token_first_hop_len
    return pad if 0 < spec.token_min_first_hop_len <= pad else pad + spec.token_first_hop_len


def run(args: argparse.Namespace, scratch: Path) -> dict:
    """The whole benchmark; `scratch` is a temporary folder (the tiny model is written there)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    cache_dir = Path(args.cache_dir)
    if args.model_dir:
        folder = Path(args.model_dir)
    elif args.tiny:
        folder = tiny_folder(scratch, args.family)
    else:
        folder = full_size_folder(cache_dir, args.family)
    random_weights = is_random(folder)
    machine = measure_machine(args.threads, small=args.tiny)

    start = time.perf_counter()
    engine = load_engine(folder, device="cpu", precision=args.precision, threads=args.threads,
                         n_timesteps=args.n_timesteps)
    load_s = time.perf_counter() - start
    family = engine.folder.family
    workload = Workload.for_family(family.token_rate, family.mel_rate, args.tokens)
    if args.upstream_schedule:
        engine.streaming_spec = engine.folder.family.upstream_streaming

    voice = voice_clip(workload.prompt_seconds)
    start = time.perf_counter()
    features = engine.encode_voice(voice)
    frontend_s = time.perf_counter() - start
    start = time.perf_counter()
    again = engine.encode_voice(voice)
    frontend_cached_s = time.perf_counter() - start
    model_input = build_input(engine, features, workload)

    with busy_neighbours(args.busy_cores):  # the contention run: other processes keep cores busy meanwhile
        offline = [render_offline(engine, model_input, workload.output_tokens, args.seed) for _ in range(args.runs)]
        streams = [render_streaming(engine, model_input, workload.output_tokens, args.seed)
                   for _ in range(args.stream_runs)]
    audio_s = offline[0][2].numel() / engine.info.sample_rate
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB

    # Measured again at the end, keeping the better of each rate: on a shared machine another process
    # may slow one measurement, and the floor should use what the machine can do (a lower bound).
    after = measure_machine(args.threads, small=args.tiny)
    machine = {key: max(value, after[key]) for key, value in machine.items()}

    tokens = offline[0][1].token_ids
    flow_flops, hift_flops = count_flops(engine, model_input, tokens, args.seed)
    bf16_flow, bf16_hift = engine.info.precision.bf16_flow, engine.info.precision.bf16_hift
    floor = floor_estimate(machine, llm_bytes_per_token(engine.llm), len(tokens), flow_flops, hift_flops, bf16_flow,
                           bf16_hift, int8_flow=engine.info.precision.int8_flow)
    floor_rtf = floor["total_s"] / audio_s

    walls = [wall for wall, _, _ in offline]
    stages = {
        "llm_prefill_s": spread([t.llm_prefill_s for _, t, _ in offline]),
        "llm_decode_s": spread([t.llm_decode_s for _, t, _ in offline]),
        "flow_s": spread([t.flow_s for _, t, _ in offline]),
        "hift_s": spread([t.hift_s for _, t, _ in offline]),
        "total_s": spread(walls),
    }
    decode_rates = [(t.tokens - 1) / t.llm_decode_s for _, t, _ in offline if t.llm_decode_s > 0]
    rtf = statistics.median(walls) / audio_s
    result = {
        "precision": args.precision,
        "rtf": rtf,
        "rtf_min": min(walls) / audio_s,
        "rtf_max": max(walls) / audio_s,
        "first_chunk_s": statistics.median([first for first, *_ in streams]) if streams else None,
        "load_s": load_s,
        "peak_rss_mb": peak_rss_mb,
        "weights_in_memory_mb": weight_bytes_in_memory(engine) / 2**20,
        "llm_tokens_per_s": statistics.median(decode_rates) if decode_rates else 0.0,
        "floor_rtf": floor_rtf,
        "ratio_to_floor": rtf / floor_rtf,
        "audio_s": audio_s,
        "tokens": len(tokens),
        "runs": args.runs,
        "threads": torch.get_num_threads(),
        "busy_cores": args.busy_cores,
        "stages": stages,
        "frontend_s": frontend_s,
        "frontend_cached_s": frontend_cached_s,
        "prompt_cache_hit": again is features,
        "frontend_note": ("tiny ONNX stand-ins for CAM++ and the speech tokenizer (random model): not representative"
                          if random_weights else "the folder's own ONNX models"),
        "streaming": {
            "first_chunk_s": spread([first for first, *_ in streams]) if streams else None,
            "total_s": spread([total for _, total, _, _ in streams]) if streams else None,
            "chunks": streams[0][2] if streams else 0,
            "first_hop_tokens": first_hop_tokens(engine, model_input),
        },
        "floor": floor,
        "flops_source": "torch.utils.flop_counter on this workload (flow and HiFT, one whole-utterance call each)",
        "machine": machine,
        "engine": dataclasses.asdict(engine.info.precision),
        "model": {"folder": folder.name, "family": family.name, "random_weights": random_weights,
                  "tiny": bool(args.tiny)},
        "workload": workload.describe(),
        "torch": torch.__version__,
    }
    if args.deviation:
        from deviation import fast_deviation

        # An explicit --n-timesteps is what both modes would run, so the flow-steps rows use it too.
        fast, extra = settings_for("fast"), settings_for("extra-fast")
        if args.n_timesteps is not None:
            fast = dataclasses.replace(fast, n_timesteps=args.n_timesteps)
            extra = dataclasses.replace(extra, n_timesteps=args.n_timesteps)
        reuse = args.precision == "stock" and args.n_timesteps is None
        stock = engine if reuse else load_engine(folder, device="cpu", precision="stock", threads=args.threads)
        result["deviation_fast_vs_stock"] = fast_deviation(stock, model_input, tokens, fast, extra, args.seed)
    return result


# --- output ----------------------------------------------------------------------------------------

def _row(name: str, v: dict[str, float], extra: str = "") -> str:
    return f"  {name:<22}{v['min']:8.2f}{v['median']:9.2f}{v['max']:8.2f}  {extra}".rstrip()


def format_report(r: dict) -> str:
    s, f, m, st = r["stages"], r["floor"], r["machine"], r["streaming"]
    weights = "random weights" if r["model"]["random_weights"] else "real weights"
    cache = "hit, frontend skipped" if r["prompt_cache_hit"] else "MISS"
    engine = ", ".join(f"{k}={v}" for k, v in r["engine"].items() if k != "saved_voices")
    rate = r["llm_tokens_per_s"]
    lines = [
        f"{r['model']['folder']} ({weights}) · precision {r['precision']} · {r['threads']} threads · "
        f"torch {r['torch']}" + (f" · {r['busy_cores']} cores kept busy by other processes" if r['busy_cores'] else ""),
        f"workload: {r['workload']} → {r['audio_s']:.2f} s of audio",
        f"engine: {engine}",
        f"machine: read {m['read_gb_s']:.1f} GB/s, copy {m['copy_gb_s']:.1f} GB/s, batch-1 GEMV "
        f"{m['gemv_gb_s']:.1f} GB/s, fp32 GEMM {m['fp32_gflop_s']:.0f} GFLOP/s, bf16 GEMM {m['bf16_gflop_s']:.0f}, "
        f"int8 GEMM {m.get('int8_gflop_s', 0):.0f}",
        f"load {r['load_s']:.2f} s · peak RSS {r['peak_rss_mb']:.0f} MB · model tensors in memory "
        f"{r['weights_in_memory_mb']:.0f} MB (peak RSS ÷ that: {r['peak_rss_mb'] / r['weights_in_memory_mb']:.2f})",
        f"frontend {r['frontend_s']:.3f} s ({r['frontend_note']}); same voice again "
        f"{r['frontend_cached_s'] * 1e3:.1f} ms (prompt cache {cache})",
        f"  {'stage (s)':<22}{'min':>8}{'median':>9}{'max':>8}",
        _row("LLM prefill", s["llm_prefill_s"]),
        _row("LLM decode", s["llm_decode_s"], f"{rate:.1f} tokens/s, {1e3 / rate if rate else 0:.1f} ms/token"),
        _row("flow", s["flow_s"]),
        _row("HiFT", s["hift_s"]),
        _row("total (offline)", s["total_s"], f"RTF {r['rtf']:.2f} [{r['rtf_min']:.2f}–{r['rtf_max']:.2f}]"),
    ]
    if st["first_chunk_s"]:
        share = st["first_chunk_s"]["median"] / s["total_s"]["median"]
        lines.append(_row("first chunk (stream)", st["first_chunk_s"],
                          f"first hop {st['first_hop_tokens']} tokens, {st['chunks']} chunks, {share:.0%} of the "
                          "offline total"))
        lines.append(_row("stream total", st["total_s"]))
    lines += [
        f"floor: LLM {f['llm_bytes_per_token'] / 1e6:.0f} MB/token × {r['tokens']} ÷ read BW = {f['llm_s']:.2f} s"
        f" + flow {f['flow_flops'] / 1e12:.3f} TFLOP = {f['flow_s']:.2f} s + HiFT {f['hift_flops'] / 1e12:.3f} TFLOP"
        f" = {f['hift_s']:.2f} s → {f['total_s']:.2f} s, RTF {r['floor_rtf']:.2f}; measured/floor ="
        f" {r['ratio_to_floor']:.2f}×",
        f"  (FLOPs: {r['flops_source']})",
    ]
    dev = r.get("deviation_fast_vs_stock")
    if dev:
        weights = "random weights: numerical sensitivity only" if r["model"]["random_weights"] else "real weights"
        lines += format_deviation(dev, weights)
    return "\n".join(lines)


def format_deviation(dev: dict, weights: str = "random weights: numerical sensitivity only") -> list[str]:
    """The deviation table of `deviation.fast_deviation`, one row per variant."""
    lines = [f"fast and extra-fast vs stock ({dev['family']}), same tokens and noise ({weights}); verdict: a mel L1 "
             f"of at most {dev['threshold']:g} × the noise-seed spread is fast, more is extra-fast only",
             f"  {'variant':<36}{'mel L1':>8}{'max':>8}{'÷ seed':>8}  {'verdict':<16}{'SNR dB':>7}"
             f"{'log-spec L1':>12}{'÷ seed':>8}"]
    for name, d in dev["token_to_wave"].items():
        lines.append(f"  {name:<36}{d['mel_l1']:8.4f}{d['mel_max_abs']:8.3f}{d['seed_ratio']:8.3f}  "
                     f"{d['verdict']:<16}{d['wave_snr_db']:7.1f}{d['wave_logspec_l1']:12.3f}"
                     f"{d['logspec_seed_ratio']:8.3f}")
    for bits in ("int8", "int4"):
        q = dev.get(f"llm_{bits}")
        if q:
            lines.append(f"  {bits} LLM, teacher-forced over {q['steps']} steps: top-1 agreement "
                         f"{q['top1_agreement']:.3f}, mean KL {q['mean_kl']:.4f} nats")
    lines += [f"  not measured: {note}" for note in dev["skipped"]]
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model-dir", type=Path, help="a real model folder (default: full-size random weights)")
    src.add_argument("--tiny", action="store_true",
                     help="tiny random model, 60 tokens, 1 run, 1 thread: seconds (smoke test, CI)")
    p.add_argument("--family", default="v1", choices=sorted(FAMILIES),
                   help="architecture of the random model: v1 CosyVoice-300M, v2 CosyVoice2-0.5B, v3 Fun-CosyVoice3-0.5B")
    p.add_argument("--precision", default="stock", choices=PRECISIONS)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--tokens", type=int, default=None,
                   help="speech tokens to decode, EOS ignored (default: 5 s at the family's rate, v1 250, v2/v3 125)")
    p.add_argument("--runs", type=int, default=3, help="offline runs (median reported)")
    p.add_argument("--stream-runs", type=int, default=2, help="streaming runs (0: skip)")
    p.add_argument("--n-timesteps", type=int, default=None, help="override the flow's Euler steps")
    p.add_argument("--upstream-schedule", action="store_true",
                   help="stream with upstream's chunk schedule (first chunk after 100 + 20 tokens)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--busy-cores", type=int, default=0,
                   help="keep this many cores busy with other processes during the runs (contention.py)")
    p.add_argument("--deviation", action="store_true",
                   help="also measure how far fast and extra-fast move the output from stock")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="where the random full-size model is kept")
    p.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    p.add_argument("--out", type=Path, help="also write the JSON result to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.tiny:  # a smoke test: small everything unless asked otherwise
        given = set(argv if argv is not None else sys.argv[1:])
        defaults = {"--runs": ("runs", 1), "--stream-runs": ("stream_runs", 1), "--tokens": ("tokens", 60),
                    "--threads": ("threads", 1)}
        for flag, (name, value) in defaults.items():
            if flag not in given:
                setattr(args, name, value)
    with tempfile.TemporaryDirectory() as scratch:
        result = run(args, Path(scratch))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(json.dumps(result) if args.json else format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
