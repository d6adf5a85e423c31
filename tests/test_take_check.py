"""`take_check`: languages by script, seconds-per-character bands (CJK vs latin, speed, short texts), repeated
token runs, word recall, and the verdict's reasons."""

from __future__ import annotations

import numpy as np
import pytest

from cosyvoice_ui.cosyvoice.families import V1, V2, V3
from cosyvoice_ui.take_check import (BANDS, MEASURED, allowed_seconds, band, check_take, hard_limits, language_of,
                                     spoken_chars, token_repeat, word_recall)

# Each CosyVoice family's decoder facts, as its engine reports them in `EngineInfo.decoder`.
DECODERS = {spec.name: spec.decoder for spec in (V1, V2, V3)}


def bands(family: str, language: str) -> tuple[float, float]:
    return band(family, language, DECODERS.get(family)) if family in DECODERS else BANDS[(family, language)]

EN = "The quick brown fox jumps over the lazy dog."  # 35 letters
ZH = "今天天气很好，我们去公园散步吧。"  # 14 Hanzi


def normal_seconds(text: str, language: str) -> float:
    """A take at the measured median rate."""
    _, median, _, overhead, _ = MEASURED[language]
    return overhead + median * spoken_chars(text)


@pytest.mark.parametrize(("text", "language"), [
    (EN, "en"), (ZH, "zh"), ("こんにちは、元気ですか。", "ja"), ("안녕하세요, 반갑습니다.", "ko"),
    ("Привет, как дела?", "other"), ("...!?", "other"), ("我们用 Python 写代码。", "zh"),
    ("Let us meet at 北京 tomorrow morning after breakfast.", "en"),
])
def test_language_by_script(text: str, language: str) -> None:
    assert language_of(text) == language


def test_spoken_chars_skip_punctuation_and_spaces() -> None:
    assert spoken_chars(EN) == 35
    assert spoken_chars(ZH) == 14
    assert spoken_chars("a, b! 12") == 4


def test_bands_cover_every_family_and_language_and_hold_the_median() -> None:
    for family in ("offline", "v1", "v2", "v3", "*"):
        for language in ("en", "zh", "ja", "ko", "other"):
            lo, hi = bands(family, language)
            assert 0 < lo < hi
    for language in MEASURED:
        p1, median, p99, _, _ = MEASURED[language]
        assert p1 <= median <= p99
        for family in ("offline", "v1", "v2", "v3"):
            lo, hi = bands(family, language)
            assert lo < median < hi
    # a Hanzi takes several times as long as a latin letter
    assert MEASURED["zh"][1] > 3 * MEASURED["en"][1]
    assert BANDS[("offline", "zh")][0] > BANDS[("offline", "en")][1]


def test_cosyvoice_hard_limits_follow_token_rate() -> None:
    for family, rate in (("v1", 50), ("v2", 25), ("v3", 25)):
        decoder = DECODERS[family]
        assert decoder.token_rate == rate
        lo, hi = hard_limits(decoder, "zh")
        per_char = decoder.tokens_per_char("zh")
        assert (lo, hi) == pytest.approx((2 / rate * per_char, 20 / rate * per_char))  # ratios 2 and 20
    assert hard_limits(None, "en") is None
    for family, decoder in DECODERS.items():
        for language in ("en", "zh"):
            lo, hi = bands(family, language)
            hard_lo, hard_hi = hard_limits(decoder, language)
            assert lo >= hard_lo


@pytest.mark.parametrize(("text", "language"), [(EN, "en"), (ZH, "zh")])
@pytest.mark.parametrize("family", ["offline", "v1", "v2", "v3", "fake"])
def test_normal_take_passes_doubled_too_long_cut_too_short(text: str, language: str, family: str) -> None:
    seconds = normal_seconds(text, language)
    ok = check_take(text, seconds, family, decoder=DECODERS.get(family))
    assert ok.ok and ok.reasons == () and ok.chars == spoken_chars(text)
    assert ok.band[0] < ok.seconds_per_char < ok.band[1]
    assert ok.seconds_per_char == pytest.approx(seconds / ok.chars)
    long = check_take(text, 2.2 * seconds, family, decoder=DECODERS.get(family))
    assert not long.ok and long.reasons == ("too_long",) and "too long" in long.detail
    short = check_take(text, 0.3 * seconds, family, decoder=DECODERS.get(family))
    assert not short.ok and short.reasons == ("too_short",)
    assert long.severity > 0 and short.severity > 0 and ok.severity == 0


