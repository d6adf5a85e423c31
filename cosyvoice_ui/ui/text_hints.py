"""What the text boxes hint at, from the text and the model's `EngineInfo` (pure functions, no Gradio)."""

from __future__ import annotations

import re

from ..types import EngineInfo

# Hiragana, katakana (with its phonetic extensions) and half-width katakana; the prolonged sound mark
# (U+30FC) counts, it is written only in kana words.
_KANA = re.compile(r"[\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9d]")
# CJK ideographs: the unified block, extension A and the compatibility block.
_KANJI = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def is_japanese_with_kanji(text: str) -> bool:
    """Kana and kanji in one text: Japanese whose kanji a model may read with Chinese readings. Chinese
    text (no kana) and kana-only Japanese are not."""
    return bool(_KANA.search(text or "")) and bool(_KANJI.search(text or ""))


def kanji_hint_shown(info: EngineInfo | None, text: str) -> bool:
    """Whether to show the "kanji may be misread" note: the model has that limitation and the text mixes
    kana and kanji."""
    return bool(info and "ja_kanji" in info.text_caveats) and is_japanese_with_kanji(text)
