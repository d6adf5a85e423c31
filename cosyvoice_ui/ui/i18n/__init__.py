"""The web UI's words, one module per language: `en.py` (labels) and `zh.py` (labels, and the Chinese messages of
the error codes: the English messages are the errors' own). `ui/strings.py` reads them (`label`, `message`, the
`gr.I18n` tables); a key missing from `zh` falls back to English, and tests/ui/test_strings.py holds both tables
to the same keys and placeholders."""

from __future__ import annotations


def notice(summary: str, details: str) -> str:
    """A notice that takes one line: the summary, with the details behind a disclosure (closed)."""
    return f"<details><summary>{summary}</summary>\n\n{details}\n\n</details>"
