"""Style voices and the voice-match cache of the offline backend, as small JSON files on disk.

Layout under `voices_dir` (the app's voices folder; the shared `VoiceLibrary` ignores these folders
because they hold no voice.json):

    offline/voices/<name>.json      a style voice: {"name", "style", "created", "source", "similarity"}
    offline/match_cache/<sha>.json  the best match found for a prompt recording (sha256 of samples + rate)

A voice is a `VoiceStyle` (blend weights + a 256-number offset), about 3 KB of JSON. Saved voices of
the shared library (prompt recordings) are matched once and their style is kept in the voice's own
folder by the engine (`register_voice`), not here.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal


from ..errors import InvalidRequest
from ..files import write_atomic
from .styles import VoiceStyle

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[\w][\w .\-]{0,63}$")


@dataclass(frozen=True)
class StyleVoice:
    """A named style stored on disk and offered as a speaker."""

    name: str
    style: VoiceStyle
    created: float  # unix time
    source: str = ""  # how it was made, e.g. "match:refine" or "manual"
    similarity: float | None = None  # d-vector cosine to the prompt it was matched to, if any


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
    """Write atomically (temp file + rename) so a crash never leaves half a voice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, ensure_ascii=False).encode("utf-8"))


class VoiceStore:
    """Saved voices and cached matches in `root` (created on first write).

    Does: validate names, save / list / load / delete voices, read and write the match cache.
    Does not: decide which names are reserved beyond `reserved` (the engine passes its presets).
    """

    def __init__(self, root: Path, reserved: tuple[str, ...] = ()) -> None:
        self.root = Path(root)
        self.reserved = frozenset(reserved)

    @property
    def voices_dir(self) -> Path:
        return self.root / "offline" / "voices"

    @property
    def cache_dir(self) -> Path:
        return self.root / "offline" / "match_cache"

    def check_name(self, name: str) -> str:
        """Return the stripped name or raise `InvalidRequest` saying what a name may contain."""
        clean = (name or "").strip()
        if not _NAME.match(clean):
            raise InvalidRequest(
                "voice_name_invalid",
                f"voice name {name!r} is not allowed: use 1-64 letters, digits, spaces, '.', '-' or '_', "
                "starting with a letter or digit",
                name=name,
            )
        if clean in self.reserved:
            raise InvalidRequest(
                "voice_name_taken",
                f"{clean!r} is a built-in speaker of the offline backend; choose another name",
                name=clean,
            )
        return clean

    def _path(self, name: str) -> Path:
        return self.voices_dir / f"{name}.json"

    def save(self, name: str, style: VoiceStyle, source: str = "manual", similarity: float | None = None) -> StyleVoice:
        """Save (or overwrite) voice `name`."""
        clean = self.check_name(name)
        voice = StyleVoice(name=clean, style=style, created=time.time(), source=source, similarity=similarity)
        _write_json(
            self._path(clean),
            {"name": clean, "style": style.to_json(), "created": voice.created, "source": source, "similarity": similarity},
        )
        log.info("saved offline voice %r (%s)", clean, source)
        return voice

    def load(self, name: str) -> StyleVoice | None:
        """The saved voice `name`, or None if there is none (or its file is unreadable)."""
        path = self._path(name)
        if not _NAME.match(name) or not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return StyleVoice(
                name=name,
                style=VoiceStyle.from_json(data["style"]),
                created=float(data.get("created", 0.0)),
                source=str(data.get("source", "")),
                similarity=data.get("similarity"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable saved voice %s: %s", path.name, exc)
            return None

    def names(self) -> list[str]:
        """Names of the saved voices, sorted."""
        if not self.voices_dir.is_dir():
            return []
        return sorted(p.stem for p in self.voices_dir.glob("*.json") if not p.name.startswith(".") and _NAME.match(p.stem))

    def delete(self, name: str) -> bool:
        """Delete voice `name`; False if there was no such voice."""
        path = self._path(name)
        if not _NAME.match(name) or not path.is_file():
            return False
        path.unlink()
        log.info("deleted offline voice %r", name)
        return True

    def cached_match(self, key: str, fingerprint: str | None = None) -> MatchResult | None:
        """The cached match of the prompt with hash `key`, if any (and made with `fingerprint`'s models)."""
        return read_match(self.cache_dir / f"{key}.json", fingerprint)

    def cache_match(self, key: str, match: MatchResult, fingerprint: str | None = None) -> None:
        """Remember `match` for the prompt with hash `key`."""
        write_match(self.cache_dir / f"{key}.json", match, fingerprint)


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
