"""Fun-CosyVoice3-0.5B (v3) on one CUDA GPU at batch 1: first streamed packet and RTF, stock fp32 and
bf16 + CUDA graphs (issue 14, item 4). One prepared run of a few minutes.

    python benchmarks/gpu_v3.py                              # full-size random weights, on cuda
    python benchmarks/gpu_v3.py --json --out gpu_v3.json     # table, then one JSON object (last line)
    python benchmarks/gpu_v3.py --model-dir pretrained_models/Fun-CosyVoice3-0.5B
    python benchmarks/gpu_v3.py --device cpu --tiny --json   # seconds; the smoke test CI runs

Model and workload as bench_engine.py: the official v3 architecture and files with random weights (written
once to --cache-dir, loaded by the real loader), a 5 s prompt (already encoded: a saved voice, so the
frontend is not timed) and exactly 125 output tokens (5 s), EOS ignored.

Configurations, measured in this order on one loaded engine (each adds one change, in place):
  stock_fp32      what `load_engine(device="cuda")` gives: upstream numerics in float32.
  bf16            the flow's DiT estimator, the LLM and HiFT's convolution stack cast to bfloat16 here
                  (`DiT.to_bf16`, `HiFTGenerator.set_conv_dtype`, the LLM's parameters); each cast is
                  checked with a short call and undone if it fails.
  bf16_llm_graph  bf16 plus the LLM decode step as one captured CUDA graph. The engine's own step cannot
                  be captured (its KV cache grows by one position per step), so `StaticDecode` swaps in a
                  fixed-size cache, benchmark-side, as instance attributes of the loaded engine's LLM
                  (checked against the engine's decode first); it shows what a static cache would buy.
  bf16_graphs     bf16 + CUDA graphs: the above plus the flow estimator under
                  torch.compile(mode="reduce-overhead", dynamic=False). With --no-llm-graph, or when the
                  static decode fails, the LLM keeps the engine's eager decode step here.

Per configuration: warm-up renders first (CUDA init, cuDNN, compile and graph capture), then up to
--runs timed runs of each metric, CUDA synchronised around every timer; medians reported.
  first_packet_s  request start → the first streamed audio chunk on the CPU (the stream is then
                  closed, so no later chunk is rendered).
  rtf             one whole-utterance (non-streamed) render ÷ its audio seconds.
--budget-s caps the wall time (default 300 s, counted from the start, so writing the random folder,
about a minute the first time, is in it): once spent, every metric keeps the runs it has (at least one)
and a configuration not yet started is skipped. A line per configuration goes to stderr as it ends.
On a GPU box, one command (about 4 to 6 minutes, most of it the folder and the flow's compile):
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_v3.py --json --out gpu_v3.json 2>&1 | tee gpu_v3.log
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import statistics
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script from any directory, without installing the package
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # bench_engine and workload, whatever the working directory

import torch  # noqa: E402
from torch import nn  # noqa: E402

from cosyvoice_ui.cosyvoice.engine import load_engine  # noqa: E402
from cosyvoice_ui.testing.signals import voice_clip  # noqa: E402

from bench_engine import DEFAULT_CACHE, full_size_folder, is_random, tiny_folder  # noqa: E402
from workload import Workload, build_input, render_offline  # noqa: E402


# Published batch-1 numbers for CosyVoice3 on a GPU (first packet in seconds, or None where not published).
ANCHORS = (
    {"name": "H100, vLLM-Omni", "first_packet_s": 0.209, "rtf": 0.12},
    {"name": "L20, TRT-LLM", "first_packet_s": None, "rtf": 0.109},
)
TARGET = {"first_packet_s": 0.200, "rtf": 0.1}
CONFIGS = ("stock_fp32", "bf16", "bf16_llm_graph", "bf16_graphs")
LABELS = {"stock_fp32": "stock fp32", "bf16": "bf16", "bf16_llm_graph": "bf16 + LLM step graph",
          "bf16_graphs": "bf16 + CUDA graphs"}
LLM_GRAPH_NOTE = ("the engine's LLM decode step cannot be graph-captured as it is (its KV cache grows by one "
                  "position per step); the LLM step graphs here run on a benchmark-side static KV cache, "
                  "installed on the loaded engine, to show what one in the engine would buy")


def _short(exc: BaseException) -> str:
    """An exception as one short line for the report: type and first line of the message, without a
    traceback or file paths (compiler errors name their cache files)."""
    first = re.sub(r"(?:/[\w.+-]+){2,}/?", "<path>", (str(exc).strip().splitlines() or [""])[0])
    return f"{type(exc).__name__}: {first[:160]}" if first else type(exc).__name__


class Clock:
    """Wall time since the start, against --budget-s."""

    def __init__(self, budget_s: float) -> None:
        self.start = time.perf_counter()
        self.budget_s = budget_s
        self.hit = False

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def spent(self) -> bool:
        if self.elapsed() > self.budget_s:
            self.hit = True
        return self.hit


class Bench:
    """One engine, one prepared model input, and synchronised timers around the engine's renders."""

    def __init__(self, engine, model_input, tokens: int, seed: int) -> None:
        self.engine = engine
        self.model_input = model_input
        self.tokens = tokens
        self.seed = seed
        self.cuda = engine.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.engine.device)

    def _synced(self, fn):
        """`fn` followed by a device synchronisation, so a stage's time includes its GPU work."""
        def call(*args, **kwargs):
            out = fn(*args, **kwargs)
            self.sync()
            return out
        return call

    def offline(self) -> dict[str, float]:
        """One whole-utterance render: wall seconds, audio seconds and per-stage seconds."""
        engine = self.engine
        # Instance attributes, wrapped by workload.StageClock inside render_offline, which removes them on exit.
        engine.flow.inference = self._synced(engine.flow.inference)
        engine.hift.inference = self._synced(engine.hift.inference)
        try:
            self.sync()
            wall, times, wave = render_offline(engine, self.model_input, self.tokens, self.seed)
        finally:
            for module in (engine.flow, engine.hift):
                module.__dict__.pop("inference", None)
        audio_s = wave.numel() / engine.info.sample_rate
        decode_steps = max(1, times.tokens - 1)
        return {"wall_s": wall, "audio_s": audio_s, "rtf": wall / audio_s if audio_s else math.inf,
                "llm_prefill_s": times.llm_prefill_s, "llm_ms_per_token": 1000 * times.llm_decode_s / decode_steps,
                "flow_s": times.flow_s, "hift_s": times.hift_s, "tokens": times.tokens}

    def first_packet(self) -> dict[str, float]:
        """Seconds from the request to the first streamed chunk on the CPU; the stream is closed there."""
        generator = torch.Generator().manual_seed(self.seed)
        self.sync()
        start = time.perf_counter()
        stream = self.engine.render_input(self.model_input, generator, stream=True, forced_tokens=self.tokens)
        try:
            for wave, _ in stream:
                if wave.numel():
                    samples = wave.float().cpu()  # waits for the GPU: the chunk is playable now
                    return {"first_packet_s": time.perf_counter() - start,
                            "chunk_s": samples.numel() / self.engine.info.sample_rate}
        finally:
            stream.close()
        raise RuntimeError("the stream produced no audio")


