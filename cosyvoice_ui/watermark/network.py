"""PerTh's two networks over the 0-2 kHz levels (`spectral.SUBBAND` bins × frames), with the checkpoint's
parameter names.

Each is a stack of 1-D convolutions across time: 128 → 256 channels (kernel 1), five 256 → 256 layers (kernel 7,
same length), 256 → out (kernel 1), a leaky ReLU after every layer but the last. The encoder's output (128
channels) is a residual added to the levels of the frames that carry sound. The decoder runs three such stacks:
on the levels as they are, stretched in time to 1.25× their length and squeezed to 0.75×; each gives a weight
and a mark per frame, averaged over the frames that carry sound; the three marks are blended by the softmax of
the three weights into one score (1: marked, 0: not).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import CheckpointError
from .spectral import SUBBAND, hann

HIDDEN = 256
KERNEL = 7
MIDDLE_LAYERS = 5
REACH = MIDDLE_LAYERS * (KERNEL // 2)  # frames on each side that one output frame depends on (15)
SPEEDS = (("slow_layers", 1.25), ("normal_layers", 1.0), ("fast_layers", 0.75))
BLOCK_FRAMES = 1024  # frames per pass of a stack on long signals (exact: each block sees REACH frames around it)


class _Layer(nn.Module):
    def __init__(self, channels_in: int, channels_out: int, kernel: int, activate: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels_in, channels_out, kernel, padding=kernel // 2)
        self.activate = activate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        return F.leaky_relu(x) if self.activate else x


def _stack(channels_out: int) -> nn.Sequential:
    middle = [_Layer(HIDDEN, HIDDEN, KERNEL) for _ in range(MIDDLE_LAYERS)]
    return nn.Sequential(_Layer(SUBBAND, HIDDEN, 1), *middle, _Layer(HIDDEN, channels_out, 1, activate=False))


def _in_blocks(stack: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """`stack` over [channels, T] in blocks of frames that each see `REACH` frames on either side: the
    whole-sequence answer (the convolutions reach no further), in memory bounded by the block size."""
    frames = x.shape[1]
    if frames <= BLOCK_FRAMES:
        return stack(x[None])[0]
    pieces = []
    for start in range(0, frames, BLOCK_FRAMES):
        end = min(frames, start + BLOCK_FRAMES)
        lo, hi = max(0, start - REACH), min(frames, end + REACH)
        pieces.append(stack(x[None, :, lo:hi])[0, :, start - lo:end - lo])
    return torch.cat(pieces, dim=1)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = _stack(SUBBAND)

    def residual(self, levels: torch.Tensor) -> torch.Tensor:
        """The change to the levels [SUBBAND, T] (before the mask), in blocks of frames (`_in_blocks`)."""
        return _in_blocks(self.layers, levels)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum(dim=-1) / mask.sum(dim=-1)


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for name, _ in SPEEDS:
            setattr(self, name, _stack(2))

    def score(self, levels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The mark's score (a 0-d tensor, about 0 unmarked and 1 marked) of levels [SUBBAND, T] with the voiced
        mask [T]."""
        frames = levels.shape[1]
        weights, marks = [], []
        for name, speed in SPEEDS:
            size = int(frames * speed)
            x, m = levels[None], mask[None, None]
            if size != frames:
                x = F.interpolate(x, size=size, mode="linear", align_corners=True)
                m = F.interpolate(m, size=size, mode="nearest")
            out = _in_blocks(getattr(self, name), x[0])[None]
            weights.append(_masked_mean(out[:, :1], m))
            marks.append(_masked_mean(out[:, 1:], m))
        attention = torch.softmax(torch.cat(weights, dim=1), dim=1)
        return (torch.cat(marks, dim=1) * attention).sum(dim=1)[0]


class PerthNetwork(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.window = hann()

    @classmethod
    def from_state(cls, state: dict) -> PerthNetwork:
        """The networks with the checkpoint's tensors (every parameter must be there, with its shape); the
        checkpoint's analysis window must be the periodic Hann window `spectral.py` uses."""
        network = cls()
        wanted = network.state_dict()
        found = {k: v for k, v in state.items() if k in wanted}
        missing = sorted(set(wanted) - set(found))
        wrong = sorted(k for k, v in found.items() if tuple(v.shape) != tuple(wanted[k].shape))
        if missing or wrong:
            raise CheckpointError(f"the watermark's weight file does not fit the network: "
                                  f"{len(missing)} missing and {len(wrong)} misshapen tensors")
        window = state.get("ap.spectrogram.window")
        if window is None or tuple(window.shape) != tuple(hann().shape):
            raise CheckpointError("the watermark's weight file names no analysis window of the size used here")
        apart = float((window.float() - hann()).abs().max())
        if not apart <= 1e-6:
            raise CheckpointError(f"the watermark's weight file uses another analysis window than the one here "
                                  f"(they differ by up to {apart:.2g})")
        network.load_state_dict(found, strict=True)
        network.window = window.float().clone()  # the analysis and synthesis window the network was trained with
        return network.eval().requires_grad_(False)
