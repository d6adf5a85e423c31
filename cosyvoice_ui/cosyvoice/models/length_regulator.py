"""Token-rate → mel-rate length regulator of the v1 flow (`InterpolateRegulator`), inference variant.

v1 speech tokens run at 50 Hz and mel frames at 22050/256 ≈ 86.13 Hz, so the token encoding is
linearly interpolated in time (half-pixel sampling, `align_corners=False`) and then smoothed by a
small conv stack. Shapes: B batch, C channels (80), T1/T2 prompt/generated tokens, M1/M2 frames.

Not here: the training-time variant (one interpolation of the whole padded batch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# Upstream splits the generated tokens into head / middle / tail when there are more than this many.
SPLIT_MIN_TOKENS = 40
# Head and tail length in tokens: the v1 streaming overlap, so overlapping tokens map to the same frames.
EDGE_TOKENS = 20


def edge_frames(input_frame_rate: float, mel_rate: float) -> int:
    """Mel frames for `EDGE_TOKENS` tokens: int(20 / 50 · 22050 / 256) = 34 for v1."""
    return int(EDGE_TOKENS / input_frame_rate * mel_rate)


def _stretch(x: torch.Tensor, frames: int) -> torch.Tensor:
    """Channel-major x [B, C, T] linearly resampled to [B, C, frames]."""
    return F.interpolate(x, size=frames, mode="linear", align_corners=False)


class InterpolateRegulator(nn.Module):
    """Interpolate prompt and generated token encodings to their mel lengths, then smooth.

    `model` = len(sampling_ratios) × [Conv1d(k3, same) → GroupNorm(groups) → Mish] → Conv1d(k1)
    (upstream's layout, keys `model.{0,1,3,4,...,12}`). The prompt part and the generated part are
    interpolated separately so the prompt/generated boundary falls exactly on frame M1; long
    generated parts are further split into head (20 tokens → 34 frames) / middle / tail (20 → 34),
    which keeps frames of the 20-token streaming overlap identical between consecutive chunks.
    """

    def __init__(self, channels: int, sampling_ratios: tuple[int, ...], input_frame_rate: float,
                 mel_rate: float, out_channels: int | None = None, groups: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in sampling_ratios:
            layers += [nn.Conv1d(channels, channels, 3, 1, 1), nn.GroupNorm(groups, channels), nn.Mish()]
        layers.append(nn.Conv1d(channels, out_channels or channels, 1, 1))
        self.model = nn.Sequential(*layers)
        self.edge = edge_frames(input_frame_rate, mel_rate)

    def inference(self, prompt: torch.Tensor, generated: torch.Tensor, mel_len1: int, mel_len2: int) -> torch.Tensor:
        """Args:
            prompt: [B, T1, C] encoding of the prompt tokens (T1 may be 0).
            generated: [B, T2, C] encoding of the tokens to synthesise.
            mel_len1, mel_len2: target frames M1 (prompt mel length) and M2.
        Returns: channel-major [B, C', M1 + M2] (upstream returns it time-major; the flow wants channels first).
        """
        g = generated.transpose(1, 2)
        if g.size(-1) > SPLIT_MIN_TOKENS:
            e = self.edge
            parts = [
                _stretch(g[:, :, :EDGE_TOKENS], e),
                _stretch(g[:, :, EDGE_TOKENS:-EDGE_TOKENS], mel_len2 - 2 * e),
                _stretch(g[:, :, -EDGE_TOKENS:], e),
            ]
        else:
            parts = [_stretch(g, mel_len2)]
        if prompt.size(1) > 0:
            parts.insert(0, _stretch(prompt.transpose(1, 2), mel_len1))
        return self.model(torch.cat(parts, dim=2))
