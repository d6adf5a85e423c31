"""Causal 1-D convolutions of the v3 vocoder (upstream's `CausalConv1d`, `CausalConv1dDownSample`,
`CausalConv1dUpsample`). Each is an `nn.Conv1d` with no built-in padding, so its `weight`/`bias` keys are
those of the official `hift.pt`; the padding is added in `forward`. [B, C, L] in, [B, C', L'] out. Each can run
time-major (`conv_layout.TimeMajorConv`), padding on the channels-last view.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .conv_layout import TimeMajorConv, concat_time, image, signal


class CausalConv1d(TimeMajorConv, nn.Conv1d):
    """Stride-1 conv that keeps the length: (k-1)*dilation zeros on the left (`right=False`), or that many
    frames of right context (`right=True`: the caller's look-ahead frames, zeros when there are none)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 right: bool = False) -> None:
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation)
        self.causal_padding = (kernel_size - 1) * dilation
        self.right = right

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """context: [B, C, causal_padding] frames after `x` (right-sided convs only; None → zeros)."""
        if self.right:
            if context is None:
                context = x.new_zeros(x.size(0), x.size(1), self.causal_padding)
            elif context.size(-1) != self.causal_padding:
                raise ValueError(f"expected {self.causal_padding} context frames, got {context.size(-1)}")
            if self.time_major:
                return signal(self._conv_image(image(concat_time([x, context]))))
            x = torch.cat([x, context], dim=2)
        elif self.time_major:
            return signal(self._causal_image(image(x), self.causal_padding))
        elif self.causal_padding:
            x = F.pad(x, (self.causal_padding, 0))
        return super().forward(x)


class CausalDownsample(TimeMajorConv, nn.Conv1d):
    """Strided conv (kernel 2r, stride r) after r-1 zeros on the left: L → (L - 1) // r, which takes the
    source STFT's 120*T + 1 frames to a stage's frame count."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride)
        self.causal_padding = stride - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.time_major:
            return signal(self._causal_image(image(x), self.causal_padding))
        return super().forward(F.pad(x, (self.causal_padding, 0)))


class CausalUpsample(TimeMajorConv, nn.Conv1d):
    """Nearest ×stride repeat, k-1 zeros on the left, then a stride-1 conv: L → L*stride. Stands in for the
    non-causal vocoder's ConvTranspose1d (weights are [out, in, k], a Conv1d layout)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int) -> None:
        super().__init__(in_channels, out_channels, kernel_size)
        self.stride_up = stride
        self.causal_padding = kernel_size - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.time_major:  # the repeat on the channels-last image (same indices as the 1-D interpolate)
            x4 = F.interpolate(image(x), scale_factor=(1.0, float(self.stride_up)), mode="nearest")
            return signal(self._causal_image(x4, self.causal_padding))
        x = F.interpolate(x, scale_factor=float(self.stride_up), mode="nearest")
        return super().forward(F.pad(x, (self.causal_padding, 0)))
