"""The voice-match cache of the offline backend, as small JSON files on disk.

Layout under `voices_dir` (the app's voices folder; the shared `VoiceLibrary` ignores this folder
because it holds no voice.json):

    offline/match_cache/<sha>.json  the best match found for a prompt recording (sha256 of samples + rate)

Each file is a `MatchResult` (a `VoiceStyle`: blend weights + a 256-number offset, about 3 KB of JSON);
the cache keeps the `MAX_CACHED_MATCHES` most recently used.
Saved voices of the shared library (prompt recordings) are matched once and their match is kept in the
voice's own folder by the engine (`register_voice`, through `read_match` / `write_match`), not here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from ..files import write_atomic
from .styles import VoiceStyle

log = logging.getLogger(__name__)


MatchLevel = Literal["quick", "refine"]
MATCH_LEVELS: tuple[str, ...] = ("quick", "refine")


@dataclass(frozen=True)
class MatchResult:
    """The outcome of one voice match (also what the match cache stores).

    Attributes:
        style: the best style found.
        similarity: d-vector cosine between the prompt and `style` reading the calibration sentences.
        baseline: the same cosine for the nearest stock voice (what a plain preset would give).
        baseline_voice: that stock voice's name.
        level: "quick" or "refine".
        evaluations: candidate styles rendered and measured for this match (0 from the cache).
        seconds: wall time of the match (0 from the cache).
        cached: True when the result was read from the match cache.
    """

    style: VoiceStyle
    similarity: float
    baseline: float
    baseline_voice: str
    level: str
    evaluations: int = 0
    seconds: float = 0.0
    cached: bool = False

    def to_json(self) -> dict:
        return {
            "style": self.style.to_json(),
            "similarity": self.similarity,
            "baseline": self.baseline,
            "baseline_voice": self.baseline_voice,
            "level": self.level,
        }

    @classmethod
    def from_json(cls, data: dict) -> MatchResult:
        level = str(data["level"])
        if level not in MATCH_LEVELS:
            raise ValueError(f"unknown match level {level!r}")
        return cls(
            style=VoiceStyle.from_json(data["style"]),
            similarity=float(data["similarity"]),
            baseline=float(data["baseline"]),
            baseline_voice=str(data.get("baseline_voice", "")),
            level=level,
            cached=True,
        )


def _write_json(path: Path, data: dict) -> None:
    """Write atomically (temp file + rename) so a crash never leaves half a match."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, ensure_ascii=False).encode("utf-8"))


MAX_CACHED_MATCHES = 512  # about 1.5 MB; every new prompt recording adds one, so the cache must be capped


class MatchCache:
    """Cached voice matches of prompt recordings under `root` (created on first write), at most
    `max_entries`: a new one evicts the least recently used (a hit refreshes its file's mtime).

    Does: read and write one match per prompt hash. Does not: compute the hash or the match (see `speakers`).
    """

    def __init__(self, root: Path, max_entries: int = MAX_CACHED_MATCHES) -> None:
        self.root = Path(root)
        self.max_entries = max_entries

    @property
    def cache_dir(self) -> Path:
        return self.root / "offline" / "match_cache"

    def cached_match(self, key: str, fingerprint: str | None = None) -> MatchResult | None:
        """The cached match of the prompt with hash `key`, if any (and made with `fingerprint`'s models)."""
        path = self.cache_dir / f"{key}.json"
        match = read_match(path, fingerprint)
        if match is not None:
            with contextlib.suppress(OSError):  # recently used: evicted last
                os.utime(path)
        return match

    def cache_match(self, key: str, match: MatchResult, fingerprint: str | None = None) -> None:
        """Remember `match` for the prompt with hash `key`, evicting the oldest beyond `max_entries`."""
        write_match(self.cache_dir / f"{key}.json", match, fingerprint)
        self._evict()

    def _evict(self) -> None:
        try:
            entries = [(p.stat().st_mtime, p) for p in self.cache_dir.glob("*.json")]
        except OSError:  # a file removed meanwhile (another process): the next write evicts
            return
        entries.sort()
        for _, path in entries[:max(0, len(entries) - self.max_entries)]:
            with contextlib.suppress(OSError):
                path.unlink()


def read_match(path: Path, fingerprint: str | None = None) -> MatchResult | None:
    """A match stored at `path`, or None if absent, unreadable or (given `fingerprint`) made by other models."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if fingerprint is not None and data.get("fingerprint") != fingerprint:
            log.info("%s was matched with other offline models; matching again", path.name)
            return None
        return MatchResult.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable voice match %s: %s", path.name, exc)
        return None


def write_match(path: Path, match: MatchResult, fingerprint: str | None = None) -> None:
    """Store `match` at `path` (atomically), tagged with `fingerprint` if given."""
    data = replace(match, cached=False).to_json()
    if fingerprint is not None:
        data["fingerprint"] = fingerprint
    _write_json(path, data)
