"""Text normalisation and splitting rules (cosyvoice-models.md §2.2), one rule per test.

Expected outputs were written from the rules, not by running the code.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from cosyvoice_ui.cosyvoice.frontend import text as T
from cosyvoice_ui.cosyvoice.frontend.text import (detect_language, is_punctuation_only, normalize, pack_sentences,
                                                  replace_blank, spell_out_numbers, split_sentences)


def words(s: str) -> int:
    """A stand-in token counter: whitespace-separated words."""
    return len(s.split())


@pytest.fixture
def no_tn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if wetext TN is reached (it must only run on text with an ASCII digit)."""

    def forbidden(text: str, lang: str) -> str:
        raise AssertionError(f"TN called on {text!r}")

    monkeypatch.setattr(T._BACKENDS, "tn", forbidden)


# ------------------------------------------------------------------------------------------ language, bypass


def test_detect_language_uses_cjk_unified_ideographs_only() -> None:
    assert detect_language("你好world") == "zh"
    assert detect_language("東京タワー") == "zh"  # kanji are in U+4E00-U+9FFF
    assert detect_language("こんにちは") == "en"  # kana alone are not
    assert detect_language("안녕하세요") == "en"
    assert detect_language("Hello.") == "en"


def test_special_token_syntax_disables_the_frontend(no_tn: None) -> None:
    raw = "  <|en|>Hello  world 2024, 你好 "
    assert normalize(raw) == [raw]
    assert normalize(raw, split=False) == raw
    # `<|` alone is not enough
    assert normalize("a <| b", count_tokens=words) == ["a <| b."]


def test_frontend_off_and_empty_text_are_returned_untouched(no_tn: None) -> None:
    assert normalize("  你好 世界 ", use_frontend=False) == ["  你好 世界 "]
    assert normalize("  你好 世界 ", split=False, use_frontend=False) == "  你好 世界 "
    assert normalize("") == [""]
    assert normalize("", split=False) == ""


# ------------------------------------------------------------------------------------------ Chinese path


def test_replace_blank_keeps_only_spaces_between_ascii() -> None:
    assert replace_blank("你好 世界") == "你好世界"
    assert replace_blank("我用 Apple Store 买的") == "我用Apple Store买的"
    assert replace_blank("a  b") == "ab"  # each space of a double space has a space neighbour


def test_chinese_spaces_and_final_full_stop(no_tn: None) -> None:
    assert normalize("  我用 Apple Store 买的 ") == ["我用Apple Store买的。"]
    assert normalize("第一行\n第二行") == ["第一行第二行。"]


def test_chinese_symbol_replacements(no_tn: None) -> None:
    assert normalize("面积是十米²，体积三米³") == ["面积是十米平方，体积三米立方。"]
    # `——` becomes a space after blank removal, so that space survives
    assert normalize("（注意）【重要】`代码`——结束") == ["注意重要代码 结束。"]
    # ` - ` only survives blank removal between ASCII characters
    assert normalize("苹果A - B型") == ["苹果A，B型。"]
    assert normalize("你好 - 世界") == ["你好-世界。"]


def test_chinese_dot_becomes_full_stop_and_splits(no_tn: None) -> None:
    assert normalize("第一点.第二点", split=False) == "第一点。第二点"
    assert normalize("第一点.第二点") == ["第一点。第二点。"]


def test_chinese_trailing_commas_become_one_full_stop(no_tn: None) -> None:
    assert normalize("你好，世界，，", split=False) == "你好，世界。"
    assert normalize("好的,、，") == ["好的。"]
    assert normalize("你好，世界") == ["你好，世界。"]  # an inner comma is kept and is no split point


def test_split_false_returns_the_normalised_string(no_tn: None) -> None:
    assert normalize("  你好 世界  ", split=False) == "你好世界"
    assert normalize("Hello world", split=False) == "Hello world"  # no final '.' without splitting


# ------------------------------------------------------------------------------------------ English path


def test_spell_out_numbers_replaces_each_ascii_digit_run() -> None:
    assert spell_out_numbers("in 2024 and 7") == "in two thousand and twenty-four and seven"
    assert spell_out_numbers("no digits") == "no digits"
    assert spell_out_numbers("x12y3", lambda d: f"<{d}>") == "x<12>y<3>"


def test_spell_out_numbers_reads_overlong_runs_digit_by_digit() -> None:
    assert spell_out_numbers("1" * 40) == " ".join(["one"] * 40)


def test_english_digits_go_through_tn_then_inflect(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def fake_tn(text: str, lang: str) -> str:
        seen.append(lang)
        return text.replace("3", "three")  # leaves "2024" for inflect

    monkeypatch.setattr(T._BACKENDS, "tn", fake_tn)
    assert normalize("I have 3 apples since 2024", count_tokens=words) == [
        "I have three apples since two thousand and twenty-four."
    ]
    assert seen == ["en"]


def test_chinese_digits_go_through_zh_tn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T._BACKENDS, "tn", lambda text, lang: text.replace("3", "三") + f"[{lang}]")
    assert normalize("我有3个", split=False) == "我有三个[zh]"


