"""Time-major convolutions (models/conv_layout.py) and the one-pass Snake kernel (kernels/snake.cpp).

The layout: its helpers keep the layout and the values; each of the vocoders' convolution layers (plain, transposed,
causal with left zeros or right context, strided down-sampling, nearest up-sampling) gives torch's own layer's
output in float32 and bf16, comes back time-major, takes inputs in any layout, and keeps its state-dict keys and
shapes; whole tiny vocoders (v1-type, batch of two, windowed) give their plain output.
The kernel: its reference against torch's Snake; the kernel against the reference in both layouts and dtypes, with
tails, batch views and odd layouts; its input checks; the Snake module on it; a failing probe; fast engines taking
both. Golden parity of the fixtures' vocoders with both on is in test_hift.py. Where the kernels cannot be built the
kernel tests skip with the reason."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cosyvoice_ui import load_engine
from cosyvoice_ui.cosyvoice import kernels
from cosyvoice_ui.cosyvoice.kernels import reference_snake
from cosyvoice_ui.cosyvoice.models.causal_conv import CausalConv1d, CausalDownsample, CausalUpsample
from cosyvoice_ui.cosyvoice.models.conv_layout import (Conv1d, ConvTranspose1d, TimeMajorConv, concat_time,
                                                       is_time_major, pad_time, reflect_one_left, time_major)
from cosyvoice_ui.cosyvoice.models.hift import HiFTGenerator, Snake
from cosyvoice_ui.cosyvoice.models.nsf import SineGen

from .test_hift import tiny_config


@pytest.fixture
def snake_kernel() -> None:
    """Skips where the kernel cannot be built or loaded; built once per process when the first test asks."""
    if not kernels.snake_available():
        pytest.skip(f"the kernels are not available here: {kernels.why_not_built() or 'build failed'}")


needs_kernel = pytest.mark.usefixtures("snake_kernel")


def _signal(batch: int, channels: int, frames: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(batch, channels, frames, generator=torch.Generator().manual_seed(seed)).to(dtype)


# --- the layout's helpers --------------------------------------------------------------------------------------


def test_time_major_is_the_channels_last_order_and_made_once() -> None:
    x = _signal(2, 5, 7)
    assert not is_time_major(x)
    y = time_major(x)
    assert is_time_major(y) and torch.equal(y, x) and y.stride() == (35, 1, 5)
    assert time_major(y) is y  # already so: no copy
    assert y.unsqueeze(2).is_contiguous(memory_format=torch.channels_last)
    assert is_time_major(_signal(1, 1, 9)) and is_time_major(_signal(3, 4, 1).transpose(1, 2).transpose(1, 2))
    assert is_time_major(y[..., 2:5])  # a window along time stays time-major
    assert not is_time_major(torch.zeros(4, 5))  # not a signal


def test_padding_joining_and_reflection_keep_the_layout_and_the_values() -> None:
    x = time_major(_signal(2, 6, 9, seed=1))
    padded = pad_time(x, 3, 1)
    assert is_time_major(padded) and torch.equal(padded, F.pad(x, (3, 1)))
    assert pad_time(x, 0) is x
    joined = concat_time([x, x[..., :4]])
    assert is_time_major(joined) and torch.equal(joined, torch.cat([x, x[..., :4]], dim=-1))
    reflected = reflect_one_left(x)
    assert is_time_major(reflected) and torch.equal(reflected, F.pad(x.contiguous(), (1, 0), mode="reflect"))


# --- each layer against torch's own ---------------------------------------------------------------------------


def _layers() -> list[tuple[str, nn.Module, int]]:
    """(name, a layer with random weights, its input channels)."""
    torch.manual_seed(0)  # test-only: the layers' own initialisation
    return [("conv, same padding, dilated", Conv1d(12, 8, 5, dilation=3, padding=6), 12),
            ("conv 1x1", Conv1d(18, 8, 1), 18),
            ("conv, strided", Conv1d(18, 8, 6, 3, padding=1), 18),
            ("transposed conv", ConvTranspose1d(16, 8, 16, 8, padding=4), 16),
            ("causal conv, left zeros", CausalConv1d(8, 8, 7, dilation=2), 8),
            ("causal conv, 1 tap", CausalConv1d(8, 4, 1), 8),
            ("causal conv, right context", CausalConv1d(16, 8, 5, right=True), 16),
            ("causal down-sampling", CausalDownsample(18, 8, 6, 3), 18),
            ("causal up-sampling", CausalUpsample(16, 8, 7, 5), 16)]


def _run(layer: nn.Module, x: torch.Tensor, context: torch.Tensor | None) -> torch.Tensor:
    with torch.inference_mode():
        return layer(x, context) if context is not None else layer(x)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("index", range(9))
def test_each_layer_time_major_gives_torchs_output(index: int, dtype: torch.dtype, tolerance: float) -> None:
    name, plain, channels = _layers()[index]
    plain = plain.to(dtype).eval()
    keys = {k: (v.shape, v.dtype) for k, v in plain.state_dict().items()}
    layer = copy.deepcopy(plain)
    layer.use_time_major()
    assert {k: (v.shape, v.dtype) for k, v in layer.state_dict().items()} == keys, name
    assert is_time_major(layer.weight)
    x = _signal(2, channels, 41, seed=index, dtype=dtype)
    right = getattr(plain, "right", False)
    for context in ([None, _signal(2, channels, plain.causal_padding, seed=9, dtype=dtype)] if right else [None]):
        expected = _run(plain, x, context)
        for given in (x, time_major(x)):  # either layout in: the same numbers
            got = _run(layer, given, context)
            assert got.shape == expected.shape, name
            assert is_time_major(got), name
            scale = float(expected.abs().max())
            assert float((got.float() - expected.float()).abs().max()) <= tolerance * scale, name


def test_a_plain_layer_is_torchs_until_switched() -> None:
    torch.manual_seed(1)
    ours, theirs = Conv1d(4, 3, 3, padding=1), nn.Conv1d(4, 3, 3, padding=1)
    theirs.load_state_dict(ours.state_dict())
    x = _signal(1, 4, 10)
    with torch.inference_mode():
        assert torch.equal(ours(x), theirs(x)) and not is_time_major(ours(x))
    assert isinstance(ours, TimeMajorConv) and isinstance(ours, nn.Conv1d)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("window", [0, 3])
def test_a_whole_vocoder_time_major_gives_its_plain_output(dtype: torch.dtype, tolerance: float, window: int) -> None:
    """A v1-type tiny vocoder (reflect padding at the last stage, windows of the later stages), batch of two."""
    torch.manual_seed(2)
    plain = HiFTGenerator(tiny_config(), SineGen).eval()
    plain.set_conv_dtype(dtype)
    plain.window_frames = window
    laid = copy.deepcopy(plain)
    assert laid.use_time_major() == sum(isinstance(m, TimeMajorConv) for m in plain.modules()) > 0
    assert laid.time_major and all(m.time_major for m in laid.modules() if isinstance(m, TimeMajorConv))
    mel = _signal(2, 80, 13, seed=3) - 5
    with torch.inference_mode():
        source = plain.source(plain.predict_f0(mel), torch.Generator().manual_seed(0))
        expected, got = plain.decode_to_spectrum(mel, source), laid.decode_to_spectrum(mel, source)
        wave_expected, wave = plain.decode(mel, source), laid.decode(mel, source)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert float((got - expected).abs().max()) <= tolerance * float(expected.abs().max())
    assert float((wave - wave_expected).abs().max()) <= tolerance * float(wave_expected.abs().max())


# --- the Snake kernel ------------------------------------------------------------------------------------------


def test_the_reference_is_torchs_snake() -> None:
    torch.manual_seed(3)
    snake = Snake(6)
    with torch.no_grad():
        snake.alpha.copy_(torch.rand(6) * 2 + 0.1)
    x = _signal(2, 6, 11, seed=4) * 5
    alpha = snake.alpha.detach()
    with torch.inference_mode():
        expected = snake(x)
    got = reference_snake(x, alpha, 1 / (alpha + 1e-9))
    assert torch.allclose(got, expected, atol=1e-5)


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same strides along every dimension longer than one (a length-one dimension's stride means nothing)."""
    return all(sa == sb for sa, sb, n in zip(a.stride(), b.stride(), a.shape) if n > 1)


