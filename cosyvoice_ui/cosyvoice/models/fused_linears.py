"""Linears with their activation inside oneDNN's product (issue 26, seventeenth pass).

A bf16 DiT feed-forward's tanh GELU, run by torch as its own pass over a [B, T, 4D] tensor, cost more than the product
before it (5.6 against ~1.7 ms fused). `fuse_linear_gelus` turns each `nn.Sequential(nn.Linear, nn.GELU)` into one
`linears.PackedLinear` with the GELU as a oneDNN post-op: applied to the float32 sums before the one rounding to the
output's dtype. `linears.unpack_linears` restores the pair and its keys.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from .linears import PackedLinear, onednn_linear_works


@functools.cache  # a property of this machine and torch build, per dtype: probed once per process
def onednn_fused_gelu_works(dtype: torch.dtype) -> bool:
    """True when oneDNN's packed inner product with a fused GELU (both forms) runs in `dtype` here and agrees with
    the plain layer followed by torch's GELU (to one rounding of `dtype`)."""
    if not onednn_linear_works():
        return False
    try:
        generator = torch.Generator().manual_seed(0)  # a private RNG: the global one stays untouched
        linear = nn.utils.skip_init(nn.Linear, 64, 48, dtype=dtype)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(48, 64, generator=generator) * 0.2)
            linear.bias.copy_(torch.randn(48, generator=generator))
        x = torch.randn(5, 64, generator=generator).to(dtype)
        with torch.inference_mode():
            for approximate, activation in (("tanh", "gelu_tanh"), ("none", "gelu")):
                expected = F.gelu(linear(x).float(), approximate=approximate)
                got = PackedLinear(linear, activation)(x).float()
                if got.dtype != torch.float32 or not torch.allclose(got, expected, rtol=2e-2, atol=2e-2):
                    return False
        return True
    except (RuntimeError, TypeError):
        return False


def fuse_linear_gelus(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Replace every `nn.Sequential(nn.Linear, nn.GELU)` under `module` (except under the child names in `skip`) by
    one `PackedLinear` that applies the GELU inside oneDNN's call, in place; returns how many. `unpack_linears`
    restores the pair (same keys)."""
    def fusable(name: str, m: nn.Module) -> bool:
        return (isinstance(m, nn.Sequential) and len(m) == 2 and type(m[0]) is nn.Linear
                and type(m[1]) is nn.GELU and not any(name == s or name.startswith(s + ".") for s in skip))

    targets = [(name, m) for name, m in module.named_modules() if name and fusable(name, m)]
    for name, pair in targets:
        parent_name, _, child = name.rpartition(".")
        activation = "gelu_tanh" if pair[1].approximate == "tanh" else "gelu"
        setattr(module.get_submodule(parent_name) if parent_name else module, child, PackedLinear(pair[0], activation))
    return len(targets)
