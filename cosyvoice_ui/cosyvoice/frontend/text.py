"""Text normalisation and sentence splitting, as CosyVoice's `text_normalize` does it (all versions).

Order of decisions for one string:
1. Text containing both `<|` and `|>` (special-token syntax such as `<|en|>`), empty text, or
   `use_frontend=False`: returned untouched (`[text]`, or `text` with `split=False`).
2. Strip; choose the Chinese path if any CJK Unified Ideograph (U+4E00-U+9FFF) is present, else English.
3. Chinese: wetext zh TN (only when an ASCII digit is present), drop newlines, drop spaces not between two
   ASCII characters, `²`/`³` -> 平方/立方, `.` -> `。`, ` - ` -> `，`, delete （）【】 and backticks,
   `——` -> space, trailing `，`/`,`/`、` run -> `。`; split by characters.
   English: wetext en TN (only when an ASCII digit is present), remaining ASCII digit runs spelled out by
   `inflect`; split by text tokens (`count_tokens`, the model's own tokenizer).
4. Splitting: sentences end at terminal punctuation (a following closing quote joins the sentence), then
   greedy packing (flush when buffer+sentence > 80 and buffer > 60; a tail shorter than 20 joins the last
   segment), then segments made only of punctuation/symbols are dropped.

`split=False` (prompt and instruct text) returns the normalised string whole. The wetext normalizers and
the inflect engine are built on first use, once per process, behind a lock; without wetext the rules run
without TN. Not here: tokenisation (`tokenizer.py`), the closed `ttsfrd` frontend, generator (bi-streaming)
input.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Callable
from typing import Literal

from ...validation import check_characters

log = logging.getLogger(__name__)

MAX_LEN = 80  # flush the buffer when adding a sentence would exceed this ...
MIN_LEN = 60  # ... and the buffer is already longer than this
MERGE_LEN = 20  # a final buffer shorter than this is glued to the previous segment

ZH_TERMINALS = frozenset("。？！；：、.?!;")
EN_TERMINALS = frozenset(".?!;:")
CLOSING_QUOTES = frozenset('"”')

_CJK = re.compile(r"[\u4e00-\u9fff]")
_ASCII_DIGIT = re.compile(r"[0-9]")
_ASCII_DIGIT_RUN = re.compile(r"[0-9]+")
_TRAILING_COMMAS = re.compile(r"[，,、]+$")
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

Language = Literal["zh", "en"]


class _Backends:
    """Lazily built third-party normalisers (wetext FSTs take ~0.5 s to load), shared by all threads.

    Calls are serialised: inflect's engine keeps per-call state on itself, and wetext's thread safety is
    not documented. Both are millisecond-fast on sentence-sized input.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built = False
        self._zh = None
        self._en = None
        self._inflect = None
        self._out_of_range: type[Exception] = ArithmeticError

    def _build(self) -> None:
        # Called with the lock held.
        if self._built:
            return
        import inflect

        self._inflect = inflect.engine()
        self._out_of_range = inflect.NumOutOfRangeError
        try:
            from wetext import Normalizer
        except ImportError:
            log.warning("wetext is not installed: text with digits is normalised by the fallback rules only")
        else:
            self._zh = Normalizer(lang="zh", remove_erhua=False)
            self._en = Normalizer(lang="en")
        self._built = True

    def prepare(self) -> None:
        with self._lock:
            self._build()

    def tn(self, text: str, lang: Language) -> str:
        """wetext text normalisation of `text` (called only when it holds an ASCII digit)."""
        with self._lock:
            self._build()
            normalizer = self._zh if lang == "zh" else self._en
            if normalizer is None:
                return text
            try:
                return normalizer.normalize(text)
            # wetext's FST pipeline fails on some input (e.g. double spaces in English): keep the text.
            except Exception as exc:  # noqa: BLE001 - wetext documents no exception types
                log.warning("wetext %s normalisation failed (%r); keeping the text as is", lang, exc)
                return text

    def number_to_words(self, digits: str) -> str:
        """inflect's reading of a digit string; digit by digit when it is too long to be one number."""
        with self._lock:
            self._build()
            try:
                return self._inflect.number_to_words(digits)
            except self._out_of_range:
                # inflect's words for 0-9, from a table: one inflect call per digit costs ~1 ms (it type-checks
                # every call), so a long digit run held this lock for seconds
                return " ".join(DIGIT_WORDS[int(d)] for d in digits)


_BACKENDS = _Backends()


def prepare() -> None:
    """Build the TN backends now (e.g. at model load) instead of on the first request.

    Importing inflect alone takes seconds on a slow machine; wetext needs about half a second.
    """
    _BACKENDS.prepare()


def detect_language(text: str) -> Language:
    """Return "zh" if the text holds any CJK Unified Ideograph (U+4E00-U+9FFF), else "en" (upstream's test)."""
    return "zh" if _CJK.search(text) else "en"


def has_special_syntax(text: str) -> bool:
    """True when the text contains both `<|` and `|>`: upstream then skips normalisation entirely."""
    return "<|" in text and "|>" in text


def is_punctuation_only(text: str) -> bool:
    """True for "" and for strings made only of Unicode punctuation (P*) and symbols (S*)."""
    return all(unicodedata.category(ch)[0] in "PS" for ch in text)


