"""`KernelInt8Linear`: an int8 linear on this project's own AVX-512 VNNI kernel (`kernels/int8_linear.cpp`).

Decoding steps are one-row products bound by how fast the weights stream. fbgemm's dynamic linear streams a v3
decoding step's 121 int8 linears at ~21 GB/s on 2 threads of an AMD Zen 4 where a plain read runs 32-52 GB/s;
this kernel's layout is one sequential stream per layer, and the decode took 0.70-0.99x fbgemm's time per token
(issue 26, fifteenth pass, alternating runs). Calls of many rows (a prefill) run the same kernel, block by block, at
about fbgemm's speed or better.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear

from ..kernels import pack_levels
from .linears import symmetric_int8_weights


class KernelInt8Linear(nn.Module):
    """An int8 linear on this project's own kernel (`kernels/int8_linear.cpp`, AVX-512 VNNI): the same int8
    weights per output channel as the fbgemm layer it replaces, in a layout that streams as one sequence, and
    activations quantised per row to 8 bits with a symmetric scale (fbgemm: one 7-bit range per call). A row's
    output does not depend on the other rows of a call, so a batched decoding step gives each request the numbers
    it gets alone, and a prefill the numbers of one-row steps. Made after loading (and after any prepared copy is
    written) by `from_dynamic`; inference only, CPU only; non-persistent buffers, so a recorded decoding step can
    hold them."""

    def __init__(self, weight: torch.Tensor, out_features: int, in_features: int, scales: torch.Tensor,
                 sums: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_blocks", weight, persistent=False)
        self.register_buffer("weight_scale", scales, persistent=False)
        self.register_buffer("weight_sum", sums, persistent=False)
        self.register_buffer("bias", bias, persistent=False)

    @classmethod
    def from_dynamic(cls, dynamic: DynamicQuantLinear) -> KernelInt8Linear:
        """The layer for `dynamic`'s own int8 weights (ValueError where they have zero points)."""
        levels, scales, bias = symmetric_int8_weights(dynamic)
        return cls(pack_levels(levels), levels.size(0), levels.size(1), scales.float().contiguous(),
                   levels.sum(dim=1, dtype=torch.int32), None if bias is None else bias.float().contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in_features] float32 → [..., out_features]."""
        y = torch.ops.cosyvoice_kernels.int8_linear(x.reshape(-1, self.in_features), self.weight_blocks,
                                                    self.out_features, self.weight_scale, self.weight_sum, self.bias)
        return y.reshape(x.shape[:-1] + (self.out_features,))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def int8_linears_on_kernel(module: nn.Module) -> int:
    """Replace every plain int8 dynamic linear under `module` by a `KernelInt8Linear`, in place, one layer at a
    time (its fbgemm copy is freed as the new one is made); returns how many. A layer whose weights have zero points
    (not what this project's quantisation makes) stays on fbgemm. Call only when `kernels.int8_linear_available()`."""
    count = 0
    # Names only: holding the layers themselves would keep every fbgemm copy alive until the last is replaced.
    for name in [name for name, m in module.named_modules() if type(m) is DynamicQuantLinear]:
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        try:
            replacement = KernelInt8Linear.from_dynamic(getattr(parent, child))
        except ValueError:
            continue
        setattr(parent, child, replacement)  # the fbgemm layer goes here
        count += 1
    return count
