"""The cross / instruct tab and the text helpers against what the model says it can do (FakeEngine, no
model): the family's instruction picker (labels in en and zh), instruct with a voice sample where the
model's instruct takes one (CosyVoice2/3) and with a preset where it takes a preset, the explanations of
what a model cannot do, the tag and pronunciation chips, and the Japanese kanji hint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Instruction, Mode
from cosyvoice_ui.ui import strings
from cosyvoice_ui.ui.handlers import Handlers
from cosyvoice_ui.ui.requests import cross_meta, request_from_meta
from cosyvoice_ui.ui.tabs.text_tools import insert
from cosyvoice_ui.ui.text_hints import is_japanese_with_kanji, kanji_hint_shown

from .test_layout import events, fake_manager, label_key, submode_of

gr = pytest.importorskip("gradio")

INSTRUCTIONS = (Instruction("dialect", "四川话", "Sichuanese", "用四川话说这句话"),
                Instruction("emotion", "开心", "Happy", "用开心的语气说"))


def voice_instruct() -> FakeEngine:
    """Like a base CosyVoice2/3 folder: no presets, instruct with any voice, tags, pinyin/CMU, the kanji caveat."""
    return FakeEngine(modes=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC), speakers=(),
                      instruct_voice=True, instructions=INSTRUCTIONS, text_tags=("[breath]", "[laughter]"),
                      pronunciation=("pinyin", "cmu"), text_caveats=("ja_kanji",))


def preset_instruct() -> FakeEngine:
    """Like CosyVoice-300M-Instruct: instruct with a preset speaker, free-text examples, v1's tags."""
    return FakeEngine(modes=(Mode.INSTRUCT, Mode.SFT, Mode.ZERO_SHOT, Mode.VC), speakers=("A", "B"),
                      text_tags=("[laughter]", "<strong></strong>"))


def build(engine: FakeEngine, tmp_path: Path):
    from cosyvoice_ui.ui.layout import build_ui

    return build_ui(fake_manager(engine), Settings(), output_dir=tmp_path / "out")


def adapted(app, submode: str = "instruct", lang: str = "en-US") -> dict:
    adapt = events(app, "adapt")[0]
    choice = submode_of(adapt)
    lang_box = next(c for c in adapt.inputs if c is not choice)
    return adapt.fn({choice: submode, lang_box: lang})


def by_label(updates: dict, key: str) -> list[dict]:
    return [u for c, u in updates.items() if label_key(c) == key]


def markdown(updates: dict, key: str) -> dict:
    [update] = [u for c, u in updates.items() if isinstance(c, gr.Markdown) and key in str(c.value)]
    return update


@pytest.mark.parametrize("lang, labels", [("en-US", ["Dialect · Sichuanese", "Emotion · Happy"]),
                                          ("zh-CN", ["方言 · 四川话", "情感 · 开心"])])
def test_instruct_takes_the_sample_and_offers_the_family_instructions(tmp_path: Path, lang: str,
                                                                      labels: list[str]) -> None:
    updates = adapted(build(voice_instruct(), tmp_path), lang=lang)
    [picker] = by_label(updates, "instruct_picker")
    assert picker["visible"] is True
    assert picker["choices"] == [(label, item.text) for label, item in zip(labels, INSTRUCTIONS)]
    [instruct] = by_label(updates, "instruct_text")
    assert instruct["visible"] is True  # free text stays
    assert all(u["visible"] for u in by_label(updates, "prompt_audio"))  # the voice sample, not a preset
    assert not any(u.get("visible") for u in by_label(updates, "speaker"))  # no preset dropdown shown
    assert markdown(updates, "instruct_voice_note")["visible"] is True
    assert markdown(updates, "instruct_unavailable")["visible"] is False


def test_a_preset_instruct_model_takes_a_preset_and_has_no_picker(tmp_path: Path) -> None:
    updates = adapted(build(preset_instruct(), tmp_path))
    [picker] = by_label(updates, "instruct_picker")
    assert picker["visible"] is False
    assert any(u.get("visible") and u["value"] == "A" for u in by_label(updates, "speaker"))
    cross_prompt = by_label(updates, "prompt_audio")
    assert any(u["visible"] is False for u in cross_prompt)
    assert markdown(updates, "instruct_voice_note")["visible"] is False


