"""Sentence, language and phoneme-chunk splitting of the offline backend (pure string code)."""

from __future__ import annotations

import pytest

from cosyvoice_ui.offline.text import (
    EN,
    ZH,
    Run,
    char_language,
    chunk_phonemes,
    english_punctuation,
    is_speakable,
    normalize,
    split_languages,
    split_sentences,
    strip_unsupported,
)


def test_char_language() -> None:
    assert char_language("a") == EN
    assert char_language("é") == EN
    assert char_language("中") == ZH
    assert char_language("3") is None
    assert char_language("，") is None
    assert char_language("あ") is None  # kana is not spoken by this backend


def test_split_languages_mixed() -> None:
    runs = split_languages("我喜欢 Python 编程。")
    assert runs == [Run("我喜欢", ZH), Run("Python", EN), Run("编程。", ZH)]


def test_split_languages_digits_follow_han() -> None:
    # "2024年" is read in Mandarin; "3 apples" in English.
    assert split_languages("in 2024年 we") == [Run("in", EN), Run("2024年", ZH), Run("we", EN)]
    assert split_languages("I have 3 apples") == [Run("I have 3 apples", EN)]


def test_split_languages_punctuation_joins_previous_run() -> None:
    assert split_languages("Hello, 世界！Bye.") == [Run("Hello,", EN), Run("世界！", ZH), Run("Bye.", EN)]


def test_split_languages_without_letters_uses_default() -> None:
    assert split_languages("123") == [Run("123", EN)]
    assert split_languages("123", default=ZH) == [Run("123", ZH)]
    assert split_languages("   ") == []


def test_split_sentences() -> None:
    text = "The first sentence is here. 第二句话在这里。Is this the third one? Yes it is!"
    assert split_sentences(text) == [
        "The first sentence is here.",
        "第二句话在这里。",
        "Is this the third one?",
        "Yes it is!",
    ]


def test_split_sentences_keeps_abbreviations_and_joins_short_ones() -> None:
    pieces = split_sentences("Mr. Smith met Dr. Jones today. Yes! We all went home early.")
    assert pieces == ["Mr. Smith met Dr. Jones today.", "Yes! We all went home early."]


def test_split_sentences_newlines() -> None:
    assert split_sentences("line one is here\nline two is here") == ["line one is here", "line two is here"]


def test_normalize() -> None:
    assert normalize("  Ｈｅｌｌｏ   world \n\n 你好，世界 ") == "Hello world\n你好，世界"


def test_english_punctuation() -> None:
    assert english_punctuation("Hello，world。OK？") == "Hello,world.OK?"


def test_is_speakable() -> None:
    assert is_speakable("hi")
    assert is_speakable("你好")
    assert is_speakable("42")
    assert not is_speakable("ありがとう")
    assert not is_speakable("?!…")


def test_chunk_phonemes_short_input_is_one_chunk() -> None:
    assert chunk_phonemes("həlˈO wˈɜɹld.", 510) == ["həlˈO wˈɜɹld."]


@pytest.mark.parametrize("limit", [20, 37, 50])
def test_chunk_phonemes_respects_limit_and_keeps_content(limit: int) -> None:
    words = [f"w{i}" + ("." if i % 7 == 6 else ",") * (i % 3 == 0) for i in range(80)]
    text = " ".join(words)
    chunks = chunk_phonemes(text, limit)
    assert all(0 < len(c) <= limit for c in chunks)
    # Only spaces are dropped at cuts: the symbols survive in order.
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")


def test_chunk_phonemes_prefers_sentence_end() -> None:
    text = "aaa bbb. ccc, ddd eee"
    assert chunk_phonemes(text, 16) == ["aaa bbb.", "ccc, ddd eee"]


def test_chunk_phonemes_cuts_unbroken_runs() -> None:
    assert chunk_phonemes("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_strip_unsupported() -> None:
    assert strip_unsupported("Hi ありがとう 你好 Привет 42!") == ("Hi  你好  42!", "ありがとうПривет")