def measure(bench: Bench, clock: Clock, runs: int, warmup: int) -> dict:
    """Warm up, then time up to `runs` of each metric (at least one, fewer once the budget is spent)."""
    start = time.perf_counter()
    for _ in range(warmup):
        bench.offline()
        bench.first_packet()
    warmup_s = time.perf_counter() - start
    if bench.cuda:
        torch.cuda.reset_peak_memory_stats(bench.engine.device)
    offline, packets = [], []
    for i in range(runs):
        if i and clock.spent():
            break
        offline.append(bench.offline())
        packets.append(bench.first_packet())
    median = statistics.median
    result = {
        "first_packet_s": median([p["first_packet_s"] for p in packets]),
        "first_packet_runs_s": [p["first_packet_s"] for p in packets],
        "first_chunk_audio_s": packets[0]["chunk_s"],
        "rtf": median([o["rtf"] for o in offline]),
        "rtf_runs": [o["rtf"] for o in offline],
        "offline_s": median([o["wall_s"] for o in offline]),
        "audio_s": offline[0]["audio_s"],
        "tokens": offline[0]["tokens"],
        "llm_prefill_s": median([o["llm_prefill_s"] for o in offline]),
        "llm_ms_per_token": median([o["llm_ms_per_token"] for o in offline]),
        "flow_s": median([o["flow_s"] for o in offline]),
        "hift_s": median([o["hift_s"] for o in offline]),
        "runs": len(offline),
        "warmup_s": warmup_s,
    }
    if bench.cuda:
        result["peak_gpu_mb"] = torch.cuda.max_memory_allocated(bench.engine.device) / 2**20
    return result