def test_picking_an_instruction_fills_the_text_box(tmp_path: Path) -> None:
    app = build(voice_instruct(), tmp_path)
    [pick] = [fn for fn in app.fns.values() if any(label_key(c) == "instruct_picker" for c in fn.inputs)
              and any(label_key(c) == "instruct_text" for c in fn.outputs)]
    assert pick.fn("用四川话说这句话", "my own words") == "用四川话说这句话"
    assert pick.fn(None, "my own words") == "my own words"


def test_the_preset_tab_explains_instruct_and_presets_on_a_base_voice_instruct_model(tmp_path: Path) -> None:
    updates = adapted(build(voice_instruct(), tmp_path))
    assert markdown(updates, "no_speakers_note")["visible"] is True
    assert markdown(updates, "preset_instruct_note")["visible"] is True
    updates = adapted(build(preset_instruct(), tmp_path / "p"))
    assert markdown(updates, "preset_instruct_note")["visible"] is False


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_explanations_name_the_models_that_can(lang: str) -> None:
    unavailable = strings.label("instruct_unavailable", lang)
    assert "CosyVoice-300M-Instruct" in unavailable and "CosyVoice2-0.5B" in unavailable
    assert ("样本" in strings.label("instruct_voice_note", lang)) == (lang == "zh")
    assert ("跨语种复刻 / 指令控制" in strings.label("preset_instruct_note", lang)) == (lang == "zh")
    assert "[j][ǐ]" in strings.label("pronunciation_help", lang) and "[R][EH1][D]" in strings.label(
        "pronunciation_help", lang)
    assert ("假名" in strings.label("ja_kanji_note", lang)) == (lang == "zh")


def _chips(updates: dict) -> tuple[list, list]:
    """(the tags of the visible tag chips, the label keys of the visible pronunciation chips)."""
    buttons = [(c, u) for c, u in updates.items() if isinstance(c, gr.Button) and u.get("visible")]
    tags = [u["value"] for c, u in buttons if "value" in u]
    hints = [key for c, u in buttons for key in ("chip_pinyin", "chip_cmu") if key in str(c.value)]
    return tags, hints


def test_tag_and_pronunciation_chips_follow_the_model(tmp_path: Path) -> None:
    updates = adapted(build(voice_instruct(), tmp_path), submode="cross")
    assert _chips(updates) == (["[breath]", "[laughter]"], ["chip_pinyin", "chip_cmu"])
    assert markdown(updates, "pronunciation_help")["visible"] is True
    updates = adapted(build(preset_instruct(), tmp_path / "p"), submode="cross")
    assert _chips(updates) == (["[laughter]", "<strong></strong>"], [])  # v1 keeps its tags, no hints
    assert markdown(updates, "pronunciation_help")["visible"] is False
    updates = adapted(build(FakeEngine(), tmp_path / "f"), submode="cross")
    assert _chips(updates) == ([], [])


def test_chips_insert_their_text(tmp_path: Path) -> None:
    app = build(voice_instruct(), tmp_path)
    assert insert("他笑了", "[laughter]") == "他笑了[laughter]" and insert(None, "[breath]") == "[breath]"
    inserts = [fn for fn in app.fns.values() if fn.name == "<lambda>" and len(fn.inputs) == 2
               and label_key(fn.inputs[0]) == "text" and fn.outputs == fn.inputs[:1]]
    # Without a caret from the browser (the chip's label comes through) the hint goes at the end ...
    assert sorted(fn.fn("对报道", "chip label") for fn in inserts) == ["对报道[R][EH1][D]", "对报道[j][ǐ]"]
    # ... and where the browser inserted it at the caret (the label comes back empty) the text stays as sent.
    assert [fn.fn("对[j][ǐ]报道", "") for fn in inserts] == ["对[j][ǐ]报道"] * 2
    assert all(fn.js and "selectionStart" in fn.js for fn in inserts)
    chips = [fn for fn in app.fns.values() if fn.name == "insert"]
    assert chips and all(fn.js and "selectionStart" in fn.js and "#text-tools-box-" in fn.js for fn in chips)


