"""The options' precision radio: Stock / Fast / Extra fast with a line that says what each changes (the fast
step count read from `settings_for`), shown for every CosyVoice generation and hidden where a backend has no
switch, and a pick reloads the model through `set_load_options` with a message in the browser's language."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.cosyvoice.precision import PRECISIONS, settings_for
from cosyvoice_ui.serving.backends import describe
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import LoadOptions, Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Precision
from cosyvoice_ui.ui import strings

gr = pytest.importorskip("gradio")


def manager_for(info, precision: str = "stock") -> ModelManager:
    engine = FakeEngine()
    return ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                        describe_model=lambda model_id: info, load_options=LoadOptions(precision=precision))


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


def test_the_help_line_names_the_fast_step_count_in_both_languages() -> None:
    steps = settings_for("fast").n_timesteps
    en, zh = strings.filled(strings.LABELS_EN)["precision_info"], strings.filled(strings.LABELS_ZH)["precision_info"]
    assert f"fewer diffusion steps ({steps})" in en and f"（{steps} 步）" in zh
    for words in ("upstream's numbers", "int8 LLM", "bf16", "shorter flow prompt", "a quarter",
                  "classifier-free guidance", "4-bit LLM", "opt-in"):
        assert words in en, words
    assert "无分类器引导" in zh and "{" not in en + zh
    t = strings.i18n()  # the table the page is built with has the number in place
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
