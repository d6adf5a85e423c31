"""The Glossary tab's editor cannot trap its user (issue 25): rows come from buttons under the table, the columns
are fixed, and a refused action (an empty table, a bad row, a store that is full, no glossary picked) is a line
in the status under Save, in the user's language, while the table keeps its rows and stays editable. The tab's
events never raise gr.Error, which would cover the table and the saved list with "Error" badges and print a
traceback on the server. Then the same in Chromium on the real app: an empty save, a row added with the button,
typed into and saved."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.glossary import MAX_ENTRIES, GlossaryStore, make_glossary
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine

gr = pytest.importorskip("gradio")

from cosyvoice_ui.ui import strings  # noqa: E402
from cosyvoice_ui.ui.tabs.glossary import refusal, with_last_row_removed, with_row_added  # noqa: E402

SKIP = {"__type__": "update"}  # gr.skip(): the output is left as the browser has it
EMPTY_EN = "The glossary has no entries; write a word and its pronunciation in the table"
EMPTY_ZH = "词表中还没有词条：请在表格中填写词和它的读音。"


# --- the row buttons' work ----------------------------------------------------------------------------------------

def test_a_row_is_added_at_the_end_up_to_what_a_glossary_holds() -> None:
    assert with_row_added([["Nguyen", "Win", None]]) == [["Nguyen", "Win", ""], ["", "", ""]]
    assert with_row_added(None) == [["", "", ""]]
    assert with_row_added({"data": [["a", "b", "c"]], "headers": []}) == [["a", "b", "c"], ["", "", ""]]
    full = [["w", "p", ""]] * MAX_ENTRIES
    assert len(with_row_added(full[1:])) == MAX_ENTRIES
    with pytest.raises(InvalidRequest) as info:
        with_row_added(full)
    assert info.value.code == "glossary_too_many" and str(MAX_ENTRIES) in strings.message(info.value, "zh")


def test_the_last_row_is_removed_and_one_row_always_stays() -> None:
    assert with_last_row_removed([["a", "b", ""], ["c", "d", ""]]) == [["a", "b", ""]]
    assert with_last_row_removed([["a", "b", ""]]) == [["", "", ""]]
    assert with_last_row_removed([]) == [["", "", ""]]


def test_a_refusal_is_plain_text_in_the_users_language() -> None:
    exc = InvalidRequest("glossary_empty", "the glossary has no entries; write a word and its pronunciation "
                         "in the table")
    assert refusal(exc, "en") == EMPTY_EN
    assert refusal(exc, "zh") == EMPTY_ZH
    assert refusal("**Bold** <b>", "en") == "\\*\\*Bold\\*\\* &lt;b&gt;"  # text, not Markdown or HTML


def test_the_table_label_names_the_button_it_has() -> None:
    for lang in ("en", "zh"):
        label = strings.label("glossary_table", lang)
        assert "+" not in label and strings.label("glossary_add_row", lang) in label


# --- the tab's events in a built page -----------------------------------------------------------------------------

def build(tmp_path: Path, **settings):
    from cosyvoice_ui.ui.layout import build_ui

    engine = FakeEngine(pronunciation=("pinyin", "cmu"))
    manager = ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda model_id: engine.info)
    return build_ui(manager, Settings(glossary_dir=tmp_path / "g", **settings), output_dir=tmp_path / "out")


@pytest.fixture()
def app(tmp_path: Path):
    return build(tmp_path)


def event(app, name: str):
    return next(fn for fn in app.fns.values() if fn.name == name)


def key_of(component) -> str:
    return getattr(getattr(component, "label", None), "key", "")


def inputs(fn, lang: str = "en", **by_key) -> dict:
    """The event's input values: each component's default, `by_key` by label key, the browser's language."""
    data = {c: c.value for c in fn.inputs}
    data.update({c: by_key[key_of(c)] for c in fn.inputs if key_of(c) in by_key})
    # options.lang: the hidden textbox the page load fills with the browser's Accept-Language
    languages = [c for c in fn.inputs if isinstance(c, gr.Textbox) and c.visible is False and c.value == "en"]
    assert len(languages) <= 1
    data.update({c: "zh-CN,zh;q=0.9" if lang == "zh" else "en-US,en;q=0.9" for c in languages})
    return data


def keys(components) -> list[str]:
    return [key_of(c) for c in components]


def test_the_table_has_fixed_columns_and_row_buttons(app) -> None:
    table = next(b for b in app.blocks.values() if key_of(b) == "glossary_table")
    assert table.column_count == (3, "fixed")
    add, remove = event(app, "add_one"), event(app, "remove_one")
    assert keys(add.outputs) == ["glossary_table", ""] and keys(remove.outputs) == ["glossary_table"]
    buttons = " ".join(str(b.value) for b in app.blocks.values() if isinstance(b, gr.Button))  # I18n markers
    assert '"glossary_add_row"' in buttons and '"glossary_remove_row"' in buttons


@pytest.mark.parametrize("lang, expected", [("en", EMPTY_EN), ("zh", EMPTY_ZH)])
def test_saving_an_empty_table_is_a_message_and_keeps_the_table(app, tmp_path: Path, lang: str,
                                                                 expected: str) -> None:
    save = event(app, "save_it")
    assert keys(save.outputs)[:3] == ["glossary_saved_list", "glossary_choice", "glossary_table"]
    data = inputs(save, lang, glossary_name="Empty", glossary_table=[["", "", ""], ["", "", ""]])
    saved_list, choice, table, status = save.fn(data)  # returns: no gr.Error, so no badge and no traceback
    assert (saved_list, choice, table) == (SKIP, SKIP, SKIP)  # the rows the user has stay as they are
    assert status == expected
    assert GlossaryStore(tmp_path / "g").ids() == ()


