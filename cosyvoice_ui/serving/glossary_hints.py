"""The syntax of the pronunciation hints a glossary entry may carry: pinyin (`[j][ǐ]`) and CMU phones
(`[R][EH1][D]`), as Fun-CosyVoice3 reads them inline (`EngineInfo.pronunciation`).

`canonical_hint(kind, text)` checks a hint and returns the form the model reads: one bracket per pinyin initial
and per toned final (tone digits such as `ji3` or whole syllables such as `[jǐ]` are rewritten to `[j][ǐ]`), one
bracket per upper-case CMU phone (`R EH1 D` → `[R][EH1][D]`). Wrong syntax raises `HintError` with a message
that says what to write instead. Pure text, no model: the exact token list is the backend's.
"""

from __future__ import annotations

import re
import unicodedata

PINYIN, CMU = "pinyin", "cmu"
HINT_KINDS = (PINYIN, CMU)

# CMU dictionary's 39 phones: 15 vowels (take a stress digit 0/1/2, or none) and 24 consonants (never one).
CMU_VOWELS = frozenset("AA AE AH AO AW AY EH ER EY IH IY OW OY UH UW".split())
CMU_CONSONANTS = frozenset("B CH D DH F G HH JH K L M N NG P R S SH T TH V W Y Z ZH".split())

# Mandarin initials (y and w count, as in the v3 token list) and finals, ü written as v.
INITIALS = ("zh", "ch", "sh", "b", "p", "m", "f", "d", "t", "n", "l", "g", "k", "h", "j", "q", "x", "r", "z",
            "c", "s", "y", "w")
FINALS = frozenset(("a o e ai ei ao ou an en ang eng ong er i ia ie iao iu iou ian in iang ing iong u ua uo uai "
                    "ui uei uan un uen uang ueng v ve van vn ue io").split())

_CONTRACTED = {"iou": "iu", "uei": "ui", "uen": "un"}
_TONED = {"ā": ("a", 1), "á": ("a", 2), "ǎ": ("a", 3), "à": ("a", 4), "ē": ("e", 1), "é": ("e", 2),
          "ě": ("e", 3), "è": ("e", 4), "ī": ("i", 1), "í": ("i", 2), "ǐ": ("i", 3), "ì": ("i", 4),
          "ō": ("o", 1), "ó": ("o", 2), "ǒ": ("o", 3), "ò": ("o", 4), "ū": ("u", 1), "ú": ("u", 2),
          "ǔ": ("u", 3), "ù": ("u", 4), "ǖ": ("v", 1), "ǘ": ("v", 2), "ǚ": ("v", 3), "ǜ": ("v", 4)}
_MARK = {(plain, tone): toned for toned, (plain, tone) in _TONED.items()}
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_ONLY_BRACKETS = re.compile(r"(?:\s*\[[^\[\]]*\]\s*)+")
_CMU_PIECE = re.compile(r"([A-Z]{1,2})([0-2]?)")
_DIGIT_TONE = re.compile(r"([a-zv]+)([1-5])")
PINYIN_EXAMPLE, CMU_EXAMPLE = "[j][ǐ]", "[R][EH1][D]"


class HintError(ValueError):
    """A hint whose syntax is wrong; the message says how to write it."""


def looks_like_hint(text: str) -> bool:
    """Whether `text` is written as bracketed hints (`[..][..]`) rather than a plain respelling."""
    return bool(text.strip()) and _ONLY_BRACKETS.fullmatch(text) is not None


def guess_kind(text: str) -> str:
    """The kind of a bracketed hint: "cmu" when written in upper case, or when it is CMU phones in lower case
    but not pinyin; else "pinyin"."""
    if re.search(r"[A-Z]", text):  # pinyin is written in lower case
        return CMU
    for kind in (PINYIN, CMU):
        try:
            canonical_hint(kind, text)
            return kind
        except HintError:
            pass
    return PINYIN


def _pieces(text: str) -> list[str]:
    """The hint's pieces: the brackets' contents, or whitespace-separated syllables/phones when unbracketed."""
    text = unicodedata.normalize("NFC", text.strip())
    if "[" in text or "]" in text:
        if not _ONLY_BRACKETS.fullmatch(text):
            raise HintError("write the hint as bracketed pieces only, e.g. "
                            f"{PINYIN_EXAMPLE} or {CMU_EXAMPLE} (check that every '[' has its ']')")
        pieces = [p.strip() for p in _BRACKETS.findall(text)]
    else:
        pieces = text.split()
    if not pieces or any(not p for p in pieces):
        raise HintError(f"a hint has an empty bracket; write e.g. {PINYIN_EXAMPLE} or {CMU_EXAMPLE}")
    return pieces


