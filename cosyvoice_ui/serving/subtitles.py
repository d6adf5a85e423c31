"""Subtitles from our own segmenting: every segment is rendered on its own, so its start and end in the
joined audio are known to the sample. Cues → SRT or WebVTT text; chunks → cues.

Nothing here imports torch or a UI library. Times are seconds (float); the writers round to milliseconds.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ..budget import Budget
from ..errors import InvalidRequest
from ..types import AudioChunk

SUBTITLE_FORMATS = ("srt", "vtt")
PARSE_SECONDS = 10.0  # the time budget of reading a subtitle file back
MAX_LINE_CHARS = 42  # the usual broadcast limit for one subtitle line (latin); CJK lines wrap at half of it


@dataclass(frozen=True)
class Cue:
    """One subtitle: `text` is shown from `start` to `end` (seconds); `speaker` labels script lines."""

    start: float
    end: float
    text: str
    speaker: str = ""

    def shifted(self, offset: float) -> Cue:
        return replace(self, start=self.start + offset, end=self.end + offset)


class SegmentClock:
    """Turns the chunks of one result, in playback order, into one cue per text segment.

    `feed` every chunk as it is produced (streamed or not); `cues()` gives each segment's span in the
    joined audio (`audio.join_chunks` concatenates, so the spans add up to the whole length).
    """

    def __init__(self, speaker: str = "", offset: float = 0.0) -> None:
        self.speaker = speaker
        self.offset = offset
        self._samples = 0
        self._rate = 0
        self._spans: dict[int, list] = {}  # segment -> [first sample, end sample, text]

    def feed(self, chunk: AudioChunk) -> None:
        self._rate = chunk.sample_rate or self._rate
        start = self._samples
        self._samples += len(chunk.samples)
        span = self._spans.setdefault(chunk.segment, [start, start, ""])
        span[1] = self._samples
        if chunk.text:
            span[2] = chunk.text

    @property
    def seconds(self) -> float:
        return self._samples / self._rate if self._rate else 0.0

    def cues(self, fallback_text: str = "") -> list[Cue]:
        """One cue per segment that has text (a segment without text, e.g. voice conversion, uses
        `fallback_text`; a segment with neither is left out)."""
        if not self._rate:
            return []
        cues = []
        for segment in sorted(self._spans):
            first, end, text = self._spans[segment]
            text = text or fallback_text
            if text.strip() and end > first:
                cues.append(Cue(self.offset + first / self._rate, self.offset + end / self._rate, text.strip(),
                                self.speaker))
        return cues


def cues_from_chunks(chunks: Iterable[AudioChunk], speaker: str = "", offset: float = 0.0) -> list[Cue]:
    clock = SegmentClock(speaker, offset)
    for chunk in chunks:
        clock.feed(chunk)
    return clock.cues()


def shift(cues: Iterable[Cue], offset: float) -> list[Cue]:
    return [cue.shifted(offset) for cue in cues]


def check_subtitle_format(fmt: str) -> str:
    """`fmt` in lower case when it is one we write, else `InvalidRequest` naming the choices."""
    value = str(fmt or "").strip().lower().lstrip(".")
    if value not in SUBTITLE_FORMATS:
        raise InvalidRequest("bad_subtitle_format", f"unknown subtitle format {fmt!r}; choose srt or vtt",
                             format=str(fmt))
    return value


def render(cues: Iterable[Cue], fmt: str, speakers: bool = True) -> str:
    """The cues as SRT or WebVTT text; `speakers` puts each cue's speaker label before its text."""
    fmt = check_subtitle_format(fmt)
    return to_srt(cues, speakers) if fmt == "srt" else to_vtt(cues, speakers)


def to_srt(cues: Iterable[Cue], speakers: bool = True) -> str:
    """SRT: a cue's text (and label) on at most two lines; nothing in it can end the cue early (no blank line,
    no "-->")."""
    blocks = []
    for number, cue in enumerate(_ordered(cues), start=1):
        text = _wrap(_no_arrow(f"{_one_line(cue.speaker)}: {cue.text}" if speakers and cue.speaker else cue.text))
        blocks.append(f"{number}\n{_stamp(cue.start, ',')} --> {_stamp(cue.end, ',')}\n{text}\n")
    return "\n".join(blocks)


