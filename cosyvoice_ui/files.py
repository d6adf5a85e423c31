"""Writing files so that a crash or a kill never leaves half a file: write beside, then rename over."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# `.NAME.PID.HEX.tmp`: what `atomic_path` writes to before the rename.
_TEMP_NAME = re.compile(r"^\..+\.(\d+)\.[0-9a-f]{8}\.tmp$")
STALE_TEMP_S = 3600.0  # a temp file this old is a leftover even if its writer's pid was reused


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


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs now (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # exists but is not ours (or an impossible id: not alive)
    return True


def is_stale(pid: int, path: Path) -> bool:
    """A leftover of a killed writer: its process is gone, or it is older than any write takes."""
    if pid != os.getpid() and not pid_alive(pid):
        return True
    try:
        return time.time() - path.lstat().st_mtime > STALE_TEMP_S
    except OSError:
        return False


def sweep_stale_temp(folder: Path) -> int:
    """Remove the temp files a killed process left in `folder` (a `kill -9` skips `atomic_path`'s cleanup).
    Returns how many were removed; a folder that cannot be read or written is left as it is."""
    removed = 0
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return 0
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if match and is_stale(int(match.group(1)), entry):
            try:
                entry.unlink()
                removed += 1
            except OSError as exc:
                log.debug("cannot remove the leftover %s (%s)", entry.name, exc)
    return removed