def _snake_inputs(channels: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    alpha = torch.rand(channels, generator=g) * 3 + 0.05
    return alpha, 1 / alpha


@needs_kernel
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 2e-6), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("batch,channels,frames", [(1, 64, 300), (2, 20, 37), (3, 1, 17), (1, 17, 1), (2, 130, 5)])
def test_the_kernel_is_the_reference(batch: int, channels: int, frames: int, dtype: torch.dtype,
                                     tolerance: float) -> None:
    """Both layouts, channel and time counts with tails past 16, arguments up to ~±200 radians: within float32
    rounding (bf16: the one rounding of the output) of the reference, in the input's dtype and layout."""
    alpha, inv_alpha = _snake_inputs(channels, batch * channels + frames)
    x = (_signal(batch, channels, frames, seed=frames) * 40).to(dtype)
    for given in (x, time_major(x)):
        with torch.inference_mode():
            got = torch.ops.cosyvoice_kernels.snake(given, alpha, inv_alpha)
        expected = reference_snake(given, alpha, inv_alpha)
        assert got.dtype == dtype and got.shape == given.shape and _same_layout(got, given)
        assert torch.allclose(got.double(), expected.double(), rtol=tolerance, atol=tolerance)


@needs_kernel
def test_the_kernel_takes_windows_and_other_layouts() -> None:
    alpha, inv_alpha = _snake_inputs(8, 5)
    whole = time_major(_signal(3, 8, 30, seed=6))
    window = whole[1:, :, 4:21]  # a view: batch stride past its own size, offset start
    odd = _signal(8, 2, 30, seed=8).permute(1, 0, 2)  # [2, 8, 30]: channels neither adjacent nor rows of time
    for given in (window, odd):
        with torch.inference_mode():
            got = torch.ops.cosyvoice_kernels.snake(given, alpha, inv_alpha)
        assert torch.allclose(got, reference_snake(given, alpha, inv_alpha), rtol=2e-6, atol=2e-6)
    with torch.inference_mode():
        empty = torch.ops.cosyvoice_kernels.snake(torch.zeros(1, 8, 0), alpha, inv_alpha)
        special = torch.ops.cosyvoice_kernels.snake(torch.tensor([[[float("nan"), float("inf"), 0.0]]]),
                                                    alpha[:1], inv_alpha[:1])
    assert empty.shape == (1, 8, 0)
    assert torch.isnan(special[0, 0, :2]).all() and special[0, 0, 2] == 0  # sin(inf) is NaN, as torch's


