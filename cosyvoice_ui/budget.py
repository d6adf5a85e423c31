"""Budgets for reading what users upload (books, scripts, subtitles): a time budget the parsers check as they
go, and the refusals they raise when a document is too big or too slow to read.

The parsers are linear, so a budget is a backstop, not the defence: it turns "the server is busy for a
minute" into a clear message. It is cooperative: a parser calls `check()` every line or item, which costs a
counter increment and, every `every` calls, one clock read. Every refusal is an `InvalidRequest` whose code
the UI translates; messages never show a path, a traceback or the document's own text.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .errors import InvalidRequest


class Budget:
    """The time one document may take to read. `check()` raises `document_too_complex` once it is spent."""

    def __init__(self, seconds: float, what: str = "document", every: int = 256,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = float(seconds)
        self.what = what
        self.every = max(1, int(every))
        self._clock = clock
        self._deadline = clock() + self.seconds
        self._calls = 0

    def check(self, weight: int = 1) -> None:
        """Count `weight` units of work; look at the clock every `every` units."""
        self._calls += weight
        if self._calls >= self.every:
            self._calls = 0
            self.check_now()

    def check_now(self) -> None:
        if self._clock() > self._deadline:
            raise too_complex(self.what, self.seconds)

    @property
    def left_s(self) -> float:
        return max(0.0, self._deadline - self._clock())


def too_complex(what: str, seconds: float) -> InvalidRequest:
    return InvalidRequest(
        "document_too_complex",
        f"reading this {what} took longer than {seconds:g} seconds, so it was stopped (it is very large, or its "
        "formatting is unusually complex); split it into smaller files or save it as plain text, and upload it "
        "again", what=what, seconds=seconds)


def too_large(code: str, what: str, amount: int, limit: int, unit: str, advice: str) -> InvalidRequest:
    """A size refusal: "the book has 12,000,000 characters; at most 10,000,000 can be read — split it ..."."""
    return InvalidRequest(code, f"the {what} has {amount:,} {unit}; at most {limit:,} can be read. {advice}",
                          what=what, amount=amount, limit=limit)
