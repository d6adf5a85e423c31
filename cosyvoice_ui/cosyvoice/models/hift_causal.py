"""The v3 causal HiFT vocoder (upstream `CausalHiFTGenerator`): `HiFTGenerator` with causal layers, an
f0 predictor with 3 frames of look-ahead run in float64, fixed source noise, and `inference(mel, finalize)`.

Shapes as in hift.py (U = prod(upsample_rates) * istft_hop samples per frame; R = prod(upsample_rates)
STFT frames per mel frame). Streaming: with `finalize=False` the last frames of the mel are look-ahead:
the f0 predictor reads T frames and returns T-3, `conv_pre` takes its last `conv_pre_look_right` (4)
frames as right context (T-7 left), the source STFT loses R*4 frames to match and the last U samples
are dropped: U*(T-8) samples, equal to what a longer run gives for them (the vocoder keeps no state;
upstream's streaming re-runs it on the whole accumulated mel). `finalize=True` zero-pads the right.

Layer keys and weight layouts match the official `hift.pt` (the `ups` are Conv1d, [out, in, k]). No
random draws: the source's noise is a `FixedNSFNoise` given to the constructor or `set_fixed_noise`.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from ..config import HiFTConfig
from .causal_conv import CausalConv1d, CausalDownsample, CausalUpsample
from .conv_layout import time_major
from .hift import HiFTGenerator
from .nsf import CausalSineGen2, FixedNSFNoise, replay_rng

log = logging.getLogger(__name__)


class CausalConvRNNF0Predictor(nn.Module):
    """Mel → f0 in Hz, causal: Conv1d k4 with 3 frames of right context, then 4 × Conv1d k3 (left
    padding 2), ELU after each, a per-frame Linear and abs(). Runs in float64 whatever the parameters'
    dtype, as upstream does ("precision is crucial for causal inference"); returns the input's dtype."""

    def __init__(self, in_channels: int = 80, cond_channels: int = 512, num_class: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = [CausalConv1d(in_channels, cond_channels, 4, right=True), nn.ELU()]
        for _ in range(4):
            layers += [CausalConv1d(cond_channels, cond_channels, 3), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, num_class)

    @property
    def look_ahead(self) -> int:
        """Frames of right context the first conv reads (3)."""
        return self.condnet[0].causal_padding

    def forward(self, mel: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel: [B, 80, T] → f0 [B, T] (finalize) or [B, T - look_ahead] (the last frames are context)."""
        x = mel.double()
        for i, layer in enumerate(self.condnet):
            if isinstance(layer, CausalConv1d):
                # Cast the weights per call (cheap for this small net) rather than keep a float64 copy.
                w, b = layer.weight.double(), layer.bias.double()
                if i == 0 and not finalize:
                    x = F.conv1d(x, w, b)  # its own last frames are the right context
                elif layer.right:
                    x = F.conv1d(F.pad(x, (0, layer.causal_padding)), w, b)
                else:
                    x = F.conv1d(F.pad(x, (layer.causal_padding, 0)), w, b)
            else:
                x = layer(x)
        f0 = F.linear(x.transpose(1, 2), self.classifier.weight.double(), self.classifier.bias.double())
        return torch.abs(f0.squeeze(-1)).to(mel.dtype)


class CausalHiFTGenerator(HiFTGenerator):
    """The v3 vocoder. Does: f0 (float64), the fixed-noise source, causal decoding, look-ahead trimming
    for streaming. Does not: keep state between calls, draw random numbers, cross-fade.

    cfg: the yaml's hift section; sine_generator: the family's (`CausalSineGen2`); conv_pre_look_right:
    the yaml's `conv_pre_look_right` (4), by default `cfg.conv_pre_look_right`; fixed_noise: the source
    noise (upstream's construction-time buffers: `upstream_fixed_noise`), settable later.
    """

    causal = True

    def __init__(self, cfg: HiFTConfig, sine_generator: type[CausalSineGen2] = CausalSineGen2, *,
                 conv_pre_look_right: int | None = None, fixed_noise: FixedNSFNoise | None = None) -> None:
        look_right = getattr(cfg, "conv_pre_look_right", 0) if conv_pre_look_right is None else conv_pre_look_right
        if look_right <= 0:
            raise ValueError("the causal vocoder needs conv_pre_look_right > 0 (the yaml's hift section has it)")
        self.conv_pre_look_right = look_right  # read by _make_conv_pre during super().__init__
        super().__init__(cfg, sine_generator)
        if fixed_noise is not None:
            self.set_fixed_noise(fixed_noise)

    def set_fixed_noise(self, noise: FixedNSFNoise) -> None:
        self.m_source.l_sin_gen.set_fixed_noise(noise)

    def _make_f0_predictor(self, cfg: HiFTConfig) -> nn.Module:
        return CausalConvRNNF0Predictor(cfg.f0_in_channels, cfg.f0_cond_channels)

    def _make_conv_pre(self, c_in: int, c_out: int) -> nn.Module:
        return CausalConv1d(c_in, c_out, self.conv_pre_look_right + 1, right=True)

    def _make_up(self, c_in: int, c_out: int, kernel: int, rate: int) -> nn.Module:
        return CausalUpsample(c_in, c_out, kernel, rate)

    def _make_source_down(self, c_in: int, c_out: int, rate: int) -> nn.Module:
        return CausalConv1d(c_in, c_out, 1) if rate == 1 else CausalDownsample(c_in, c_out, 2 * rate, rate)

    def _make_conv_post(self, c_in: int, c_out: int) -> nn.Module:
        return CausalConv1d(c_in, c_out, 7)

    def predict_f0(self, mel: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel: [B, 80, T] → f0 [B, T] Hz, or [B, T-3] when not finalizing."""
        return self.f0_predictor(mel, finalize)

    def decode_to_spectrum(self, mel: torch.Tensor, source: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel [B, 80, T'] + source [B, 1, T'*U] → conv_post output [B, 2K, F]; F = R*T' + 1 (finalize) or
        R*(T'-4) + 1 (the last 4 mel frames are conv_pre's right context)."""
        low = self.decode_dtype
        s_stft = self._stft(source)
        if self.time_major:
            s_stft = time_major(s_stft)
        mel = mel.to(low)
        if finalize:
            x = self.conv_pre(mel)
        else:
            r = self.conv_pre_look_right
            if mel.size(-1) <= r:
                raise ValueError(f"a non-final chunk needs more than {r} mel frames after the f0 look-ahead")
            x = self.conv_pre(mel[..., :-r], mel[..., -r:])
            s_stft = s_stft[..., : -self.frames_per_mel * r]
        return self._fuse_stages(x, s_stft.to(low))

    def decode(self, mel: torch.Tensor, source: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel: [B, 80, T'], source: [B, 1, T'*U] → wave [B, T'*U] (finalize) or [B, (T'-5)*U]."""
        x = self.decode_to_spectrum(mel, source, finalize)
        k = self.cfg.istft_n_fft // 2 + 1
        wave = self._istft(torch.exp(x[:, :k]), torch.sin(x[:, k:]))
        if not finalize:
            wave = wave[:, : -self.upsample_factor]
        return wave.clamp(-self.cfg.audio_limit, self.cfg.audio_limit)

    @torch.inference_mode()
    def inference(self, mel: torch.Tensor, finalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """mel: [B, 80, T] → (wave, source [B, 1, U*T']); T' = T (finalize) or T-3; the wave has U*T
        samples (finalize) or U*(T-8), all final."""
        f0 = self.predict_f0(mel, finalize)
        s = self.source(f0)
        if not finalize:
            mel = mel[..., : -self.f0_predictor.look_ahead]
        log.debug("causal hift: mel %s finalize=%s -> source %d samples", tuple(mel.shape), finalize, s.size(-1))
        return self.decode(mel, s, finalize), s

    # Mel frames before a window's first wanted frame that the decoder re-runs as context. Every layer of the
    # decoder is causal or looks right only (conv_pre): the full-size v3 stack reaches about 22 frames back
    # (the first stage's resblocks: 120 samples at 8 per frame, plus its 16-tap up-sampling conv; the later
    # stages a few frames more), and the source STFT's and the last stage's reflect padding touch only the
    # window's first frame. 50 frames leave twice that.
    WINDOW_CONTEXT_FRAMES = 50

    @torch.inference_mode()
    def inference_from(self, mel: torch.Tensor, first_frame: int, finalize: bool = True) -> torch.Tensor:
        """The wave of `inference(mel, finalize)` from sample U·first_frame on, decoding only a window that
        starts `WINDOW_CONTEXT_FRAMES` earlier: a stream's later chunks then cost their own frames plus the
        context, not the whole mel again. f0 and the source still run over every frame (cheap next to the
        decoder), because the sine's phase is a running sum from the first sample."""
        f0 = self.predict_f0(mel, finalize)
        s = self.source(f0)
        if not finalize:
            mel = mel[..., : -self.f0_predictor.look_ahead]
        start = max(0, first_frame - self.WINDOW_CONTEXT_FRAMES)
        u = self.upsample_factor
        wave = self.decode(mel[..., start:], s[..., start * u:], finalize)
        return wave[:, (first_frame - start) * u:]


RngOps = list[tuple[str, tuple[int, ...]]]


def construction_rng_ops(hift: HiFTConfig, *, cfm_noise_shape: tuple[int, ...], flow_vocab_size: int,
                         flow_input_size: int, flow_output_size: int, spk_embed_dim: int) -> RngOps:
    """Upstream's global-RNG calls between the flow CFM's reseed (0) and the sine generator's rand_ini,
    in order (cosyvoice-models.md §5.5): the CFM noise, the flow's input embedding and speaker Linear
    inits, the causal f0 predictor's conv and classifier inits. Relies on upstream building llm → flow →
    hift and on torch's CPU RNG use per op; best effort, checked on the tiny fixture."""
    c, k0 = hift.f0_cond_channels, 4
    ops = [("randn", cfm_noise_shape), ("normal_", (flow_vocab_size, flow_input_size)),
           ("uniform_", (flow_output_size, spk_embed_dim)), ("uniform_", (flow_output_size,)),
           ("uniform_", (c, hift.f0_in_channels, k0)), ("uniform_", (c,))]
    ops += [("uniform_", (c, c, 3)), ("uniform_", (c,))] * 4
    return ops + [("uniform_", (1, c)), ("uniform_", (1,))]


def upstream_fixed_noise(ops: RngOps, harmonics: int, max_samples: int,
                         seed: int = 0) -> FixedNSFNoise:
    """The fixed source noise upstream's constructor leaves: a CPU generator seeded `seed` (the CFM's
    reseed), consumed by `ops` (`construction_rng_ops`), then rand_ini and the buffer's state.
    max_samples: upstream's buffer is 300 s at the model's sample rate."""
    g = torch.Generator().manual_seed(seed)
    replay_rng(g, ops)
    return FixedNSFNoise.from_generator(g, harmonics, max_samples)