# --- bf16 and CUDA graphs (in place, on the loaded engine) ------------------------------------------

def _check_llm(bench: Bench) -> None:
    mi = bench.model_input
    device = bench.engine.device
    steps = bench.engine.llm.inference(mi.text.to(device), mi.prompt_text.to(device), mi.llm_prompt_tokens.to(device),
                                       mi.llm_embedding.to(device), sampler=bench.engine.sampler,
                                       generator=torch.Generator().manual_seed(0), max_len=2, ignore_eos=True)
    with torch.inference_mode():
        assert len(list(islice(steps, 2))) == 2


def _check_flow(bench: Bench) -> torch.Tensor:
    prompt = bench.engine._flow_prompt(bench.model_input)
    tokens = torch.zeros(1, 8, dtype=torch.long, device=bench.engine.device)
    mel, _ = bench.engine.flow.inference(tokens, prompt.prompt_token, prompt.prompt_feat, prompt.embedding,
                                         n_timesteps=2)
    assert torch.isfinite(mel).all()
    return mel


def _check_hift(bench: Bench) -> None:
    with torch.inference_mode():
        speech, _ = bench.engine.hift.inference(_check_flow(bench), True)
    assert speech.numel() > 0


def _llm_params_to(engine, dtype: torch.dtype) -> None:
    """The LLM's parameters only: its rotary `inv_freq` buffer stays float32 (bf16 would round the
    frequencies by up to 0.4 %, hundreds of milliradians at a few hundred positions)."""
    with torch.no_grad():
        for p in engine.llm.parameters():
            p.data = p.data.to(dtype)


def _undo_llm(engine) -> None:
    _llm_params_to(engine, torch.float32)


def _undo_flow(engine) -> None:
    estimator = engine.flow.estimator
    estimator.float()
    estimator.compute_dtype = torch.float32


def _undo_hift(engine) -> None:
    engine.hift.set_conv_dtype(torch.float32)


def to_bf16(bench: Bench) -> tuple[dict[str, str], list[str]]:
    """Cast the flow estimator, the LLM and HiFT's convolutions to bfloat16; returns (what each part runs
    in, failure notes). A part whose cast or check call fails is put back to float32 and noted."""
    engine = bench.engine
    applied, failed = {}, []
    # SDPA on CUDA (flash / memory-efficient kernels); the matmul path is the CPU's faster one.
    steps = [
        ("flow", f"bf16 DiT estimator ({'SDPA' if bench.cuda else 'matmul'} attention; time embedding and rotary "
                 "angles fp32)",
         lambda: engine.flow.estimator.to_bf16(matmul_attention=not bench.cuda), _check_flow, _undo_flow),
        ("hift", "bf16 convolution stack (f0 predictor, NSF source and STFTs fp32)",
         lambda: engine.hift.set_conv_dtype(torch.bfloat16), _check_hift, _undo_hift),
    ]
    if bench.cuda:
        steps.append(("llm", "bf16 (RMSNorm statistics and log-softmax fp32)",
                      lambda: _llm_params_to(engine, torch.bfloat16), _check_llm, _undo_llm))
    else:
        applied["llm"] = "fp32 (CPU: the LLM's linears are oneDNN-packed fp32; bf16 cast on CUDA only)"
    for part, label, cast, check, undo in steps:
        try:
            cast()
            check(bench)
            applied[part] = label
        except Exception as exc:  # report it and measure the rest
            failed.append(f"bf16 {part} failed ({_short(exc)}); kept fp32")
            applied[part] = "fp32 (bf16 failed)"
            try:
                undo(engine)
            except Exception as undo_exc:
                failed.append(f"putting {part} back to fp32 failed too ({_short(undo_exc)})")
    return applied, failed


