"""Checks the offline engines add to the shared ones in `cosyvoice_ui.validation`.

Each raises `InvalidRequest` with a message that says what to do instead.
"""

from __future__ import annotations

from ..errors import InvalidRequest
from .text import is_speakable


def check_speakable(text: str) -> None:
    """Refuse text with nothing the offline voices can read (they speak English and Mandarin only)."""
    if not is_speakable(text):
        raise InvalidRequest(
            "text_unsupported_language",
            "the offline voice reads English and Mandarin Chinese only, and this text has no Latin letters, "
            "Chinese characters or digits; rewrite it in English or Chinese, or load a CosyVoice model",
            languages="en, zh",
        )
