"""Markdown to plain text for reading aloud, in time linear in the text (no backtracking regex over user text).

Line level: `heading`, `front_matter`, `strip_line_markup` (rules, table separators, quotes, list markers) are
plain string scans. Inline: `plain_inline` is one left-to-right pass with a delimiter stack, as CommonMark's
reference algorithm does: emphasis (`*`, `_`, `**`, `__`, `~~`) is matched against the nearest open
delimiter of the same kind, a per-kind floor keeps each failed search from being repeated (so `*a ` × N costs
N steps, not N²), code spans find their closing run through an index of backtick runs, and links, images and
inline HTML find their closing `)` / `>` through a cached forward search. Links keep their words; images,
HTML tags and backslashes before punctuation are dropped; what does not match stays as it is.

The only regexes here are single character classes and runs (`\\*+`), which cannot backtrack.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass

from ..budget import Budget
from .textclean import collapse_spaces

# a backslash escape, a run of backticks, emphasis characters or tildes, an image or link bracket, a tag opener
_TOKEN = re.compile(r"\\[!-/:-@\[-`{-~]|`+|\*+|_+|~+|!\[|[\[\]<]")
_BACKTICKS = re.compile(r"`+")
_TAG_START = re.compile(r"[A-Za-z/!?]")
_KEY = re.compile(r"\w+")
_SPACE = re.compile(r"\s")
SLICE_CHARS = 64 * 1024
_TABLE_CHARS = re.compile(r"[\s:|-]*")


def heading(line: str) -> tuple[int, str] | None:
    """(level, text) of an ATX heading line ("## Title ##"), or None. The text keeps its inline markup."""
    level = len(line) - len(line.lstrip("#"))
    if not 1 <= level <= 6 or len(line) == level or not line[level].isspace():
        return None
    return level, line[level:].strip().rstrip("#").rstrip()


def front_matter(text: str) -> tuple[str, str, str]:
    """YAML-style front matter's `title:` and `author:` (the rest of it is dropped), and the text after it."""
    if not text.startswith("---\n"):
        return "", "", text
    end = text.find("\n---\n", 3)
    if end < 0:
        return "", "", text
    fields: dict[str, str] = {}
    for line in text[4:end].split("\n"):
        key, colon, value = line.partition(":")
        if colon and _KEY.fullmatch(key):
            fields[key.lower()] = value.strip().strip("\"'")
    return fields.get("title", ""), fields.get("author", ""), text[end + 5:]


def strip_line_markup(line: str) -> str:
    """A line without its block markup: a rule or a table's separator row is blank; a quote's `>` and a list
    item's marker are removed."""
    if _is_rule(line) or _is_table_separator(line):
        return ""
    lead = len(line) - len(line.lstrip())
    if lead <= 3 and line[lead:lead + 1] == ">":  # a block quote
        line = line[lead + 1:]
        if line[:1].isspace():
            line = line[1:]
    rest = line.lstrip()
    if rest[:1] in ("-", "*", "+") and rest[1:2].isspace():
        return rest[1:].lstrip()
    digits = len(rest) - len(rest.lstrip("0123456789"))
    if digits and rest[digits:digits + 1] in (".", ")") and rest[digits + 1:digits + 2].isspace():
        return rest[digits + 1:].lstrip()
    return line


def _is_rule(line: str) -> bool:
    """`---`, `* * *`, `___`: three or more of one of - * _ and nothing else but spaces. (String methods only:
    a list of the line's words would cost 50 bytes a word on a line of millions.)"""
    stripped = line.strip()
    if not stripped or stripped[0] not in "-*_":
        return False
    rest = stripped.replace(stripped[0], "")
    return len(stripped) - len(rest) >= 3 and (not rest or rest.isspace())


def _is_table_separator(line: str) -> bool:
    """`|---|:--:|` or `--- | ---`: only - : | and spaces, and a | after at least one other character."""
    if not _TABLE_CHARS.fullmatch(line):
        return False
    first = line.find("|")
    return first > 0 or (first == 0 and line.find("|", 1) >= 2)


@dataclass
class _Delimiter:
    char: str
    count: int
    piece: int  # index of its text in the output pieces


@dataclass
class _Bracket:
    image: bool
    piece: int


