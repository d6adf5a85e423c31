"""Is a rendered take plausible for its text? Seconds per character and repeated token runs.

A TTS model that loops (repeats words, runs past its end) makes a take far too long for its text; one that
stops early makes it far too short. Both show as audio seconds per spoken character outside a band of normal
speech, and a loop also shows as a run of speech tokens repeated verbatim. Pure Python + numpy, no torch.

How the bands were derived (`python benchmarks/bad_takes.py --measure` repeats the measurement):
  * Normal speech, measured: the offline voice (Kokoro-82M, real speech) read the measurement half of an
    English and a Mandarin corpus (`benchmarks/bad_take_corpus.py`, 16 varied lines each: 2-60 characters,
    questions, lists) with 4 speakers (2 presets, 2 blends, female and male) at speeds 0.8 / 1.0 / 1.25: 64 takes
    per language. With seconds normalised to speed 1 (× speed), a least-squares line seconds = a + b·chars
    gave English a = 0.25 s, b = 0.066 s/letter and Mandarin a = 0.24 s, b = 0.231 s/Hanzi (residual sd
    0.34 s and 0.36 s); the per-character rate after the overhead, (seconds − a) / chars, has p1 / median /
    p99 of 0.053 / 0.065 / 0.083 s per letter and 0.181 / 0.230 / 0.297 s per Hanzi (`MEASURED`).
  * Allowed length of a take: (a + lo·chars) / speed − sd  ..  (a + hi·chars) / speed + sd, with per
    character [lo, hi] = [p1 / 1.15, p99 × 1.15] for the offline voice (unseen lines), and for the cloning
    families [p1 / 1.25, p99 / 0.8], the measured speed span, because they copy the prompt's pace.
  * CosyVoice facts (shared docs): speech tokens come at 50/s (v1) or 25/s (v2, v3) and the LLM decodes
    between min_token_text_ratio = 2 and max_token_text_ratio = 20 speech tokens per text token. v1's
    tokenizer gives 0.28 ids per letter and 1.24 per Hanzi on the corpus (measured), so v1 can make
    0.011-0.112 s/letter and 0.05-0.50 s/Hanzi; v2/v3 (Qwen2, ~0.25 and ~0.7 ids, not measurable here)
    0.02-0.20 s/letter and 0.056-0.56 s/Hanzi. The bands sit inside these limits (clipped to them where that
    keeps the measured p1-p99). For v1 English the decoder's cap (0.112 s/letter) is only ~1.7× normal
    speech: a run past EOS there is often not long enough to be caught by length alone (the benchmark
    shows it).
  * Japanese and Korean were not measured (no corpus on the offline voice): they scale the Mandarin band
    (kana ½ Hanzi, Hangul 0.8 Hanzi); other scripts use the English band.
The speed factor divides the allowed length; repeated speech tokens are checked separately (`token_repeat`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from .types import SpeechDecoder

LANGUAGES = ("zh", "en", "ja", "ko", "other")

# Measured normal speech (offline voice, see the module docstring), per language at speed 1.0:
# (p1, median, p99) of seconds per spoken character after the fixed overhead, the overhead in seconds
# (intercept of the fit) and the standard deviation of the fit's residuals in seconds (an additive allowance).
MEASURED: dict[str, tuple[float, float, float, float, float]] = {
    "en": (0.0531, 0.0651, 0.0827, 0.251, 0.336),  # 64 takes: 16 lines × 4 speakers, speeds 0.8/1.0/1.25
    "zh": (0.1809, 0.2302, 0.2972, 0.244, 0.364),  # 64 takes, same set-up
}
MARGIN = 1.15  # the offline band is [p1 / MARGIN, p99 * MARGIN] per character (lines not in the corpus)
CLONE_SPAN = (0.8, 1.25)  # cloning families follow the prompt's pace: [p1 / 1.25, p99 / 0.8] per character
# Not measured (no corpus on the offline voice): from the measured Hanzi rate, a kana is about half a
# Hanzi (~7-9 morae/s) and a Hangul block one syllable (~5-6/s); "other" scripts use the English letter band.
_DERIVED = {"ja": 0.5, "ko": 0.8}

# The CosyVoice decoders' facts (speech tokens per second, speech tokens per text token, text tokens per character)
# come with the engine: `EngineInfo.decoder`, a `SpeechDecoder` from the family's spec (cosyvoice/families.py).
# Hard per-character limits = ratio / token rate × text tokens per char.


def _measured(language: str) -> tuple[float, float, float, float, float]:
    if language in MEASURED:
        return MEASURED[language]
    base = MEASURED["zh"] if language in _DERIVED else MEASURED["en"]
    factor = _DERIVED.get(language, 1.0)
    return (base[0] * factor, base[1] * factor, base[2] * factor, base[3], base[4])


def hard_limits(decoder: SpeechDecoder | None, language: str) -> tuple[float, float] | None:
    """(min, max) seconds per character a stock CosyVoice decoder can produce; None without a decoder."""
    if decoder is None or not decoder.token_rate:
        return None
    per_char = decoder.tokens_per_char(language)
    return (decoder.min_token_text_ratio / decoder.token_rate * per_char,
            decoder.max_token_text_ratio / decoder.token_rate * per_char)


def band(family: str, language: str, decoder: SpeechDecoder | None = None) -> tuple[float, float]:
    """(min, max) seconds per spoken character of `language`, on top of the fixed overhead: the offline voice's
    own measured band, else the cloning band (any other engine), kept inside the decoder's limits when the
    engine has a decoder but never narrower than the measured normal speech (p1-p99)."""
    p1, _, p99, _, _ = _measured(language)
    if family == "offline":
        return p1 / MARGIN, p99 * MARGIN
    clone = (p1 / CLONE_SPAN[1], p99 / CLONE_SPAN[0])
    hard = hard_limits(decoder, language)
    if hard is None:
        return clone
    return max(clone[0], min(hard[0], p1)), max(p99, min(clone[1], hard[1]))


# (family, language) -> band: the offline voice's and any cloning engine's without decoder facts ("*").
BANDS: dict[tuple[str, str], tuple[float, float]] = {
    (family, language): band(family, language) for family in ("offline", "*") for language in LANGUAGES}


@dataclass(frozen=True)
class TakeCheck:
    """The verdict on one take. `band` is the allowed seconds per character for this text's length."""

    ok: bool
    reasons: tuple[str, ...]  # among "too_long", "too_short", "repeat", "asr_mismatch"
    seconds: float
    chars: int
    seconds_per_char: float
    band: tuple[float, float]
    repeat: str = ""  # e.g. "12 tokens repeated 3×" when a repeated run was found
    detail: str = ""  # one line for people: why the take is (not) plausible
    recall: float | None = None  # word recall of the verify round trip, when it ran

    @property
    def severity(self) -> float:
        """How far off the take is (0 = fine); picks the best of several bad takes."""
        lo, hi = self.band
        spc = self.seconds_per_char
        off = 0.0
        if spc > hi > 0:
            off += float(np.log(spc / hi))
        if 0 < spc < lo:
            off += float(np.log(lo / spc))
        elif spc == 0:
            off += 5.0
        if "repeat" in self.reasons:
            off += 1.0
        if self.recall is not None and "asr_mismatch" in self.reasons:
            off += 1.0 - self.recall
        return off

    def as_dict(self) -> dict:
        return {"ok": self.ok, "reasons": list(self.reasons), "seconds": round(self.seconds, 3),
                "chars": self.chars, "seconds_per_char": round(self.seconds_per_char, 4),
                "band": [round(self.band[0], 4), round(self.band[1], 4)], "repeat": self.repeat,
                "detail": self.detail, "recall": self.recall}


