"""The fixed-noise flow-matching sampler of the causal flows (`CausalConditionalCFM`).

Same Euler ODE and classifier-free guidance as `ConditionalCFM` (`cfm.py`), with two differences:

* Noise: one fixed standard-normal buffer [1, F, 15000] is drawn when the sampler is built, from a seed-0
  CPU generator (upstream reseeds every global RNG with 0 and calls `torch.randn`; a private generator
  gives the same numbers without touching the caller's RNG). A call of T frames uses its first T columns,
  so a frame index always gets the same noise: re-running the flow over a growing token list keeps the
  earlier frames consistent, which is what streaming relies on (no v1-style noise cache).
* The estimator is told whether the call is streaming, so its attention is chunk-causal then.

Shapes: F mel bins (80), T = prompt + generated frames (≤ the buffer's 15000, 300 s at 50 Hz). B = 1.

Not here: the estimator (passed in: the causal U-Net or the DiT), the token encoder and prompt slicing.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from ..config import CFMConfig
from .cfm import ConditionalCFM, euler_steps, time_grid
from .estimators.dit_stream import DiTStreamState

log = logging.getLogger(__name__)

NOISE_FRAMES = 15000  # upstream: 50 frames/s × 300 s
NOISE_SEED = 0


def fixed_noise(mel_bins: int = 80, frames: int = NOISE_FRAMES, seed: int = NOISE_SEED) -> torch.Tensor:
    """[1, mel_bins, frames] float32 on CPU: one `randn` of the whole tensor from a fresh CPU generator
    seeded `seed` (the same numbers as `torch.manual_seed(seed); torch.randn(...)`; drawing only a
    prefix would give other numbers for a different total size)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn([1, mel_bins, frames], generator=generator, dtype=torch.float32)


class CausalConditionalCFM(ConditionalCFM):
    """Euler solver with guidance around an `estimator(x, mask, mu, t, spks, cond, streaming=...)`: the
    solver and the guidance are `ConditionalCFM`'s; the noise and the `streaming` flag are this class's.

    `rand_noise` is a plain attribute, not a registered buffer: it is not in `flow.pt`, and `.to(device)`
    of the module leaves it on the CPU (each call moves the slice it needs).

    Does not: draw noise per call, keep a cache between calls, or slice off the prompt (the flow does).
    """

    def __init__(self, cfg: CFMConfig, estimator: nn.Module, mel_bins: int = 80,
                 noise_frames: int = NOISE_FRAMES) -> None:
        """mel_bins: rows of the noise buffer (the estimator's output channels)."""
        super().__init__(cfg, estimator, overlap_frames=0)
        self.rand_noise = fixed_noise(mel_bins, noise_frames)

    def initial_noise(self, frames: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The first `frames` columns of the fixed buffer [1, F, frames]."""
        if frames > self.rand_noise.size(2):
            raise ValueError(f"{frames} mel frames exceed the fixed noise buffer ({self.rand_noise.size(2)} frames)")
        return self.rand_noise[:, :, :frames].to(device=device, dtype=dtype)

    def forward(  # type: ignore[override]  # no cache in or out: the fixed noise replaces it
        self,
        mu: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
        mask: torch.Tensor | None = None,
        n_timesteps: int | None = None,
        temperature: float = 1.0,
        streaming: bool = False,
        noise: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Sample a mel.

        Args:
            mu: [1, F, T] frame-aligned token encoding; spks: [1, F]; cond: [1, F, T] prompt mel then zeros.
            mask: [1, 1, T] valid frames, or None (all valid, as at B = 1).
            n_timesteps: Euler steps (default: the config's, 10).
            temperature: noise scale.
            streaming: chunk-causal attention in the estimator.
            noise: [1, F, T] a draw to use instead of the fixed buffer (tests, experiments).
        Returns: mel [1, F, T] float32, prompt frames included.
        """
        steps = self.n_timesteps if n_timesteps is None else n_timesteps
        if noise is None:
            noise = self.initial_noise(mu.size(2), mu.device, mu.dtype)
        elif noise.shape != mu.shape:
            raise ValueError(f"noise has shape {tuple(noise.shape)}, expected {tuple(mu.shape)} (the shape of mu)")
        z = noise.to(device=mu.device, dtype=mu.dtype) * temperature
        log.debug("causal cfm: %d frames, %d steps, streaming=%s", mu.size(2), steps, streaming)
        return self.solve_euler(z, mu, spks, cond, mask, steps, streaming=streaming)

    def sample_from(self, mu: torch.Tensor, spks: torch.Tensor, cond: torch.Tensor, state: DiTStreamState,
                    n_timesteps: int | None = None, temperature: float = 1.0) -> torch.Tensor:
        """A streaming (chunk-causal) sample of frames [state.frames, T) only, the earlier frames' part of every
        Euler step read from `state` (the estimator's `forward_from`); mu, cond [1, F, T] of all frames.
        Returns mel [1, F, T - state.frames] float32: what `forward(..., streaming=True)` gives for those
        frames. The caller commits the state (`state.commit(T)`) once the pass is used."""
        steps = self.n_timesteps if n_timesteps is None else n_timesteps
        start, frames = state.frames, mu.size(2)
        if not start < frames:
            raise ValueError(f"the state already holds {start} frames of this {frames}-frame pass")
        rows = 1 if self.inference_cfg_rate == 0 else 2
        if not state.matches(steps, rows):
            raise ValueError(f"the stream state was made for {state.steps} steps and {state.rows} rows, this pass "
                             f"runs {steps} and {rows}")
        x = self.initial_noise(frames, mu.device, mu.dtype)[:, :, start:] * temperature
        batch = self.guidance_batch(mu[:, :, start:], spks, cond[:, :, start:], None)
        w = self.inference_cfg_rate
        grid = time_grid(steps, self.t_scheduler, mu.device)
        log.debug("causal cfm: frames %d-%d of %d (kept %d), %d steps", start, frames, frames, start, steps)
        for index, (t, dt) in enumerate(euler_steps(grid)):
            b_mu, b_spks, b_cond, _ = batch
            v = self.estimator.forward_from(x.expand(rows, -1, -1), b_mu, t.to(x.dtype).reshape(1).expand(rows),
                                            b_spks, b_cond, start, state.step(index))
            if w != 0:
                v_cond, v_uncond = v.split(1)
                v = (1.0 + w) * v_cond - w * v_uncond
            x = x + dt.to(x.dtype) * v
        return x.float()
