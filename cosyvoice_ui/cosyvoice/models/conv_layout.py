"""Time-major convolutions for the vocoder's convolution stack: [B, C, T] tensors kept in memory as [B, T, C].

oneDNN's CPU convolutions work on channels-last data. Handed a plain [B, C, T] tensor (what `nn.Conv1d` passes),
each call reorders its input into that layout and its output back, and on a v3 vocoder those reorders were a
third of the whole vocoder's time (issue 26, seventeenth pass: `aten::copy_` inside `mkldnn_convolution`, 0.26 of
0.93 s). A 1-D signal whose memory runs time-major is a channels-last 2-D image of height one, so these helpers run
each convolution as `conv2d` on the `[B, C, 1, T]` view of such a tensor, with weights kept in the matching layout:
no reorders, and the output comes back time-major for the next layer. The element-wise layers between (Snake,
LeakyReLU, sums) keep their input's layout; padding and concatenation happen on the 4-D view, where torch keeps
channels-last.

The same sums in the same order as the plain layout on oneDNN (measured: bit-identical outputs in bf16); only the
memory order differs. A tensor that is not time-major is copied into it first, so results never depend on it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def is_time_major(x: torch.Tensor) -> bool:
    """True when the [B, C, T] tensor's channels are adjacent in memory (stride 1 along C) and time steps are C
    apart: the channels-last layout of its [B, C, 1, T] view."""
    return x.dim() == 3 and (x.size(1) == 1 or x.stride(1) == 1) and (x.size(2) == 1 or x.stride(2) == x.size(1))


def time_major(x: torch.Tensor) -> torch.Tensor:
    """`x` [B, C, T] with its memory in [B, T, C] order (x itself when it already is)."""
    return x if is_time_major(x) else x.transpose(1, 2).contiguous().transpose(1, 2)


def image(x: torch.Tensor) -> torch.Tensor:
    """The [B, C, 1, T] channels-last view of a [B, C, T] tensor (copied into time-major order first if needed)."""
    return time_major(x).unsqueeze(2)


def signal(x4: torch.Tensor) -> torch.Tensor:
    """Back from a [B, C, 1, T] image to [B, C, T] (a view)."""
    return x4.squeeze(2)


def pad_time(x: torch.Tensor, left: int, right: int = 0) -> torch.Tensor:
    """Zeros before and after a time-major signal along time, keeping its layout."""
    if not (left or right):
        return x
    return signal(F.pad(image(x), (left, right)))


def concat_time(pieces: list[torch.Tensor]) -> torch.Tensor:
    """Time-major signals joined along time, keeping the layout."""
    return signal(torch.cat([image(p) for p in pieces], dim=3))


def reflect_one_left(x: torch.Tensor) -> torch.Tensor:
    """`F.pad(x, (1, 0), mode="reflect")` for a time-major signal, keeping its layout: sample 1, then x."""
    return concat_time([x[..., 1:2], x])


class TimeMajorConv:
    """Mixed into the vocoder's Conv1d / ConvTranspose1d layers: after `use_time_major()` their weights are kept
    channels-last ([out, in, k] with `in` adjacent) and `forward` runs on time-major signals through `conv2d`
    (`conv_transpose2d`). Before it, the layer is the plain torch layer. State-dict keys and shapes stay as they
    were; only the weight's memory order changes."""

    time_major = False

    def use_time_major(self) -> None:
        self.weight.data = time_major(self.weight.data)
        self.time_major = True

    def _conv_image(self, x4: torch.Tensor) -> torch.Tensor:
        """The layer's own convolution (its stride, dilation and built-in padding) on a [B, C, 1, T] image."""
        assert isinstance(self, nn.Conv1d)
        return F.conv2d(x4, self.weight.unsqueeze(2), self.bias, (1, self.stride[0]), (0, self.padding[0]),
                        (1, self.dilation[0]), self.groups)

    def _causal_image(self, x4: torch.Tensor, left: int) -> torch.Tensor:
        """The layer's convolution after `left` zeros before the image's samples (a causal layer without built-in
        padding). The zeros are written out: asked to pad inside the call (both sides, the extra outputs
        dropped), oneDNN took 1.3x the whole vocoder's time here and rounded differently."""
        return self._conv_image(F.pad(x4, (left, 0)) if left else x4)


class Conv1d(TimeMajorConv, nn.Conv1d):
    """`nn.Conv1d` that can run time-major (`TimeMajorConv`); same keys and numbers as torch's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.time_major:
            return super().forward(x)
        return signal(self._conv_image(image(x)))


class ConvTranspose1d(TimeMajorConv, nn.ConvTranspose1d):
    """`nn.ConvTranspose1d` that can run time-major (`TimeMajorConv`); same keys and numbers as torch's."""

    def forward(self, x: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        if not self.time_major or output_size is not None:
            return super().forward(x, output_size)
        y = F.conv_transpose2d(image(x), self.weight.unsqueeze(2), self.bias, (1, self.stride[0]),
                               (0, self.padding[0]), (0, self.output_padding[0]), self.groups, (1, self.dilation[0]))
        return signal(y)


def use_time_major(module: nn.Module) -> int:
    """Every `TimeMajorConv` layer under `module` made time-major, in place; returns how many."""
    layers = [m for m in module.modules() if isinstance(m, TimeMajorConv)]
    for layer in layers:
        layer.use_time_major()
    return len(layers)