REASON_TEXT = {"too_long": "too long for its text", "too_short": "too short for its text",
               "repeat": "repeated speech", "asr_mismatch": "words not heard back"}


def _script(ch: str) -> str:
    code = ord(ch)
    if 0x3040 <= code <= 0x30FF or 0x31F0 <= code <= 0x31FF:
        return "kana"
    if 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0xF900 <= code <= 0xFAFF:
        return "han"
    if 0xAC00 <= code <= 0xD7AF or 0x1100 <= code <= 0x11FF or 0x3130 <= code <= 0x318F:
        return "hangul"
    if ch.isascii() and ch.isalnum():
        return "latin"
    if ch.isalpha():
        return "latin" if unicodedata.name(ch, "").startswith("LATIN") else "other"
    if ch.isdigit():
        return "latin"
    return ""


def _counts(text: str) -> dict[str, int]:
    counts = {"kana": 0, "han": 0, "hangul": 0, "latin": 0, "other": 0}
    for ch in text:
        script = _script(ch)
        if script:
            counts[script] += 1
    return counts


def language_of(text: str) -> str:
    """The language a text is mostly written in: "zh", "en", "ja", "ko" or "other" (by script)."""
    c = _counts(text)
    cjk = c["han"] + c["kana"]
    # latin letters weigh less: one Hanzi is about 3.5 letters of speech
    weights = {"cjk": cjk * 3.5, "hangul": c["hangul"] * 3.0, "latin": c["latin"], "other": c["other"]}
    top = max(weights, key=lambda k: weights[k])
    if weights[top] == 0:
        return "other"
    if top == "cjk":
        return "ja" if c["kana"] and c["kana"] >= 0.1 * cjk else "zh"
    return {"hangul": "ko", "latin": "en", "other": "other"}[top]


def spoken_chars(text: str) -> int:
    """Letters, digits and CJK characters (what takes time to say); punctuation and spaces are not counted."""
    return sum(_counts(text).values())


