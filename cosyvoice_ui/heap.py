"""Giving glibc's free heap back to the operating system.

glibc keeps freed memory for reuse instead of returning it, and after a large block is freed it raises the size
above which it maps blocks of their own (up to 32 MB), so most of a model conversion's float temporaries (fused
weights, unpacked int8 copies, folded weight norms) end up in heap arenas that stay resident after they are free.
Measured on a cold fast v1 load (benchmarks/load_memory.py, issue 26): the heap held 690 MB after the LLM's
conversion and 369 MB after `trim_heap`. Every later model then loaded on top of that garbage, and the peak was
its sum."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys


@functools.cache
def _malloc_trim():
    """libc's `malloc_trim`, looked up once; None off glibc."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_size_t,)
    function.restype = ctypes.c_int
    return function


def trim_heap() -> bool:
    """Return the heap's free pages to the OS (`malloc_trim(0)`: every arena, not only the top). True when some
    memory went back; False when none could, or off glibc. Costs a walk over the free lists (a few ms)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