class _Forward:
    """`find(char, start)` for non-decreasing starts, each answer reused until passed: linear in total."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.found: dict[str, int] = {}

    def find(self, char: str, start: int) -> int:
        known = self.found.get(char)
        if known is None or (0 <= known < start):
            known = self.text.find(char, start)
            self.found[char] = known
        return known


class _BacktickRuns:
    """Where runs of each length of backticks start, built on the first backtick: the closing run of a code
    span is a binary search away."""

    def __init__(self, text: str) -> None:
        self.starts: dict[int, list[int]] = {}
        for run in _BACKTICKS.finditer(text):
            self.starts.setdefault(run.end() - run.start(), []).append(run.start())

    def next(self, length: int, start: int) -> int:
        starts = self.starts.get(length, [])
        at = bisect.bisect_left(starts, start)
        return starts[at] if at < len(starts) else -1


def plain_inline(text: str, budget: Budget | None = None) -> str:
    """The words of a paragraph or heading of Markdown without inline markup, whitespace collapsed.

    A paragraph longer than `SLICE_CHARS` (a book without blank lines is one paragraph) is read a slice at a
    time, cut at a space: markup cannot span two slices, and the scanner's pieces stay a slice's worth."""
    if len(text) <= SLICE_CHARS:
        return _plain_slice(text, budget)
    parts, start = [], 0
    while start < len(text):
        space = _SPACE.search(text, start + SLICE_CHARS)
        end = space.start() if space else len(text)
        part = _plain_slice(text[start:end], budget)
        if part:
            parts.append(part)
        start = end
    return " ".join(parts)


def _plain_slice(text: str, budget: Budget | None) -> str:
    pieces: list[str] = []
    delimiters: list[_Delimiter] = []
    brackets: list[_Bracket] = []
    floors = {"*": 0, "_": 0, "~": 0}  # below this, no delimiter can open this kind (searched already)
    forward = _Forward(text)
    backticks: _BacktickRuns | None = None
    pos, size = 0, len(text)
    while pos < size:
        found = _TOKEN.search(text, pos)
        if found is None:
            pieces.append(text[pos:])
            break
        start, end = found.span()
        if start > pos:
            pieces.append(text[pos:start])
        if budget is not None:
            budget.check()
        token = found.group()
        first = token[0]
        pos = end
        if first == "\\":
            pieces.append(token[1])
        elif first == "`":
            backticks = backticks or _BacktickRuns(text)
            close = backticks.next(len(token), end)
            if close < 0:
                pieces.append(token)
            else:
                pieces.append(text[end:close])
                pos = close + len(token)
        elif first == "<":
            close = forward.find(">", end) if _TAG_START.match(text, end) else -1
            if close < 0:
                pieces.append(token)
            else:
                pos = close + 1
        elif token in ("[", "!["):
            brackets.append(_Bracket(token == "![", len(pieces)))
            pieces.append(token)
        elif token == "]":
            pos = _close_bracket(text, end, pieces, brackets, delimiters, floors, forward)
        else:
            _delimiter_run(text, start, end, pieces, delimiters, floors)
    return collapse_spaces("".join(pieces).replace("|", " "))


def _close_bracket(text: str, end: int, pieces: list[str], brackets: list[_Bracket],
                   delimiters: list[_Delimiter], floors: dict[str, int], forward: _Forward) -> int:
    """A `]`: with an open bracket and `(url)` after it, a link (its words kept) or an image (dropped)."""
    close = forward.find(")", end + 1) if brackets and text.startswith("(", end) else -1
    if close < 0:
        if brackets:
            brackets.pop()  # "[text]" without a url stays as it is
        pieces.append("]")
        return end
    opener = brackets.pop()
    while delimiters and delimiters[-1].piece >= opener.piece:  # emphasis cannot cross the link's edge
        delimiters.pop()
    for kind in floors:
        floors[kind] = min(floors[kind], len(delimiters))
    if opener.image:
        del pieces[opener.piece:]
    else:
        pieces[opener.piece] = ""
    return close + 1


def _delimiter_run(text: str, start: int, end: int, pieces: list[str], delimiters: list[_Delimiter],
                   floors: dict[str, int]) -> None:
    char, count = text[start], end - start
    if char == "~" and count != 2:  # strikethrough is exactly "~~"
        pieces.append(text[start:end])
        return
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    left = not after.isspace() and (not _punctuation(after) or before.isspace() or _punctuation(before))
    right = not before.isspace() and (not _punctuation(before) or after.isspace() or _punctuation(after))
    if char == "_":  # no emphasis inside words: snake_case stays
        can_open, can_close = left and (not right or _punctuation(before)), right and (not left or _punctuation(after))
    else:
        can_open, can_close = left, right
    while can_close and count:
        at = len(delimiters) - 1
        while at >= floors[char] and delimiters[at].char != char:
            at -= 1
        if at < floors[char]:
            floors[char] = len(delimiters)
            break
        opener = delimiters[at]
        used = min(opener.count, count)
        opener.count -= used
        count -= used
        pieces[opener.piece] = char * opener.count
        del delimiters[at + (1 if opener.count else 0):]  # what lay between stays as written
        for kind in floors:
            floors[kind] = min(floors[kind], len(delimiters))
    if count:
        if can_open:
            delimiters.append(_Delimiter(char, count, len(pieces)))
        pieces.append(char * count)


def _punctuation(char: str) -> bool:
    return unicodedata.category(char)[0] in "PS"
