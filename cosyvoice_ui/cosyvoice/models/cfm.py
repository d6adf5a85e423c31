"""Conditional flow matching sampler for the v1 flow (`ConditionalCFM`): noise → mel by Euler steps.

Shapes: F = 80 mel bins, T = prompt + generated mel frames, C = cached frames. Inference is B = 1.

The ODE runs from t=0 (Gaussian noise) to t=1 (mel) on a cosine time grid. Every step evaluates the
estimator once on a batch of two — row 0 conditional (mu, spks, cond), row 1 unconditional (zeros)
— and combines them as v = (1 + w)·v_cond − w·v_uncond with w = `inference_cfg_rate`.

Randomness: the initial noise comes from an explicit `noise` tensor or from `torch.randn` with a
per-call `torch.Generator`; the global RNG is never used.

v1 streaming cache `[1, F, C, 2]` (channel 0 noise, 1 mu): the first C frames of noise and mu are
overwritten by the cache, and the returned cache holds the first `prompt_len` and last `overlap`
frames of both, so prompt and overlap frames see identical noise and conditioning across chunks.

Not here: the token encoder and length regulation (`flow.py`), the estimator itself (passed in; the
registry picks it: `estimators/unet.py` for v1), the fixed-noise v2/v3 variant.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from ..config import CFMConfig

log = logging.getLogger(__name__)

SCHEDULERS = ("cosine", "linear")


def time_grid(n_timesteps: int, scheduler: str = "cosine", device: torch.device | None = None) -> torch.Tensor:
    """The n+1 ODE times in float32: cosine → 1 − cos(k/n · π/2), linear → k/n, k = 0…n."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown t_scheduler {scheduler!r}; choose one of {SCHEDULERS}")
    if n_timesteps < 1:
        raise ValueError(f"n_timesteps must be at least 1, got {n_timesteps}")
    t = torch.linspace(0, 1, n_timesteps + 1, device=device, dtype=torch.float32)
    if scheduler == "cosine":
        t = 1 - torch.cos(t * 0.5 * torch.pi)  # same expression as upstream, so the float32 values agree
    return t


