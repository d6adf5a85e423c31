"""Inference-time transforms applied once after loading: a faster weight layout for the stock path, and
the opt-in "fast" precision.

stock — the same arithmetic with faster kernels: the LLM's `nn.Linear`s become `PackedLinear`s, whose
    weights are pre-packed for oneDNN's inner product. Batch-1 decoding is a matrix-vector product per
    linear, bound by how fast the weights stream from memory; torch's default (MKL) GEMV runs on one
    thread, oneDNN's packed kernel uses every intra-op thread and streams the weights ~1.4-1.8x
    faster on a 2-core x86 (and runs the prefill GEMMs faster too). Only the summation order changes
    (float rounding, ~1e-6 relative). Where oneDNN is unavailable the weights are stored column-major
    instead (Wᵀ contiguous), which MKL's GEMV streams ~1.3x faster than row-major. In both modes each
    attention layer's q/k/v projections are fused into one linear (`fuse_qkv_projections`).
fast — changes the numbers, for speed (`FastSettings`):
    * int8 dynamic quantisation of the LLM linears (per-channel int8 weights, activations quantised
      per call): a quarter of the bytes per decoded token;
    * a bfloat16 copy of the flow estimator where the CPU has native bf16 dot products (AVX512-BF16
      or AMX), with its time embedding kept in float32 (t·1000 in bf16 would be off by up to ~1 rad)
      and its attention as plain matmuls (faster than the bf16 SDPA kernel on CPU);
    * HiFT's convolution stack in bfloat16 (same CPU condition), f0 predictor, NSF source and STFTs
      in float32;
    * fewer Euler steps and a shorter flow prompt (applied by the engine).

Not here: choosing the precision (loader.py) or measuring its effect (benchmarks/bench_engine.py).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from ...types import Precision

log = logging.getLogger(__name__)

PRECISIONS = ("stock", "fast")


@dataclass(frozen=True)
class FastSettings:
    """What `precision="fast"` changes. Each field can be switched off on its own (benchmarks, tests)."""

    int8_llm: bool = True
    bf16_estimator: bool = True  # only taken where `bf16_is_native()`
    matmul_attention: bool = True  # bf16 estimator: matmul-softmax-matmul instead of SDPA (faster on CPU)
    bf16_hift: bool = True  # HiFT's convolution stack in bf16 (f0 and source stay float32); only where native
    n_timesteps: int = 4  # flow Euler steps (stock: the yaml's 10); an explicit n_timesteps wins
    flow_prompt_seconds: float = 3.0  # keep the last this-many seconds of the prompt in the flow


class PackedLinear(nn.Module):
    """An `nn.Linear` for CPU inference whose weight is pre-packed in oneDNN's layout.

    Does not: train, move between devices, or keep a float copy of the weight (the packed one replaces
    it), so it is not part of any state dict: pack after loading, never before saving.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().contiguous()
        self.weight_packed = torch.ops.mkldnn._reorder_linear_weight(weight, 1)  # tuned for batch-1 calls
        self.bias = None if linear.bias is None else linear.bias.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in_features] float32 → [..., out_features]."""
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.weight_packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def fuse_qkv_projections(module: nn.Module) -> int:
    """Replace each attention layer's `linear_q`/`linear_k`/`linear_v` under `module` by one
    `linear_qkv` ([3D, D] weight: q rows, then k, then v), in place; returns how many layers were fused.

    Run after the strict state-dict load (the checkpoint keeps upstream's three projections, so the
    fused module is not loadable, like `PackedLinear`). One call per layer instead of three: batch-1
    decoding pays a fixed cost per kernel call, and a taller matrix streams at a better rate. A missing
    key bias (`key_bias=False`) becomes zeros, which adds exactly nothing. Outputs match the separate
    projections up to float summation order.
    """
    from .transformer import RelPositionMultiHeadedAttention

    fused = 0
    for attn in module.modules():
        if not isinstance(attn, RelPositionMultiHeadedAttention) or attn.linear_qkv is not None:
            continue
        parts = (attn.linear_q, attn.linear_k, attn.linear_v)
        width = parts[0].in_features
        weight = torch.cat([p.weight.detach() for p in parts])
        bias = torch.cat([p.bias.detach() if p.bias is not None else weight.new_zeros(p.out_features) for p in parts])
        linear = nn.utils.skip_init(nn.Linear, width, weight.size(0), device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
        linear.requires_grad_(False)
        attn.linear_qkv = linear
        del attn.linear_q, attn.linear_k, attn.linear_v  # the fused copy replaces them (no double memory)
        fused += 1
    return fused


def onednn_linear_works() -> bool:
    """True when oneDNN's packed inner product is available and agrees with F.linear on this machine."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return False
    try:
        generator = torch.Generator().manual_seed(0)  # a private RNG: the global one stays untouched
        probe = nn.utils.skip_init(nn.Linear, 64, 48)
        with torch.no_grad():
            probe.weight.copy_(torch.randn(48, 64, generator=generator))
            probe.bias.copy_(torch.randn(48, generator=generator))
        x = torch.randn(3, 64, generator=generator)
        with torch.inference_mode():
            return bool(torch.allclose(PackedLinear(probe)(x), probe(x), atol=1e-4, rtol=1e-4))
    except (RuntimeError, TypeError):
        return False


