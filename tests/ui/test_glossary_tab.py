"""The Glossary tab and the output options' glossary choice, without a browser (a fake engine): the table editor
saves, opens, deletes, imports and exports glossaries; the preview reads a sentence as the loaded model will and
names the entries it cannot use; the chosen glossary reaches every tab's text before the check, the subtitles keep
the words as typed, and the dropdown follows the saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.glossary import GlossaryStore, make_glossary
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine, RecordingEngine
from cosyvoice_ui.types import Mode, SynthesisRequest

gr = pytest.importorskip("gradio")

from cosyvoice_ui.ui import strings  # noqa: E402
from cosyvoice_ui.ui.handlers import Handlers, OutputOptions  # noqa: E402
from cosyvoice_ui.ui.tabs.glossary import (edited_glossary, export_file, import_file, model_reads,  # noqa: E402
                                           preview_markdown, rows_of, save_edited, table_rows)

ROWS = [["Xi'an", "[x][ī][ān]", "Shee-ahn"], ["GIF", "[JH][IH1][F]", ""], ["Nguyen", "Win", ""], ["", "", ""]]


def manager_for(engine: FakeEngine) -> ModelManager:
    return ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                        describe_model=lambda model_id: engine.info)


def test_the_table_round_trips_through_the_store(tmp_path: Path) -> None:
    store = GlossaryStore(tmp_path)
    saved = save_edited(store, "", "Place names", ROWS, False)
    assert saved.id == "place-names" and store.ids() == ("place-names",)
    assert rows_of(store.get(saved.id)) == [row for row in ROWS if any(row)]  # the blank row is dropped
    again = save_edited(store, saved.id, "Places", ROWS[:1], True)  # the open glossary is saved over
    assert again.id == saved.id and store.get(saved.id).name == "Places" and store.get(saved.id).case_sensitive
    assert rows_of(None) == [["", "", ""]]


def test_table_values_of_every_shape_gradio_sends() -> None:
    assert table_rows({"data": [["a", None, "c", "extra"]], "headers": []}) == [["a", "", "c"]]
    assert table_rows(None) == []


def test_a_bad_row_is_refused_with_its_place_in_both_languages(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as info:
        save_edited(GlossaryStore(tmp_path), "", "Bad", [["ok", "fine", ""], ["给", "[zz9]", ""]], False)
    assert info.value.code == "glossary_bad_hint" and "row 2" in info.value.message
    assert strings.message(info.value, "zh").startswith("词表第 2 行（给）")
    with pytest.raises(InvalidRequest) as empty:
        save_edited(GlossaryStore(tmp_path), "", "Empty", [["", "", ""]], False)
    assert empty.value.code == "glossary_empty" and "词条" in strings.message(empty.value, "zh")


def test_export_then_import_gives_the_same_glossary(tmp_path: Path) -> None:
    glossary = edited_glossary("Names", ROWS, True)
    path = export_file(glossary, tmp_path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["name"] == "Names" and len(data["entries"]) == 3
    back = import_file(path)
    assert back.entries == glossary.entries and back.case_sensitive
    short = tmp_path / "brands.json"
    short.write_text(json.dumps({"Nguyen": "Win"}), encoding="utf-8")
    assert import_file(short).name == "brands"  # a bare {word: pronunciation} file is named after the file
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidRequest) as info:
        import_file(broken)
    assert info.value.code == "glossary_invalid_json"


def test_preview_with_a_loaded_model_and_without_one() -> None:
    glossary = edited_glossary("Names", ROWS, False)
    reads_hints = FakeEngine(pronunciation=("pinyin", "cmu"))
    # the reading is shown as text: Markdown's punctuation is backslash-escaped in the source
    loaded = preview_markdown(reads_hints, reads_hints.info, "We flew to Xi'an with a GIF.", glossary,
                              "en").replace("\\", "")
    assert "**How it will be read** (fake)" in loaded and "[x][ī][ān]" in loaded and "[JH][IH1][F]" in loaded
    plain = FakeEngine()  # reads no hints: the respelling, and GIF has none
    unloaded = preview_markdown(None, plain.info, "We flew to Xi'an with a GIF.", glossary, "en").replace("\\", "")
    assert "load a model" in unloaded and "Shee-ahn" in unloaded
    assert "**Not used on fake:** “GIF”" in unloaded
    assert "没有词表里的词" in preview_markdown(None, plain.info, "Nothing here.", glossary, "zh")
    assert preview_markdown(None, plain.info, "  ", glossary, "en") == ""


def test_the_tab_says_which_hints_the_model_reads() -> None:
    assert model_reads(FakeEngine(pronunciation=("pinyin", "cmu")).info, "en") == (
        "The loaded model (fake) reads: pinyin hints, CMU phone hints, respellings.")
    assert "只读改写读法" in model_reads(FakeEngine().info, "zh")
    assert model_reads(None, "en") == ""


def test_the_chosen_glossary_reaches_the_engine_and_the_subtitles_keep_the_words(tmp_path: Path) -> None:
    engine = RecordingEngine(pronunciation=("pinyin", "cmu"))
    handlers = Handlers(manager_for(engine), Settings(glossary_dir=tmp_path / "g"), tmp_path / "out")
    saved = handlers.glossaries.save(make_glossary("Names", ROWS[:3]))
    request = SynthesisRequest(Mode.SFT, text="Meet Nguyen in Xi'an.", speaker="A", seed=1)
    *_, (audio, path, subtitles, info, takes, history) = handlers.generate(
        request, OutputOptions(glossary=saved.id), [], None, None)
    assert engine.texts == ["Meet Win in [x][ī][ān]."]
    srt = next(p for p in subtitles if p.endswith(".srt"))
    assert "Meet Nguyen in Xi'an." in Path(srt).read_text(encoding="utf-8")
    assert history[0]["text"] == "Meet Nguyen in Xi'an."  # what the user typed


def test_no_glossary_leaves_the_text_alone_and_a_deleted_one_is_refused(tmp_path: Path) -> None:
    engine = RecordingEngine()
    handlers = Handlers(manager_for(engine), Settings(glossary_dir=tmp_path / "g"), tmp_path / "out")
    request = SynthesisRequest(Mode.SFT, text="Meet Nguyen.", speaker="A", seed=1)
    list(handlers.generate(request, OutputOptions(), [], None, None))
    assert engine.texts == ["Meet Nguyen."]
    with pytest.raises(InvalidRequest) as info:
        handlers.check(request, OutputOptions(glossary="gone"))
    assert info.value.code == "glossary_unknown" and "已保存词表" in strings.message(info.value, "zh")


def test_the_glossary_is_applied_before_the_length_check(tmp_path: Path) -> None:
    engine = RecordingEngine()
    handlers = Handlers(manager_for(engine), Settings(glossary_dir=tmp_path / "g", max_text_chars=20),
                        tmp_path / "out")
    saved = handlers.glossaries.save(make_glossary("Long", [["AI", "artificial intelligence", ""]]))
    request = SynthesisRequest(Mode.SFT, text="AI and AI.", speaker="A", seed=1)
    handlers.check(request)  # 10 characters as typed
    with pytest.raises(InvalidRequest) as info:
        handlers.check(request, OutputOptions(glossary=saved.id))
    assert info.value.code == "text_too_long"


# --- the tab's events in a built page ---------------------------------------------------------------------------

@pytest.fixture()
def app(tmp_path: Path):
    from cosyvoice_ui.ui.layout import build_ui

    engine = FakeEngine(pronunciation=("pinyin", "cmu"))
    return build_ui(manager_for(engine), Settings(glossary_dir=tmp_path / "g"), output_dir=tmp_path / "out")


def event(app, name: str):
    return next(fn for fn in app.fns.values() if fn.name == name)


def by_label(fn, key: str):
    return next(c for c in fn.inputs if getattr(getattr(c, "label", None), "key", "") == key)


def test_saving_refreshes_the_output_options_choice(app, tmp_path: Path) -> None:
    save = event(app, "save_it")
    assert all(fn.api_visibility == "private" for fn in app.fns.values() if fn.name in ("save_it", "delete_it"))
    options_choice = next(c for c in save.outputs if getattr(c.label, "key", "") == "glossary_choice")
    data = {c: c.value for c in save.inputs}
    data[by_label(save, "glossary_name")] = "Names"
    data[by_label(save, "glossary_table")] = ROWS
    saved_list, choice, table, status = save.fn(data)
    assert saved_list["value"] == "names" and ("Names", "names") in [tuple(c) for c in saved_list["choices"]]
    assert ("Names", "names") in [tuple(c) for c in choice["choices"]] and "value" not in choice
    assert status == "Glossary “Names” saved." and table == [row for row in ROWS if any(row)]
    assert save.outputs[1] is options_choice
    assert GlossaryStore(tmp_path / "g").ids() == ("names",)

    delete = event(app, "delete_it")
    data = {c: c.value for c in delete.inputs}
    data[next(c for c in delete.inputs if getattr(c.label, "key", "") == "glossary_saved_list")] = "names"
    data[options_choice] = "names"  # the deleted one was chosen: the choice falls back to none
    saved_list, choice, name, case, table, status = delete.fn(data)
    assert choice["value"] == "" and GlossaryStore(tmp_path / "g").ids() == ()


def test_the_page_load_lists_the_saved_glossaries(app, tmp_path: Path) -> None:
    GlossaryStore(tmp_path / "g").save(make_glossary("Brands", [["GIF", "Jif", ""]]))
    adapt = event(app, "adapt")
    updates = adapt.fn({c: c.value for c in adapt.inputs})
    choice = next(u for c, u in updates.items() if getattr(getattr(c, "label", None), "key", "") == "glossary_choice")
    assert ("Brands", "brands") in [tuple(c) for c in choice["choices"]]
