"""The neural-source-filter excitation of HiFT: f0 (Hz, at sample rate) → harmonic source signal.

Shapes: B batch, H = nb_harmonics + 1 sine channels (fundamental + overtones), L samples.

The source is random: every call draws a phase offset per overtone and Gaussian noise. The draws
are gathered in `NSFNoise`, made in upstream's order from a caller's `torch.Generator`, so a
generator seeded like a golden's recipe reproduces upstream sample for sample, and a test can also
hand in draws made some other way (e.g. one generator per draw).

Which sine generator a family uses is the registry's choice (upstream picks by sample rate: `SineGen`
at 22050 Hz for v1, `SineGen2` for the 24 kHz v2/v3); `SourceModuleHnNSF` takes it as an argument.

Not here: the f0 predictor, f0 up-sampling and the STFT of the source (see `hift.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

@dataclass(frozen=True)
class NSFNoise:
    """The random draws of one source call.

    phase: [B, H, 1] Uniform(-pi, pi) offsets as drawn (channel 0 is zeroed when used: the
        fundamental has no offset).
    sine: [B, H, L] standard normal, scaled per sample by the voiced/unvoiced noise amplitude.
    """

    phase: torch.Tensor
    sine: torch.Tensor

    @classmethod
    def draw(
        cls,
        batch: int,
        harmonics: int,
        length: int,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> NSFNoise:
        """Draw in upstream's order: phase, sine noise, then the noise-branch draw [B, L, 1].

        The last draw is unused at inference, but upstream makes it, so it is consumed here too:
        otherwise a generator shared with later calls would drift from upstream's stream.
        Draws happen on the generator's device (CPU when there is none) and move to `device`.
        """
        gen_device = generator.device if generator is not None else torch.device("cpu")
        u = torch.rand(batch, harmonics, 1, generator=generator, device=gen_device)
        # Same arithmetic as torch.distributions.Uniform(-pi, pi).sample: low + u * (high - low).
        low, high = torch.tensor(-math.pi), torch.tensor(math.pi)
        phase = low.to(gen_device) + u * (high - low).to(gen_device)
        sine = torch.randn(batch, harmonics, length, generator=generator, device=gen_device)
        torch.randn(batch, length, 1, generator=generator, device=gen_device)  # unused noise branch
        target = gen_device if device is None else torch.device(device)
        return cls(phase=phase.to(target), sine=sine.to(target))


class SineGen(nn.Module):
    """v1 harmonic sine generator (22050 Hz): a phase accumulated per sample.

    phi_h[n] = 2*pi * frac(sum_{m<=n} h*f0[m]/sr) + rho_h. Unvoiced samples (f0 <= threshold) carry
    noise of std sine_amp/3 instead of the sine; voiced ones a sine plus noise of std noise_std.
    Holds no parameters (upstream's `l_sin_gen`).
    """

    def __init__(self, sampling_rate: int, harmonic_num: int, sine_amp: float, noise_std: float,
                 voiced_threshold: float) -> None:
        super().__init__()
        self.sampling_rate = sampling_rate
        self.harmonic_num = harmonic_num
        self.sine_amp = sine_amp
        self.noise_std = noise_std
        self.voiced_threshold = voiced_threshold

    def forward(self, f0: torch.Tensor, noise: NSFNoise) -> torch.Tensor:
        """f0: [B, 1, L] Hz → sine channels [B, H, L].

        Arithmetic follows upstream op by op (f0*h, then /sr, cumsum, mod 1): the float32 cumsum
        over tens of thousands of samples is order sensitive, and parity is judged at 5e-4.
        """
        h = torch.arange(1, self.harmonic_num + 2, device=f0.device, dtype=f0.dtype).view(1, -1, 1)
        freq = f0 * h / self.sampling_rate  # cycles per sample, [B, H, L]
        theta = 2 * math.pi * (torch.cumsum(freq, dim=-1) % 1)
        phase = noise.phase.to(device=f0.device, dtype=f0.dtype).clone()
        phase[:, 0, :] = 0
        sines = self.sine_amp * torch.sin(theta + phase)
        uv = (f0 > self.voiced_threshold).to(f0.dtype)  # [B, 1, L]
        noise_amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        return sines * uv + noise_amp * noise.sine.to(device=f0.device, dtype=f0.dtype)


class SineGen2(nn.Module):
    """v2/v3 sine generator (24 kHz, frame-rate phase integration). Not implemented yet.

    It has no parameters, so v2 `hift.pt` files still load; only generating a source fails.
    """

    def __init__(self, sampling_rate: int, harmonic_num: int, sine_amp: float, noise_std: float,
                 voiced_threshold: float) -> None:
        super().__init__()
        self.sampling_rate = sampling_rate
        self.harmonic_num = harmonic_num

    def forward(self, f0: torch.Tensor, noise: NSFNoise) -> torch.Tensor:
        raise NotImplementedError(
            f"the {self.sampling_rate} Hz HiFT source (SineGen2, CosyVoice2/3) is not implemented yet; "
            "only the v1 source (SineGen) is available")


class SourceModuleHnNSF(nn.Module):
    """Harmonic-plus-noise source: the sine channels of `sine_generator` (a `SineGen` or `SineGen2`, the
    family's) merged by `l_linear` (H → 1) and tanh.

    Does not draw noise itself: `forward` takes an `NSFNoise` (see `NSFNoise.draw`). Upstream's
    separate noise branch and uv outputs are unused by the vocoder and not produced.
    """

    def __init__(self, sine_generator: SineGen | SineGen2) -> None:
        super().__init__()
        self.l_sin_gen = sine_generator
        self.l_linear = nn.Linear(sine_generator.harmonic_num + 1, 1)

    @property
    def harmonics(self) -> int:
        """H, the number of sine channels."""
        return self.l_linear.in_features

    def forward(self, f0: torch.Tensor, noise: NSFNoise) -> torch.Tensor:
        """f0: [B, 1, L] Hz at the sample rate → excitation [B, 1, L] in (-1, 1)."""
        sines = self.l_sin_gen(f0, noise)  # [B, H, L]
        return torch.tanh(self.l_linear(sines.transpose(1, 2))).transpose(1, 2)