def pack_linears(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Replace the `nn.Linear`s under `module` (except the child names in `skip`) by `PackedLinear`s,
    in place. Returns how many were replaced."""
    targets = [(name, m) for name, m in module.named_modules()
               if isinstance(m, nn.Linear) and not any(name == s or name.startswith(s + ".") for s in skip)]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, child, PackedLinear(linear))
    return len(targets)


def speed_up_llm(llm: nn.Module, device: str) -> str:
    """The stock LLM transform (same numbers, faster kernels); returns a description."""
    fused = fuse_qkv_projections(llm)
    if device != "cpu":
        return f"fp32 (q/k/v fused in {fused} layers)"
    if onednn_linear_works():
        # spk_embed_affine_layer's weight is read directly (its dtype/device), so it stays an nn.Linear.
        count = pack_linears(llm, skip=("spk_embed_affine_layer",))
        return f"fp32 (oneDNN packed, {count} linears, q/k/v fused)"
    column_major_linears(llm)
    return "fp32 (column-major linears)"


def column_major_linears(module: nn.Module) -> int:
    """Store every `nn.Linear` weight under `module` as a transposed-contiguous tensor (same values,
    same shape, strides (1, out)). Returns how many were changed. State-dict keys and shapes stay,
    so the module still saves and loads as before."""
    changed = 0
    for linear in module.modules():
        if isinstance(linear, nn.Linear) and linear.weight.is_contiguous():
            weight = linear.weight.detach()
            linear.weight = nn.Parameter(weight.t().contiguous().t(), requires_grad=False)
            changed += 1
    return changed


def quantize_linears_int8(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Replace the `nn.Linear`s under `module` (except the child names in `skip`) by int8 dynamic
    quantised ones, in place (CPU only). Returns how many were replaced."""
    from torch.ao.quantization import quantize_dynamic

    names = {name for name, m in module.named_modules()
             if isinstance(m, nn.Linear) and not any(name == s or name.startswith(s + ".") for s in skip)}
    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated in favour of torchao, which is not a dependency here;
        # the eager dynamic path still works and is what this CPU-only mode needs.
        warnings.simplefilter("ignore")
        quantize_dynamic(module, names, dtype=torch.qint8, inplace=True)
    return len(names)


def bf16_is_native() -> bool:
    """True when oneDNN has bf16 dot-product instructions on this CPU (else bf16 would be emulated,
    slower than float32)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


class Bf16Estimator(nn.Module):
    """Wraps a flow estimator converted to bfloat16 (except `time_mlp`); takes and returns float32.

    Does not keep a float32 copy: the wrapped module is converted in place.
    """

    def __init__(self, estimator: nn.Module, matmul_attention: bool = True) -> None:
        super().__init__()
        for name, child in estimator.named_children():
            if name != "time_mlp":
                child.to(torch.bfloat16)
        for module in estimator.modules():
            if hasattr(module, "matmul_attention"):  # unet.Attention: see its comment
                module.matmul_attention = matmul_attention
        self.inner = estimator

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, mu: torch.Tensor, t: torch.Tensor,
                spks: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Same arguments and shapes as `ConditionalDecoder.forward`; `t` stays float32."""
        low = torch.bfloat16
        v = self.inner(x.to(low), mask, mu.to(low), t.float(), spks.to(low), cond.to(low))
        return v.float()


def bf16_hift_decoder(hift: nn.Module) -> None:
    """Convert HiFT's convolution stack (conv_pre, up-sampling, source and residual blocks, conv_post)
    to bfloat16 in place; `decode_to_spectrum` casts its inputs and returns float32. The f0 predictor,
    the NSF source and both STFTs stay float32: f0 is integrated into a phase over ~10^5 samples
    (bf16's 8-bit mantissa would detune it), and the STFT/iSTFT have no bf16 CPU kernels."""
    for name in ("conv_pre", "ups", "source_downs", "source_resblocks", "resblocks", "conv_post"):
        getattr(hift, name).to(torch.bfloat16)
    hift.decode_dtype = torch.bfloat16


def apply_precision(llm: nn.Module, flow: nn.Module, precision: str, device: str,
                    fast: FastSettings | None = None, hift: nn.Module | None = None) -> Precision:
    """Apply `precision` to loaded models in place; returns what was done (for `EngineInfo.precision`).
    `hift` is only changed by fast precision (and left alone when None)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {PRECISIONS}")
    done: dict[str, object] = {"mode": precision}
    on_cpu = device == "cpu"
    if precision == "stock":
        done["llm"] = speed_up_llm(llm, device)
        return Precision(**done)
    fast = fast or FastSettings()
    if fast.int8_llm and on_cpu:
        # spk_embed_affine_layer's weight is read directly (its dtype/device), so it stays a float Linear.
        fuse_qkv_projections(llm)
        count = quantize_linears_int8(llm, skip=("spk_embed_affine_layer",))
        done["llm"] = f"int8 dynamic ({count} linears, q/k/v fused)"
    else:
        done["llm"] = "fp32"
    if fast.bf16_estimator and on_cpu and bf16_is_native():
        flow.decoder.estimator = Bf16Estimator(flow.decoder.estimator, fast.matmul_attention)
        done["flow"] = "bf16 estimator"
        done["flow_attention"] = "matmul" if fast.matmul_attention else "sdpa"
    else:
        done["flow"] = "fp32"
    if hift is not None:
        if fast.bf16_hift and on_cpu and bf16_is_native():
            bf16_hift_decoder(hift)
            done["hift"] = "bf16 convolutions (f0, source, STFT fp32)"
        else:
            done["hift"] = "fp32"
    done["flow_steps"] = fast.n_timesteps
    done["flow_prompt_seconds"] = fast.flow_prompt_seconds
    record = Precision(**done)
    log.info("fast precision: %s", record)
    return record


def trim_flow_prompt(tokens: torch.Tensor, mel: torch.Tensor, seconds: float,
                     token_rate: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the last `seconds` of a flow prompt: tokens [1, T1] and mel [1, M1, F] cut together,
    keeping their frame-per-token ratio. Shorter prompts are returned unchanged."""
    keep = int(seconds * token_rate)
    t1, m1 = tokens.size(1), mel.size(1)
    if t1 <= keep or keep <= 0:
        return tokens, mel
    frames = int(m1 * keep / t1)
    return tokens[:, t1 - keep:], mel[:, m1 - frames:]
