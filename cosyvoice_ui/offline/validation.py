"""Checks the offline engines add to the shared ones in `cosyvoice_ui.validation`.

Each raises `InvalidRequest` with a message that says what to do instead.
"""

from __future__ import annotations

from ..errors import InvalidRequest
from ..types import Mode
from .text import is_speakable

# Which official model can serve a mode the offline backends cannot (named in the error message).
MODE_HINTS = {
    Mode.INSTRUCT: "CosyVoice-300M-Instruct (or CosyVoice2-0.5B / Fun-CosyVoice3-0.5B for instruct2-style prompts)",
    Mode.VC: "any CosyVoice model (CosyVoice-300M, CosyVoice2-0.5B or Fun-CosyVoice3-0.5B)",
    Mode.ZERO_SHOT: "any CosyVoice model (CosyVoice-300M, CosyVoice2-0.5B or Fun-CosyVoice3-0.5B)",
    Mode.CROSS_LINGUAL: "any CosyVoice model (CosyVoice-300M, CosyVoice2-0.5B or Fun-CosyVoice3-0.5B)",
}


def check_mode(mode: Mode, supported: tuple[Mode, ...], backend: str) -> None:
    """Refuse modes the backend cannot serve, naming the model that can."""
    if mode in supported:
        return
    options = ", ".join(m.value for m in supported)
    hint = MODE_HINTS.get(mode, "a CosyVoice model")
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
