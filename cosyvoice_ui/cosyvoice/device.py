"""Where a CosyVoice model runs: `auto` resolved to a usable device, and explicit choices checked."""

from __future__ import annotations

import torch


def resolve_device(device: str) -> str:
    """`auto` → cuda when a GPU is usable, else cpu. Validates explicit choices."""
    device = (device or "auto").lower()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but no CUDA GPU is usable here (torch.cuda.is_available() "
                         "is False); use --device cpu or install a CUDA build of torch")
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"unknown device {device!r}; choose auto, cpu or cuda")
    return device
