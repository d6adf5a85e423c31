"""Inference-time transforms applied once after loading: a faster weight layout for the stock path, and
the opt-in "fast" precision.

stock — the same arithmetic in a different memory layout: the LLM's `nn.Linear` weights are stored
    column-major (as Wᵀ, contiguous). Batch-1 decoding is a matrix-vector product per linear; torch's
    kernel for x·Wᵀ with a contiguous Wᵀ streams memory about 1.5x faster on CPUs than with W
    row-major. Only the summation order changes (float rounding, ~1e-6 relative).
fast — changes the numbers, for speed (`FastSettings`):
    * int8 dynamic quantisation of the LLM linears (per-channel int8 weights, activations quantised
      per call): a quarter of the bytes per decoded token;
    * a bfloat16 copy of the flow estimator where the CPU has native bf16 dot products (AVX512-BF16
      or AMX), with its time embedding kept in float32 (t·1000 in bf16 would be off by up to ~1 rad);
    * fewer Euler steps and a shorter flow prompt (applied by the engine).

Not here: choosing the precision (loader.py) or measuring its effect (benchmarks/bench_engine.py).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import torch
from torch import nn

log = logging.getLogger(__name__)

PRECISIONS = ("stock", "fast")


@dataclass(frozen=True)
class FastSettings:
    """What `precision="fast"` changes. Each field can be switched off on its own (benchmarks, tests)."""

    int8_llm: bool = True
    bf16_estimator: bool = True  # only taken where `bf16_is_native()`
    n_timesteps: int = 5  # flow Euler steps (stock: the yaml's 10); an explicit n_timesteps wins
    flow_prompt_seconds: float = 3.0  # keep the last this-many seconds of the prompt in the flow


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

    def __init__(self, estimator: nn.Module) -> None:
        super().__init__()
        for name, child in estimator.named_children():
            if name != "time_mlp":
                child.to(torch.bfloat16)
        self.inner = estimator

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, mu: torch.Tensor, t: torch.Tensor,
                spks: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Same arguments and shapes as `ConditionalDecoder.forward`; `t` stays float32."""
        low = torch.bfloat16
        v = self.inner(x.to(low), mask, mu.to(low), t.float(), spks.to(low), cond.to(low))
        return v.float()


def apply_precision(llm: nn.Module, flow: nn.Module, precision: str, device: str,
                    fast: FastSettings | None = None) -> dict[str, str]:
    """Apply `precision` to loaded models in place; returns what was done (for `EngineInfo.extras`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {PRECISIONS}")
    done: dict[str, str] = {"precision": precision}
    on_cpu = device == "cpu"
    if precision == "stock":
        if on_cpu:
            column_major_linears(llm)
            done["llm"] = "fp32 (column-major linears)"
        else:
            done["llm"] = "fp32"
        done["flow"] = "fp32"
        return done
    fast = fast or FastSettings()
    if fast.int8_llm and on_cpu:
        # spk_embed_affine_layer's weight is read directly (its dtype/device), so it stays a float Linear.
        count = quantize_linears_int8(llm, skip=("spk_embed_affine_layer",))
        done["llm"] = f"int8 dynamic ({count} linears)"
    else:
        done["llm"] = "fp32"
    if fast.bf16_estimator and on_cpu and bf16_is_native():
        flow.decoder.estimator = Bf16Estimator(flow.decoder.estimator)
        done["flow"] = "bf16 estimator"
    else:
        done["flow"] = "fp32"
    done["flow_steps"] = str(fast.n_timesteps)
    done["flow_prompt_seconds"] = f"{fast.flow_prompt_seconds:g}"
    log.info("fast precision: %s", done)
    return done


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
