"""trim_heap (cosyvoice_ui/heap.py): freed heap memory that glibc kept goes back to the OS."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# What a model conversion leaves behind: blocks that live in the heap (below the mmap threshold), freed with one
# block still in use above them, so the heap's top cannot shrink on its own. Run in a child: the fixed thresholds
# it sets would change how every later test in this process allocates.
CHILD = textwrap.dedent("""
    import ctypes, ctypes.util, json
    from cosyvoice_ui.heap import trim_heap

    def rss_kib():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    assert libc.mallopt(-3, 64 << 20) and libc.mallopt(-1, 1 << 30)  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    blocks = [libc.malloc(1 << 20) for _ in range(96)]
    for block in blocks:
        libc.memset(block, 1, 1 << 20)
    keeper = blocks.pop()
    for block in blocks:
        libc.free(block)
    kept = rss_kib()
    trimmed = trim_heap()
    print(json.dumps({"trimmed": trimmed, "freed_kib": kept - rss_kib()}))
""")


@pytest.mark.skipif(not (sys.platform.startswith("linux") and Path("/proc/self/statm").exists()),
                    reason="glibc's heap on Linux")
def test_freed_heap_chunks_go_back_to_the_os() -> None:
    import json

    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["trimmed"] is True
    assert result["freed_kib"] >= 64 * 1024, f"only {result['freed_kib']} KiB of the 95 freed MiB went back"
