"""The instruct picker's data and the text facts of each family (families.py), as EngineInfo carries them:
upstream's instruction wording without `<|endofprompt|>` or the v3 system prompt (the recipes add those),
labels in zh and en, and which family reads which inline tags and pronunciation hints."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.cosyvoice.families import FAMILIES, V1, V2, V3, ModelFolder, folder_info
from cosyvoice_ui.types import Mode

CATEGORIES = {"dialect", "emotion", "rate", "volume", "style"}


@pytest.mark.parametrize("family", [V2, V3], ids=lambda f: f.title)
def test_instructions_are_plain_labelled_data(family) -> None:
    assert family.instructions
    for item in family.instructions:
        assert item.category in CATEGORIES and item.zh and item.en and item.text.strip()
        assert "<|endofprompt|>" not in item.text and "helpful assistant" not in item.text
    assert len({item.text for item in family.instructions}) == len(family.instructions)


def test_cosyvoice3_lists_upstreams_26_instructions() -> None:
    by_category = {c: [i for i in V3.instructions if i.category == c] for c in CATEGORIES}
    assert len(V3.instructions) == 26 and len(by_category["dialect"]) == 17
    dialects = {i.zh for i in by_category["dialect"]}
    assert {"广东话", "四川话", "上海话", "东北话", "闽南话", "天津话", "山东话"} <= dialects
    assert next(i for i in V3.instructions if i.zh == "广东话").text == "请用广东话表达。"
    assert {i.en for i in by_category["emotion"]} == {"Happy", "Sad", "Angry"}
    assert by_category["rate"] and by_category["volume"]


def test_cosyvoice2_uses_its_own_wording() -> None:
    texts = {i.zh: i.text for i in V2.instructions}
    assert texts["四川话"] == "用四川话说这句话" and {"郑州话", "长沙话"} <= set(texts)
    assert "Surprised" in {i.en for i in V2.instructions if i.category == "emotion"}


def test_text_facts_per_family() -> None:
    assert V1.instructions == () and V1.pronunciation == () and "[laughter]" in V1.text_tags
    assert {"[breath]", "[laughter]", "<strong></strong>"} <= set(V2.text_tags) <= set(V3.text_tags)
    assert V3.pronunciation == ("pinyin", "cmu") and V2.pronunciation == ()
    assert V3.text_caveats == ("ja_kanji",) and all(f.text_caveats == () for f in FAMILIES if f is not V3)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.title)
def test_folder_info_carries_the_family_facts(family) -> None:
    info = folder_info(ModelFolder(Path("x"), family, instruct=False, has_spk2info=False), ())
    assert info.text_tags == family.text_tags and info.pronunciation == family.pronunciation
    assert info.text_caveats == family.text_caveats
    assert info.instructions == (family.instructions if Mode.INSTRUCT in info.modes else ())
