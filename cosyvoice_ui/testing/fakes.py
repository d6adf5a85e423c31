"""A fake `Engine` for orchestration tests (manager, UI, API): no model, deterministic audio,
adjustable delay per chunk, and the same request checks as a real backend."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np

from ..engine import Engine, raise_if_cancelled, report
from ..types import AudioChunk, CheckedRequest, EngineInfo, Mode, ProgressCallback


class FakeEngine(Engine):
    """Speaks a sine tone: 0.25 s per word, in `chunks_per_request` chunks."""

    def __init__(self, name: str = "fake", modes: tuple[Mode, ...] = tuple(Mode), speakers: tuple[str, ...] = ("A", "B"),
                 sample_rate: int = 16000, chunk_delay_s: float = 0.0, chunks_per_request: int = 2,
                 instruct_examples: tuple[str, ...] = ("Speak slowly.",)) -> None:
        self._info = EngineInfo(name=name, family="fake", sample_rate=sample_rate, modes=modes, speakers=speakers,
                                instruct_examples=instruct_examples)
        self.chunk_delay_s = chunk_delay_s
        self.chunks_per_request = chunks_per_request
        self.closed = False
        self.calls = 0
        self.started = threading.Event()  # set when a synthesis has begun (for concurrency tests)
        self.release = threading.Event()  # when `hold` is True, chunks wait for this
        self.release.set()

    @property
    def info(self) -> EngineInfo:
        return self._info

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                     cancel: threading.Event | None) -> Iterator[AudioChunk]:
        assert not self.closed, "used after close()"
        self.calls += 1
        self.started.set()
        words = max(1, len((request.text or "x").split()))
        total = int(0.25 * words * self._info.sample_rate / request.speed)
        t = np.arange(total) / self._info.sample_rate
        wave = (0.3 * np.sin(2 * np.pi * (200 + (request.seed or 0) % 50) * t)).astype(np.float32)
        pieces = np.array_split(wave, self.chunks_per_request)
        for i, piece in enumerate(pieces):
            raise_if_cancelled(cancel)
            while not self.release.wait(0.05):
                raise_if_cancelled(cancel)
            if self.chunk_delay_s:
                time.sleep(self.chunk_delay_s)
            report(progress, "vocoder", (i + 1) / len(pieces), f"chunk {i + 1}")
            yield AudioChunk(piece, self._info.sample_rate, 0, 1, i == len(pieces) - 1, request.text)

    def close(self) -> None:
        self.closed = True
