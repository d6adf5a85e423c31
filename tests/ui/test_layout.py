"""The page's parts without a browser (a fake engine, no model): tab events take dict inputs and stay private,
validators mark the widget an error is about, the page adapts to what the model can do, and the example
recording for voice conversion is made through the manager's queue."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode

gr = pytest.importorskip("gradio")


def fake_manager(engine: FakeEngine) -> ModelManager:
    return ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                        describe_model=lambda model_id: engine.info)


@pytest.fixture()
def engine() -> FakeEngine:
    return FakeEngine(speakers=("A", "B", "C"))


@pytest.fixture()
def app(engine: FakeEngine, tmp_path: Path):
    from cosyvoice_ui.ui.layout import build_ui

    return build_ui(fake_manager(engine), Settings(), output_dir=tmp_path / "out")


def events(app, name: str) -> list:
    return [fn for fn in app.fns.values() if fn.name == name]


def label_key(component) -> str:
    return getattr(getattr(component, "label", None), "key", "")


def test_only_the_api_endpoints_are_public(app) -> None:
    from cosyvoice_ui.ui.api_tools import ENDPOINTS

    public = sorted(fn.api_name for fn in app.fns.values() if fn.api_visibility == "public")
    assert public == sorted(ENDPOINTS)


def test_api_jobs_wait_in_the_model_queue_not_behind_each_other(app) -> None:
    """The soak found Gradio API jobs admitted one at a time in front of the model queue: each waited for the
    whole REST queue once per Gradio job ahead of it. They go straight to the model queue (the manager's FIFO)."""
    from cosyvoice_ui.ui.api_tools import ENDPOINTS

    api = [fn for fn in app.fns.values() if fn.api_name in ENDPOINTS and fn.queue]
    assert api and all(fn.concurrency_limit is None for fn in api)
    assert not {fn.concurrency_id for fn in api} & {fn.concurrency_id for fn in app.fns.values()
                                                     if fn.api_name not in ENDPOINTS}


def test_every_generate_event_takes_one_dict_of_its_widgets(app) -> None:
    runs = events(app, "run")
    assert len(runs) == 6  # four Generate buttons, and the two example buttons' follow-up
    assert all(fn.inputs_as_dict for fn in runs)
    assert sum(fn.validator is not None for fn in runs) == 4


def _preset_run(app):
    return next(fn for fn in events(app, "run") if fn.validator is not None
                and {label_key(c) for c in fn.inputs} >= {"speaker", "text"} and len(fn.inputs) == 12)


def _values(fn, **by_key) -> dict:
    """A value for every input of `fn`: the named ones by their label key, the others their defaults."""
    data = {}
    for component in fn.inputs:
        key = label_key(component)
        data[component] = by_key[key] if key in by_key else component.value
    return data


@pytest.mark.parametrize("lang", ["en-US", "zh-CN"])
def test_the_validator_marks_the_widget_the_error_is_about(app, lang: str) -> None:
    fn = _preset_run(app)
    # the browser's language: the hidden box set to "en" (the other hidden box holds the click's id)
    lang_box = next(c for c in fn.inputs if isinstance(c, gr.Textbox) and not c.visible and c.value == "en")
    data = _values(fn, speaker="A", text="")
    data[lang_box] = lang
    verdicts = fn.validator(data)
    bad = {label_key(c): v["message"] for c, v in verdicts.items() if not v["is_valid"]}
    assert list(bad) == ["text"]
    assert ("合成文本为空" in bad["text"]) == lang.startswith("zh")
    assert all(v["is_valid"] for v in fn.validator(_values(fn, speaker="A", text="Hello there.")).values())


def test_a_generate_event_runs_its_dict_through_the_handlers(app, engine: FakeEngine) -> None:
    fn = _preset_run(app)
    *_, (audio, download, subtitles, info, _takes, history) = fn.fn(
        _values(fn, speaker="B", text="one two three", seed=5), None, None)
    rate, wave = audio
    # the download box appears with its file; the subtitle box only with cues in it
    assert download["visible"] is True and Path(download["value"]).is_file()
    assert subtitles["visible"] is bool(subtitles["value"])
    assert rate == engine.info.sample_rate and len(wave) > 0
    assert history[0]["voice"] == "B" and history[0]["seed"] == 5 and "seed 5" in info


def submode_of(adapt):
    """The cross tab's submode radio among the adapt event's inputs (the other is the browser's language)."""
    return next(c for c in adapt.inputs if label_key(c) == "submode")


def test_the_page_adapts_to_the_model_and_the_submode(app) -> None:
    adapt = events(app, "adapt")[0]
    submode = submode_of(adapt)
    shown = {label_key(c): u for c, u in adapt.fn({submode: "instruct"}).items() if isinstance(u, dict)}
    assert shown["instruct_text"]["visible"] is True and shown["prompt_audio"]["visible"] is False
    hidden = {label_key(c): u for c, u in adapt.fn({submode: "cross"}).items()}
    assert hidden["instruct_text"]["visible"] is False and hidden["prompt_audio"]["visible"] is True
    assert hidden["precision"]["visible"] is False  # the fake engine has no precision switch


def test_a_model_without_instructions_says_so(tmp_path: Path) -> None:
    from cosyvoice_ui.ui.layout import build_ui

    engine = FakeEngine(modes=(Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL))
    app = build_ui(fake_manager(engine), Settings(), output_dir=tmp_path)
    adapt = events(app, "adapt")[0]
    updates = adapt.fn({submode_of(adapt): "instruct"})
    note = next(c for c in updates if isinstance(c, gr.Markdown) and "instruct_unavailable" in str(c.value))
    assert updates[note]["visible"] is True
    assert not any(label_key(c) == "instruct_text" and u["visible"] for c, u in updates.items())


def test_the_conversion_example_is_recorded_through_the_manager_queue(engine: FakeEngine, tmp_path: Path) -> None:
    from cosyvoice_ui.ui.examples import example_source, source_available, source_speaker

    manager = fake_manager(engine)
    jobs = []
    job = manager.job

    def counted(*args, **kwargs):
        jobs.append(1)
        return job(*args, **kwargs)

    manager.job = counted
    assert source_speaker(engine.info) == "B"  # a preset other than the default one
    path = example_source(tmp_path, manager)
    assert path and Path(path).is_file() and jobs == [1] and engine.calls == 1
    assert example_source(tmp_path, manager) == path and engine.calls == 1  # recorded once, then reused
    assert source_available(None, tmp_path)


def test_a_model_without_two_presets_cannot_record_the_example(tmp_path: Path) -> None:
    from cosyvoice_ui.ui.examples import example_source, source_available

    engine = FakeEngine(modes=(Mode.ZERO_SHOT, Mode.VC), speakers=())
    manager = fake_manager(engine)
    assert not source_available(engine.info, tmp_path)
    assert example_source(tmp_path, manager) is None and engine.calls == 0


def test_the_no_model_notice_needs_nothing_to_choose_and_nothing_to_run() -> None:
    from cosyvoice_ui.ui.notices import nothing_installed

    def manager(n: int):
        return SimpleNamespace(choices=lambda: [object()] * n)

    assert nothing_installed(manager(1), None)
    assert not nothing_installed(manager(2), None)  # a folder that fails to load shows its error instead
    assert not nothing_installed(manager(1), FakeEngine().info)
