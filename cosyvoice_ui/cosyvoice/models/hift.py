"""HiFT vocoder (CosyVoice `HiFTGenerator`): 80-bin mel → waveform, via an NSF source and an iSTFT head.

Shapes: B batch, T mel frames, U = prod(upsample_rates) * istft_hop samples per frame (256 for v1),
N = T*U samples, F = N/hop + 1 STFT frames, K = istft_n_fft/2 + 1 frequency bins.

Pipeline: f0 = f0_predictor(mel) → nearest ×U → NSF source (nsf.py) → [streaming: cached samples
overwrite the head] → decode(mel, source): conv_pre, per stage (LeakyReLU 0.1, ConvTranspose, fuse
the source's STFT, average of 3 ResBlocks), LeakyReLU 0.01, conv_post → exp magnitude / sin phase →
iSTFT → clamp. Attribute names follow upstream so a folded `hift.pt` loads with strict=True.
At inference the stages after the first run over windows of the mel with the context their convolutions
reach (`decode_to_spectrum`), so the vocoder's memory does not grow with the utterance.

Weight norm: upstream's convs are weight-normed (g, v pairs in hift.pt); ours are plain convs and the
loader folds the pairs into `.weight` once (checkpoint.fold_weight_norm). `weight_norm_names` and
`unfold_weight_norm` go the other way, for writing test checkpoints in the official layout.

The number of up-sampling stages follows the config (v1: 2, 24 kHz: 3); the v3 causal vocoder
(`hift_causal.CausalHiFTGenerator`) reuses this class through its layer builders (`_make_*`).
Not here: streaming cross-fades (streaming.py).
HiFT runs in float32 (upstream never casts it to fp16: the phase cumsum needs the precision).
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import StateDict
from ..config import HiFTConfig
from .causal_conv import CausalConv1d
from .conv_layout import Conv1d, ConvTranspose1d, reflect_one_left, time_major, use_time_major
from .nsf import NSFNoise, SineGen, SineGen2, SourceModuleHnNSF

log = logging.getLogger(__name__)


def _same_padding(kernel_size: int, dilation: int = 1) -> int:
    return (kernel_size * dilation - dilation) // 2


class Snake(nn.Module):
    """x + sin²(αx)/(α + 1e-9) with a learned per-channel α (linear scale). Input/output [B, C, L]."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    # Set by `use_kernel`: inference runs on the project's one-pass kernel (`kernels/snake.cpp`).
    kernel = False

    def use_kernel(self) -> None:
        """Inference on `torch.ops.cosyvoice_kernels.snake` (call only where `kernels.snake_available()`): one
        read and one write of the signal instead of five element-wise ops, float32 inside, one rounding. 1/α is
        kept in float32 beside it (non-persistent: the checkpoint's keys stay)."""
        alpha = self.alpha.detach().float()
        self.register_buffer("kernel_alpha", alpha.contiguous(), persistent=False)
        self.register_buffer("kernel_inv_alpha", (1.0 / (alpha + 1e-9)).contiguous(), persistent=False)
        self.kernel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel and not torch.is_grad_enabled():
            return torch.ops.cosyvoice_kernels.snake(x, self.kernel_alpha, self.kernel_inv_alpha)
        alpha = self.alpha.view(1, -1, 1)
        if torch.is_grad_enabled():
            return x + (1.0 / (alpha + 1e-9)) * torch.sin(x * alpha).pow(2)
        # The same operations in one buffer: at the last stage's 128 x 27k samples (v1, 5 s) each temporary is
        # 14 MB and this is the process's memory peak. Products and sums commute exactly: same bits.
        wave = (x * alpha).sin_().pow_(2)
        return wave.mul_(1.0 / (alpha + 1e-9)).add_(x)