@needs_kernel
def test_the_kernel_checks_its_inputs() -> None:
    op = torch.ops.cosyvoice_kernels.snake
    alpha, inv_alpha = _snake_inputs(4, 0)
    with pytest.raises(RuntimeError, match="batch, channels, time"):
        op(torch.zeros(4, 10), alpha, inv_alpha)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        op(torch.zeros(1, 4, 10, dtype=torch.float64), alpha, inv_alpha)
    with pytest.raises(RuntimeError, match="one value per channel"):
        op(torch.zeros(1, 5, 10), alpha, inv_alpha)


@needs_kernel
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 2e-5), (torch.bfloat16, 0.07)])
def test_snake_on_the_kernel_gives_its_torch_output(dtype: torch.dtype, tolerance: float) -> None:
    """The module switched over: its torch output to float32 rounding; in bf16, where torch rounds after each of
    its five ops, within those roundings; with autograd on, torch's ops still run (the kernel has no backward)."""
    torch.manual_seed(4)
    snake = Snake(24)
    with torch.no_grad():
        snake.alpha.copy_(torch.rand(24) * 2 + 0.1)
    snake = snake.to(dtype)
    keys = set(snake.state_dict())
    on_kernel = copy.deepcopy(snake)
    on_kernel.use_kernel()
    assert set(on_kernel.state_dict()) == keys  # its float32 copies are not checkpoint entries
    x = time_major(_signal(1, 24, 200, seed=5, dtype=dtype) * 3)
    with torch.inference_mode():
        expected, got = snake(x), on_kernel(x)
    assert got.dtype == dtype and is_time_major(got)
    assert float((got.float() - expected.float()).abs().max()) <= tolerance
    grad_x = x.float().requires_grad_()
    on_kernel.float()(grad_x).sum().backward()  # the torch path: differentiable
    assert grad_x.grad is not None


def test_a_failing_snake_probe_keeps_torchs_ops(monkeypatch) -> None:
    monkeypatch.setattr(kernels, "built", lambda: True)
    monkeypatch.setattr(kernels, "_probe_snake", lambda: (_ for _ in ()).throw(RuntimeError("bad op")))
    assert kernels.snake_available.__wrapped__() is False
    monkeypatch.setattr(kernels, "_probe_snake", lambda: False)
    assert kernels.snake_available.__wrapped__() is False


@pytest.mark.parametrize("family", ["v1", "v3"])
def test_engines_lay_out_their_vocoder_and_fast_takes_the_kernel(family: str, request) -> None:
    """Every precision on a CPU: time-major convolutions (recorded); fast: the Snake kernel where built (recorded);
    stock keeps torch's Snake. The fast engine's wave is the plain vocoder's to bf16 rounding."""
    import dataclasses

    from cosyvoice_ui.cosyvoice.precision import settings_for

    folder = request.getfixturevalue("tiny_base" if family == "v1" else "tiny_v3")
    stock = load_engine(folder, device="cpu", precision="stock")
    assert stock.info.precision.hift == "fp32, time-major" and stock.hift.time_major
    assert not any(m.kernel for m in stock.hift.modules() if isinstance(m, Snake))
    fast = load_engine(folder, device="cpu", precision="fast")
    without = load_engine(folder, device="cpu", precision="fast",
                          fast=dataclasses.replace(settings_for("fast"), kernel_snake=False))
    built = kernels.snake_available()
    assert fast.info.precision.hift.endswith(", time-major, one-pass Snake" if built else ", time-major")
    assert without.info.precision.hift.endswith(", time-major")
    assert all(m.kernel is built for m in fast.hift.modules() if isinstance(m, Snake))
    mel = _signal(1, 80, 30, seed=6) - 5
    with torch.inference_mode():
        waves = [e.hift.inference(mel)[0] if family == "v3"
                 else e.hift.inference(mel, generator=torch.Generator().manual_seed(0))[0] for e in (fast, without)]
    scale = float(waves[1].abs().max())
    assert float((waves[0] - waves[1]).abs().max()) <= 0.1 * scale