def test_wetext_failure_keeps_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def normalize(self, text: str) -> str:
            raise AssertionError("fst failed")

    T._BACKENDS.number_to_words("1")  # make sure the backends are built before swapping one
    monkeypatch.setattr(T._BACKENDS, "_en", Broken())
    assert normalize("Room 12", count_tokens=words) == ["Room twelve."]


def test_wetext_zh_reads_a_year() -> None:
    pytest.importorskip("wetext")
    assert normalize("今天是2024年") == ["今天是二零二四年。"]


def test_english_needs_a_token_counter_only_to_split() -> None:
    with pytest.raises(ValueError, match="count_tokens"):
        normalize("Hello there.")
    assert normalize("Hello there.", split=False) == "Hello there."


# ------------------------------------------------------------------------------------------ sentence cuts


def test_split_sentences_appends_missing_final_punctuation() -> None:
    assert split_sentences("hello world", "en") == ["hello world."]
    assert split_sentences("你好", "zh") == ["你好。"]
    assert split_sentences("a, b", "en") == ["a, b."]  # commas are not split points


def test_split_sentences_terminal_sets_differ_by_language() -> None:
    assert split_sentences("甲、乙:丙", "zh") == ["甲、", "乙:丙。"]  # zh: `、` splits, ASCII `:` does not
    assert split_sentences("A: b; c", "en") == ["A:", " b;", " c."]


def test_closing_quote_stays_with_its_sentence() -> None:
    assert split_sentences("他说：“你好。”然后走了。", "zh") == ["他说：", "“你好。”", "然后走了。"]
    assert split_sentences('He said "Hi." Then left.', "en") == ['He said "Hi."', " Then left."]


def test_repeated_terminal_is_dropped_and_its_quote_joins_the_previous_sentence() -> None:
    assert split_sentences("你好！！", "zh") == ["你好！"]
    assert split_sentences("好！！”再见", "zh") == ["好！”", "再见。"]
    assert split_sentences("Wait... what?", "en") == ["Wait.", " what?"]


# ------------------------------------------------------------------------------------------ packing


def test_packing_flushes_only_when_over_max_and_buffer_over_min() -> None:
    a51, a61, a70 = "一" * 50 + "。", "一" * 60 + "。", "一" * 69 + "。"
    b30, b20, b15 = "二" * 29 + "。", "二" * 19 + "。", "二" * 14 + "。"
    assert pack_sentences([a51, b30], len) == [a51 + b30]  # 81 > 80 but the buffer (51) is not > 60
    assert pack_sentences([a61, b30], len) == [a61, b30]
    b19 = "二" * 18 + "。"
    assert pack_sentences([a61, b19], len) == [a61 + b19]  # 61 + 19 = 80 is not > 80
    assert pack_sentences([a70, b20], len) == [a70, b20]  # a tail of exactly 20 stands alone
    assert pack_sentences([a70, b15], len) == [a70 + b15]  # a tail under 20 joins the last segment
    assert pack_sentences([a70, a70, a70], len) == [a70, a70, a70]
    assert pack_sentences([b15], len) == [b15]  # a short text with no earlier segment is kept


def test_chinese_long_text_is_split_by_characters(no_tn: None) -> None:
    first, second = "一" * 70 + "。", "二" * 30 + "。"
    assert normalize(first + second) == [first, second]
    assert normalize(first + "二" * 14 + "。") == [first + "二" * 14 + "。"]


def test_english_long_text_is_split_by_tokens(no_tn: None) -> None:
    first = " ".join(["alpha"] * 65) + "."
    second = " " + " ".join(["beta"] * 30) + "."
    assert normalize(first + second, count_tokens=words) == [first, second]
    # measured in characters this would be split differently: the counter is really used
    assert normalize(first + second, count_tokens=lambda s: 1) == [first + second]


# ------------------------------------------------------------------------------------------ punctuation filter


def test_is_punctuation_only() -> None:
    assert is_punctuation_only("")
    assert is_punctuation_only("。！…")
    assert is_punctuation_only("$+%")  # symbols count too
    assert not is_punctuation_only("a.")
    assert not is_punctuation_only(" .")


def test_punctuation_only_segments_are_dropped(no_tn: None) -> None:
    first = "一" * 70 + "。"
    assert normalize(first + "…" * 30 + "。") == [first]
    assert normalize("……", count_tokens=words) == []


# ------------------------------------------------------------------------------------------ laziness


def test_import_builds_nothing() -> None:
    code = (
        "import sys, cosyvoice_ui.cosyvoice.frontend.text, cosyvoice_ui.cosyvoice.frontend.tokenizer;"
        "print([m for m in ('wetext', 'inflect', 'tiktoken', 'torch') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_cmu_stress_digits_stay_digits_while_numbers_are_spelled_out() -> None:
    """A pronunciation hint's stress digit ([EH1]) is part of the phone; a number beside it is still read out."""
    assert normalize("I have [R][EH1][D] it 3 times.", count_tokens=len) == ["I have [R][EH1][D] it three times."]
    assert normalize("我[R][EH1][D]了3本书。", count_tokens=len) == ["我[R][EH1][D]了三本书。"]
