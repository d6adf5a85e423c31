"""Process resources: the resident-set figure the UI and /health show, giving freed memory back, and the
number of CPU threads the model backends compute with."""

from __future__ import annotations

import gc
import os

from ..heap import trim_heap


def rss_mb() -> float:
    """Resident memory of this process in MB (Linux /proc; 0 when unknown)."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0


def release_memory() -> None:
    """Give freed memory back to the OS: Python objects, glibc's heap, the CUDA cache."""
    gc.collect()
    trim_heap()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def set_compute_threads(threads: int | None) -> None:
    """Intra-op threads for torch (the CosyVoice backend); None keeps torch's default."""
    if threads:
        import torch

        torch.set_num_threads(threads)
