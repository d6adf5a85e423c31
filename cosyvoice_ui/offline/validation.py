"""Checks the offline engines add to the shared ones in `cosyvoice_ui.validation`.

Each raises `InvalidRequest` with a message that says what to do instead.
"""

from __future__ import annotations

from ..errors import InvalidRequest
from ..types import Mode
from ..validation import mode_hint
from .text import is_speakable

def check_mode(mode: Mode, supported: tuple[Mode, ...], backend: str) -> None:
    """Refuse modes the backend cannot serve, naming the model that can."""
    if mode in supported:
        return
    options = ", ".join(m.value for m in supported)
    hint = mode_hint(mode)
    raise InvalidRequest(
        "mode_unsupported",
        f"mode {mode.value!r} is not available on the {backend} backend (it can do: {options}). "
        f"Load {hint} to use it.",
        mode=mode.value,
        backend=backend,
        supported=options,
        needs=hint,
    )


def check_speakable(text: str) -> None:
    """Refuse text with nothing the offline voices can read (they speak English and Mandarin only)."""
    if not is_speakable(text):
        raise InvalidRequest(
            "text_unsupported_language",
            "the offline voice reads English and Mandarin Chinese only, and this text has no Latin letters, "
            "Chinese characters or digits; rewrite it in English or Chinese, or load a CosyVoice model",
            languages="en, zh",
        )
