"""The ids of stored things (saved voices, glossaries, projects): one rule for what an id is.

An id is a URL path segment and a file or folder name: 1-64 word characters (any script) and dashes, starting
with a word character. It is compared after NFKC normalisation, so look-alikes ("ｎａｍｅｓ", full-width) name
the same thing as their plain form instead of a twin, and it never holds a control character (a trailing
newline, which `$` in a regex would let through, included).
"""

from __future__ import annotations

import re
import unicodedata

MAX_ID_CHARS = 64
_ID = re.compile(r"\w[\w-]{0,%d}" % (MAX_ID_CHARS - 1))


def normal_id(value: object) -> str | None:
    """`value` as a canonical id (NFKC), or None when it is not a valid id."""
    if not isinstance(value, str) or not value or len(value) > 4 * MAX_ID_CHARS:
        return None
    if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in value):
        return None
    text = unicodedata.normalize("NFKC", value)
    return text if _ID.fullmatch(text) else None


def is_id(value: object) -> bool:
    """Whether `value` is already a canonical id (what a stored name on disk must be)."""
    return isinstance(value, str) and normal_id(value) == value


def slug(name: str, fallback: str, max_chars: int = 48) -> str:
    """A readable id from a display name: NFKC, lower case, word characters and dashes ("My Voice!" →
    "my-voice"); `fallback` when nothing is left."""
    text = unicodedata.normalize("NFKC", str(name or "")).strip().lower()
    text = "".join(ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cf"))
    out = re.sub(r"[^\w-]+", "-", text).strip("-_")
    return out[:max_chars].strip("-_") or fallback
