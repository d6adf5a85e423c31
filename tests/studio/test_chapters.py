"""Chaptered books with ffmpeg: M4B chapter atoms and MP3 ID3v2 CHAP frames, read back with ffprobe."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.audio import encode, ensure_ffmpeg
from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.studio.chapters import (ChapterMark, ffmetadata, probe_duration, probe_tags, read_chapters,
                                          write_chaptered)

pytestmark = pytest.mark.skipif(not ensure_ffmpeg(), reason="ffmpeg/ffprobe are not installed")

RATE = 24000
LENGTHS = (1.0, 2.5, 0.75)
TITLES = ("One", "Two = 2; #two \\ back", "Trois é 三")


@pytest.fixture()
def chapter_files(tmp_path: Path) -> list[Path]:
    files = []
    for number, seconds in enumerate(LENGTHS, start=1):
        t = np.arange(int(seconds * RATE)) / RATE
        path = tmp_path / f"{number:02d}.flac"
        path.write_bytes(encode((0.2 * np.sin(2 * np.pi * 220 * number * t)).astype(np.float32), RATE, "flac"))
        files.append(path)
    return files


@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
def test_markers_read_back_at_the_chapter_boundaries(chapter_files: list[Path], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"book.{fmt}"
    marks = write_chaptered(chapter_files, TITLES, out, fmt, book_title="The Book", author="Someone")
    read = read_chapters(out)
    assert [m.title for m in read] == list(TITLES)
    starts = np.cumsum((0.0, *LENGTHS[:-1]))
    assert [m.start for m in read] == pytest.approx(list(starts), abs=0.002)
    assert [m.end for m in read] == pytest.approx(list(starts + np.array(LENGTHS)), abs=0.002)
    assert read == marks
    assert probe_duration(out) == pytest.approx(sum(LENGTHS), abs=0.1)
    tags = probe_tags(out)
    assert tags["title"] == "The Book" and tags["artist"] == "Someone"
    if fmt == "m4b":
        assert tags["major_brand"].strip() == "M4B"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_given_durations_set_the_markers(chapter_files: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "book.m4b"
    write_chaptered(chapter_files, TITLES, out, durations=[1.0, 2.5, 0.75])
    assert [m.end for m in read_chapters(out)] == pytest.approx([1.0, 3.5, 4.25], abs=0.002)


def test_ffmetadata_escapes_and_uses_milliseconds() -> None:
    text = ffmetadata([ChapterMark(0.0, 1.2346, "A=B;C#D"), ChapterMark(1.2346, 2.0, "line\nbreak")], "T", "")
    assert text.startswith(";FFMETADATA1\n")
    assert "[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=1235\ntitle=A\\=B\\;C\\#D\n" in text
    assert "START=1235\nEND=2000\ntitle=line\\\nbreak" in text


def test_unknown_book_format_and_mismatched_titles(chapter_files: list[Path], tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as caught:
        write_chaptered(chapter_files, TITLES, tmp_path / "book.ogg", "ogg")
    assert caught.value.code == "bad_book_format" and "m4b or mp3" in str(caught.value)
    with pytest.raises(ValueError):
        write_chaptered(chapter_files, TITLES[:2], tmp_path / "book.m4b")
