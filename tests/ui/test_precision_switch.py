"""The options' precision radio: Stock / Fast / Extra fast with a line that says in plain words what each costs
and changes (the measured numbers; the jargon is the README's), set to the mode in effect (the default "auto" shown
as Fast on a CPU, Stock on a GPU), shown for every CosyVoice generation and hidden where a backend has no switch,
and a pick reloads the model through `set_load_options` with a message in the browser's language."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.cosyvoice.precision import PRECISIONS
from cosyvoice_ui.serving.backends import describe
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import LoadOptions, Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Precision
from cosyvoice_ui.ui import strings

gr = pytest.importorskip("gradio")


def manager_for(info, precision: str = "stock", device: str = "auto") -> ModelManager:
    engine = FakeEngine()
    return ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                        describe_model=lambda model_id: info,
                        load_options=LoadOptions(precision=precision, device=device))


def build(manager: ModelManager, tmp_path: Path):
    from cosyvoice_ui.ui.layout import build_ui

    return build_ui(manager, Settings(), output_dir=tmp_path / "out")


def radio_of(app):
    found = [b for b in app.blocks.values() if isinstance(b, gr.Radio)
             and getattr(b.label, "key", "") == "precision"]
    assert len(found) == 1
    return found[0]


def switch_of(app):
    (fn,) = [fn for fn in app.fns.values() if fn.name == "switch_precision"]
    return fn


def test_the_radio_offers_every_mode_with_its_label_and_help(tmp_path: Path) -> None:
    radio = radio_of(build(manager_for(FakeEngine(precision=Precision()).info, "fast"), tmp_path))
    assert [value for _, value in radio.choices] == list(PRECISIONS) == ["stock", "fast", "extra-fast"]
    assert radio.value == "fast" and radio.visible is True  # the manager's current mode
    keys = [label.key for label, _ in radio.choices]
    assert keys == ["precision_stock", "precision_fast", "precision_extra_fast"]
    assert {strings.LABELS_EN[k] for k in keys} == {"Stock", "Fast", "Extra fast"}
    assert radio.info.key == "precision_info"


@pytest.mark.parametrize(("device", "shown"), [("cpu", "fast"), ("cuda", "stock")])
def test_the_default_shows_the_mode_it_resolves_to(tmp_path: Path, device: str, shown: str) -> None:
    manager = manager_for(FakeEngine(precision=Precision()).info, "auto", device)
    assert radio_of(build(manager, tmp_path)).value == shown  # never "auto", which is no choice of the radio


def test_the_help_line_explains_each_mode_in_plain_words_in_both_languages() -> None:
    en, zh = strings.LABELS_EN["precision_info"], strings.LABELS_ZH["precision_info"]
    # One sentence per mode, in the radio's order, each with what it costs or changes
    starts = [en.index(f"{strings.LABELS_EN[k]}: ") for k in ("precision_stock", "precision_fast",
                                                               "precision_extra_fast")]
    assert starts == sorted(starts) and starts[0] == 0
    assert "reference numbers" in en and "3.5-7× faster on a CPU" in en and "than picking another seed" in en
    assert "the default on a CPU" in en and "the default on a GPU" in en and "third less time than Fast" in en
    zh_starts = [zh.index(f"{strings.LABELS_ZH[k]}：") for k in ("precision_stock", "precision_fast",
                                                               "precision_extra_fast")]
    assert zh_starts == sorted(zh_starts) and zh_starts[0] == 0
    assert "3.5–7 倍" in zh and "随机种子" in zh and "CPU 上默认使用" in zh and "GPU 上默认使用" in zh
    for jargon in ("int8", "int4", "bf16", "4-bit", "LLM", "CFG", "guidance", "flow", "vocoder", "diffusion"):
        assert jargon.lower() not in (en + zh).lower(), jargon  # the jargon lives in the README
    t = strings.i18n()  # the table the page is built with carries the same lines
    assert t.translations["en"]["precision_info"] == en and t.translations["zh-CN"]["precision_info"] == zh


@pytest.mark.parametrize("family", ["v1", "v2", "v3"])
def test_every_generation_gets_the_switch(request: pytest.FixtureRequest, family: str, tmp_path: Path) -> None:
    folder = request.getfixturevalue({"v1": "tiny_base", "v2": "tiny_v2", "v3": "tiny_v3"}[family])
    info = describe(str(folder))
    assert info.precision is not None
    app = build(manager_for(info), tmp_path)
    assert radio_of(app).visible is True


def test_a_backend_without_precision_hides_the_radio(tmp_path: Path) -> None:
    app = build(manager_for(FakeEngine().info), tmp_path)
    assert radio_of(app).visible is False


@pytest.mark.parametrize("lang", ["en-US", "zh-CN"])
def test_each_pick_reloads_with_that_mode_and_says_so(tmp_path: Path, monkeypatch, lang: str) -> None:
    manager = manager_for(FakeEngine(precision=Precision()).info)
    app = build(manager, tmp_path)
    switch = switch_of(app)
    assert switch.api_visibility == "private"
    radio = radio_of(app)
    lang_box = next(c for c in switch.inputs if c is not radio)
    shown, asked = [], []
    monkeypatch.setattr(gr, "Info", shown.append)
    real = manager.set_load_options
    monkeypatch.setattr(manager, "set_load_options", lambda **changes: asked.append(changes) or real(**changes))
    for mode in ("fast", "extra-fast", "extra-fast", "stock"):
        switch.fn({radio: mode, lang_box: lang})
        assert manager.load_options.precision == mode
    assert asked == [{"precision": m} for m in ("fast", "extra-fast", "extra-fast", "stock")]
    assert shown == [strings.label("precision_switched", lang[:2])] * 3  # picking the current mode says nothing


def test_a_value_that_is_no_mode_changes_nothing(tmp_path: Path) -> None:
    manager = manager_for(FakeEngine(precision=Precision()).info)
    app = build(manager, tmp_path)
    switch, radio = switch_of(app), radio_of(app)
    lang_box = next(c for c in switch.inputs if c is not radio)
    switch.fn({radio: "turbo", lang_box: "en"})
    assert manager.load_options.precision == "stock"
