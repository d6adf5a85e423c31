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

T = TypeVar("T")


class RenderTurns:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._busy = False
        self._waiting: list[tuple[int, int]] = []
        self._tickets = itertools.count()

    @contextmanager
    def turn(self, rendered: int) -> Iterator[None]:
        """Wait for the render slot; `rendered`: how many chunks the caller's request has had (fewest go first,
        then first come)."""
        with self._changed:
            ticket = (rendered, next(self._tickets))
            heapq.heappush(self._waiting, ticket)
            while self._busy or self._waiting[0] != ticket:
                self._changed.wait()
            heapq.heappop(self._waiting)
            self._busy = True
        try:
            yield
        finally:
            with self._changed:
                self._busy = False
                self._changed.notify_all()

    def wrap(self, render: object) -> _InTurn:
        """A segment's renderer whose renders take turns, counting that request's chunks."""
        return _InTurn(self, render)


class _InTurn:
    """A renderer (`streaming.Chunker.renderer`: called whole, or `.chunk(...)` by the v2/v3 schedule) whose
    renders wait for their turn; anything else it has is read through."""

    def __init__(self, turns: RenderTurns, render: object) -> None:
        self._turns, self._render, self._rendered = turns, render, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._render, name)

    def __call__(self, *args, **kwargs):
        return self._in_turn(self._render, *args, **kwargs)

    def chunk(self, *args, **kwargs):
        return self._in_turn(self._render.chunk, *args, **kwargs)

    def _in_turn(self, render: Callable[..., T], *args, **kwargs) -> T:
        with self._turns.turn(self._rendered):
            self._rendered += 1
            return render(*args, **kwargs)
