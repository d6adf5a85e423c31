"""The one fake `Engine` of the orchestration tests (manager, UI, API): no model, deterministic audio per
seed, and handles to hold, gate and observe a running job. Requests go through the real checks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np

from ..engine import Engine, raise_if_cancelled, report
from ..types import AudioChunk, CheckedRequest, EngineInfo, Mode, ProgressCallback


class FakeEngine(Engine):
    """Speaks seeded noise (the same seed gives the same samples, another seed others).

    Length: `chunk_samples` per chunk when given, else 0.25 s per word (divided by the speed), split into
    `chunks` chunks. Handles: `release` (cleared: chunks wait for it), `gate` (chunk 2 waits for it),
    events `started`, `second_chunk_started`, `finished`, `cancelled`, and the counter `calls`.
    """

    def __init__(self, name: str = "fake", modes: tuple[Mode, ...] = tuple(Mode), speakers: tuple[str, ...] = ("A", "B"),
                 sample_rate: int = 16000, chunks: int = 2, chunk_samples: int | None = None,
                 chunk_delay_s: float = 0.0, gate: threading.Event | None = None,
                 instruct_examples: tuple[str, ...] = ("Speak slowly.",), **facts) -> None:
        # `facts`: any other EngineInfo field (instructions, instruct_voice, text_tags, pronunciation, ...)
        self._info = EngineInfo(name=name, family="fake", sample_rate=sample_rate, modes=tuple(modes),
                                speakers=tuple(speakers), instruct_examples=instruct_examples, **facts)
        self.chunks = chunks
        self.chunk_samples = chunk_samples
        self.chunk_delay_s = chunk_delay_s
        self.gate = gate
        self.closed = False
        self.calls = 0
        self.started = threading.Event()  # a synthesis has begun (concurrency tests)
        self.second_chunk_started = threading.Event()
        self.finished = threading.Event()
        self.cancelled = threading.Event()
        self.release = threading.Event()  # cleared: every chunk waits until it is set again
        self.release.set()

    @property
    def info(self) -> EngineInfo:
        return self._info

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        assert not self.closed, "used after close()"
        self.calls += 1
        self.started.set()
        rng = np.random.default_rng(request.seed)
        rate = self._info.sample_rate
        if self.chunk_samples is not None:
            sizes = [self.chunk_samples] * self.chunks
        else:
            words = max(1, len((request.text or "x").split()))
            sizes = [len(p) for p in np.array_split(np.empty(int(0.25 * words * rate / request.speed)), self.chunks)]
        for i, size in enumerate(sizes):
            if i == 1:
                self.second_chunk_started.set()
                if self.gate is not None:
                    self.gate.wait(5.0)
            if cancel is not None and cancel.is_set():
                self.cancelled.set()
            raise_if_cancelled(cancel)
            while not self.release.wait(0.05):
                raise_if_cancelled(cancel)
            if self.chunk_delay_s:
                time.sleep(self.chunk_delay_s)
            report(progress, "vocoder", (i + 1) / len(sizes), f"chunk {i + 1}")
            samples = (0.1 * rng.standard_normal(size)).astype(np.float32)
            yield AudioChunk(samples, rate, 0, 1, i == len(sizes) - 1, request.text)
        self.finished.set()

    def close(self) -> None:
        self.closed = True


class RecordingEngine(FakeEngine):
    """The fake engine, keeping every checked request it renders: `received`, and `texts` (their texts)."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.received: list[CheckedRequest] = []

    @property
    def texts(self) -> list[str]:
        return [request.text for request in self.received]

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        self.received.append(request)
        yield from super()._synthesize(request, progress, cancel)