@pytest.mark.parametrize("text, mixed", [("今日はいい天気ですね。", True), ("きょうはいいてんきですね。", False),
                                         ("コンニチハ", False), ("今天天气很好。", False), ("Hello", False),
                                         ("ｺﾝﾆﾁﾊ東京", True)])
def test_japanese_with_kanji_is_told_apart(text: str, mixed: bool) -> None:
    assert is_japanese_with_kanji(text) is mixed


def test_the_kanji_hint_shows_for_kanji_and_kana_on_a_model_that_misreads_kanji(tmp_path: Path) -> None:
    assert kanji_hint_shown(voice_instruct().info, "今日はいい天気ですね。")
    assert not kanji_hint_shown(preset_instruct().info, "今日はいい天気ですね。")  # no such caveat
    assert not kanji_hint_shown(None, "今日はいい天気ですね。")
    app = build(voice_instruct(), tmp_path)
    hints = [fn for fn in app.fns.values() if fn.outputs and isinstance(fn.outputs[0], gr.Markdown)
             and "ja_kanji_note" in str(fn.outputs[0].value)]
    assert len(hints) == 3  # the clone, cross and preset tabs' text boxes
    assert all(fn.fn("今日はいい天気ですね。")["visible"] is True for fn in hints)
    assert all(fn.fn("今天天气很好。")["visible"] is False for fn in hints)


@pytest.fixture()
def sample(tmp_path: Path) -> str:
    clip = voice_clip(4.0, 16000)
    path = tmp_path / "voice.wav"
    sf.write(path, np.asarray(clip.samples), clip.sample_rate)
    return str(path)


def test_instruct_with_a_sample_is_a_valid_request_where_instruct_takes_a_voice(tmp_path: Path, sample: str) -> None:
    meta = cross_meta("instruct", sample, "", None, "用四川话说这句话", "今天天气很好。")
    assert meta["mode"] == "instruct" and meta["prompt"] == sample and meta["voice"] == "sample"
    request = request_from_meta(meta)
    assert request.mode is Mode.INSTRUCT and request.prompt_audio is not None
    Handlers(fake_manager(voice_instruct()), Settings(), tmp_path / "a").check(request)
    with pytest.raises(InvalidRequest):  # a preset-instruct model still needs its preset
        Handlers(fake_manager(preset_instruct()), Settings(), tmp_path / "b").check(request)
    preset = cross_meta("instruct", sample, "", "A", "Speak slowly.", "Hello.")
    assert preset["speaker"] == "A" and "prompt" not in preset


@pytest.mark.parametrize("lang, placeholder", [("en-US", "e.g. Speak slowly."), ("zh-CN", "例如：Speak slowly.")])
def test_the_instruct_box_shows_the_models_own_example(tmp_path: Path, lang: str, placeholder: str) -> None:
    updates = adapted(build(preset_instruct(), tmp_path), lang=lang)
    [instruct] = by_label(updates, "instruct_text")
    assert instruct["placeholder"] == placeholder
    [examples] = [u for c, u in updates.items() if isinstance(c, gr.Dataset)]
    assert examples["visible"] is True  # free-text examples where the model lists no instructions
    updates = adapted(build(voice_instruct(), tmp_path / "v"), lang=lang)
    assert [u for c, u in updates.items() if isinstance(c, gr.Dataset)][0]["visible"] is False  # the picker instead


@pytest.mark.parametrize("engine, needs", [(voice_instruct, "voice"), (preset_instruct, "preset"),
                                           (lambda: FakeEngine(modes=(Mode.SFT,)), None)])
def test_the_public_api_says_what_instruct_takes(tmp_path: Path, engine, needs) -> None:
    from cosyvoice_ui.api.service import ApiService
    from cosyvoice_ui.ui.api_tools import Endpoints

    service = ApiService(fake_manager(engine()), Settings(voices_dir=tmp_path / "voices"))
    assert Endpoints(service, tmp_path / "out").voice_list()["instruct_needs"] == needs
