"""Text splitting for the offline backend: sentences, language runs, and phoneme chunks.

Pure string functions, no model, no G2P: `frontend.py` glues them to the phonemizers.

    text -> sentences (the units we render and stream) -> language runs (en / zh) -> G2P
         -> phoneme string -> chunks of at most MAX_PHONEMES symbols (split at pauses when possible)
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

EN = "en"
ZH = "zh"
LANGUAGES = (EN, ZH)

# CJK Unified Ideographs, extension A and the compatibility block: read as Mandarin.
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# Sentence ends, western and full-width; a newline also ends a sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?;。！？；…])\s+|(?<=[。！？；])|\n+")
# Where a phoneme string may be cut, best first: sentence ends, clause breaks, word breaks.
# A period after one of these (or after a single letter) does not end a sentence.
_ABBREVIATION = re.compile(r"(?:\b(?:mr|mrs|ms|dr|prof|sr|jr|st|vs|etc|no|fig|approx)|\b[a-z]|\b(?:e\.g|i\.e))\.$", re.I)
_CUT_CLASSES = ("!.?…", ":;", ",—", " ")
# A number with its thousands separators; one longer than MAX_NUMBER_DIGITS digits is read digit by digit.
_DIGIT_RUN = re.compile(r"\d(?:[\d,]*\d)?")
MAX_NUMBER_DIGITS = 15
_FULLWIDTH_PUNCT = str.maketrans({"，": ",", "。": ".", "！": "!", "？": "?", "：": ":", "；": ";", "、": ","})


@dataclass(frozen=True)
class Run:
    """A stretch of text in one language."""

    text: str
    lang: str  # EN or ZH


def char_language(ch: str) -> str | None:
    """EN for letters of Latin scripts, ZH for Han characters, None for everything else (neutral)."""
    if _HAN.match(ch):
        return ZH
    if ch.isalpha() and "LATIN" in unicodedata.name(ch, ""):
        return EN
    return None


def is_speakable(text: str) -> bool:
    """True when `text` holds something the offline voices can read (Latin letters, Han, or digits)."""
    return any(char_language(c) is not None or c.isdigit() for c in text)


def strip_unsupported(text: str) -> tuple[str, str]:
    """Remove letters of scripts this backend cannot read (kana, Cyrillic, Hangul, ...).

    Left in, the English G2P's neural fallback would invent a reading for them. Returns the kept text
    and the removed characters.
    """
    kept, dropped = [], []
    for c in text:
        (dropped if c.isalpha() and char_language(c) is None else kept).append(c)
    return "".join(kept), "".join(dropped)


def normalize(text: str) -> str:
    """Unicode NFKC (full-width letters/digits to ASCII) except CJK punctuation, whitespace collapsed."""
    keep = {"，", "。", "！", "？", "：", "；", "、"}
    out = "".join(c if c in keep else unicodedata.normalize("NFKC", c) for c in text)
    out = re.sub(r"[ \t\r\f\v]+", " ", out)
    return re.sub(r"\s*\n\s*", "\n", out).strip()


def speech_units(text: str) -> int:
    """A rough length: Latin words plus Han characters (one syllable each)."""
    return len(_HAN.findall(text)) + len(re.findall(r"[^\W\d_]*[A-Za-z\u00c0-\u024f][^\W\d_]*", text)) + len(
        re.findall(r"\d+", text)
    )


def split_sentences(text: str, min_units: int = 3) -> list[str]:
    """Cut text after sentence-ending punctuation and at newlines.

    A cut after an abbreviation ("Mr.", "e.g.") is undone, and a sentence shorter than `min_units`
    (see `speech_units`) is joined to the next one, because a one-word render sounds clipped.
    """
    pieces = [p.strip() for p in _SENTENCE_END.split(text) if p and p.strip()]
    merged: list[str] = []
    for piece in pieces:
        if merged and (_ABBREVIATION.search(merged[-1]) or speech_units(merged[-1]) < min_units):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged


def split_languages(text: str, default: str = EN) -> list[Run]:
    """Split text into runs of one language each.

    Neutral characters (spaces, digits, punctuation) join the run before them, except that digits
    written directly before a Han character join it ("2024年" is read in Mandarin). Text with no
    letters at all is one run in `default`.
    """
    langs = [char_language(c) for c in text]
    # Digits (and their separators) glued to a following Han character take its language.
    i = len(text) - 1
    next_lang: str | None = None
    while i >= 0:
        if langs[i] is not None:
            next_lang = langs[i]
        elif text[i].isspace():
            next_lang = None
        elif next_lang == ZH and (text[i].isdigit() or text[i] in ".,:%"):
            langs[i] = ZH
        i -= 1
    first = next((lang for lang in langs if lang is not None), default)
    runs: list[Run] = []
    current, start = first, 0
    for i, lang in enumerate(langs):
        if lang is not None and lang != current:
            if text[start:i].strip():
                runs.append(Run(text[start:i], current))
            current, start = lang, i
    if text[start:].strip():
        runs.append(Run(text[start:], current))
    return [Run(r.text.strip(), r.lang) for r in runs]


def spell_long_numbers(text: str) -> str:
    """Digit runs too long to read as one number become single digits ("12345678901234567890" -> "1 2 3 ...").

    The English G2P spells integers below 10**18 only and raises on longer ones.
    """

    def read(match: re.Match[str]) -> str:
        digits = match.group().replace(",", "")
        return " ".join(digits) if len(digits) > MAX_NUMBER_DIGITS else match.group()

    return _DIGIT_RUN.sub(read, text)


def english_punctuation(text: str) -> str:
    """Full-width punctuation to ASCII, for the English G2P (which only knows ASCII punctuation)."""
    return text.translate(_FULLWIDTH_PUNCT)


def chunk_phonemes(phonemes: str, limit: int) -> list[str]:
    """Cut a phoneme string into pieces of at most `limit` symbols.

    Cuts after the last sentence end that fits, else the last clause break, else the last word
    break, else mid-word (only for pathological input), so the model pauses where a reader would.
    """
    assert limit > 0, f"limit must be positive, got {limit}"
    rest = phonemes.strip()
    chunks: list[str] = []
    while len(rest) > limit:
        cut = 0
        for marks in _CUT_CLASSES:
            if marks == " ":
                # A space may sit just past the limit: it is dropped, not kept.
                cut = rest[: limit + 1].rfind(" ")
            else:
                # A punctuation mark stays with the chunk it ends.
                cut = max(rest[:limit].rfind(m) for m in marks) + 1
            if cut > 0:
                break
        if cut <= 0:
            cut = limit
        chunks.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    if rest:
        chunks.append(rest)
    return [c for c in chunks if c]
