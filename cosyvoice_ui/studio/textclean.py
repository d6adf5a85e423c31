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

import codecs
import re

MAX_TITLE_CHARS = 200  # a chapter title is a line, not a paragraph; longer ones are cut
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# str.translate rather than re.sub: a text full of control characters would make re.sub build a list of millions
# of pieces; translate writes its output in one buffer.
_CLEAN = str.maketrans({**{chr(c): " " for c in [*range(0x00, 0x09), 0x0b, 0x0c, *range(0x0e, 0x20),
                                                  *range(0x7f, 0xa0)]}, **{ch: None for ch in _BIDI}})
_UNSAFE = re.compile(f"[{_CONTROLS.pattern[1:-1]}{_BIDI}]")
_SPACES_CHUNK = 64 * 1024
_C_CALL_CHARS = 1 << 20  # a long C-level pass (decode, translate) is cut into slices of this many bytes or chars
_SPACES = re.compile(r"\s+")  # the same characters as str.split(); one pass, no list of words
_BINARY_SHARE = 0.02  # more control characters than this (besides whitespace) and it is not a text file


class NotText(ValueError):
    """The bytes are not a text document (binary data, or an encoding that cannot be read)."""


def clean_text(text: str) -> str:
    text = str(text)
    if len(text) <= _C_CALL_CHARS:
        return _clean_slice(text)
    # a slice at a time: one C call over a whole book would hold the GIL (and stall the server) for a second
    return "".join(_clean_slice(text[at:at + _C_CALL_CHARS]) for at in range(0, len(text), _C_CALL_CHARS))


def _clean_slice(text: str) -> str:
    return text.translate(_CLEAN) if _UNSAFE.search(text) else text  # the search is far faster than translate


def collapse_spaces(text: str) -> str:
    """Whitespace runs as one space, none at the ends (as " ".join(text.split())), a slice of about 64 KB at a
    time: one list of a whole book's words would cost some 50 bytes per word."""
    if len(text) <= _SPACES_CHUNK:
        return _SPACES.sub(" ", text).strip()
    parts, start = [], 0
    while start < len(text):
        space = _SPACES.search(text, start + _SPACES_CHUNK)  # cut where a space run starts: no word is split
        end = space.start() if space else len(text)
        part = _SPACES.sub(" ", text[start:end]).strip()
        if part:
            parts.append(part)
        start = end
    return " ".join(parts)


def clean_title(text: str, limit: int = MAX_TITLE_CHARS) -> str:
    title = collapse_spaces(clean_text(text))
    if len(title) > limit:
        cut = title[:limit].rsplit(" ", 1)[0] if " " in title[:limit] else title[:limit]
        title = cut.rstrip() + "…"
    return title


def decode_document(data: bytes) -> str:
    """The text of an uploaded document, cleaned of control characters; `NotText` for binary data."""
    text = _decode(bytes(data))
    if "\x00" in text:
        raise NotText("the file holds binary data (a NUL character)")
    allowed = max(16, int(_BINARY_SHARE * len(text)))
    for count, _ in enumerate(_CONTROLS.finditer(text), start=1):  # stops at the first one over the share
        if count > allowed:
            raise NotText("the file holds binary data (many control characters)")
    return clean_text(text)


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        return _strict(data, "utf-8-sig")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return _strict(data, "utf-16")
    if b"\x00" in data:
        # UTF-16 without a BOM: its ASCII characters (spaces, newlines, digits) put NULs on one side of many byte
        # pairs; a few stray NULs in a UTF-8 file are binary data, not a sign of UTF-16
        even, odd = data[0::2].count(0), data[1::2].count(0)
        enough = max(4, len(data) // 200)  # 1% of one side's bytes
        if odd > 4 * even and odd >= enough:
            return _strict(data, "utf-16-le")
        if even > 4 * odd and even >= enough:
            return _strict(data, "utf-16-be")
        raise NotText("the file holds binary data (NUL bytes)")
    for encoding in ("utf-8", "gb18030"):
        try:
            return _decode_in_slices(data, encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("cp1252", errors="replace")  # every byte decodes: a fast single-byte table


def _strict(data: bytes, encoding: str) -> str:
    try:
        return _decode_in_slices(data, encoding)
    except UnicodeDecodeError:
        raise NotText(f"the file is not valid {encoding} text") from None


def _decode_in_slices(data: bytes, encoding: str) -> str:
    """`data.decode(encoding)`, a megabyte per C call (a 40 MB GB18030 file would hold the GIL for a second)."""
    if len(data) <= _C_CALL_CHARS:
        return data.decode(encoding)
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    view = memoryview(data)
    parts = [decoder.decode(view[at:at + _C_CALL_CHARS]) for at in range(0, len(data), _C_CALL_CHARS)]
    parts.append(decoder.decode(b"", final=True))
    return "".join(parts)
