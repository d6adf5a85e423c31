"""Resemble AI's own PerTh model code (the pinned `resemble-perth` wheel), loaded beside ours for the equality
tests, without the packages its import chain wants (torchaudio, librosa, pkg_resources, ...).

`perth` and `perth.perth_net` are entered as bare namespace packages (their `__init__`s import the heavy chain),
and two stand-ins take the place of what the model code calls: `torchaudio.transforms` (the `Spectrogram` and
`InverseSpectrogram` it builds its audio processor from, with torchaudio's defaults: centred frames, reflected
edges, no normalisation, `torch.stft` / `torch.istft` underneath; `TimeStretch` only holds its buffer, it is used in
training) and `librosa.resample` (its polyphase mode: scipy's `resample_poly` at the reduced ratio, cut or padded to
ceil(n · new / old); the package's detector asks for exactly that, its embedder for soxr, which the tests avoid by
embedding at the network's own 32 kHz). The stand-ins leave `sys.modules` when the context ends.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn

STUBBED = ("torchaudio", "torchaudio.transforms", "librosa")


class _Spectrogram(nn.Module):
    def __init__(self, n_fft, win_length, hop_length, window_fn, power=None, normalized=False, **_) -> None:
        super().__init__()
        assert power is None and not normalized  # what the package asks for; nothing else is stood in for
        self.n_fft, self.hop = n_fft, hop_length
        self.register_buffer("window", window_fn(win_length))

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        return torch.stft(signal, self.n_fft, self.hop, self.window.shape[0], self.window, center=True,
                          pad_mode="reflect", normalized=False, onesided=True, return_complex=True)


class _InverseSpectrogram(nn.Module):
    def __init__(self, n_fft, win_length, hop_length, window_fn, normalized=False, **_) -> None:
        super().__init__()
        assert not normalized
        self.n_fft, self.hop = n_fft, hop_length
        self.register_buffer("window", window_fn(win_length))

    def forward(self, spectrum: torch.Tensor, length: int | None = None) -> torch.Tensor:
        return torch.istft(spectrum, self.n_fft, self.hop, self.window.shape[0], self.window, center=True,
                           normalized=False, onesided=True, length=length)


class _TimeStretch(nn.Module):
    def __init__(self, n_freq, hop_length, **_) -> None:
        super().__init__()
        self.register_buffer("phase_advance", torch.zeros(n_freq, 1))


def _polyphase(y, orig_sr, target_sr, res_type="soxr_hq", **_):
    from scipy.signal import resample_poly

    assert res_type == "polyphase", f"the stand-in only resamples by polyphase, not {res_type}"
    common = math.gcd(int(orig_sr), int(target_sr))
    size = int(math.ceil(y.shape[-1] * target_sr / orig_sr))
    out = resample_poly(y, target_sr // common, orig_sr // common, axis=-1)
    return out[..., :size] if out.shape[-1] >= size else np.pad(out, (0, size - out.shape[-1]))


def site_folder() -> Path | None:
    """The folder holding the installed `perth` package (None: resemble-perth is not installed)."""
    spec = importlib.util.find_spec("perth")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


@contextlib.contextmanager
def package_watermarker() -> Iterator[object]:
    """The package's `PerthImplicitWatermarker` over its `PerthNet` with the pretrained weights."""
    root = site_folder()
    assert root is not None, "resemble-perth is not installed"
    saved = {name: sys.modules.get(name) for name in STUBBED}
    before = set(sys.modules)
    try:
        for name, path in (("perth", root / "perth"), ("perth.perth_net", root / "perth" / "perth_net")):
            module = types.ModuleType(name)
            module.__path__ = [str(path)]
            sys.modules[name] = module
        sys.modules["perth.perth_net"].PREPACKAGED_MODELS_DIR = str(root / "perth" / "perth_net" / "pretrained")
        audio, transforms, librosa = (types.ModuleType(name) for name in STUBBED)
        transforms.Spectrogram, transforms.InverseSpectrogram = _Spectrogram, _InverseSpectrogram
        transforms.TimeStretch = _TimeStretch
        audio.transforms = transforms
        librosa.resample = _polyphase
        sys.modules.update(zip(STUBBED, (audio, transforms, librosa)))
        implicit = "perth.perth_net.perth_net_implicit"
        marker = importlib.import_module(f"{implicit}.perth_watermarker")
        model = importlib.import_module(f"{implicit}.model.perth_net")
        config = importlib.import_module(f"{implicit}.config")
        network = model.PerthNet(config.default_hp)
        checkpoint = root / "perth" / "perth_net" / "pretrained" / "implicit" / "perth_net_250000.pth.tar"
        network.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True)["model"])
        yield marker.PerthImplicitWatermarker(run_name=None, perth_net=network.eval())
    finally:
        for name in set(sys.modules) - before:
            if name == "perth" or name.startswith("perth.") or name in STUBBED:
                del sys.modules[name]
        for name, module in saved.items():
            if module is not None:
                sys.modules[name] = module
