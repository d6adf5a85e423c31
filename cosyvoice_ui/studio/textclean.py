"""Text from uploaded documents made safe to show, speak and write into other formats.

- `decode_document`: bytes → text (UTF-8, UTF-16 with or without a BOM, GB18030, else Windows-1252), refusing a
  binary file by looking at the whole file, in every encoding (a NUL anywhere, or a run of control bytes).
- `clean_text`: control characters (category Cc except tab, newline and carriage return) become spaces and
  bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) are dropped: a title can then neither
  break a line-based format (ffmetadata, SRT, WebVTT) nor reorder what the reader sees.
- `clean_title`: a cleaned, whitespace-collapsed title of bounded length.

All of it is single-character classes and C-level string methods: linear in the text.
"""

from __future__ import annotations

import re

MAX_TITLE_CHARS = 200  # a chapter title is a line, not a paragraph; longer ones are cut
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_BINARY_SHARE = 0.02  # more control characters than this (besides whitespace) and it is not a text file


class NotText(ValueError):
    """The bytes are not a text document (binary data, or an encoding that cannot be read)."""


def clean_text(text: str) -> str:
    return _BIDI.sub("", _CONTROLS.sub(" ", str(text)))


def clean_title(text: str, limit: int = MAX_TITLE_CHARS) -> str:
    title = " ".join(clean_text(text).split())
    if len(title) > limit:
        cut = title[:limit].rsplit(" ", 1)[0] if " " in title[:limit] else title[:limit]
        title = cut.rstrip() + "…"
    return title


def decode_document(data: bytes) -> str:
    """The text of an uploaded document, cleaned of control characters; `NotText` for binary data."""
    text = _decode(bytes(data))
    if "\x00" in text:
        raise NotText("the file holds binary data (a NUL character)")
    cleaned, controls = _CONTROLS.subn(" ", text)
    if controls > 16 and controls > _BINARY_SHARE * len(text):
        raise NotText("the file holds binary data (many control characters)")
    return _BIDI.sub("", cleaned)


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        return _strict(data, "utf-8-sig")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return _strict(data, "utf-16")
    if b"\x00" in data:
        # UTF-16 without a BOM: its ASCII characters put NULs on one side of each byte pair
        even, odd = data[0::2].count(0), data[1::2].count(0)
        if odd > 4 * even and odd >= 4:
            return _strict(data, "utf-16-le")
        if even > 4 * odd and even >= 4:
            return _strict(data, "utf-16-be")
        raise NotText("the file holds binary data (NUL bytes)")
    for encoding in ("utf-8", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("cp1252", errors="replace")


def _strict(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        raise NotText(f"the file is not valid {encoding} text") from None
