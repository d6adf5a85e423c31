"""What both model downloaders share (CosyVoice folders in `cosyvoice/hub.py`, ASR models in `asr/catalogue.py`):
the Hugging Face endpoint, a quick reachability check, and a tqdm class that turns the hub's byte bars into our
progress events. tqdm is imported only when a download starts."""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlparse

from .types import ProgressCallback, ProgressEvent


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check of the hub host, so that offline machines fail in seconds, not minutes."""
    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True"):
        return False
    url = urlparse(endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def byte_progress(progress: ProgressCallback | None, label: str):
    """A tqdm class for `snapshot_download(tqdm_class=...)` that sums its byte bars and reports the share done
    to `progress` (the library draws nothing in the terminal). The hub grows a bar's total as each file starts,
    so the share is kept from going back."""
    from tqdm.auto import tqdm

    lock = threading.Lock()
    bars: dict[int, tuple[float, float]] = {}
    reported = [0.0]

    class Forwarding(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = False
            super().__init__(*args, **kwargs)

        def display(self, *args, **kwargs):  # draw nothing in the terminal from the library
            return None

        def update(self, n=1):
            result = super().update(n)
            if progress is not None and self.unit == "B":
                with lock:
                    bars[id(self)] = (float(self.n), float(self.total or 0))
                    done = sum(b[0] for b in bars.values())
                    total = sum(b[1] for b in bars.values())
                    if total <= 0:
                        return result
                    reported[0] = fraction = max(reported[0], min(1.0, done / total))
                progress(ProgressEvent("download", fraction, f"{label}: {done / 1e6:.0f} / {total / 1e6:.0f} MB"))
            return result

    return Forwarding