def allowed_seconds(text: str, family: str, speed: float = 1.0,
                    decoder: SpeechDecoder | None = None) -> tuple[tuple[float, float], int, str]:
    """((min, max) seconds a normal take of `text` lasts, spoken chars, language). A mixed text adds up its
    scripts: each character's band plus the overhead and fit residual of the dominant language."""
    c = _counts(text)
    language = language_of(text)
    parts = {"ja" if language == "ja" else "zh": c["han"] + c["kana"], "ko": c["hangul"], "en": c["latin"],
             "other": c["other"]}
    chars = sum(parts.values())
    bands = {lang: band(family, lang, decoder) for lang, n in parts.items() if n}
    lo = sum(n * bands[lang][0] for lang, n in parts.items() if n)
    hi = sum(n * bands[lang][1] for lang, n in parts.items() if n)
    _, _, _, overhead, residual = _measured(language)
    speed = speed if speed and speed > 0 else 1.0
    return (max(0.0, (lo + overhead) / speed - residual), (hi + overhead) / speed + residual), chars, language


def token_repeat(tokens, min_block: int = 12, min_span: int = 40, max_same: int = 0) -> str:
    """Describe the longest verbatim repeated run in `tokens` ("" when none): a block of at least
    `min_block` tokens said twice in a row, or a shorter block looped until it covers `min_span` tokens
    (a stuck token included). `max_same` > 0 also flags one token held that many times."""
    a = np.asarray(tuple(tokens), dtype=np.int64)
    n = len(a)
    best = ""
    best_span = 0
    for period in range(1, n // 2 + 1):
        eq = a[period:] == a[:-period]
        if not eq.any():
            continue
        # longest run of True in eq: the block of `period` tokens repeats over run + period tokens
        padded = np.concatenate(([0], eq.view(np.int8), [0]))
        edges = np.flatnonzero(np.diff(padded))
        runs = edges[1::2] - edges[::2]
        run = int(runs.max())
        span = run + period
        repeated = span / period
        if period == 1:
            hit = max_same > 0 and span >= max_same
        elif period >= min_block:
            hit = repeated >= 2.0
        else:
            hit = span >= min_span and repeated >= 3.0
        if hit and span > best_span:
            best_span = span
            best = f"{period} tokens repeated {repeated:.1f}×"
    return best


def _repeat_limits(decoder: SpeechDecoder | None) -> dict[str, int]:
    rate = decoder.token_rate if decoder is not None and decoder.token_rate else 25
    # a block of >= 0.5 s said twice, a short loop covering >= 1.6 s, one token held >= 2.4 s
    return {"min_block": max(8, int(0.5 * rate)), "min_span": int(1.6 * rate), "max_same": int(2.4 * rate)}


_WORD = re.compile(r"[\w']+", re.UNICODE)


def _words(text: str) -> list[str]:
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        if any(_script(ch) in ("han", "kana", "hangul") for ch in word):
            out.extend(ch for ch in word if _script(ch))  # CJK: characters are the units
        else:
            out.append(word.strip("'"))
    return [w for w in out if w]


def word_recall(reference: str, heard: str) -> float:
    """Share of the reference's words (CJK: characters) found, in order, in what was heard (LCS / len)."""
    ref, hyp = _words(reference), _words(heard)
    if not ref:
        return 1.0
    if not hyp:
        return 0.0
    prev = [0] * (len(hyp) + 1)
    for r in ref:
        cur = [0] * (len(hyp) + 1)
        for j, h in enumerate(hyp, 1):
            cur[j] = prev[j - 1] + 1 if r == h else max(prev[j], cur[j - 1])
        prev = cur
    return prev[-1] / len(ref)


def check_take(text: str, seconds: float, family: str, tokens=(), *, speed: float = 1.0,
               recall: float | None = None, min_recall: float = 0.5,
               decoder: SpeechDecoder | None = None) -> TakeCheck:
    """Check one take of `text` lasting `seconds` from an engine of `family` ("offline": the offline voice's
    band; others: the cloning band) whose speech-token decoder is `decoder` (`EngineInfo.decoder`: its limits
    bound the band, its token rate sizes the repeat check). `tokens`: the take's speech tokens (CosyVoice);
    `recall`: the word recall of an ASR round trip, when one ran."""
    (shortest, longest), chars, language = allowed_seconds(text, family, speed, decoder)
    reasons: list[str] = []
    spc = seconds / chars if chars else 0.0
    band = (shortest / chars, longest / chars) if chars else (0.0, float("inf"))
    if chars and seconds > longest:
        reasons.append("too_long")
    elif chars and seconds < shortest:
        reasons.append("too_short")
    repeat = token_repeat(tokens, **_repeat_limits(decoder)) if len(tokens) else ""
    if repeat:
        reasons.append("repeat")
    if recall is not None and recall < min_recall:
        reasons.append("asr_mismatch")
    if reasons:
        detail = "; ".join(REASON_TEXT[r] for r in reasons)
    else:
        detail = "plausible"
    detail += f" ({seconds:.2f} s for {chars} {language} chars, {spc:.3f} s/char; band {band[0]:.3f}-{band[1]:.3f})"
    if repeat:
        detail += f"; {repeat}"
    if recall is not None:
        detail += f"; recall {recall:.2f}"
    return TakeCheck(not reasons, tuple(reasons), float(seconds), chars, spc, band, repeat, detail, recall)