def test_cjk_and_latin_need_different_lengths() -> None:
    # 14 characters: fine as Chinese at ~3.5 s, far too long as 14 English letters
    assert check_take(ZH, normal_seconds(ZH, "zh"), "offline").ok
    assert check_take("abcdefghijklmn", normal_seconds(ZH, "zh"), "offline").reasons == ("too_long",)
    # a mixed line counts each script at its own rate
    (lo_mixed, hi_mixed), chars, _ = allowed_seconds("我们用 Python 写代码。", "offline")
    (lo_zh, hi_zh), _, _ = allowed_seconds("我们用写代码。", "offline")
    assert chars == 12 and lo_mixed > lo_zh and hi_mixed > hi_zh


def test_speed_scales_the_allowed_length() -> None:
    seconds = normal_seconds(EN, "en")
    assert check_take(EN, seconds / 2.0, "offline", speed=2.0).ok
    assert not check_take(EN, seconds / 2.0, "offline", speed=1.0).ok
    (lo1, hi1), _, _ = allowed_seconds(EN, "offline", 1.0)
    (lo2, hi2), _, _ = allowed_seconds(EN, "offline", 0.5)
    assert hi2 > 1.9 * hi1 - 1 and lo2 > lo1


def test_short_texts_get_the_fixed_allowance() -> None:
    # "Yes." is 3 letters: its take is mostly the fixed overhead, still plausible
    assert check_take("Yes.", 0.55, "offline").ok
    assert check_take("好。", 0.35, "offline").ok
    assert check_take("Yes.", 4.0, "offline").reasons == ("too_long",)


def test_empty_text_is_never_judged_by_length() -> None:
    check = check_take("...", 3.0, "v1", decoder=DECODERS["v1"])
    assert check.ok and check.chars == 0


def rng_tokens(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 4096, n).tolist()


def test_random_tokens_have_no_repeat() -> None:
    for seed in range(5):
        assert token_repeat(rng_tokens(300, seed), min_block=12, min_span=40, max_same=60) == ""
        assert check_take(EN, normal_seconds(EN, "en"), "v1", rng_tokens(120, seed), decoder=DECODERS["v1"]).ok


def test_doubled_segment_tokens_are_a_repeat() -> None:
    tokens = rng_tokens(60)
    doubled = tokens + tokens
    found = token_repeat(doubled, min_block=12, min_span=40)
    assert found.startswith("60 tokens repeated 2.0")
    check = check_take(EN, normal_seconds(EN, "en"), "v2", doubled, decoder=DECODERS["v2"])
    assert "repeat" in check.reasons and not check.ok and "60 tokens repeated" in check.repeat


def test_short_loops_and_stuck_tokens() -> None:
    loop = rng_tokens(20) + [5, 6, 7, 8] * 15 + rng_tokens(20, 1)  # a 4-token loop over 60 tokens
    assert token_repeat(loop, min_block=12, min_span=40) != ""
    assert token_repeat(rng_tokens(20) + [5, 6, 7, 8] * 3, min_block=12, min_span=40) == ""  # brief: fine
    stuck = rng_tokens(30) + [9] * 80
    assert token_repeat(stuck, min_block=12, min_span=40, max_same=60) != ""
    assert token_repeat(rng_tokens(30) + [9] * 20, min_block=12, min_span=40, max_same=60) == ""
    # a stuck token on v1 (50/s): 2.4 s = 120 tokens
    assert "repeat" in check_take(EN, 3.0, "v1", rng_tokens(30) + [9] * 130, decoder=DECODERS["v1"]).reasons


def test_word_recall() -> None:
    assert word_recall("The quick brown fox", "the quick brown fox") == 1.0
    assert word_recall("The quick brown fox", "the quick") == 0.5
    assert word_recall("The quick brown fox", "") == 0.0
    assert word_recall("", "anything") == 1.0
    assert word_recall("今天天气很好", "今天天气") == pytest.approx(4 / 6)
    assert word_recall("don't stop", "Don't STOP!") == 1.0


def test_recall_under_the_minimum_is_a_mismatch() -> None:
    seconds = normal_seconds(EN, "en")
    bad = check_take(EN, seconds, "offline", recall=0.2, min_recall=0.5)
    assert bad.reasons == ("asr_mismatch",) and bad.recall == 0.2 and bad.severity > 0
    assert check_take(EN, seconds, "offline", recall=0.9, min_recall=0.5).ok


def test_as_dict_is_plain_data() -> None:
    data = check_take(EN, 10.0, "v1", decoder=DECODERS["v1"]).as_dict()
    assert data["ok"] is False and data["reasons"] == ["too_long"] and isinstance(data["band"], list)