def canonical_hint(kind: str, text: str) -> str:
    """`text` checked as a `kind` hint, rewritten to the bracketed form the model reads. Raises `HintError`."""
    pieces = _pieces(text)
    if kind == CMU:
        return "".join(f"[{phone}]" for phone in map(_cmu_phone, pieces))
    if kind == PINYIN:
        return "".join(f"[{token}]" for piece in pieces for token in _pinyin_tokens(piece))
    raise HintError(f"unknown hint kind {kind!r}; use one of: {', '.join(HINT_KINDS)}")


def _cmu_phone(piece: str) -> str:
    match = _CMU_PIECE.fullmatch(piece.upper())
    if match is None or match.group(1) not in CMU_VOWELS | CMU_CONSONANTS:
        raise HintError(f"[{piece}] is not a CMU phone; use the 39 CMU phones (vowels AA AE AH AO AW AY EH ER EY "
                        "IH IY OW OY UH UW with a stress digit 0/1/2, consonants such as B CH D R S T), "
                        f"e.g. {CMU_EXAMPLE}")
    phone, stress = match.groups()
    if stress and phone in CMU_CONSONANTS:
        raise HintError(f"[{piece}]: only vowels take a stress digit; write [{phone}]")
    return phone + stress


def _pinyin_tokens(piece: str) -> list[str]:
    """One bracket's pinyin (an initial, a toned final, or a whole syllable) → the initial/final tokens."""
    raw = piece.lower().replace("u:", "v").replace("ü", "v")
    base, tone, marked_at = _tone_of(piece, raw)
    if base in INITIALS and tone == 5:
        return [base]
    if base in FINALS:
        initial, final = "", base
    else:
        initial = next((i for i in INITIALS if base.startswith(i) and base[len(i):] in FINALS), "")
        final = base[len(initial):]
        if not initial:
            raise HintError(f"[{piece}] is not pinyin; write an initial and a final with its tone mark or tone "
                            f"digit, e.g. {PINYIN_EXAMPLE} or [ji3]")
    if tone != 5 and marked_at is not None and marked_at != len(initial) + _mark_position(final):
        right = initial + _toned(final, tone)
        raise HintError(f"[{piece}]: the tone mark is on the wrong vowel; write [{right}]")
    final = _spelled(initial, final)
    return [t for t in (initial, final if tone == 5 else _toned(final, tone)) if t]


def _spelled(initial: str, final: str) -> str:
    """The written form of a final, as the v3 tokens spell it: iou/uei/uen → iu/ui/un, ü → u after j q x y."""
    final = _CONTRACTED.get(final, final)
    if initial in ("j", "q", "x", "y") and final.startswith("v"):
        final = "u" + final[1:]
    return final


def _tone_of(piece: str, raw: str) -> tuple[str, int, int | None]:
    """(toneless base with ü as v, tone 1-5, index of the marked vowel or None) of one pinyin piece."""
    digit = _DIGIT_TONE.fullmatch(raw)
    if digit is not None:
        return digit.group(1), int(digit.group(2)), None
    marks = [(i, ch) for i, ch in enumerate(raw) if ch in _TONED]
    if len(marks) > 1:
        raise HintError(f"[{piece}] has {len(marks)} tone marks; a syllable takes one, e.g. {PINYIN_EXAMPLE}")
    base = "".join(_TONED[ch][0] if ch in _TONED else ch for ch in raw)
    if not re.fullmatch(r"[a-z]+", base):
        raise HintError(f"[{piece}] is not pinyin; use letters with a tone mark (ā á ǎ à) or a tone digit 1-5, "
                        f"e.g. {PINYIN_EXAMPLE} or [ji3]")
    if not marks:
        return base, 5, None
    index, ch = marks[0]
    return base, _TONED[ch][1], index


def _mark_position(final: str) -> int:
    """Where the tone mark goes: on a or e, on the o of ou, else on the last vowel."""
    for vowel in ("a", "e"):
        if vowel in final:
            return final.index(vowel)
    if "ou" in final:
        return final.index("o")
    return max(i for i, ch in enumerate(final) if ch in "iouv")


def _toned(final: str, tone: int) -> str:
    where = _mark_position(final)
    return final[:where] + _MARK[(final[where], tone)] + final[where + 1:]
