"""Writing files so that a crash or a kill never leaves half a file: write beside, then rename over."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path in `path`'s folder to write to; it replaces `path` when the block ends normally,
    and is removed when the block fails (so readers see the old file or the new one, never a part)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one step."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
