"""Text -> Kokoro phoneme ids for English and Mandarin (real G2P; skipped without the offline packages)."""

from __future__ import annotations

import logging

import pytest

from cosyvoice_ui.offline.frontend import OfflineFrontend, Phonemizer
from cosyvoice_ui.offline.kokoro import MAX_PHONEMES
from cosyvoice_ui.offline.text import EN, ZH, Run


def test_english_phonemes(offline_frontend: OfflineFrontend) -> None:
    ph = offline_frontend.phonemizer.phonemize(Run("Hello world.", EN))
    assert ph == "həlˈO wˈɜɹld."


def test_english_numbers_are_spelled(offline_frontend: OfflineFrontend) -> None:
    ph = offline_frontend.phonemizer.phonemize(Run("It costs $5.", EN))
    assert "fˈIv dˈɑləɹz" in ph


def test_mandarin_phonemes_carry_tones(offline_frontend: OfflineFrontend) -> None:
    ph = offline_frontend.phonemizer.phonemize(Run("你好，世界。", ZH))
    assert ph == "ni↓xau↓, ʂɨ↘ʨje↘."


def test_mandarin_numbers_are_read_in_mandarin(offline_frontend: OfflineFrontend) -> None:
    ph = offline_frontend.phonemizer.phonemize(Run("3个", ZH))
    assert ph.startswith("sa→n")  # 三


def test_mixed_sentence(offline_frontend: OfflineFrontend) -> None:
    (sentence,) = offline_frontend.prepare("我喜欢 Python 编程。")
    assert sentence.languages == (ZH, EN)  # in order of first appearance
    (phonemes,) = sentence.phonemes
    assert "↓" in phonemes and "ˈ" in phonemes  # Mandarin tones and English stress in one chunk
    vocab = offline_frontend.phonemizer.vocab
    assert sentence.ids[0] == tuple(vocab[c] for c in phonemes)


def test_unknown_symbols_are_dropped_and_logged(offline_frontend: OfflineFrontend, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="cosyvoice_ui.offline.frontend"):
        kept = offline_frontend.phonemizer.filter("ab✓c  d")
    assert kept == "abc d"
    assert "✓" in caplog.text


def test_filter_keeps_known_symbols() -> None:
    ph = Phonemizer({"a": 1, "b": 2, " ": 3})
    assert ph.filter("a x b") == "a b"
    assert ph.to_ids("a b") == (1, 3, 2)


def test_long_text_is_chunked_to_the_model_limit(offline_frontend: OfflineFrontend) -> None:
    text = ", ".join(["the quick brown fox jumps over the lazy dog"] * 40) + "."
    (sentence,) = offline_frontend.prepare(text)
    assert len(sentence.ids) >= 3
    assert all(0 < len(ids) <= MAX_PHONEMES for ids in sentence.ids)
    # Chunks are cut at commas, not mid-word.
    assert all(p.endswith(",") or p.endswith(".") for p in sentence.phonemes)


def test_sentences_without_speech_are_dropped(offline_frontend: OfflineFrontend) -> None:
    sentences = offline_frontend.prepare("Hello there, friend. ありがとう。Привет мир.")
    assert [s.text for s in sentences] == ["Hello there, friend."]


def test_other_scripts_are_skipped_inside_a_sentence(offline_frontend: OfflineFrontend) -> None:
    plain = offline_frontend.sentence("Thank you very much.")
    mixed = offline_frontend.sentence("Thank you ありがとう very much.")
    assert mixed.phonemes == plain.phonemes


def test_no_split(offline_frontend: OfflineFrontend) -> None:
    text = "One sentence here. Another sentence there."
    assert len(offline_frontend.prepare(text)) == 2
    assert len(offline_frontend.prepare(text, split=False)) == 1