class ResBlock(nn.Module):
    """HiFi-GAN/BigVGAN residual block with Snake: for each dilation d,
    x += conv2(snake2(conv1_d(snake1(x)))). Length-preserving: "same" padding, or left (causal) padding
    when `causal` (the v3 vocoder). [B, C, L] → [B, C, L]."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...], causal: bool = False) -> None:
        super().__init__()

        def conv(d: int) -> nn.Conv1d:
            if causal:
                return CausalConv1d(channels, channels, kernel_size, dilation=d)
            return Conv1d(channels, channels, kernel_size, dilation=d, padding=_same_padding(kernel_size, d))

        self.convs1 = nn.ModuleList(conv(d) for d in dilations)
        self.convs2 = nn.ModuleList(conv(1) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, (conv1, conv2, act1, act2) in enumerate(zip(self.convs1, self.convs2, self.activations1,
                                                            self.activations2)):
            update = conv2(act2(conv1(act1(x))))
            # After the first dilation x is this block's own sum: added into in place (the caller's x is kept).
            x = x.add_(update) if i and not torch.is_grad_enabled() else x + update
        return x


class ConvRNNF0Predictor(nn.Module):
    """Mel → f0 in Hz (v1/v2). Despite upstream's name there is no RNN: 5 × (Conv1d k3 → ELU), a
    per-frame Linear to one value, and abs(). Does not decide voicing (the source thresholds f0)."""

    def __init__(self, in_channels: int = 80, cond_channels: int = 512, num_class: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(5):
            layers += [nn.Conv1d(in_channels if i == 0 else cond_channels, cond_channels, 3, padding=1), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, num_class)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel: [B, 80, T] → f0 [B, T] (Hz, non-negative)."""
        h = self.condnet(mel).transpose(1, 2)  # [B, T, C]
        return torch.abs(self.classifier(h).squeeze(-1))


