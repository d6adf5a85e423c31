"""The neural-source-filter excitation of HiFT: f0 (Hz, at sample rate) → harmonic source signal.

Shapes: B batch, H = nb_harmonics + 1 sine channels (fundamental + overtones), L samples.

The v1/v2 source is random: every call draws a phase offset per overtone and Gaussian noise. The
draws are gathered in `NSFNoise`, made in upstream's order by the sine generator's `draw` from a
caller's `torch.Generator`, so a generator seeded like a golden's recipe reproduces upstream sample
for sample, and a test can also hand in draws made some other way (e.g. one generator per draw).
The v3 source (`CausalSineGen2`) draws nothing: its noise is fixed at construction (`FixedNSFNoise`),
and its `draw` serves that.

Which sine generator a family uses is the registry's choice (upstream picks by sample rate: `SineGen`
at 22050 Hz for v1, `SineGen2` for v2 at 24 kHz, the causal variant `CausalSineGen2` for v3);
`SourceModuleHnNSF` takes it as an argument. All take (sampling_rate, harmonic_num, sine_amp,
noise_std, voiced_threshold, upsample_scale).

Not here: the f0 predictor, f0 up-sampling and the STFT of the source (see `hift.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

@dataclass(frozen=True)
class NSFNoise:
    """The random draws of one source call.

    phase: [B, H, 1] initial phase offsets as drawn, in the generator's unit: radians, Uniform(-pi, pi)
        for `SineGen`; cycles, Uniform[0, 1) for `SineGen2` (channel 0 is zeroed when used: the
        fundamental has no offset).
    sine: [B, H, L] standard normal (v3: the fixed uniform buffer), scaled per sample by the
        voiced/unvoiced noise amplitude.
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
                 voiced_threshold: float, upsample_scale: int = 1) -> None:
        super().__init__()
        self.sampling_rate = sampling_rate
        self.harmonic_num = harmonic_num
        self.sine_amp = sine_amp
        self.noise_std = noise_std
        self.voiced_threshold = voiced_threshold
        # Samples per mel frame; unused here (the phase is integrated per sample), kept so every sine
        # generator takes the same arguments.
        self.upsample_scale = upsample_scale

    def draw(self, batch: int, length: int, generator: torch.Generator | None = None,
             device: torch.device | str | None = None) -> NSFNoise:
        """This generator's random draws for one call, in upstream's order (see `NSFNoise.draw`)."""
        return NSFNoise.draw(batch, self.harmonic_num + 1, length, generator, device)

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
    """v2 sine generator (24 kHz; upstream's choice for any rate but v1's): the phase is integrated at
    frame rate and interpolated back to samples.

    r_h = (h*f0/sr) mod 1 per sample; the initial-phase draw (in cycles, fundamental zeroed) is added
    to sample 0 only; r is linearly down-sampled by 1/U (U = `upsample_scale` samples per frame, giving
    each frame its own value), cumsum * 2*pi, times U, and linearly up-sampled by U (`up_mode`). Then
    0.1*sin, with uv and noise as in `SineGen`. Holds no parameters; randomness comes in an `NSFNoise`
    (`draw`). Arithmetic and tensor layout ([B, L, H]) follow upstream op by op, so the same draws give
    the same samples.
    """

    up_mode = "linear"

    def __init__(self, sampling_rate: int, harmonic_num: int, sine_amp: float, noise_std: float,
                 voiced_threshold: float, upsample_scale: int = 1) -> None:
        super().__init__()
        self.sampling_rate = sampling_rate
        self.harmonic_num = harmonic_num
        self.sine_amp = sine_amp
        self.noise_std = noise_std
        self.voiced_threshold = voiced_threshold
        self.upsample_scale = upsample_scale

    def draw(self, batch: int, length: int, generator: torch.Generator | None = None,
             device: torch.device | str | None = None) -> NSFNoise:
        """Draw in upstream's order: initial phase rand(B, H) (cycles), sine noise randn(B, L, H), then the
        unused noise-branch randn(B, L, 1) (consumed so a shared generator stays in step with upstream).
        Returned as `NSFNoise` (phase [B, H, 1] in cycles, sine [B, H, L])."""
        h = self.harmonic_num + 1
        gen_device = generator.device if generator is not None else torch.device("cpu")
        ini = torch.rand(batch, h, generator=generator, device=gen_device)
        sine = torch.randn(batch, length, h, generator=generator, device=gen_device)
        torch.randn(batch, length, 1, generator=generator, device=gen_device)  # unused noise branch
        target = gen_device if device is None else torch.device(device)
        return NSFNoise(phase=ini.unsqueeze(-1).to(target), sine=sine.transpose(1, 2).to(target))

    def phase(self, f0: torch.Tensor, initial_phase: torch.Tensor) -> torch.Tensor:
        """f0: [B, L, 1] Hz, initial_phase: [B, H] cycles → phase [B, L', H] radians (L' = L when L is a
        whole number of frames)."""
        h = torch.arange(1, self.harmonic_num + 2, device=f0.device, dtype=f0.dtype).view(1, 1, -1)
        rad = (f0 * h / self.sampling_rate) % 1
        ini = initial_phase.to(device=f0.device, dtype=f0.dtype).clone()
        ini[:, 0] = 0
        rad[:, 0, :] = rad[:, 0, :] + ini
        u = self.upsample_scale
        rad = F.interpolate(rad.transpose(1, 2), scale_factor=1 / u, mode="linear").transpose(1, 2)
        phase = torch.cumsum(rad, dim=1) * 2 * math.pi
        return F.interpolate(phase.transpose(1, 2) * u, scale_factor=u, mode=self.up_mode).transpose(1, 2)

    def forward(self, f0: torch.Tensor, noise: NSFNoise) -> torch.Tensor:
        """f0: [B, 1, L] Hz → sine channels [B, H, L]."""
        f0_t = f0.transpose(1, 2)  # [B, L, 1], upstream's layout
        sines = torch.sin(self.phase(f0_t, noise.phase.squeeze(-1))) * self.sine_amp
        uv = (f0_t > self.voiced_threshold).to(f0.dtype)
        noise_amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        n = noise.sine.to(device=f0.device, dtype=f0.dtype).transpose(1, 2)
        return (sines * uv + noise_amp * n).transpose(1, 2)


