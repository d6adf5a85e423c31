"""Turns at the flow and vocoder for concurrent requests: one render at a time, the request with the fewest chunks
rendered first.

With several requests on one engine, their LLM steps share a batch (`models/decode_batcher.py`), but the flow and
the vocoder are compute-bound: two renders at once on the same cores only split the cores (and oversubscribe
their thread pools). Taking turns costs no throughput, and ordering the turns by chunks already rendered puts every
request's first chunk ahead of the others' later chunks, which is what a waiting listener notices.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ..openmp import release_threads

T = TypeVar("T")


class RenderTurns:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._busy = False
        self._busy_first = False  # the render running is a request's first
        self._waiting: list[tuple[int, int]] = []
        self._tickets = itertools.count()

    def first_chunks_pending(self) -> bool:
        """Whether a request's first render is running or waiting for its turn (the decode loop yields the cores
        to it while no request still waits for the tokens of its own first chunk: `DecodeBatcher`'s `hold`)."""
        with self._changed:
            return self._busy_first or any(rendered == 0 for rendered, _ in self._waiting)

    @contextmanager
    def turn(self, rendered: int) -> Iterator[None]:
        """Wait for the render slot; `rendered`: how many chunks the caller's request has had (fewest go first,
        then first come)."""
        release_threads()  # a waiting thread's OpenMP team would throttle the working ones' (openmp.py)
        with self._changed:
            ticket = (rendered, next(self._tickets))
            heapq.heappush(self._waiting, ticket)
            while self._busy or self._waiting[0] != ticket:
                self._changed.wait()
            heapq.heappop(self._waiting)
            self._busy, self._busy_first = True, rendered == 0
        try:
            yield
        finally:
            with self._changed:
                self._busy = self._busy_first = False
                self._changed.notify_all()

    def wrap(self, render: object) -> _InTurn:
        """A segment's renderer whose renders take turns, counting that request's chunks."""
        return _InTurn(self, render)


class _InTurn:
    """A renderer (`streaming.Chunker.renderer`: called whole, or `.chunk(...)` by the v2/v3 schedule) whose
    renders wait for their turn; anything else it has is read through."""

    def __init__(self, turns: RenderTurns, render: object) -> None:
        self._turns, self._render, self._rendered = turns, render, 0
        self._asked = 0  # renders asked for (a render waiting for its turn counts)

    def waiting_for_tokens(self) -> bool:
        """True until this request asks for its first render: its decode is what its listener waits for."""
        return self._asked == 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._render, name)

    def __call__(self, *args, **kwargs):
        return self._in_turn(self._render, *args, **kwargs)

    def chunk(self, *args, **kwargs):
        return self._in_turn(self._render.chunk, *args, **kwargs)

    def _in_turn(self, render: Callable[..., T], *args, **kwargs) -> T:
        self._asked += 1
        with self._turns.turn(self._rendered):
            self._rendered += 1
            try:
                return render(*args, **kwargs)
            finally:
                # Between turns this thread waits; its OpenMP team would only throttle the decode loop's and the
                # next render's (openmp.py).
                release_threads()
