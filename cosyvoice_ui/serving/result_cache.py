"""Recent synthesis results, so a repeated request (an IVR phrase, a retried call) is served instantly.

Only requests with an explicit seed are cacheable: a request without one asks for a fresh random take,
and serving it from the cache would make it silently deterministic.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..audio import audio_hash
from ..types import SynthesisRequest

DEFAULT_MAX_BYTES = 256 * 2**20


@dataclass(frozen=True)
class CachedResult:
    """Finished audio of one request (post-processed, before encoding: one entry serves every format)."""

    samples: np.ndarray  # [N] float32, read-only
    sample_rate: int
    seed: int


def request_key(model: str, request: SynthesisRequest, voice_tag: str = "", **extra: object) -> str | None:
    """The cache key of a request on `model`, or None when the request must not be cached (no seed).

    `voice_tag` identifies a saved voice's exact recording (id + creation time), so re-adding a voice
    under the same id never serves audio of the old one. `extra` holds output options (e.g. loudness).
    """
    if request.seed is None:
        return None
    parts = {
        "model": model, "mode": request.mode.value, "text": request.text, "speaker": request.speaker or "",
        "voice": voice_tag, "prompt_audio": audio_hash(request.prompt_audio), "prompt_text": request.prompt_text,
        "instruct_text": request.instruct_text, "source_audio": audio_hash(request.source_audio),
        "speed": float(request.speed), "seed": int(request.seed), "stream": bool(request.stream),
        "text_frontend": bool(request.text_frontend), "voice_match": request.voice_match, **{k: str(v) for k, v in extra.items()},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class ResultCache:
    """A thread-safe LRU of `CachedResult`s bounded by entry count and total bytes.

    Does not decide what is cacheable (see `request_key`) and does not encode audio.
    """

    def __init__(self, entries: int = 64, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.entries = max(0, entries)
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, CachedResult] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str | None) -> CachedResult | None:
        if key is None or self.entries == 0:
            return None
        with self._lock:
            result = self._items.get(key)
            if result is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return result

    def put(self, key: str | None, samples: np.ndarray, sample_rate: int, seed: int) -> None:
        """Keep a result; results larger than a quarter of the byte budget are not kept."""
        if key is None or self.entries == 0:
            return
        data = np.array(samples, dtype=np.float32, copy=True)
        data.setflags(write=False)  # callers share the array; nobody may scale it in place
        if data.nbytes > self.max_bytes // 4:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.samples.nbytes
            self._items[key] = CachedResult(data, int(sample_rate), int(seed))
            self._bytes += data.nbytes
            while self._items and (len(self._items) > self.entries or self._bytes > self.max_bytes):
                _, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.samples.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
