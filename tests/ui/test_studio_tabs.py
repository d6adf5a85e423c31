"""The Script and Audiobook tabs' widgets without a browser (a fake engine): their events stay private, the voice
rows fit the loaded model (presets only where it has them, instructions only where it follows them, clones only
where it clones), and opening a project fills one row per name with its voice."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode
from cosyvoice_ui.studio.workspace import VoiceRow
from cosyvoice_ui.ui.studio.voices import MAX_VOICES, kinds

gr = pytest.importorskip("gradio")


def manager_of(engine: FakeEngine) -> ModelManager:
    return ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                        describe_model=lambda model_id: engine.info)


def build_page_tabs(engine: FakeEngine, tmp_path: Path, *builders):
    """A page over `engine` with the tabs `builders` make (each called with the page): (demo, *their tabs)."""
    from cosyvoice_ui.ui import strings
    from cosyvoice_ui.ui.handlers import Handlers
    from cosyvoice_ui.ui.options import build_options
    from cosyvoice_ui.ui.page import Page
    from cosyvoice_ui.ui.saved_voices import SavedVoices

    manager = manager_of(engine)
    settings = Settings(projects_dir=tmp_path / "projects")
    t = strings.i18n()
    with gr.Blocks() as demo:
        page = Page(manager, settings, Handlers(manager, settings, tmp_path / "out"), t, True,
                    build_options(manager, t), SavedVoices(None, t))
        with gr.Tabs():
            tabs = [build(page) for build in builders]
    return (demo, *tabs)


def build_tabs(engine: FakeEngine, tmp_path: Path):
    from cosyvoice_ui.ui.studio.book_tab import build_book
    from cosyvoice_ui.ui.studio.script_tab import build_script

    return build_page_tabs(engine, tmp_path, build_script, build_book)


def choice_values(update: dict) -> list[str]:
    return [value for _, value in update["choices"]]


def test_the_voice_kinds_follow_the_model() -> None:
    sft = FakeEngine(modes=(Mode.SFT,), speakers=("A",)).info
    clone = FakeEngine(modes=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT), speakers=()).info
    assert kinds(sft, saved_enabled=True) == ["default", "preset"]
    assert kinds(clone, saved_enabled=True) == ["default", "saved", "sample"]
    assert kinds(clone, saved_enabled=False) == ["default", "sample"]


def test_the_studio_events_are_private_and_rows_adapt(tmp_path: Path) -> None:
    engine = FakeEngine(modes=(Mode.SFT, Mode.ZERO_SHOT), speakers=("A", "B"))
    demo, script, book = build_tabs(engine, tmp_path)
    assert not [fn for fn in demo.fns.values() if fn.api_visibility == "public"]
    assert len(script.voices.rows) == MAX_VOICES
    assert book.books.workspace is script.workspace  # one set of project locks and one voice memory per app
    assert script.workspace.speech is script.workspace.speech  # the app's one speech job for every tab
    no_presets = FakeEngine(modes=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT), speakers=()).info
    updates = script.adapt(no_presets, {})
    row = script.voices.rows[0]
    assert choice_values(updates[row.kind]) == ["default", "sample"]
    assert updates[row.instruct]["visible"] is True and updates[row.preset]["choices"] == []
    presets_only = FakeEngine(modes=(Mode.SFT,), speakers=("A", "B")).info
    updates = book.adapt(presets_only, {})
    assert choice_values(updates[book.voice.kind]) == ["default", "preset"]
    assert updates[book.voice.instruct]["visible"] is False


def test_opening_a_project_fills_one_row_per_name(tmp_path: Path) -> None:
    engine = FakeEngine(modes=(Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL), speakers=("A", "B"))
    _, script, _ = build_tabs(engine, tmp_path)
    project = script.workspace.save("", "Rows", "Alice: Hi.\nBob: Hello.", {"Bob": VoiceRow("preset", preset="B")})
    updates = script.voices.fill(project, engine.info, False, [""], "en")
    rows = script.voices.rows
    assert updates[script.voices.speakers] == ["Alice", "Bob"]
    assert updates[rows[0].group]["visible"] and updates[rows[1].group]["visible"]
    assert not updates[rows[2].group]["visible"]
    assert updates[rows[1].kind]["value"] == "preset" and updates[rows[1].preset]["value"] == "B"
    assert updates[rows[1].preset]["visible"] and not updates[rows[0].preset]["visible"]
    data = {component: None for component in script.voices.inputs}
    data[script.voices.speakers] = ["Alice", "Bob"]
    data[rows[1].kind], data[rows[1].preset] = "preset", "A"
    assert script.voices.values(data)["Bob"] == VoiceRow("preset", preset="A")


def event(demo, name: str):
    return next(fn for fn in demo.fns.values() if fn.name == name)


def values(fn, by: dict) -> dict:
    """A value for every input of `fn`: the ones in `by` (component → value), the others their defaults."""
    return {component: by.get(component, component.value) for component in fn.inputs}


def test_the_tab_events_render_and_export_a_script(tmp_path: Path) -> None:
    from types import SimpleNamespace

    engine = FakeEngine(modes=(Mode.SFT,), speakers=("A", "B"))
    demo, script, book = build_tabs(engine, tmp_path)
    request = SimpleNamespace(session_hash="test", headers={})
    create = event(demo, "create_project")
    shown = create.fn(values(create, by={script.new_name: "Tab test", script.script: "A: one.\nB: two."}))
    assert shown[script.current] == "Tab-test" and shown[script.voices.speakers] == ["A", "B"]
    render = event(demo, "render_lines")
    steps = list(render.fn(values(render, by={script.current: "Tab-test"}), request, None))
    assert steps[-1][1] == "Done: 2 line(s) rendered, 0 kept as they were."
    export = event(demo, "export_files")
    files, message = export.fn(values(export, by={script.current: "Tab-test"}))
    assert message == "Exported 3 file(s)."  # as the tab opens: mix, srt, vtt (stems are opt-in)
    assert sorted(Path(path).suffix for path in files) == [".srt", ".vtt", ".wav"]
    everything = ["mix", "stems_zip", "stems", "srt", "vtt"]
    files, message = export.fn(values(export, by={script.current: "Tab-test", script.parts: everything}))
    assert message == "Exported 6 file(s)."  # mix, zip, 2 stems, srt, vtt
    assert all(Path(path).is_file() for path in files)
    opening = event(demo, "open_project")
    with pytest.raises(gr.Error) as missing:
        opening.fn(values(opening, by={script.pick: "no-such-project"}))
    assert missing.value.message.startswith("There is no project called “no-such-project”")
    assert "/" not in missing.value.message  # no paths shown


def test_the_rows_follow_the_names_as_the_script_is_typed(tmp_path: Path) -> None:
    engine = FakeEngine(modes=(Mode.SFT, Mode.ZERO_SHOT), speakers=("A", "B", "C"))
    demo, script, _ = build_tabs(engine, tmp_path)
    script.workspace.save("", "Earlier", "Bob: Hi.\nAlice: Hello.", {"Bob": VoiceRow("preset", preset="C")})
    typed = event(demo, "names_changed")
    rows = script.voices.rows
    # Alice's row is shown with a preset chosen; then the script gains Bob (remembered) and loses nobody.
    data = values(typed, by={script.script: "Alice: Hi.\nBob: Hello.", script.voices.speakers: ["Alice"],
                             rows[0].kind: "preset", rows[0].preset: "B"})
    updates = typed.fn(data)
    assert updates[script.voices.speakers] == ["Alice", "Bob"]
    assert updates[rows[0].kind]["value"] == "preset" and updates[rows[0].preset]["value"] == "B"
    assert updates[rows[1].kind]["value"] == "preset" and updates[rows[1].preset]["value"] == "C"
    assert typed.fn(values(typed, by={script.script: "", script.voices.speakers: ["Alice"]})) == {}


def test_stop_ends_a_render_and_keeps_what_was_done(tmp_path: Path) -> None:
    import threading
    from types import SimpleNamespace

    engine = FakeEngine(modes=(Mode.SFT,), speakers=("A", "B"))
    demo, script, _ = build_tabs(engine, tmp_path)
    request = SimpleNamespace(session_hash="stopper", headers={})
    create = event(demo, "create_project")
    create.fn(values(create, by={script.new_name: "Stop me", script.script: "A: one.\nB: two."}))
    engine.release.clear()  # the first line waits inside the engine until Stop
    render = event(demo, "render_lines")
    outcome: dict = {}

    def rendering() -> None:
        try:
            outcome["steps"] = list(render.fn(values(render, by={script.current: "Stop-me"}), request, None))
        except gr.Error as exc:
            outcome["error"] = exc.message

    worker = threading.Thread(target=rendering)
    worker.start()
    assert engine.started.wait(10)
    stop = event(demo, "stop_render")
    stop.fn(values(stop, by={}), request)  # the page had no click id to send (a render without one): any Stop stops it
    worker.join(10)
    assert not worker.is_alive() and outcome.get("error") == "Stopped."
    engine.release.set()
    assert all(line.take is None for line in script.workspace.open("Stop-me").lines)
    steps = list(render.fn(values(render, by={script.current: "Stop-me"}), request, None))
    assert steps[-1][1] == "Done: 2 line(s) rendered, 0 kept as they were."