@dataclass(frozen=True)
class FixedNSFNoise:
    """The v3 source's noise: drawn once at construction upstream, never per call.

    rand_ini: [1, H] initial phases in cycles (added to sample 0 only: no effect on the output).
    sine_state: a CPU `torch.Generator` state from which `torch.rand(1, max_samples, H)` is the uniform
        [0, 1) noise buffer (not Gaussian); CPU uniform draws are serial, so any prefix of it is
        `torch.rand(1, L, H)` from that state: the buffer (~260 MB at full length) is never held.
    max_samples: the buffer's length (upstream: 300 s), the longest source it can serve.
    """

    rand_ini: torch.Tensor
    sine_state: torch.Tensor
    max_samples: int

    @classmethod
    def from_generator(cls, generator: torch.Generator, harmonics: int, max_samples: int) -> FixedNSFNoise:
        """Draw as upstream's constructor does: rand(1, H) (then [:, 0] = 0), then the buffer's state."""
        ini = torch.rand(1, harmonics, generator=generator)
        ini[:, 0] = 0
        return cls(rand_ini=ini, sine_state=generator.get_state(), max_samples=max_samples)

    def sine(self, length: int) -> torch.Tensor:
        """The buffer's first `length` samples, [1, length, H]."""
        if length > self.max_samples:
            raise ValueError(f"a {length}-sample source exceeds the fixed noise buffer ({self.max_samples} samples)")
        g = torch.Generator()
        g.set_state(self.sine_state)
        return torch.rand(1, length, self.rand_ini.size(1), generator=g)


def replay_rng(generator: torch.Generator, ops: list[tuple[str, tuple[int, ...]]]) -> None:
    """Consume `generator` as upstream's construction-time calls do (op names: randn, rand, normal_,
    uniform_), with dummy tensors of the given shapes; used to reach the state of a fixed buffer."""
    for op, shape in ops:
        if op == "randn":
            torch.randn(*shape, generator=generator)
        elif op == "rand":
            torch.rand(*shape, generator=generator)
        elif op in ("normal_", "uniform_"):
            getattr(torch.empty(*shape), op)(generator=generator)
        else:
            raise ValueError(f"unknown RNG op {op!r}")


class CausalSineGen2(SineGen2):
    """v3 sine generator: `SineGen2` with **nearest** phase up-sampling (a staircase the model was trained
    with) and fixed noise (`FixedNSFNoise`, set with `set_fixed_noise`) instead of random draws."""

    up_mode = "nearest"

    def __init__(self, sampling_rate: int, harmonic_num: int, sine_amp: float, noise_std: float,
                 voiced_threshold: float, upsample_scale: int = 1) -> None:
        super().__init__(sampling_rate, harmonic_num, sine_amp, noise_std, voiced_threshold, upsample_scale)
        self.fixed_noise: FixedNSFNoise | None = None

    def set_fixed_noise(self, noise: FixedNSFNoise) -> None:
        if noise.rand_ini.size(1) != self.harmonic_num + 1:
            raise ValueError(f"fixed noise has {noise.rand_ini.size(1)} harmonics, not {self.harmonic_num + 1}")
        self.fixed_noise = noise

    def draw(self, batch: int, length: int, generator: torch.Generator | None = None,
             device: torch.device | str | None = None) -> NSFNoise:
        """The fixed noise's first `length` samples for every row (`generator` is not used)."""
        if self.fixed_noise is None:
            raise RuntimeError("the causal source has no fixed noise: call set_fixed_noise first")
        fixed = self.fixed_noise
        phase = fixed.rand_ini.unsqueeze(-1).expand(batch, -1, -1)
        sine = fixed.sine(length).transpose(1, 2).expand(batch, -1, -1)
        target = torch.device("cpu") if device is None else torch.device(device)
        return NSFNoise(phase=phase.to(target), sine=sine.to(target))

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