def euler_steps(t_span: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(t_k, dt_k) per Euler step. Like upstream, t advances by adding dt (float32 rounding included)
    and each dt is measured from that accumulated t to the next grid point."""
    steps = []
    t, dt = t_span[0], t_span[1] - t_span[0]
    for k in range(1, len(t_span)):
        steps.append((t, dt))
        t = t + dt
        if k < len(t_span) - 1:
            dt = t_span[k + 1] - t
    return steps


def draw_noise(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device,
               dtype: torch.dtype) -> torch.Tensor:
    """Standard normal noise from `generator` (drawn on the generator's device in float32, so a CPU
    seed gives the same noise whatever device the model runs on). Without a generator a fresh,
    OS-seeded one is used: never the global RNG."""
    if generator is None:
        generator = torch.Generator()
        generator.seed()
    z = torch.randn(shape, generator=generator, device=generator.device, dtype=torch.float32)
    return z.to(device=device, dtype=dtype)


class ConditionalCFM(nn.Module):
    """Euler ODE solver with classifier-free guidance around a velocity `estimator`.

    The estimator is any module called as `estimator(x, mask, mu, t, spks, cond)` → velocity [B, F, T]
    float32 (v1: `estimators.unet.ConditionalDecoder`); it is registered as `estimator`, the checkpoint's
    `decoder.estimator.*` keys.

    Does not: encode tokens, build mu/cond, or slice off the prompt — `MaskedDiffWithXvec` does.
    """

    def __init__(self, cfg: CFMConfig, estimator: nn.Module, overlap_frames: int = 34) -> None:
        super().__init__()
        if cfg.t_scheduler not in SCHEDULERS:
            raise ValueError(f"t_scheduler {cfg.t_scheduler!r} is not supported; choose one of {SCHEDULERS}")
        self.cfg = cfg
        self.t_scheduler = cfg.t_scheduler
        self.inference_cfg_rate = cfg.inference_cfg_rate
        self.n_timesteps = cfg.n_timesteps
        # Frames at the end of each chunk shared with the next (upstream hard-codes 34 = 20 tokens).
        self.overlap_frames = overlap_frames
        self.estimator = estimator

    def guidance_batch(self, mu: torch.Tensor, spks: torch.Tensor, cond: torch.Tensor,
                       mask: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """The step-invariant estimator inputs: row 0 conditional, row 1 zeros (the unconditional
        branch). Built once per sampling call, not per step. Without guidance only row 0 is kept."""
        if self.inference_cfg_rate == 0:  # the unconditional row would be discarded, so skip it
            return mu, spks, cond, mask
        mask2 = None if mask is None else torch.cat([mask, mask])
        return (torch.cat([mu, torch.zeros_like(mu)]), torch.cat([spks, torch.zeros_like(spks)]),
                torch.cat([cond, torch.zeros_like(cond)]), mask2)

    def velocity(self, x: torch.Tensor, t: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor,
                 cond: torch.Tensor, mask: torch.Tensor | None, **estimator_options: object) -> torch.Tensor:
        """Guided velocity at state x [1, F, T] and time t (0-d), given `guidance_batch` outputs:
        one estimator call on a batch of two, v = (1 + w)·v_cond − w·v_uncond. `estimator_options` go to
        the estimator as they are (the causal estimators' `streaming`)."""
        w = self.inference_cfg_rate
        rows = mu.size(0)
        v = self.estimator(x.expand(rows, -1, -1), mask, mu, t.reshape(1).expand(rows), spks, cond,
                           **estimator_options)
        if w == 0:
            return v
        v_cond, v_uncond = v.split(x.size(0))
        return (1.0 + w) * v_cond - w * v_uncond

    def solve_euler(self, z: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor, cond: torch.Tensor,
                    mask: torch.Tensor | None, n_timesteps: int, **estimator_options: object) -> torch.Tensor:
        """Integrate from noise z [1, F, T] at t=0 to t=1; returns float32 [1, F, T]."""
        batch = self.guidance_batch(mu, spks, cond, mask)
        x = z
        for t, dt in euler_steps(time_grid(n_timesteps, self.t_scheduler, z.device)):
            x = x + dt.to(x.dtype) * self.velocity(x, t.to(x.dtype), *batch, **estimator_options)
        return x.float()

    def forward(
        self,
        mu: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
        mask: torch.Tensor | None = None,
        n_timesteps: int | None = None,
        temperature: float = 1.0,
        prompt_len: int = 0,
        cache: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample a mel.

        Args:
            mu: [1, F, T] conditioning from the length regulator (not modified).
            spks: [1, F] projected speaker embedding.
            cond: [1, F, T] prompt mel in the first `prompt_len` frames, zeros after.
            mask: [1, 1, T] valid frames, or None (all valid).
            n_timesteps: Euler steps (default: the config's, 10).
            temperature: noise scale.
            prompt_len: prompt mel frames (mel_len1), kept in the returned cache.
            cache: [1, F, C, 2] streaming cache from the previous chunk, or None / C = 0.
            generator: source of the noise when `noise` is not given.
            noise: [1, F, T] the standard-normal draw to use instead of sampling (before the cache
                overwrite and the temperature).
        Returns: mel [1, F, T] float32 (prompt frames included) and the new cache [1, F, prompt_len + overlap, 2].
        """
        steps = self.n_timesteps if n_timesteps is None else n_timesteps
        if noise is None:
            noise = draw_noise(tuple(mu.shape), generator, mu.device, mu.dtype)
        elif noise.shape != mu.shape:
            raise ValueError(f"noise has shape {tuple(noise.shape)}, expected {tuple(mu.shape)} (the shape of mu)")
        z = noise.to(device=mu.device, dtype=mu.dtype) * temperature
        if cache is not None and cache.size(2) > 0:
            c = cache.size(2)
            if c > mu.size(2):
                raise ValueError(f"flow cache holds {c} frames but this chunk has only {mu.size(2)}")
            cache = cache.to(device=mu.device, dtype=mu.dtype)
            z = torch.cat([cache[:, :, :, 0], z[:, :, c:]], dim=2)
            mu = torch.cat([cache[:, :, :, 1], mu[:, :, c:]], dim=2)
        tail = self.overlap_frames
        new_cache = torch.stack(
            [torch.cat([z[:, :, :prompt_len], z[:, :, -tail:]], dim=2),
             torch.cat([mu[:, :, :prompt_len], mu[:, :, -tail:]], dim=2)],
            dim=-1,
        )
        log.debug("cfm: %d frames, %d steps, cache %d → %d", mu.size(2), steps,
                  0 if cache is None else cache.size(2), new_cache.size(2))
        return self.solve_euler(z, mu, spks, cond, mask, steps), new_cache
