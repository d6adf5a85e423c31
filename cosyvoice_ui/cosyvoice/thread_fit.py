"""Intra-op threads that fit the cores other processes leave free.

A decode step runs a few hundred short parallel regions, and each one ends at a barrier where every thread waits
for the others. When another process keeps the cores busy, a waiting thread sleeps and must be scheduled again;
measured here, with both cores of a 2-core machine taken by other work, 2 threads took 300 ms per step against
26 ms alone. One thread has no barrier to wait at. So the engine checks, at most every half second, how many
cores other processes used since the last look (/proc/stat minus this process's own time from
/proc/self/stat), and sets the calling thread's intra-op threads to what is left: at least 1, at most what the
process was started with. Threads are set per calling thread (OpenMP keeps the count per thread), so this reaches
the thread that decodes and renders, and nothing else.

Linux only (elsewhere `tick` does nothing). `COSYVOICE_FIT_THREADS=0` turns it off.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import torch

ENV = "COSYVOICE_FIT_THREADS"
EVERY_S = 0.5


def _system_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user time
    return total - idle, total


def _own_ticks() -> int | None:
    """This process's user + system clock ticks, from /proc/self/stat."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])


class ThreadFit:
    """One per process (`shared()`): `tick()` from the loops that run torch (decode steps, chunk renders)."""

    def __init__(self, ceiling: int | None = None, cores: int | None = None,
                 system: Callable[[], tuple[int, int] | None] = _system_ticks,
                 own: Callable[[], int | None] = _own_ticks, clock: Callable[[], float] = time.monotonic,
                 apply: Callable[[int], None] = torch.set_num_threads) -> None:
        self.ceiling = max(1, ceiling or torch.get_num_threads())
        if cores is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.cores = cores
        self.system, self.own, self.clock, self.apply = system, own, clock, apply
        self.enabled = os.environ.get(ENV, "1") != "0" and self.system() is not None and self.own() is not None
        self._last: tuple[float, int, int, int] | None = None
        self._lock = threading.Lock()
        self._wanted: dict[int, int] = {}  # thread id → the count last set on it
        self.threads = self.ceiling

    def tick(self) -> int:
        """The intra-op threads for the calling thread now (set on it when they changed)."""
        if not self.enabled or self.ceiling == 1:
            return self.ceiling
        now = self.clock()
        with self._lock:
            if self._last is None or now - self._last[0] >= EVERY_S:
                self._measure(now)
            wanted = self.threads
        me = threading.get_ident()
        if self._wanted.get(me) != wanted:
            self._wanted[me] = wanted
            self.apply(wanted)
        return wanted

    def _measure(self, now: float) -> None:
        system, own = self.system(), self.own()
        if system is None or own is None:
            return
        busy, total = system
        if self._last is not None:
            _, last_busy, last_total, last_own = self._last
            elapsed = total - last_total
            if elapsed > 0:
                others = max(0.0, (busy - last_busy) - (own - last_own)) / elapsed * self.cores
                free = self.cores - others
                # 1.3 free cores → 1 thread: the barrier cost of a half-shared core exceeds what it adds
                self.threads = max(1, min(self.ceiling, int(free + 0.3)))
        self._last = (now, busy, total, own)


_shared: ThreadFit | None = None
_shared_lock = threading.Lock()


def shared() -> ThreadFit:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ThreadFit()
        return _shared
