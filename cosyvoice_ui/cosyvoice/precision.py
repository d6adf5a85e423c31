"""Which inference-time transforms a loaded model gets, once after loading, and the `Precision` record
of what was done: a faster weight layout for the stock path, and the opt-in "fast" precision.

The transforms themselves are the modules' own methods (`TransformerLM.fuse_qkv / pack_linears /
column_major_linears / quantize_int8 / quantize_int4`, `ConditionalDecoder.to_bf16`, `DiT.to_int8`,
`HiFTGenerator.set_conv_dtype`);
this module only decides, from the precision asked for, the device and the CPU, which ones run.

stock — the same arithmetic with faster kernels: the LLM's linears pre-packed for oneDNN's inner
    product (`models/linears.py` says why) once the engine batches; for one-row steps in blocks of rows that
    every thread streams, or row-major in the process's own memory (Intel CPUs), or packed where asked; the
    flow estimator's linears packed too; only the summation
    order changes (float rounding, ~1e-6 relative). In both modes each attention layer's
    q/k/v projections are fused into one linear.
fast — changes the numbers, for speed (`FastSettings`):
    * int8 dynamic quantisation of the LLM linears (per-channel int8 weights, activations quantised
      per call): a quarter of the bytes per decoded token;
    * the flow estimator in bfloat16 where the CPU has native bf16 dot products (AVX512-BF16
      or AMX), with its time embedding kept in float32 (t·1000 in bf16 would be off by up to ~1 rad)
      and its attention as plain matmuls (faster than the bf16 SDPA kernel on CPU); an estimator made
      of linears (v3's DiT) takes int8 dynamic linears with float32 SDPA attention instead, which is
      faster there (the U-Nets of v1/v2 are convolution-bound and faster in bf16);
    * HiFT's convolution stack in bfloat16 (same CPU condition), f0 predictor, NSF source and STFTs
      in float32;
    * fewer Euler steps and a shorter flow prompt (applied by the engine);
    * v3: a stream's last flow pass in chunk attention, continuing from the frames earlier passes kept,
      instead of upstream's full attention over every frame (half the flow's time per 5 s stream; moves the
      streamed mel by 0.03 of the noise-seed spread: benchmarks/stream_kept.py).
extra-fast — fast, plus no classifier-free guidance in the flow (half its work) and 4-bit grouped LLM
    weights (an int4 decode reads ~60 % of int8's bytes per token); both move the output well beyond what
    fast's changes do (benchmarks/deviation.py), so this is a separate, labelled opt-in.

auto — the default of the app and the CLI: fast on a CPU, stock on a GPU (`resolve_precision`).

Not here: the transforms (the modules' methods), asking for a precision (loader.py), measuring its
effect (benchmarks/bench_engine.py).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..types import Precision
from .kernels import decode_attention_available, int8_linear_available, snake_available
from .models.fused_linears import fuse_linear_gelus, onednn_fused_gelu_works
from .models.linears import (INT4_GROUP, INT8_ONEDNN_MIN_ROWS, int4_kernels_available, int8_matrix_units,
                             int8_rows_on_onednn, one_row_layout, onednn_linear_works, pack_linears)

if TYPE_CHECKING:
    from .models.flow import MaskedDiffWithXvec
    from .models.hift import HiFTGenerator
    from .models.llm import TransformerLM

log = logging.getLogger(__name__)

PRECISIONS = ("stock", "fast", "extra-fast")
AUTO = "auto"  # a default, not a mode: `resolve_precision` turns it into one of PRECISIONS for the device
CHOICES = (AUTO, *PRECISIONS)  # what --precision accepts


def resolve_precision(precision: str, device: str) -> str:
    """The mode `precision` stands for on `device` ("auto", "cpu", "cuda", "cuda:1"): an explicit mode is
    itself; "auto" is fast on a CPU and stock on a GPU. On a CPU fast renders a v1/v2/v3 utterance 3.5-7x
    faster than stock and moves the mel by under a tenth of what another noise seed does (README, "How far
    fast and extra-fast move the output"); on a GPU fast's int8 and bf16 layers do not apply (CPU only) and
    stock already runs faster than real time, so the reference numbers cost little there. Extra-fast is never
    chosen for the user: dropping guidance and int4 weights are the changes large enough to hear."""
    if precision != AUTO:
        return precision
    device = (device or AUTO).lower()
    if device == AUTO:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return "stock" if device.startswith("cuda") else "fast"


@dataclass(frozen=True)
class FastSettings:
    """What `precision="fast"` changes. Each field can be switched off on its own (benchmarks, tests)."""

    int8_llm: bool = True
    int4_llm: bool = False  # 4-bit grouped LLM weights where the shape fits (int8 elsewhere); extra-fast only
    bf16_estimator: bool = True  # only taken where `bf16_is_native()`
    # Estimators made of linears (v3's DiT): int8 linears + bf16 attention instead of bf16, on CPUs without bf16
    # matrix units (AMX). Where the CPU has them, bf16 GEMMs outrun fbgemm's int8 ones (v3 DiT per call: bf16
    # 0.63x of int8, benchmarks/estimator_backends.py), so bf16 is taken there whatever this says.
    int8_estimator: bool = True
    matmul_attention: bool = True  # bf16 estimator: matmul-softmax-matmul instead of SDPA (faster on CPU)
    bf16_hift: bool = True  # HiFT's convolution stack in bf16 (f0 and source stay float32); only where native
    n_timesteps: int = 2  # flow Euler steps (stock: the yaml's 10); an explicit n_timesteps wins
    flow_prompt_seconds: float = 3.0  # keep the last this-many seconds of the prompt in the flow
    guidance: bool = True  # classifier-free guidance in the flow; off halves its work (extra-fast only)
    chunked_last_pass: bool = True  # v3 streams: the last flow pass in chunk attention from the kept frames
    # The int8 LLM's calls of many rows (prefills) on oneDNN's int8 GEMM where the CPU has AMX (0.43x fbgemm's
    # time at 200 rows); decoding stays on fbgemm. A second packed copy of the int8 weights, made at load
    # (~0.36 GB for v2/v3): a memory-tight host turns it off with COSYVOICE_ONEDNN_INT8_ROWS=0.
    onednn_int8_rows: bool = True
    # Elsewhere, on AVX-512 VNNI CPUs: the int8 LLM on this project's own kernel (`kernels/`, built once per machine
    # where a C++ compiler is at hand; else fbgemm as before). Same int8 weights, 8-bit activations per row; its
    # one-row products stream the weights faster than fbgemm's (issue 26, fifteenth pass). COSYVOICE_KERNELS=0
    # turns it off.
    kernel_int8_llm: bool = True
    # Where a decode's cache is large (`LARGE_CACHE_BYTES` a position: v1), a decoding step's attention on the same
    # extension's kernel: one pass over the cached keys, relative positions and values instead of torch's batched
    # products and softmax (issue 26, sixteenth pass: v1's decode 0.77-0.95x). Float32 sums: float rounding away
    # from torch's. v2/v3's shared key heads keep 1/7 of v1's cache a position; there the kernel measured even to
    # 0.95x, and it gives each group of heads one thread (two groups), so they keep SDPA, which spreads over cores.
    kernel_attention: bool = True
    # With the attention kernel: decodes keep their keys, values and projected positions in bf16, half the bytes a
    # step reads; scores and sums stay float32. v1 reads ~75 MB of cache a step at 435 positions: 0.86-0.96x the
    # decode time with bf16 (issue 26, sixteenth pass).
    bf16_decode_cache: bool = True
    # The vocoder's Snake activations on the same extension's one-pass kernel (`kernels/snake.cpp`): float32
    # inside, rounded once (torch's five bf16 ops round after each); 0.25-0.3x their time (seventeenth pass).
    kernel_snake: bool = True


LARGE_CACHE_BYTES = 64 * 1024  # a decode's float32 cache bytes a position from which fast takes the attention kernel
ONEDNN_ROWS_ENV = "COSYVOICE_ONEDNN_INT8_ROWS"  # "0": no oneDNN copy of the int8 LLM (prefills on fbgemm)
STEP_GRAPH_ENV = "COSYVOICE_STEP_GRAPH"  # "0": one-row decoding steps run eagerly (no recorded graph)


def settings_for(precision: str) -> FastSettings | None:
    """The default `FastSettings` of a precision mode (None for stock). "extra-fast" is fast without the
    flow's classifier-free guidance and with 4-bit LLM weights. On random weights guidance off moves the mel
    by 0.16-0.21 of the spread between two stock noise seeds (fast's changes together: under 0.09; the limit
    for fast is 0.25, and guidance matters for trained models in ways random weights cannot show), and the
    int4 LLM agrees with the float one's top choice 0.83-0.85 of the time (int8: 0.91-0.94); see
    benchmarks/deviation.py. So it is a separate, clearly labelled opt-in."""
    if precision == "stock":
        return None
    if precision == "fast":
        return FastSettings()
    if precision == "extra-fast":
        return FastSettings(guidance=False, int4_llm=True)
    raise ValueError(f"unknown precision {precision!r}; choose one of {PRECISIONS}")


def speed_up_llm(llm: TransformerLM, device: str, rows: int = 1) -> str:
    """The stock LLM transform (same numbers up to summation order, faster kernels) for decoding steps of `rows`
    rows (the engine's batch width); returns a description.

    More rows: oneDNN's packed layout (`pack_linears`; four rows ~60 ms a v3 step's linears packed against
    ~100 ms row-major on an Intel CPU, 51-64 against 78-121 ms in row blocks on an AMD one). One row: the layout
    `one_row_layout` names for this CPU (measured there, see it): row blocks (`row_blocks_linears`, every CPU but
    Intel's), row-major own copies for MKL's GEMV (Intel's), or packed where forced. `stock_llm_for_rows`
    changes the choice when the batch width changes."""
    fused = llm.fuse_qkv()
    if device != "cpu":
        return f"fp32 (q/k/v fused in {fused} layers)"
    layout = "packed" if rows > 1 and onednn_linear_works() else one_row_layout()
    if layout == "packed":
        return f"fp32 (oneDNN packed, {llm.pack_linears()} linears, q/k/v fused)"
    if layout == "row-blocks":
        return f"fp32 (row blocks for one-row steps, {llm.row_blocks_linears()} linears, q/k/v fused)"
    return f"fp32 (row-major for one-row steps, {llm.own_linear_weights()} linears, q/k/v fused)"


def stock_llm_for_rows(llm: TransformerLM, rows: int, device: str) -> str | None:
    """When a stock LLM on a CPU is to decode `rows` rows a step and still has the one-row layout, pack it for
    oneDNN (`speed_up_llm`); returns the new description, or None when nothing changed. A packed LLM stays
    packed when the width goes back to 1 (its float weights are gone; it is still correct, a little slower)."""
    if device != "cpu" or rows <= 1 or llm.has_packed_linears() or not onednn_linear_works():
        return None
    return speed_up_llm(llm, device, rows)


def bf16_is_native() -> bool:
    """True when oneDNN has bf16 dot-product instructions on this CPU (else bf16 would be emulated,
    slower than float32)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def bf16_matrix_units() -> bool:
    """True when the CPU has bf16 matrix units (Intel AMX tiles) that oneDNN's bf16 GEMMs use; there a bf16
    estimator is faster than an int8 dynamic one (fbgemm's int8 kernels do not use the tiles)."""
    if not bf16_is_native():
        return False
    try:
        return bool(torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):
        return False


def int8_estimator_wanted(fast: FastSettings, estimator: object, device: str) -> bool:
    """Whether fast mode gives this estimator int8 linears: it has them (`to_int8`), `fast` asks, the device is a
    CPU, and that CPU has no bf16 matrix units (where it has, bf16 is faster)."""
    return (fast.int8_estimator and device == "cpu" and hasattr(estimator, "to_int8")
            and not bf16_matrix_units())


def apply_precision(llm: TransformerLM, flow: MaskedDiffWithXvec, precision: str, device: str,
                    fast: FastSettings | None = None, hift: HiFTGenerator | None = None) -> Precision:
    """Apply `precision` to loaded models in place; returns what was done (for `EngineInfo.precision`).
    `hift` is changed by fast precision and laid out for a CPU (`vocoder_run_time`); left alone when None. The
    loader applies the same steps one model at a time instead (`llm_precision`, `flow_precision`,
    `vocoder_precision` and the run-time steps after each), so a model's float weights are gone before the next
    file is read."""
    check_precision(precision)
    done = {"mode": precision, **llm_precision(llm, precision, device, fast),
            **llm_rows_precision(llm, precision, device, fast),
            **llm_attention_precision(llm, precision, device, fast),
            **llm_step_precision(llm, device),
            **flow_precision(flow, precision, device, fast)}
    done.update(flow_run_time(flow, precision, device, done))
    if hift is not None:
        done.update(vocoder_precision(hift, precision, device, fast))
        done.update(vocoder_run_time(hift, precision, device, done, fast))
    return precision_record(done)


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {PRECISIONS}")


def llm_precision(llm: TransformerLM, precision: str, device: str, fast: FastSettings | None = None) -> dict:
    """The LLM's part of `apply_precision`: the record fields it sets."""
    on_cpu = device == "cpu"
    if precision == "stock":
        return {"llm": speed_up_llm(llm, device)}
    fast = fast or settings_for(precision)
    if fast.int4_llm and on_cpu and int4_kernels_available():
        llm.fuse_qkv()
        int4, int8 = llm.quantize_int4()
        return {"llm": f"int4 grouped ({int4} linears, group {INT4_GROUP}) + int8 dynamic ({int8}), q/k/v fused"}
    if fast.int8_llm and on_cpu:
        llm.fuse_qkv()
        return {"llm": f"int8 dynamic ({llm.quantize_int8()} linears, q/k/v fused)"}
    return {"llm": "fp32"}


def llm_rows_precision(llm: TransformerLM, precision: str, device: str, fast: FastSettings | None = None) -> dict:
    """After `llm_precision` (and after a prepared copy is written: the wrappers are not saved): the int8 LLM's
    many-row calls on oneDNN where the CPU has int8 matrix units; elsewhere the int8 LLM on this project's own
    kernel where it can be built (int4's prefill copies stay on fbgemm). Returns the record fields it changes."""
    if precision == "stock" or device != "cpu":
        return {}
    fast = fast or settings_for(precision)
    if fast.onednn_int8_rows and os.environ.get(ONEDNN_ROWS_ENV, "1") != "0" and int8_matrix_units():
        count = int8_rows_on_onednn(llm)
        return {"llm_rows": f"oneDNN int8 for {INT8_ONEDNN_MIN_ROWS}+ rows ({count} linears)"} if count else {}
    int4 = fast.int4_llm and int4_kernels_available()
    # AMX machines keep fbgemm for decoding (the kernel was not measured on one), with or without oneDNN's prefills.
    if fast.kernel_int8_llm and fast.int8_llm and not int4 and not int8_matrix_units() and int8_linear_available():
        count = llm.int8_linears_on_kernel()
        return {"llm_rows": f"own int8 kernel, AVX-512 VNNI ({count} linears)"} if count else {}
    return {}


def llm_attention_precision(llm: TransformerLM, precision: str, device: str, fast: FastSettings | None = None) -> dict:
    """After `llm_rows_precision`, before the step is recorded: where a decode's cache is large (v1), fast mode's
    decoding attention on the project's kernel where it is built (`kernels.decode_attention_available()`), over bf16
    caches. Returns the record field it sets."""
    if precision == "stock" or device != "cpu":
        return {}
    fast = fast or settings_for(precision)
    large = llm.llm.cache_bytes_per_position() >= LARGE_CACHE_BYTES
    if fast.kernel_attention and large and decode_attention_available():
        bf16 = fast.bf16_decode_cache
        count = llm.attention_on_kernel(torch.bfloat16 if bf16 else None)
        cache = "bf16 cache, " if bf16 else ""
        return {"llm_attention": f"own kernel, {cache}one pass a step ({count} layers)"} if count else {}
    return {}


def llm_step_precision(llm: TransformerLM, device: str) -> dict:
    """Last of the LLM's transforms, in every precision: its one-row decoding step recorded as a graph where the
    backbone can (every family on a CPU; `step_graph.py`). The same numbers as the eager step, and 0.65-0.8x its time
    (issue 26, v3 int8, 2 threads). Returns the record fields it sets. `COSYVOICE_STEP_GRAPH=0` turns it off."""
    if device != "cpu" or os.environ.get(STEP_GRAPH_ENV, "1") == "0":
        return {}
    return {"llm_step": "recorded graph"} if llm.record_decode_step() else {}


def flow_precision(flow: MaskedDiffWithXvec, precision: str, device: str, fast: FastSettings | None = None) -> dict:
    """The flow's part of `apply_precision` (estimator dtype, guidance, steps, prompt): the record fields."""
    if precision == "stock":
        # Same numbers, faster kernels: the estimator's GEMMs (hundreds of rows, every Euler step) on oneDNN's
        # packed layout, 1.35-1.55x torch's plain product on an AMD Zen 4 (issue 26, eighth pass).
        if device == "cpu" and onednn_linear_works():
            count = pack_linears(flow.estimator)
            return {"flow": f"fp32 (oneDNN packed estimator, {count} linears)"} if count else {}
        return {}
    on_cpu = device == "cpu"
    fast = fast or settings_for(precision)
    done: dict[str, object] = {}
    if int8_estimator_wanted(fast, flow.estimator, device):
        # Attention in float32 SDPA (`DiT.to_int8`); a stream's kept keys/values in bf16 where that is native: the
        # memory budget holds twice the frames.
        count = flow.estimator.to_int8(kept_dtype=torch.bfloat16 if bf16_is_native() else None)
        done["flow"] = f"int8 estimator ({count} linears)"
        done["flow_attention"] = "sdpa"
    elif fast.bf16_estimator and on_cpu and bf16_is_native():
        flow.estimator.to_bf16(matmul_attention=fast.matmul_attention)
        done["flow"] = "bf16 estimator"
        done["flow_attention"] = "matmul" if fast.matmul_attention else "sdpa"
    else:
        done["flow"] = "fp32"
    if not fast.guidance:
        flow.decoder.inference_cfg_rate = 0.0  # the sampler then skips the unconditional row
    done["flow_guidance"] = fast.guidance
    done["flow_steps"] = fast.n_timesteps
    done["flow_prompt_seconds"] = fast.flow_prompt_seconds
    done["flow_chunked_last_pass"] = fast.chunked_last_pass and hasattr(flow, "inference_from")
    return done


def vocoder_precision(hift: HiFTGenerator, precision: str, device: str, fast: FastSettings | None = None) -> dict:
    """The vocoder's part of `apply_precision`: the record fields."""
    if precision == "stock":
        return {}
    fast = fast or settings_for(precision)
    if fast.bf16_hift and device == "cpu" and bf16_is_native():
        hift.set_conv_dtype(torch.bfloat16)
        return {"hift": "bf16 convolutions (f0, source, STFT fp32)"}
    return {"hift": "fp32"}


def flow_run_time(flow: MaskedDiffWithXvec, precision: str, device: str, done: dict) -> dict:
    """After `flow_precision` (and after a prepared copy is read or written: copies keep plain layouts and no
    fused layers). On a CPU, in every precision, a DiT's position convolutions run time-major (`conv_layout`; 0.6x
    their time in bf16, 0.67x in float32). Fast mode's bf16 estimator runs each feed-forward's first linear with
    its GELU inside oneDNN's call (`fuse_linear_gelus`: v3's DiT; the U-Nets' GELU is not of that form): torch's
    tanh GELU alone took more than the product in bf16 (issue 26, seventeenth pass); the activation is applied to
    the float32 sums before the one rounding to bf16. Returns the record field it changes: `flow` gains
    ", time-major convolutions" and ", GELU fused (N linears)"."""
    if device != "cpu":
        return {}
    record = str(done.get("flow", Precision.flow))
    estimator = flow.estimator
    changed = False
    if hasattr(estimator, "use_time_major") and estimator.use_time_major():
        record, changed = f"{record}, time-major convolutions", True
    if precision != "stock" and record.startswith("bf16") and onednn_fused_gelu_works(torch.bfloat16):
        count = fuse_linear_gelus(estimator, skip=("time_embed",))
        if count:
            record, changed = f"{record}, GELU fused ({count} linears)", True
    return {"flow": record} if changed else {}


def vocoder_run_time(hift: HiFTGenerator, precision: str, device: str, done: dict,
                     fast: FastSettings | None = None) -> dict:
    """After `vocoder_precision` (and after a prepared copy is read or written: copies keep plain layouts and hold
    no kernel buffers). On a CPU, in every precision, the vocoder's convolutions run on time-major signals
    (`conv_layout`: no reorder around each oneDNN call; same numbers in bf16, float32 rounding apart; the vocoder
    alone 0.64-0.79x its time in bf16, 0.75x in float32, issue 26, seventeenth pass). Fast mode's Snake activations
    run on the project's one-pass kernel where it is built (0.25-0.3x torch's five ops; with it the bf16 vocoder
    0.51-0.63x). Returns the record field it changes: `hift` gains ", time-major" and ", one-pass Snake"."""
    if device != "cpu":
        return {}
    record = done.get("hift", Precision.hift)
    if hift.use_time_major():
        record += ", time-major"
    fast = None if precision == "stock" else fast or settings_for(precision)
    if fast is not None and fast.kernel_snake and snake_available() and hift.use_snake_kernel():
        record += ", one-pass Snake"
    return {"hift": record}


def precision_record(done: dict) -> Precision:
    record = Precision(**done)
    if record.mode != "stock":
        log.info("%s precision: %s", record.mode, record)
    return record


def trim_flow_prompt(tokens: torch.Tensor, mel: torch.Tensor, seconds: float, token_rate: float,
                     first_hop: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the last `seconds` of a flow prompt: tokens [1, T1] and mel [1, M1, F] cut together,
    keeping their frame-per-token ratio. Shorter prompts are returned unchanged.
    first_hop: (chunk, pad): keep instead the nearest length that leaves exactly `pad` tokens to the flow's
    next `chunk`-token boundary (`aligned_prompt_length`), so a stream's first chunk can be those `pad` tokens
    (`streaming_qwen.stream_with_lookahead`)."""
    keep = int(seconds * token_rate)
    t1, m1 = tokens.size(1), mel.size(1)
    if first_hop is not None and keep > 0:
        keep = aligned_prompt_length(keep, t1, *first_hop)
    if t1 <= keep or keep <= 0:
        return tokens, mel
    frames = int(m1 * keep / t1)
    return tokens[:, t1 - keep:], mel[:, m1 - frames:]


def aligned_prompt_length(keep: int, available: int, chunk: int, pad: int) -> int:
    """The prompt length nearest `keep` whose distance to the next multiple of `chunk` is `pad` (the longer of
    two equally near; one above `keep` only when `available` tokens allow it; `keep` itself when none fits)."""
    residue = (chunk - pad) % chunk
    above = keep + (residue - keep) % chunk
    below = above - chunk
    if below > 0 and (above > available or keep - below < above - keep):
        return below
    return above if above <= available else keep
