"""The feature cache of saved voices: prompt features stored in the voice's folder as safetensors, tagged
with a fingerprint of the frontend networks that computed them, so another speaker encoder or speech
tokenizer is never fed stale features."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from ..files import atomic_path

log = logging.getLogger(__name__)


def file_fingerprint(*paths: Path) -> str:
    """A cheap identity of model files: size plus the first and last MiB of each (sha256, hex)."""
    digest = hashlib.sha256()
    block = 1 << 20
    for path in paths:
        size = path.stat().st_size
        digest.update(f"{path.name}:{size};".encode())
        with open(path, "rb") as handle:
            digest.update(handle.read(block))
            if size > 2 * block:
                handle.seek(size - block)
                digest.update(handle.read(block))
    return digest.hexdigest()


def save_features(path: Path, tensors: dict[str, torch.Tensor], fingerprint: str) -> None:
    """Store prompt feature tensors (safetensors) tagged with the frontend's fingerprint; atomic."""
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp),
                  metadata={"fingerprint": fingerprint})


def load_features(path: Path, fingerprint: str) -> dict[str, torch.Tensor] | None:
    """The stored tensors, or None when the file is missing, unreadable or made by another frontend."""
    if not path.is_file():
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            if (handle.metadata() or {}).get("fingerprint") != fingerprint:
                log.info("%s was computed by another speaker encoder / tokenizer; recomputing", path.name)
                return None
            return {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as exc:  # a truncated or foreign file: recompute rather than fail the load
        log.warning("cannot read %s (%s); recomputing the voice features", path, exc)
        return None
