"""The pre-lookahead convolution of the causal flows (`PreLookaheadLayer`).

Each token frame sees itself plus the next `pre_lookahead_len` frames (conv1, kernel L+1, no padding, after
a right pad of exactly L frames), then the two previous conv1 outputs (conv2, kernel 3, causal left pad of
2), and the input is added back. When the token list is still growing (streaming, not final) the caller
passes the L look-ahead frames as `context`: they fill the right pad instead of zeros, so the last real
frames see the tokens that follow them, yet produce no output of their own.

Used by the token encoder of the causal token-to-mel flow (widths = encoder width) and directly on the
token embeddings by the DiT flow (80 → 1024 → 80). Shapes: B batch, T frames, C = in_channels,
H = hidden channels, L = look-ahead frames. Time-major in and out, as upstream.

Not here: splitting the context off the token list (the flows do that), the encoder around it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PreLookaheadLayer(nn.Module):
    """x + conv2(causal_pad(leaky_relu(conv1(right_pad(x, context))))). Keys `conv1.*`, `conv2.*`.

    Does not: keep state between calls (the look-ahead is given explicitly each time).
    """

    def __init__(self, in_channels: int, channels: int, out_channels: int | None = None,
                 pre_lookahead_len: int = 3) -> None:
        """in_channels → channels (conv1) → out_channels (conv2); out_channels defaults to in_channels and
        must equal it, because of the residual."""
        super().__init__()
        out_channels = in_channels if out_channels is None else out_channels
        if out_channels != in_channels:
            raise ValueError(f"the residual needs out_channels == in_channels, got {out_channels} != {in_channels}")
        if pre_lookahead_len < 1:
            raise ValueError(f"pre_lookahead_len must be at least 1, got {pre_lookahead_len}")
        self.pre_lookahead_len = pre_lookahead_len
        self.conv1 = nn.Conv1d(in_channels, channels, pre_lookahead_len + 1)
        self.conv2 = nn.Conv1d(channels, out_channels, 3)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """Args:
            x: [B, T, C] frames that produce output.
            context: [B, ≤L, C] the frames after x (look-ahead only), or None / empty: zeros instead.
        Returns: [B, T, C].
        """
        h = x.transpose(1, 2)
        lookahead = self.pre_lookahead_len
        if context is not None and context.size(1) > 0:
            if context.size(1) > lookahead:
                raise ValueError(f"context has {context.size(1)} frames, at most {lookahead} are looked ahead")
            h = torch.cat([h, context.transpose(1, 2).to(h)], dim=2)
            lookahead -= context.size(1)
        # Right pad to exactly L frames past x, so conv1 (kernel L+1, no padding) returns T frames.
        h = F.leaky_relu(self.conv1(F.pad(h, (0, lookahead))), 0.01)
        h = self.conv2(F.pad(h, (self.conv2.kernel_size[0] - 1, 0)))  # causal: left pad only
        return h.transpose(1, 2) + x
