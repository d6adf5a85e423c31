"""The blocked-words policy: texts this server refuses to speak (`--blocked-words FILE`).

A content rule, not a security measure, and no HTTP: the service applies it to every text it is asked
to speak, whichever way the request came in (REST or the Gradio API).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import ConfigError, InvalidRequest


def load_blocked_words(path: Path | None) -> tuple[str, ...]:
    """Words/phrases from a UTF-8 file, one per line (blank lines and '#' comments ignored), lower-cased."""
    if path is None:
        return ()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the --blocked-words file {path} ({exc}); fix the path or remove the flag") \
            from exc
    return tuple(w.strip().casefold() for w in lines if w.strip() and not w.lstrip().startswith("#"))


def check_blocked(texts: Iterable[str], words: tuple[str, ...]) -> None:
    """Raise InvalidRequest("blocked_words") when any text contains a blocked word (case-insensitive).

    The message does not repeat the word, so the list cannot be probed word by word.
    """
    if not words:
        return
    for text in texts:
        folded = (text or "").casefold()
        if folded and any(word in folded for word in words):
            raise InvalidRequest("blocked_words", "the text contains a word or phrase this server does not allow; "
                                 "rephrase it")