class GraphStep(nn.Module):
    """The compiled estimator, marking a new CUDA-graph step before each call: the previous call's
    output has been used by then (the Euler update), so its graph memory may be reused."""

    def __init__(self, compiled: nn.Module) -> None:
        super().__init__()
        self.compiled = compiled

    def forward(self, *args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return self.compiled(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:  # attributes of the estimator itself (cfg, compute_dtype, ...)
            return getattr(super().__getattr__("compiled"), name)


def compile_estimator(engine, backend: str) -> nn.Module:
    """Wrap the flow's estimator in torch.compile (inductor: mode="reduce-overhead", i.e. CUDA graphs;
    eager: tracing only, the CPU smoke test); returns the original estimator to put back."""
    original = engine.flow.decoder.estimator
    if backend == "inductor":
        compiled = torch.compile(original, mode="reduce-overhead", dynamic=False)
    else:
        compiled = torch.compile(original, backend=backend, dynamic=False)
    engine.flow.decoder.estimator = GraphStep(compiled)
    return original


def cudagraph_skips() -> int:
    """How many compiled graphs inductor ran without CUDA graphs (it only logs why)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["inductor"]["cudagraph_skips"])
    except Exception:
        return 0


# --- an LLM decode step with a static KV cache (benchmark-side; the engine's cache grows per step) ------

class StaticDecode:
    """The Qwen2 backbone's cached decode with fixed-size key/value buffers, so that one step has fixed
    shapes and, on CUDA, runs as one captured CUDA graph. Installed on the engine's `llm.llm` encoder as
    instance attributes (`new_cache`, `forward_step`) and removed with `remove`; the modules, their
    weights and every other engine path are untouched. B = 1.

    A step attends over the whole buffer with a mask (key j visible from the query at position p iff
    j ≤ p), so keys left from an earlier decode or never written are masked out. Prefill (T > 1) runs
    eagerly on the same buffers. Only for this benchmark: it measures what a static cache would buy.
    """

    class Cache:
        def __init__(self) -> None:
            self.length = 0

    def __init__(self, encoder: nn.Module, capacity: int, graphs: bool) -> None:
        self.encoder = encoder
        self.model = encoder.model.model  # Qwen2Model: layers, norm, rotary_emb
        self.capacity = capacity
        self.graphs = graphs
        self.graph = None
        self.replays = 0
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        weight = self.model.norm.weight
        attn = self.model.layers[0].self_attn
        shape = (1, attn.n_kv, capacity, attn.head_dim)
        self.k = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in self.model.layers]
        self.v = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in self.model.layers]
        self.key_pos = torch.arange(capacity, device=weight.device)
        self.x_in = torch.zeros(1, 1, self.model.cfg.hidden_size, dtype=weight.dtype, device=weight.device)
        self.pos = torch.zeros(1, dtype=torch.long, device=weight.device)
        self.out = None
        self.graph = None
        self.capacity = capacity

    def install(self) -> None:
        self.encoder.new_cache = self.new_cache
        self.encoder.forward_step = self.forward_step

    def remove(self) -> None:
        for name in ("new_cache", "forward_step"):
            self.encoder.__dict__.pop(name, None)

    def new_cache(self, reserve: int = 0) -> StaticDecode.Cache:
        if reserve > self.capacity:  # outgrown: bigger buffers, and a new graph on them
            self._allocate(reserve)
        return StaticDecode.Cache()

    def _layers(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [1, T, D] at absolute `positions` [T] (device) → hidden [1, T, D]; writes their keys/values."""
        from cosyvoice_ui.cosyvoice.models.qwen2 import apply_rotary

        model = self.model
        inv_freq = model.rotary_emb.inv_freq.float()
        freqs = positions.float()[:, None] * inv_freq[None, :]  # as RotaryEmbedding, from a device tensor
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        mask = (self.key_pos[None, :] <= positions[:, None])[None, None]  # [1, 1, T, capacity]
        t = x.size(1)
        for i, layer in enumerate(model.layers):
            attn = layer.self_attn
            q, k, v = attn._project_qkv(layer.input_layernorm(x))
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            self.k[i].index_copy_(2, positions, k)
            self.v[i].index_copy_(2, positions, v)
            out = torch.nn.functional.scaled_dot_product_attention(
                q, self.k[i], self.v[i], attn_mask=mask, enable_gqa=attn.n_heads != attn.n_kv)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(1, t, attn.n_heads * attn.head_dim))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return model.norm(x)

    def _capture(self) -> None:
        """Record one step on the static buffers (after two warm-up steps on a side stream, as CUDA
        graph capture wants); what they write is masked out or overwritten by the next decode."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._layers(self.x_in, self.pos)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.out = self._layers(self.x_in, self.pos)
        self.graph = graph

    def forward_step(self, xs: torch.Tensor, cache: StaticDecode.Cache) -> torch.Tensor:
        """As `Qwen2Encoder.forward_step`: xs [1, T, D] new positions → [1, T, D]; the cache advances."""
        start, t = cache.length, xs.size(1)
        if start + t > self.capacity:
            raise RuntimeError(f"the static cache holds {self.capacity} positions, the decode needs more")
        if t > 1 or not self.graphs:
            out = self._layers(xs, torch.arange(start, start + t, device=self.key_pos.device))
        else:
            if self.graph is None:
                self._capture()
            self.x_in.copy_(xs)
            self.pos.fill_(start)
            self.graph.replay()
            self.replays += 1
            out = self.out  # the graph's buffer: read (by the decoder head) before the next step
        cache.length = start + t
        return out


def _check_static_decode(bench: Bench, static: StaticDecode) -> float:
    """Largest difference, relative to the hidden state's scale, between the engine's own cached decode
    and the static one over a prefill and four steps."""
    mi = bench.model_input
    llm = bench.engine.llm
    device = bench.engine.device
    with torch.inference_mode():
        x = llm.build_input(mi.text.to(device), mi.prompt_text.to(device), mi.llm_prompt_tokens.to(device))
        steps = [x] + [llm.speech_embedding.weight[token].reshape(1, 1, -1) for token in (1, 2, 3, 4)]
        ours_cache = static.new_cache(reserve=x.size(1) + len(steps))
        theirs_cache = type(llm.llm).new_cache(llm.llm, reserve=x.size(1) + len(steps))
        worst = 0.0
        for step in steps:
            ours = static.forward_step(step, ours_cache)[:, -1].float()
            theirs = type(llm.llm).forward_step(llm.llm, step, theirs_cache)[:, -1].float()
            worst = max(worst, float((ours - theirs).abs().max() / theirs.abs().max().clamp(min=1e-6)))
    return worst


# --- the run ------------------------------------------------------------------------------------------

def static_decode_config(bench: Bench, clock: Clock, args: argparse.Namespace, configs: dict,
                         notes: list[str]) -> tuple[dict, StaticDecode | None]:
    """bf16 plus the LLM decode step on a static cache (one CUDA graph on CUDA, eager on the CPU);
    returns the configuration and the installed `StaticDecode` (None when it failed: nothing installed)."""
    engine, mi = bench.engine, bench.model_input
    prefix = 2 + mi.prompt_text.size(1) + mi.text.size(1) + mi.llm_prompt_tokens.size(1)
    static = None
    try:
        static = StaticDecode(engine.llm.llm, prefix + bench.tokens + 8, graphs=bench.cuda)
        drift = _check_static_decode(bench, static)
        if not math.isfinite(drift):
            raise RuntimeError("the static decode gave non-finite hidden states")
        bf16 = engine.llm.speech_embedding.weight.dtype == torch.bfloat16
        if drift > (0.1 if bf16 else 1e-3):
            notes.append(f"the static-cache decode differs from the engine's by {drift:.1e} of the hidden scale "
                         "(timing still valid)")
        static.install()
        result = measure(bench, clock, args.runs, args.warmup)
        applied = dict(configs["bf16"].get("applied", {}))
        applied["llm"] = (("bf16" if bf16 else "fp32") + ", decode step on a static KV cache"
                          + (" as one CUDA graph" if bench.cuda else " (eager: no CUDA graphs on the CPU)")
                          + " (benchmark-side, not in the engine)")
        return {"applied": applied, "static_decode_drift": drift, "llm_graph_replays": static.replays,
                **result}, static
    except Exception as exc:
        notes.append(f"the static-cache LLM decode step failed ({_short(exc)}); the engine's own decode is kept")
        if static is not None:
            static.remove()
        return {"skipped": "the static-cache LLM decode step failed"}, None


def graphs_config(bench: Bench, clock: Clock, args: argparse.Namespace, configs: dict, notes: list[str],
                  static: StaticDecode | None) -> dict:
    """Everything before plus the flow estimator under torch.compile(mode="reduce-overhead"); on
    failure the estimator is put back and the earlier numbers stand."""
    engine = bench.engine
    backend = args.graphs_backend or ("inductor" if bench.cuda else "eager")
    step = "torch.compile of the flow estimator"
    original = None
    skips = cudagraph_skips()
    replays = 0 if static is None else static.replays
    try:
        original = compile_estimator(engine, backend)
        step = "compiling and capturing CUDA graphs (warm-up renders)"
        # One render more than the others: cudagraph trees warm up, then record, then replay.
        result = measure(bench, clock, args.runs, args.warmup + 1)
    except Exception as exc:
        notes.append(f"{step} failed ({_short(exc)}); the numbers above stand without a compiled flow")
        if original is not None:
            engine.flow.decoder.estimator = original
        import torch._dynamo as dynamo  # binds only `dynamo`: `torch` stays this module's

        dynamo.reset()
        return {"skipped": f"{step} failed"}
    graphs = backend == "inductor" and bench.cuda
    skipped_graphs = cudagraph_skips() - skips
    before = configs["bf16_llm_graph"] if static is not None else configs["bf16"]
    applied = dict(before.get("applied", {}))
    applied["flow"] = applied.get("flow", "fp32") + (
        " + torch.compile(mode=\"reduce-overhead\", dynamic=False): CUDA graphs" if graphs
        else f" + torch.compile(backend=\"{backend}\"): no CUDA graphs on this device")
    if static is None:
        applied["llm"] = applied.get("llm", "fp32") + ", the engine's eager decode step"
    if graphs and skipped_graphs:
        notes.append(f"inductor ran {skipped_graphs} compiled graph(s) without CUDA graphs (its log says why)")
    config = {"applied": applied, "cuda_graphs": graphs and skipped_graphs == 0, "cudagraph_skips": skipped_graphs,
              **result}
    if static is not None:
        config["llm_graph_replays"] = static.replays - replays
    return config


def progress(clock: Clock, name: str, c: dict) -> None:
    """One line on stderr as each configuration ends: the numbers survive a later crash."""
    if "skipped" in c:
        line = f"skipped: {c['skipped']}"
    else:
        runs = f"{c['runs']} run" + ("" if c["runs"] == 1 else "s")
        line = f"first packet {c['first_packet_s'] * 1000:.0f} ms, RTF {c['rtf']:.3f} ({runs})"
    print(f"gpu_v3 [{clock.elapsed():4.0f} s] {LABELS[name].strip()}: {line}", file=sys.stderr, flush=True)


def device_facts(device: torch.device) -> dict:
    facts = {"type": device.type, "torch": torch.__version__, "cuda": torch.version.cuda,
             "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(name=props.name, memory_gb=props.total_memory / 1e9,
                     capability=f"{props.major}.{props.minor}",
                     tf32_matmul=torch.backends.cuda.matmul.allow_tf32, tf32_cudnn=torch.backends.cudnn.allow_tf32)
    else:
        facts.update(name="CPU", threads=torch.get_num_threads())
    return facts


def run(args: argparse.Namespace, scratch: Path) -> dict:
    clock = Clock(args.budget_s)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.model_dir:
        folder = Path(args.model_dir)
    elif args.tiny:
        folder = tiny_folder(scratch, "v3")
    else:
        folder = full_size_folder(Path(args.cache_dir), "v3")
    setup_s = clock.elapsed()

    start = time.perf_counter()
    engine = load_engine(folder, device=args.device, precision="stock", threads=args.threads)
    load_s = time.perf_counter() - start
    family = engine.folder.family
    if family.name != "v3":
        raise SystemExit(f"this benchmark is for Fun-CosyVoice3 (v3); the folder holds a {family.title} model")
    workload = Workload.for_family(family.token_rate, family.mel_rate, args.tokens)
    features = engine.encode_voice(voice_clip(workload.prompt_seconds))
    model_input = build_input(engine, features, workload)
    bench = Bench(engine, model_input, workload.output_tokens, args.seed)

    configs: dict[str, dict] = {}
    notes: list[str] = []
    configs["stock_fp32"] = {"applied": {"llm": engine.info.precision.llm, "flow": "fp32", "hift": "fp32"},
                             **measure(bench, clock, args.runs, args.warmup)}
    progress(clock, "stock_fp32", configs["stock_fp32"])

    if clock.spent():
        configs["bf16"] = {"skipped": "the --budget-s was spent"}
    else:
        applied, failed = to_bf16(bench)
        notes += failed
        try:
            configs["bf16"] = {"applied": applied, **measure(bench, clock, args.runs, args.warmup)}
        except Exception as exc:  # keep the stock numbers
            notes.append(f"the bf16 renders failed ({_short(exc)})")
            configs["bf16"] = {"skipped": "its renders failed", "applied": applied}
    progress(clock, "bf16", configs["bf16"])

    static = None
    for name in ("bf16_llm_graph", "bf16_graphs"):
        if args.no_graphs:
            configs[name] = {"skipped": "--no-graphs"}
        elif name == "bf16_llm_graph" and args.no_llm_graph:
            configs[name] = {"skipped": "--no-llm-graph"}
        elif clock.spent():
            configs[name] = {"skipped": "the --budget-s was spent"}
        elif name == "bf16_llm_graph":
            configs[name], static = static_decode_config(bench, clock, args, configs, notes)
        else:
            configs[name] = graphs_config(bench, clock, args, configs, notes, static)
        progress(clock, name, configs[name])
    if static is not None:
        static.remove()
    notes.append(LLM_GRAPH_NOTE)
    for c in configs.values():
        if "skipped" not in c:
            c["meets_target"] = {"first_packet": c["first_packet_s"] <= TARGET["first_packet_s"],
                                 "rtf": c["rtf"] <= TARGET["rtf"]}

    return {
        "model": {"folder": folder.name, "family": family.name, "random_weights": is_random(folder),
                  "tiny": bool(args.tiny)},
        "device": device_facts(engine.device),
        "workload": workload.describe(),
        "batch": 1,
        "flow_steps": engine.n_timesteps or engine.flow.decoder.n_timesteps,
        "first_hop_tokens": engine.streaming_spec.token_first_hop_len,
        "configs": configs,
        "anchors": list(ANCHORS),
        "target": TARGET,
        "comparable": engine.device.type == "cuda" and not args.tiny,  # only then do the targets apply
        "notes": notes,
        "setup_s": setup_s,
        "load_s": load_s,
        "elapsed_s": clock.elapsed(),
        "budget_s": args.budget_s,
        "budget_hit": clock.hit,
    }


# --- output ---------------------------------------------------------------------------------------------

def _met(value: float | None, target: float) -> str:
    if value is None:
        return ""
    return "met" if value <= target else "missed"


def format_report(r: dict) -> str:
    d = r["device"]
    weights = "random weights" if r["model"]["random_weights"] else "real weights"
    where = (f"{d['name']} ({d['memory_gb']:.0f} GB, sm {d['capability']}), CUDA {d['cuda']}, cuDNN {d['cudnn']}, "
             f"TF32 matmul {d['tf32_matmul']}" if d["type"] == "cuda" else f"CPU, {d['threads']} threads")
    lines = [
        f"{r['model']['folder']} ({weights}) · batch {r['batch']} · torch {d['torch']} · {where}",
        f"workload: {r['workload']}; {r['flow_steps']} flow steps; first chunk after the first hop "
        f"({r['first_hop_tokens']} tokens past the prompt's padding) + look-ahead",
        f"setup {r['setup_s']:.1f} s · load {r['load_s']:.1f} s · whole run {r['elapsed_s']:.0f} s "
        f"(budget {r['budget_s']:.0f} s{', spent: fewer runs' if r['budget_hit'] else ''})",
        "",
        f"  {'configuration':<22}{'first packet':>13}{'RTF':>8}{'runs':>6}{'LLM ms/tok':>12}{'flow s':>8}"
        f"{'HiFT s':>8}{'GPU MB':>8}",
    ]
    for name in CONFIGS:
        c = r["configs"].get(name)
        if c is None:
            continue
        if "skipped" in c:
            lines.append(f"  {LABELS[name]:<22}skipped: {c['skipped']}")
            continue
        gpu = f"{c['peak_gpu_mb']:8.0f}" if "peak_gpu_mb" in c else f"{'':>8}"
        lines.append(f"  {LABELS[name]:<22}{c['first_packet_s'] * 1000:10.0f} ms{c['rtf']:8.3f}{c['runs']:6d}"
                     f"{c['llm_ms_per_token']:12.1f}{c['flow_s']:8.3f}{c['hift_s']:8.3f}{gpu}")
    lines.append("")
    for anchor in r["anchors"]:
        packet = f"{anchor['first_packet_s'] * 1000:10.0f} ms" if anchor["first_packet_s"] else f"{'—':>13}"
        lines.append(f"  {'anchor: ' + anchor['name']:<22}{packet}{anchor['rtf']:8.3f}")
    t = r["target"]
    lines.append(f"  {'target (ours)':<22}{'≤ ' + format(t['first_packet_s'] * 1000, '.0f') + ' ms':>13}"
                 f"{'≤ ' + format(t['rtf'], 'g'):>8}")
    lines.append("")
    comparable = r["comparable"]
    for name in CONFIGS:
        c = r["configs"].get(name)
        if not c or "skipped" in c:
            continue
        verdict = (f"first packet {_met(c['first_packet_s'], t['first_packet_s'])}, RTF {_met(c['rtf'], t['rtf'])}"
                   if comparable else "targets apply to the full-size model on a GPU only")
        lines.append(f"{LABELS[name]}: {verdict}; warm-up {c['warmup_s']:.1f} s; "
                     + "; ".join(f"{k} {v}" for k, v in c["applied"].items()))
    lines += [f"note: {n}" for n in r["notes"]]
    if r["model"]["random_weights"]:
        lines.append("note: random weights with forced tokens do the same work as real ones; the first packet "
                     "leaves out the frontend (a saved voice)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model-dir", type=Path, help="a real Fun-CosyVoice3-0.5B folder (default: full-size random)")
    src.add_argument("--tiny", action="store_true",
                     help="tiny random v3 model, 60 tokens, 1 run, 1 thread: seconds (smoke test, CI)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (smoke test)")
    p.add_argument("--runs", type=int, default=3, help="timed runs per metric and configuration (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed renders of each kind first (graphs: one more)")
    p.add_argument("--budget-s", type=float, default=300.0,
                   help="wall-time budget: once spent, no extra runs and no new configuration (default 300)")
    p.add_argument("--tokens", type=int, default=None, help="speech tokens to decode, EOS ignored (default 125: 5 s)")
    p.add_argument("--no-graphs", action="store_true", help="skip both CUDA-graph configurations")
    p.add_argument("--no-llm-graph", action="store_true",
                   help="skip the static-cache LLM step graph: bf16_graphs then graphs the flow alone")
    p.add_argument("--graphs-backend", default=None,
                   help="torch.compile backend (default: inductor with CUDA graphs on cuda, eager on cpu)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="where the random full-size model is kept")
    p.add_argument("--json", action="store_true", help="also print one JSON object (last line)")
    p.add_argument("--out", type=Path, help="also write the JSON result to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be at least 1 and --warmup at least 0")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("no CUDA GPU is usable here; run the smoke test with --device cpu --tiny")
    if args.tiny:  # a smoke test: small everything unless asked otherwise
        given = set(argv if argv is not None else sys.argv[1:])
        for flag, name, value in (("--runs", "runs", 1), ("--tokens", "tokens", 60), ("--threads", "threads", 1)):
            if flag not in given:
                setattr(args, name, value)
    with tempfile.TemporaryDirectory() as scratch:
        result = run(args, Path(scratch))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(format_report(result))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