def test_a_bad_row_is_named_and_the_rows_stay(app) -> None:
    save = event(app, "save_it")
    rows = [["ok", "fine", ""], ["给", "[zz9]", ""]]
    *kept, status = save.fn(inputs(save, "zh", glossary_name="Bad", glossary_table=rows))
    assert kept == [SKIP] * 3 and status.startswith("词表第 2 行（给）")
    # ...and once the row is fixed it saves, and the status says so
    rows[1] = ["给", "[g][ěi]", ""]
    saved_list, choice, table, status = save.fn(inputs(save, "en", glossary_name="Fixed", glossary_table=rows))
    assert saved_list["value"] == "fixed" and table == rows and status == "Glossary “Fixed” saved."


def test_a_full_store_is_a_message(tmp_path: Path) -> None:
    app = build(tmp_path, max_glossaries=1)
    GlossaryStore(tmp_path / "g").save(make_glossary("One", {"a": "b"}))
    save = event(app, "save_it")
    *kept, status = save.fn(inputs(save, "zh", glossary_name="Two", glossary_table=[["c", "d", ""]]))
    assert kept == [SKIP] * 3 and "最多保存 1 个词表" in status
    assert GlossaryStore(tmp_path / "g").ids() == ("one",)


def test_the_add_row_button_adds_one_or_says_why_not(app) -> None:
    add = event(app, "add_one")
    rows = [["Nguyen", "Win", ""]]
    table, status = add.fn(inputs(add, glossary_table=rows))
    assert table == [["Nguyen", "Win", ""], ["", "", ""]] and status == ""
    table, status = add.fn(inputs(add, "zh", glossary_table=[["w", "p", ""]] * MAX_ENTRIES))
    assert table == SKIP and status == f"一个词表最多 {MAX_ENTRIES} 个词条；请拆分为多个词表。"


def test_the_remove_row_button_drops_the_last_row(app) -> None:
    remove = event(app, "remove_one")
    assert remove.fn(inputs(remove, glossary_table=[["a", "b", ""], ["", "", ""]])) == [["a", "b", ""]]
    assert remove.fn(inputs(remove, glossary_table=[["a", "b", ""]])) == [["", "", ""]]


def test_delete_export_and_preview_refusals_are_messages(app) -> None:
    delete = event(app, "delete_it")
    *kept, status = delete.fn(inputs(delete, "zh"))  # no saved glossary picked
    assert kept == [SKIP] * 5 and status == "请先选择一个已保存的词表。"
    bad = [["给", "[zz9]", ""]]
    export = event(app, "export_it")
    download, status = export.fn(inputs(export, glossary_table=bad))
    assert download == SKIP and status.startswith("Glossary row 1")
    preview = event(app, "try_sentence")
    reading = preview.fn(inputs(preview, "zh", glossary_table=bad, glossary_preview_text="给我"))
    assert reading.startswith("词表第 1 行")



# --- in Chromium, on the real app -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def offline_app(tmp_path_factory):
    """The app with an empty models folder (the offline default voice): the glossary editor needs no model.
    Yields its URL and its working folder (glossaries/ and app.log are there)."""
    from .test_browser import _serve

    work = tmp_path_factory.mktemp("glossary-app")
    (work / "models").mkdir()
    for url in _serve(work, "--models-dir", str(work / "models")):
        yield url, work


@pytest.mark.browser
@pytest.mark.slow
def test_an_empty_save_does_not_lock_the_table_and_a_typed_row_saves(offline_app) -> None:
    from playwright.sync_api import sync_playwright

    from .test_browser import CHROMIUM, FLAGS, open_app

    url, work = offline_app
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1000}).new_page()
        open_app(page, url)
        page.get_by_role("tab", name="Glossary").click()
        table, status = page.locator("#glossary-table"), page.locator("#glossary-status")
        badges = page.locator("[data-testid=status-tracker]", has_text="Error")

        page.get_by_role("button", name="Save glossary").click()
        status.get_by_text(EMPTY_EN).wait_for(timeout=15_000)
        page.wait_for_timeout(500)  # a badge would have been drawn with the message
        assert badges.count() == 0, "an error badge covers a widget after an empty save"

        # The cell menu offers rows only: no column to add or lose.
        first = table.locator("[data-testid=cell-0-0]")
        first.click()
        first.get_by_role("button", name="Open cell menu").click()
        menu = page.get_by_role("menu").first
        menu.wait_for(timeout=5_000)
        assert "row" in menu.inner_text().lower() and "column" not in menu.inner_text().lower()
        page.keyboard.press("Escape")

        page.get_by_label("Name", exact=True).fill("Names")
        page.get_by_role("button", name="Add row").click()
        added = table.locator("[data-testid=cell-1-0]")
        added.wait_for(timeout=10_000)
        for col, text in ((0, "Nguyen"), (2, "Win")):  # a double click opens the cell's editor
            cell = table.locator(f"[data-testid=cell-1-{col}]")
            cell.dblclick()
            cell.locator("textarea").fill(text)
            page.keyboard.press("Enter")
        page.get_by_role("button", name="Save glossary").click()
        status.get_by_text("Glossary “Names” saved.").wait_for(timeout=15_000)
        assert badges.count() == 0
        assert table.locator("[data-testid=cell-0-0]").inner_text().strip() == "Nguyen"  # the blank row dropped
        browser.close()

    saved = GlossaryStore(work / "glossaries").get("names")
    assert saved is not None
    assert [(e.word, e.pronunciation, e.kind) for e in saved.entries] == [("Nguyen", "Win", "respell")]
    # Gradio prints a raised error's traceback (stderr, unbuffered) before the browser hears of it.
    log = (work / "app.log").read_text()
    assert "Traceback" not in log and "no entries" not in log, log[-2000:]