def to_vtt(cues: Iterable[Cue], speakers: bool = True) -> str:
    """WebVTT: cue text escaped (&, <, >), so words like "<b>" or "&" are shown as typed and cannot open a tag;
    the speaker rides in a voice span ("<v Name>"), escaped the same way."""
    blocks = ["WEBVTT\n"]
    for number, cue in enumerate(_ordered(cues), start=1):
        text = _vtt_escape(_wrap(_no_arrow(cue.text)))
        if speakers and cue.speaker:
            text = f"<v {_vtt_escape(_no_arrow(_one_line(cue.speaker)))}>{text}"
        blocks.append(f"{number}\n{_stamp(cue.start, '.')} --> {_stamp(cue.end, '.')}\n{text}\n")
    return "\n".join(blocks)


# Bounded digit runs, and a run may not start inside a longer one: no quadratic rescans of long digit lines.
_SRT_TIME = re.compile(r"(?<!\d)(\d{1,6}):(\d\d):(\d\d)[,.](\d{3})")
# One or more blank lines (starts only at a newline, stops at the next non-space: linear).
_BLANK_LINES = re.compile(r"\n\s*\n")
# A tag of cue text: `<` up to the next `>` without another `<` inside, so each character is scanned once.
_VTT_TAG = re.compile(r"<[^<>]*>")


def parse(text: str, budget: Budget | None = None) -> list[Cue]:
    """Cues back from SRT or WebVTT text we wrote (or any simple file of the same shape): the check of
    the round trip, and of times in tests. A WebVTT "<v Name>" voice becomes the speaker, other cue tags are
    dropped and its character references (&amp; ...) read back (an SRT label stays in the text)."""
    text = str(text).replace("\r\n", "\n")
    vtt = text.lstrip("\ufeff").startswith("WEBVTT")
    budget = budget or Budget(PARSE_SECONDS, "subtitle file")
    cues = []
    for block in _BLANK_LINES.split(text.strip()):
        budget.check()
        lines = [line for line in block.split("\n") if line.strip()]
        times = next((i for i, line in enumerate(lines) if "-->" in line), None)
        if times is None:
            continue
        stamps = _SRT_TIME.findall(lines[times])
        if len(stamps) != 2:
            continue
        start, end = (int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000 for h, m, s, ms in stamps)
        body = " ".join(lines[times + 1:])
        speaker = ""
        if vtt:
            if body.startswith("<v ") and (close := body.find(">")) > 0:
                speaker, body = html.unescape(body[3:close].strip()), body[close + 1:]
            body = html.unescape(_VTT_TAG.sub("", body))
        cues.append(Cue(start, end, body.strip(), speaker))
    return cues


def _ordered(cues: Iterable[Cue]) -> list[Cue]:
    return sorted((c for c in cues if c.text.strip() and c.end > c.start), key=lambda c: (c.start, c.end))


def _stamp(seconds: float, separator: str) -> str:
    millis = max(0, int(round(seconds * 1000)))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _wrap(text: str) -> str:
    """At most two lines: long cues break at the space nearest the middle (CJK text at the middle)."""
    text = " ".join(text.split())
    wide = sum(1 for ch in text if ord(ch) > 0x2E80)
    limit = MAX_LINE_CHARS // 2 if wide > len(text) / 2 else MAX_LINE_CHARS
    if len(text) <= limit:
        return text
    middle = len(text) // 2
    spaces = [i for i, ch in enumerate(text) if ch == " "]
    cut = min(spaces, key=lambda i: abs(i - middle)) if spaces else middle
    return f"{text[:cut].strip()}\n{text[cut:].strip()}"


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _no_arrow(text: str) -> str:
    """WebVTT and SRT end a cue's timing line at "-->"; none may appear in cue text."""
    return str(text).replace("-->", "→")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