def replace_blank(text: str) -> str:
    """Delete every space except one whose two neighbours are both non-space ASCII characters."""

    def keep(i: int) -> bool:
        if i == 0 or i == len(text) - 1:
            return False
        before, after = text[i - 1], text[i + 1]
        return before.isascii() and before != " " and after.isascii() and after != " "

    return "".join(ch for i, ch in enumerate(text) if ch != " " or keep(i))


def spell_out_numbers(text: str, number_to_words: Callable[[str], str] | None = None) -> str:
    """Replace every maximal run of ASCII digits by its English words ("2024" -> "two thousand and twenty-four")."""
    convert = number_to_words or _BACKENDS.number_to_words
    return _ASCII_DIGIT_RUN.sub(lambda m: convert(m.group(0)), text)


def split_sentences(text: str, lang: Language) -> list[str]:
    """Cut after each terminal punctuation mark; a closing quote right after it stays with the sentence.

    A terminal mark that closes an empty span (e.g. the second `!` of `!!`) is dropped, as upstream does.
    A final terminal mark (`。` zh, `.` en) is appended when the text does not end with one.
    """
    terminals = ZH_TERMINALS if lang == "zh" else EN_TERMINALS
    if text and text[-1] not in terminals:
        text += "。" if lang == "zh" else "."
    sentences: list[str] = []
    start = 0
    i = 0
    while i < len(text):
        if text[i] in terminals:
            if i > start:
                sentences.append(text[start : i + 1])
            if i + 1 < len(text) and text[i + 1] in CLOSING_QUOTES:
                # With an empty span the quote goes to the previous sentence (or starts one if none).
                if sentences:
                    sentences[-1] += text[i + 1]
                else:
                    sentences.append(text[i + 1])
                i += 1
            start = i + 1
        i += 1
    return sentences


def pack_sentences(
    sentences: list[str],
    measure: Callable[[str], int],
    max_len: int = MAX_LEN,
    min_len: int = MIN_LEN,
    merge_len: int = MERGE_LEN,
) -> list[str]:
    """Greedy packing of sentences into segments of about `min_len`..`max_len` units of `measure`."""
    segments: list[str] = []
    buffer = ""
    for sentence in sentences:
        if measure(buffer + sentence) > max_len and measure(buffer) > min_len:
            segments.append(buffer)
            buffer = ""
        buffer += sentence
    if buffer:
        if segments and measure(buffer) < merge_len:
            segments[-1] += buffer
        else:
            segments.append(buffer)
    return segments


def split_paragraph(text: str, lang: Language, count_tokens: Callable[[str], int] | None = None) -> list[str]:
    """Sentence split + 80/60/20 packing; zh measures characters, en measures `count_tokens`."""
    if not text:
        return []
    if lang == "zh":
        measure: Callable[[str], int] = len
    elif count_tokens is None:
        raise ValueError("splitting English text needs count_tokens (the model tokenizer's length function)")
    else:
        measure = count_tokens
    return pack_sentences(split_sentences(text, lang), measure)


def _normalize_zh(text: str) -> str:
    if _ASCII_DIGIT.search(text):
        text = _BACKENDS.tn(text, "zh")
    text = text.replace("\n", "")
    text = replace_blank(text)
    text = text.replace("²", "平方").replace("³", "立方")
    text = text.replace(".", "。").replace(" - ", "，")
    for bracket in ("（", "）", "【", "】", "`"):
        text = text.replace(bracket, "")
    text = text.replace("——", " ")
    return _TRAILING_COMMAS.sub("。", text)


def _normalize_en(text: str) -> str:
    if _ASCII_DIGIT.search(text):
        text = _BACKENDS.tn(text, "en")
    return spell_out_numbers(text)


def normalize(
    text: str,
    split: bool = True,
    count_tokens: Callable[[str], int] | None = None,
    use_frontend: bool = True,
) -> list[str] | str:
    """Normalise `text` and (with `split=True`) cut it into independently synthesised segments.

    Args:
        text: user text (tts text, prompt transcript or instruct text).
        split: False for prompt/instruct text: return the normalised string whole.
        count_tokens: length of a string in model text tokens; needed to split English text.
        use_frontend: False returns the text untouched (as upstream's `text_frontend=False`).
    Returns:
        The segments (possibly empty when nothing speakable remains), or the string when `split=False`.
    Raises:
        InvalidRequest: the text holds a lone surrogate, which the tokenizers and TN backends cannot take.
    """
    check_characters(text)
    if has_special_syntax(text) or not use_frontend or not text.strip():
        return [text] if split else text
    text = _shield_stress_digits(text.strip())
    lang = detect_language(text)
    text = _normalize_zh(text) if lang == "zh" else _normalize_en(text)
    if not split:
        return _unshield_stress_digits(text)
    return [_unshield_stress_digits(s) for s in split_paragraph(text, lang, count_tokens) if not is_punctuation_only(s)]


# A CMU pronunciation hint's stress digit ("[EH1]") is part of the phone, not a number to spell out: the number
# step would read it as "[EHone]". Each digit is swapped for a private-use character across normalisation.
_STRESSED_PHONE = re.compile(r"\[([A-Z]{1,2})([012])\]")
_SHIELD = 0xE000


def _shield_stress_digits(text: str) -> str:
    return _STRESSED_PHONE.sub(lambda m: f"[{m[1]}{chr(_SHIELD + int(m[2]))}]", text)


def _unshield_stress_digits(text: str) -> str:
    return re.sub("[\ue000-\ue002]", lambda m: str(ord(m[0]) - _SHIELD), text)
