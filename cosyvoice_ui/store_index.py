"""Listings of a store (saved voices, glossaries, projects) from an index, and the store's cap.

A store is a folder with one record file per item (`<id>.json`, or `<id>/voice.json`). Listing it by reading
and parsing every record costs a read per item per listing, and a folder of ten thousand items (or a few
huge ones) made every page load slow. `StoreIndex` keeps each record's summary with the record file's size and
modification time, in memory and in `.index.json` beside the records (so a restarted process reads one file):
a listing stats the records and reads only the ones that changed since. Other processes writing the same
folder (a cluster's shared voices) are seen at the next listing, because the file's own stat is the key.

`check_room` is the cap: saving one more item than `limit` is refused with `StoreFull` (HTTP 507).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from .errors import InvalidRequest
from .files import write_atomic

log = logging.getLogger(__name__)

INDEX_FILE = ".index.json"
INDEX_VERSION = 1


class StoreFull(InvalidRequest):
    """The store holds as many items as this server keeps (`--max-voices`, ...): delete one first."""

    def __init__(self, what: str, limit: int, flag: str) -> None:
        super().__init__(f"{what.replace(' ', '_')}_store_limit",
                         f"this server keeps at most {limit} {what}s and that many are saved: delete one you no "
                         f"longer need, or ask the server's owner to raise {flag}", what=what, limit=limit)
        self.limit = limit


def check_room(count: int, limit: int, what: str, flag: str) -> None:
    """Raise `StoreFull` when a store holding `count` items may not take one more (`limit` 0: no cap)."""
    if limit > 0 and count >= limit:
        raise StoreFull(what, limit, flag)


class StoreIndex:
    """Summaries of a store's records, kept current by the records' stat (see the module docstring).

    `records()` yields (id, record file path) for every item present; `summarize(id, path)` reads one record
    into a JSON-able dict (None: unreadable, left out). Safe to use from several threads.
    """

    def __init__(self, root: str | Path, records: Callable[[], Iterable[tuple[str, Path]]],
                 summarize: Callable[[str, Path], dict | None]) -> None:
        self.root = Path(root)
        self._records = records
        self._summarize = summarize
        self._lock = threading.Lock()
        self._known: dict[str, dict] | None = None  # id → {"key": [mtime_ns, size], "summary": {...}}

    @property
    def path(self) -> Path:
        return self.root / INDEX_FILE

    def summaries(self) -> dict[str, dict]:
        """id → summary of every readable item, reading only records that changed since the last listing."""
        with self._lock:
            known = self._known if self._known is not None else self._load()
            current: dict[str, dict] = {}
            changed = False
            for item_id, record in self._records():
                try:
                    stat = record.stat()
                except OSError:
                    continue
                key = [stat.st_mtime_ns, stat.st_size]
                entry = known.get(item_id)
                if entry is None or entry.get("key") != key:
                    summary = self._summarize(item_id, record)
                    changed = True
                    if summary is None:
                        continue
                    entry = {"key": key, "summary": summary}
                current[item_id] = entry
            changed = changed or set(current) != set(known)
            self._known = current
            if changed:
                self._save(current)
            return {item_id: entry["summary"] for item_id, entry in current.items()}

    def count(self) -> int:
        return len(self.summaries())

    def forget(self) -> None:
        """Drop the cached summaries (the next listing re-checks every record's stat anyway)."""
        with self._lock:
            self._known = None

    def _load(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != INDEX_VERSION or \
                not isinstance(data.get("items"), dict):
            return {}
        return {k: v for k, v in data["items"].items()
                if isinstance(v, dict) and isinstance(v.get("summary"), dict) and isinstance(v.get("key"), list)}

    def _save(self, items: dict[str, dict]) -> None:
        if not self.root.is_dir():
            return
        try:
            write_atomic(self.path, json.dumps({"version": INDEX_VERSION, "items": items},
                                               ensure_ascii=False).encode("utf-8"))
        except OSError as exc:  # a read-only store still lists, from memory
            log.debug("cannot write the index of %s (%s)", self.root.name, exc)


def entries_of(folder: Path) -> list[os.DirEntry]:
    """The entries of `folder` (none when it does not exist or cannot be read)."""
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []
