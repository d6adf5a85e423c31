"""How long torch's OpenMP threads spin before they sleep, set before torch is loaded.

A batch-1 decode step is hundreds of short parallel regions. GNU OpenMP's default lets each idle thread spin for
300,000 iterations at every barrier before it sleeps. On a quiet machine that saves a wake-up. But when another
process holds one of the cores (a shared server: the UI, transcription, a second replica), the spinning threads
take the CPU the working thread needs. Fast mode's v3 decode then went from 31 to 407 ms a token, 12.5x the RTF
(benchmarks/contention.py).

Measured by `python benchmarks/contention.py --family v3 --precision fast` (full-size random weights, 2 threads,
one core kept busy by another process). RTF quiet → busy, one run per spin count:

| spin count | quiet | busy | busy ÷ quiet |
|---|---|---|---|
| 300,000 (GNU's default) | 1.22 | 15.25 | 12.5 |
| 20,000 | 1.12 | 3.59 | 3.2 |
| 2,000 | 1.36 | 2.21 | 1.6 |
| 0 (OMP_WAIT_POLICY=PASSIVE) | 1.56 | 1.99 | 1.3 |

Then 2 alternating batches each, back to back:
- 300,000: quiet 1.06–1.07, busy 13.2–16.4 (13.9×; decode 26 → 372–538 ms a token).
- 5,000 (SPIN_COUNT): quiet 1.20–1.25, busy 2.41–2.44 (1.98×; decode 32–33 → 63 ms a token).

So a neighbour costs about 2× (it takes one of the two cores) instead of 14×. The price is 13–17 % on a quiet
machine. A dedicated box can take that back with GOMP_SPINCOUNT=300000, because an explicit GOMP_SPINCOUNT or
OMP_WAIT_POLICY in the environment wins.

Threads (issue 26, fifth pass). Every thread that runs a parallel region keeps its own team of OpenMP workers, and
GNU OpenMP counts them all: once there are more than the machine has cores, every team's idle workers stop spinning
at barriers almost at once ("throttled"), and the hundreds of short regions of a decode step or a chunk render each
wait for a sleeping worker. The model loads on one thread and requests run on the server's worker threads, so on a
2-core machine every request ran throttled, as slowly as on one thread: a v3 fast first chunk took 1.46 s on a
worker thread against 1.04 s with the teams released (benchmarks/worker_thread.py), a whole stream 8.4 against
6.6 s. GNU caps the throttled spin at 100 (1,000 under OMP_WAIT_POLICY=ACTIVE); no variable lifts it.
`release_threads` lets go of the calling thread's team (`omp_pause_resource_all`) when its work is done or it is
about to wait (after a load, a request, a job slot; before waiting for tokens or a render turn; when the decode loop
idles or holds), so the team of the thread that works next is the only one.
"""

from __future__ import annotations

import ctypes
import functools
import os

SPIN_COUNT = "5000"


def share_cores_politely() -> None:
    """Set GNU OpenMP's spin count unless the environment already decides it. It takes effect only if torch (and
    its OpenMP runtime) has not been loaded yet, so the package calls it when it is imported."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT


_PAUSE_SOFT = 1  # omp_pause_soft: the workers go; the runtime starts new ones at the next parallel region


@functools.cache
def _pause_resource_all():
    """OpenMP's `omp_pause_resource_all` as loaded with torch, looked up once; None where the runtime lacks it."""
    try:
        pause = ctypes.CDLL(None).omp_pause_resource_all
    except (AttributeError, OSError):
        return None
    pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    return pause


def release_threads() -> bool:
    """Let go of the calling thread's OpenMP workers (module docstring). Costs 0.1–0.2 ms at this thread's next
    parallel region (a new team starts); a thread without a team pays only the call. Returns False where the
    runtime has no `omp_pause_resource_all` (OpenMP < 5) or refused (inside a parallel region)."""
    pause = _pause_resource_all()
    return pause is not None and pause(_PAUSE_SOFT) == 0