class HiFTGenerator(nn.Module):
    """The non-causal HiFT vocoder of CosyVoice v1 and v2.

    Does: f0 prediction, NSF source generation (random, from a caller's generator), decoding a mel
    plus a source into a waveform, and the streaming source-cache overwrite. Does not: cross-fade
    chunks, keep any state between calls, seed any RNG, or choose its sine generator (the registry
    passes the family's class: `SineGen` for v1, `SineGen2` for v2).
    """

    def __init__(self, cfg: HiFTConfig, sine_generator: type[SineGen | SineGen2]) -> None:
        super().__init__()
        self.cfg = cfg
        n_fft, hop = cfg.istft_n_fft, cfg.istft_hop
        self.upsample_factor = math.prod(cfg.upsample_rates) * hop  # U
        self.frames_per_mel = math.prod(cfg.upsample_rates)  # R, last-stage (STFT) frames per mel frame
        self.num_kernels = len(cfg.resblock_kernel_sizes)
        self.f0_predictor = self._make_f0_predictor(cfg)
        self.m_source = SourceModuleHnNSF(sine_generator(cfg.sampling_rate, cfg.nb_harmonics, cfg.nsf_alpha,
                                                         cfg.nsf_sigma, cfg.nsf_voiced_threshold,
                                                         upsample_scale=self.upsample_factor))
        self.conv_pre = self._make_conv_pre(cfg.in_channels, cfg.base_channels)

        stage_channels = [cfg.base_channels // 2 ** (i + 1) for i in range(len(cfg.upsample_rates))]
        self.ups = nn.ModuleList(
            self._make_up(cfg.base_channels // 2**i, c, k, u)
            for i, (c, u, k) in enumerate(zip(stage_channels, cfg.upsample_rates, cfg.upsample_kernel_sizes)))

        # The source STFT runs at the last stage's rate; stage i sees it down-sampled by the product of
        # the later stages' up-sampling rates (v1: 8 for stage 0, 1 for stage 1; 24 kHz: 15, 3, 1).
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        for i, (c, k, d) in enumerate(zip(stage_channels, cfg.source_resblock_kernel_sizes,
                                          cfg.source_resblock_dilation_sizes)):
            self.source_downs.append(self._make_source_down(n_fft + 2, c, math.prod(cfg.upsample_rates[i + 1:])))
            self.source_resblocks.append(ResBlock(c, k, d, causal=self.causal))

        self.resblocks = nn.ModuleList(
            ResBlock(c, k, d, causal=self.causal) for c in stage_channels
            for k, d in zip(cfg.resblock_kernel_sizes, cfg.resblock_dilation_sizes))
        self.conv_post = self._make_conv_post(stage_channels[-1], n_fft + 2)
        # Periodic Hann (scipy's get_window("hann", fftbins=True)); computed in float64 like scipy,
        # then cast. Not a checkpoint entry, hence non-persistent.
        window = torch.hann_window(n_fft, periodic=True, dtype=torch.float64).float()
        self.register_buffer("stft_window", window, persistent=False)
        # dtype of the convolution stack in `decode_to_spectrum` (`set_conv_dtype`). f0, the source and
        # the STFTs always run in float32.
        self.decode_dtype = torch.float32

    # Layer builders: the causal vocoder (hift_causal.py) overrides them; same keys, other padding.
    causal = False

    def _make_f0_predictor(self, cfg: HiFTConfig) -> nn.Module:
        return ConvRNNF0Predictor(cfg.f0_in_channels, cfg.f0_cond_channels)

    def _make_conv_pre(self, c_in: int, c_out: int) -> nn.Module:
        return Conv1d(c_in, c_out, 7, padding=3)

    def _make_up(self, c_in: int, c_out: int, kernel: int, rate: int) -> nn.Module:
        return ConvTranspose1d(c_in, c_out, kernel, rate, padding=(kernel - rate) // 2)

    def _make_source_down(self, c_in: int, c_out: int, rate: int) -> nn.Module:
        return Conv1d(c_in, c_out, 1) if rate == 1 else Conv1d(c_in, c_out, 2 * rate, rate, padding=rate // 2)

    def _make_conv_post(self, c_in: int, c_out: int) -> nn.Module:
        return Conv1d(c_in, c_out, 7, padding=3)

    # The convolution stack `set_conv_dtype` converts: everything between the source STFT and the iSTFT.
    CONV_STACK = ("conv_pre", "ups", "source_downs", "source_resblocks", "resblocks", "conv_post")

    def set_conv_dtype(self, dtype: torch.dtype) -> None:
        """Run the convolution stack in `dtype` (e.g. bfloat16 for speed), in place; `decode_to_spectrum`
        casts its inputs and returns float32. The f0 predictor, the NSF source and both STFTs stay
        float32: f0 is integrated into a phase over ~10^5 samples (bf16's 8-bit mantissa would detune
        it), and the STFT/iSTFT have no bf16 CPU kernels."""
        for name in self.CONV_STACK:
            getattr(self, name).to(dtype)
        self.decode_dtype = dtype

    def use_time_major(self) -> int:
        """Run the convolution stack on time-major signals (`conv_layout`: oneDNN's channels-last, no reorder
        around each convolution), in place, after `set_conv_dtype`; returns how many layers. Same numbers."""
        count = sum(use_time_major(getattr(self, name)) for name in self.CONV_STACK)
        self.time_major = count > 0
        return count

    time_major = False  # set by `use_time_major`: the stack's inputs are made time-major once, up front

    def use_snake_kernel(self) -> int:
        """Every Snake activation on the project's one-pass kernel (`Snake.use_kernel`; call only where
        `kernels.snake_available()`), in place; returns how many."""
        activations = [m for m in self.modules() if isinstance(m, Snake)]
        for activation in activations:
            activation.use_kernel()
        return len(activations)

    @property
    def sample_rate(self) -> int:
        return self.cfg.sampling_rate

    def predict_f0(self, mel: torch.Tensor) -> torch.Tensor:
        """mel: [B, 80, T] → f0 [B, T] in Hz."""
        return self.f0_predictor(mel)

    def source(self, f0: torch.Tensor, generator: torch.Generator | None = None, *,
               noise: NSFNoise | None = None) -> torch.Tensor:
        """f0: [B, T] Hz → NSF excitation [B, 1, T*U].

        Randomness comes from `generator` (drawn in upstream's order by the sine generator's `draw`; the
        global RNG when None), or from explicit draws `noise` (phase [B, H, 1], sine [B, H, T*U]).
        """
        # Nearest up-sampling through interpolate, as upstream's nn.Upsample does: for rates that
        # are not powers of two its index rounding can differ from a plain repeat.
        f0_up = F.interpolate(f0.unsqueeze(1), scale_factor=float(self.upsample_factor), mode="nearest")
        if noise is None:
            noise = self.m_source.l_sin_gen.draw(f0_up.size(0), f0_up.size(-1), generator, f0.device)
        expected = (f0_up.size(0), self.m_source.harmonics, f0_up.size(-1))
        assert tuple(noise.sine.shape) == expected, f"sine noise {tuple(noise.sine.shape)} != {expected}"
        return self.m_source(f0_up, noise)

    def _stft(self, source: torch.Tensor) -> torch.Tensor:
        """[B, 1, N] → real and imaginary parts stacked on channels [B, 2K, F]."""
        n_fft, hop = self.cfg.istft_n_fft, self.cfg.istft_hop
        spec = torch.stft(source.squeeze(1), n_fft, hop, n_fft, window=self.stft_window, center=True,
                          pad_mode="reflect", return_complex=True)
        return torch.cat([spec.real, spec.imag], dim=1)

    def _istft(self, magnitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        """[B, K, F] each → [B, hop*(F-1)]."""
        n_fft, hop = self.cfg.istft_n_fft, self.cfg.istft_hop
        magnitude = magnitude.clamp(max=100.0)  # exp() of an untrained/odd frame must not blow up
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        return torch.istft(spec, n_fft, hop, n_fft, window=self.stft_window, center=True)

    # Mel frames per window of `decode_to_spectrum` (inference only). The first stage runs over the whole mel
    # (v1: 256 channels × 8 samples a frame); the later stages, whose tensors are several times larger (v1's last:
    # 128 × 64 a frame, 14 MB each for 5 s), run a window at a time, so their memory no longer grows with the
    # utterance. 0 decodes every length whole.
    window_frames = 100

    def decode_to_spectrum(self, mel: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """The network part of `decode`: mel [B, 80, T] + source [B, 1, N] → conv_post output [B, 2K, F]
        (rows :K are log-magnitudes, rows K: pass through sin() to give the phase).

        Without autograd, stages after the first run over windows of `window_frames` mel frames, each with
        `context_samples` of the first stage's output on either side, which is as far as the later
        convolutions reach: the same values as one whole pass (float summation order aside)."""
        low = self.decode_dtype
        s_stft = self._stft(source).to(low)  # no-ops in float32
        if self.time_major:
            s_stft = time_major(s_stft)
        x = self.conv_pre(mel.to(low))
        rate0 = self.cfg.upsample_rates[0]
        window = self.window_frames * rate0
        if torch.is_grad_enabled() or len(self.ups) < 2 or window <= 0 or mel.size(-1) * rate0 <= window:
            return self._fuse_stages(x, s_stft)
        context = self.context_samples()
        x = self._up_stage(0, x, s_stft, reuse=True)  # [B, C0, rate0·T]: the first stage, whole
        length = x.size(-1)
        q = self.frames_per_mel // rate0  # STFT frames per first-stage sample
        pieces = []
        for start in range(0, length, window):
            stop = min(start + window, length)
            lo, hi = max(0, start - context), min(length, stop + context)
            # The window's STFT frames begin at its first sample's: frame q·lo pairs with it at every later stage
            # (at the last, after the one reflected frame that only the utterance's start has).
            spectrum = self._fuse_stages(x[..., lo:hi], s_stft[..., q * lo:q * hi + 1], at_start=lo == 0,
                                         first_stage=1)
            # Spectrum frame j of the window is frame q·lo + 1 + j of the whole (frame j from the start).
            shift = int(lo == 0)
            first = 0 if start == 0 else q * (start - lo) + shift
            pieces.append(spectrum[..., first:q * (stop - lo) + shift])
        return torch.cat(pieces, dim=-1)

    def context_samples(self) -> int:
        """An upper bound on how far, in first-stage samples, the stages after the first and conv_post reach to
        either side: how deep into a window the zeros its convolutions see past its edges can move values.
        At each stage the depth is carried through the up-sampling, then the larger of it and the source path's
        (whose STFT window is cut at the same edge), then the resblocks' chained reach is added. For this class's
        centred layout; the causal vocoder (`hift_causal`) decodes its own windows and does not ask."""
        def reach(conv: nn.Module) -> float:
            """One-sided reach in the convolution's input samples."""
            k, d, p, s = conv.kernel_size[0], conv.dilation[0], conv.padding[0], conv.stride[0]
            if isinstance(conv, nn.ConvTranspose1d):
                return max(p, d * (k - 1) - p) / s + 1
            return max(p, d * (k - 1) - p)

        def block_reach(block: ResBlock) -> float:
            return sum(reach(c1) + reach(c2) for c1, c2 in zip(block.convs1, block.convs2))

        rates = self.cfg.upsample_rates
        stft_reach = self.cfg.istft_n_fft / 2 / self.cfg.istft_hop  # a centred STFT frame's half window, in frames
        depth = 0.0  # in the current stage's samples
        for i in range(1, len(self.ups)):
            depth = (depth + reach(self.ups[i])) * rates[i]
            stft_per_sample = self.frames_per_mel // math.prod(rates[:i + 1])
            source = (stft_reach + reach(self.source_downs[i])) / stft_per_sample + block_reach(self.source_resblocks[i])
            blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            depth = max(depth, source) + max(block_reach(b) for b in blocks)
        depth += reach(self.conv_post)
        return math.ceil(depth / math.prod(rates[1:])) + 1

    def _fuse_stages(self, x: torch.Tensor, s_stft: torch.Tensor, at_start: bool = True,
                     first_stage: int = 0) -> torch.Tensor:
        """The input of stage `first_stage` [B, C, L] (conv_pre's output [B, C, T] for stage 0) + source STFT
        [B, 2K, R·T + 1] (in `decode_dtype`) → conv_post output [B, 2K, R·T + 1] float32: the up-sampling
        stages with source fusion and resblock averaging.

        at_start=False: x is a window that does not begin the utterance; the last stage then pairs with
        the STFT frames from the second on, and the output has R·T frames (no reflected first frame)."""
        # Without autograd every tensor below but the caller's x is this method's own: activations and sums go
        # into the buffers they read (same bits; the last stage's buffers are what HiFT adds to the peak).
        reuse = not torch.is_grad_enabled()
        for i in range(first_stage, len(self.ups)):
            x = self._up_stage(i, x, s_stft, at_start, reuse=reuse, own_input=reuse and i > first_stage)
        # Upstream uses the default LeakyReLU slope (0.01) here, not lrelu_slope; the weights expect it.
        return self.conv_post(F.leaky_relu(x, inplace=reuse)).float()

    def _up_stage(self, i: int, x: torch.Tensor, s_stft: torch.Tensor, at_start: bool = True, *,
                  reuse: bool, own_input: bool = False) -> torch.Tensor:
        """Stage i: LeakyReLU, ConvTranspose up-sampling, + the source STFT down-sampled to this rate through
        its conv and resblock, then the average of the stage's resblocks. reuse: write sums in place into
        this stage's own tensors; own_input: x too may be overwritten."""
        x = self.ups[i](F.leaky_relu(x, self.cfg.lrelu_slope, inplace=own_input))
        if i == len(self.ups) - 1:
            # The transposed convs give exactly N/hop frames; the centred STFT has one more.
            if at_start:
                x = reflect_one_left(x) if self.time_major else F.pad(x, (1, 0), mode="reflect")
            else:
                s_stft = s_stft[..., 1:]
        source = self.source_resblocks[i](self.source_downs[i](s_stft))
        x = x.add_(source) if reuse else x + source
        blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
        xs = blocks[0](x)  # a new tensor: the sums below go into it (x is read by every block)
        for block in blocks[1:]:
            xs = xs.add_(block(x)) if reuse else xs + block(x)
        return xs.div_(self.num_kernels) if reuse else xs / self.num_kernels

    def decode(self, mel: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """mel: [B, 80, T], source: [B, 1, T*U] → wave [B, T*U], clamped to ±audio_limit."""
        x = self.decode_to_spectrum(mel, source)
        k = self.cfg.istft_n_fft // 2 + 1
        # sin() on the phase row is redundant mathematically but part of what the model learned.
        wave = self._istft(torch.exp(x[:, :k]), torch.sin(x[:, k:]))
        return wave.clamp(-self.cfg.audio_limit, self.cfg.audio_limit)

    @torch.inference_mode()
    def inference(self, mel: torch.Tensor, cache_source: torch.Tensor | None = None,
                  generator: torch.Generator | None = None, *,
                  noise: NSFNoise | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """mel: [B, 80, T] → (wave [B, N], source [B, 1, N]), N = T*U.

        cache_source: [B, 1, C] (C <= N) source samples kept from the previous streaming chunk; they
        replace the first C samples of the fresh source so the overlap region's excitation is
        continuous across chunks. The returned source includes the overwrite (cache its tail).
        generator / noise: see `source`.
        """
        s = self.source(self.predict_f0(mel), generator, noise=noise)
        if cache_source is not None and cache_source.size(-1) > 0:
            c = cache_source.size(-1)
            if c > s.size(-1):
                raise ValueError(f"cache_source has {c} samples but this chunk's source only {s.size(-1)}; "
                                 "pass at most one chunk's worth of cached source")
            s = torch.cat([cache_source.to(s), s[..., c:]], dim=-1)
        log.debug("hift: mel %s -> %d samples", tuple(mel.shape), s.size(-1))
        return self.decode(mel, s), s


# ---------------------------------------------------------------------------------------------
# Weight-norm (un)folding (loading: `registry.FamilyBackend.load_vocoder`)


def weight_norm_names(model: HiFTGenerator) -> list[str]:
    """Module paths whose weight upstream's hift.pt stores as a weight-norm (g, v) pair.

    Everything convolutional except `source_downs`; the Linear layers (`l_linear`, `classifier`)
    are plain too.
    """
    names = ["conv_pre", *(f"ups.{i}" for i in range(len(model.ups)))]
    for group in ("source_resblocks", "resblocks"):
        for i, block in enumerate(getattr(model, group)):
            for convs in ("convs1", "convs2"):
                names += [f"{group}.{i}.{convs}.{j}" for j in range(len(getattr(block, convs)))]
    names.append("conv_post")
    names += [f"f0_predictor.condnet.{i}" for i, m in enumerate(model.f0_predictor.condnet)
              if isinstance(m, nn.Conv1d)]
    return names


def unfold_weight_norm(state_dict: StateDict, names: list[str], legacy: bool = False) -> StateDict:
    """Replace `name.weight` by a weight-norm pair for each name (inverse of fold_weight_norm).

    g = ||W|| over every dim but 0 (shape [dim0, 1, 1]) and v = W, as weight_norm initialises them.
    Spelling: `name.parametrizations.weight.original0/1` (current torch), or `name.weight_g/weight_v`
    when `legacy` (torch.nn.utils.weight_norm, as in the 2024 releases). Key order is kept.
    """
    wanted = set(names)
    missing = sorted(n for n in wanted if f"{n}.weight" not in state_dict)
    if missing:
        raise KeyError(f"no `.weight` to unfold for {missing[:5]}")
    g_suffix, v_suffix = ((".weight_g", ".weight_v") if legacy
                          else (".parametrizations.weight.original0", ".parametrizations.weight.original1"))
    out: StateDict = {}
    for key, value in state_dict.items():
        name = key[: -len(".weight")] if key.endswith(".weight") else None
        if name in wanted:
            dims = tuple(range(1, value.dim()))
            out[name + g_suffix] = value.double().pow(2).sum(dim=dims, keepdim=True).sqrt().to(value.dtype)
            out[name + v_suffix] = value.clone()
        else:
            out[key] = value
    return out
