"""The Glossary tab: edit pronunciation glossaries (word → pinyin / CMU hint / respelling) in a table, keep them
on the server (`serving.glossary.GlossaryStore` under `--glossary-dir`), move them as JSON files, and try a
sentence to see how the loaded model will read it. The output options' glossary choice (`options.py`) applies a
saved one to every tab's text; it is refreshed here after each save and delete.

The work is done by the plain functions below (no Gradio), which the tests call directly.
"""

# No `from __future__ import annotations`: Gradio reads the handlers' annotations at runtime.
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import InvalidRequest
from ...files import write_atomic
from ...serving.glossary import (MAX_ENTRIES, MAX_FILE_BYTES, RESPELL, Glossary, GlossaryStore, applied, from_json, make_glossary, preview,
                                 to_json)
from ...types import EngineInfo
from .. import strings
from ..page import Page
from ..markup import plain, plain_html

COLUMNS = 3  # word, pronunciation, respelling
HEADERS = ("Word · 词", "Pronunciation · 读音", "Respelling · 改写读法")
EMPTY_ROWS = [["", "", ""]]


@dataclass(frozen=True)
class GlossaryTab:
    saved: object
    name: object
    case: object
    table: object
    reads: object  # which hint kinds the loaded model reads
    lang: object

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        lang = strings.language_of(data.get(self.lang)) if data else "en"
        return {self.reads: gr.update(value=model_reads(info, lang))}


# --- the work (no Gradio) -------------------------------------------------------------------------------------

def rows_of(glossary: Glossary | None) -> list[list[str]]:
    """The table rows of a glossary: [word, pronunciation, respelling] (one empty row for an empty one)."""
    if glossary is None or not glossary.entries:
        return [list(row) for row in EMPTY_ROWS]
    return [[e.word, e.pronunciation, e.respell if e.kind != RESPELL else ""] for e in glossary.entries]


def table_rows(value) -> list[list[str]]:
    """A gr.Dataframe value (rows, a {"data": rows} dict or a pandas frame) → rows of strings."""
    if value is None:
        return []
    if isinstance(value, dict):
        value = value.get("data") or []
    if hasattr(value, "values") and hasattr(value, "columns"):  # a pandas DataFrame
        value = value.values.tolist()
    return [["" if cell is None else str(cell) for cell in list(row)[:COLUMNS]] for row in value]


def with_row_added(value) -> list[list[str]]:
    """The table with one empty row at the end; InvalidRequest once it has as many rows as a glossary holds."""
    rows = table_rows(value)
    if len(rows) >= MAX_ENTRIES:
        raise InvalidRequest("glossary_too_many", f"a glossary holds at most {MAX_ENTRIES} entries; split it "
                             "into several glossaries", limit=MAX_ENTRIES)
    return [*rows, ["", "", ""]]


def with_last_row_removed(value) -> list[list[str]]:
    """The table without its last row (the only row is emptied instead: the table keeps one row to type in)."""
    rows = table_rows(value)[:-1]
    return rows or [list(row) for row in EMPTY_ROWS]


def refusal(reason: InvalidRequest | str, lang: str) -> str:
    """A refused edit as the status line's Markdown: the reason in the user's language, shown as text. The tab
    shows refusals there rather than raising gr.Error, which would cover the table and the list with error
    badges (they stay until the next event that updates them) and print a traceback on the server."""
    text = strings.message(reason, lang) if isinstance(reason, InvalidRequest) else reason
    return plain(text)


def edited_glossary(name: str, rows, case_sensitive: bool, glossary_id: str = "") -> Glossary:
    """The glossary the editor shows (checked: InvalidRequest names the bad row)."""
    return make_glossary(name, table_rows(rows), bool(case_sensitive), glossary_id or "")


def save_edited(store: GlossaryStore, glossary_id: str, name: str, rows, case_sensitive: bool) -> Glossary:
    """Save the editor's glossary over `glossary_id` (or as a new one when empty); returns it with its id."""
    glossary = edited_glossary(name, rows, case_sensitive, glossary_id)
    if not glossary.entries:
        raise InvalidRequest("glossary_empty", "the glossary has no entries; write a word and its pronunciation "
                             "in the table")
    return store.save(glossary)


def export_file(glossary: Glossary, folder: Path) -> Path:
    """The glossary as a JSON file in `folder` (for the download), named after its id or name."""
    stem = glossary.id or "".join(c if c.isalnum() or c in "-_" else "-" for c in glossary.name).strip("-")
    target = folder / f"{stem or 'glossary'}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_atomic(target, to_json(glossary).encode("utf-8"))
    return target


def import_file(path: str | Path) -> Glossary:
    """A glossary from an uploaded JSON file (any shape `from_json` reads); InvalidRequest when unreadable."""
    try:
        if Path(path).stat().st_size > MAX_FILE_BYTES:
            raise InvalidRequest("glossary_file_too_large", f"the glossary file is over {MAX_FILE_BYTES // 2**20} MB; "
                                 f"a glossary holds at most {MAX_ENTRIES} short entries", limit_mb=MAX_FILE_BYTES // 2**20)
        data = Path(path).read_bytes()
    except OSError:
        raise InvalidRequest("glossary_unreadable", "the uploaded glossary file cannot be read; upload it again",
                             file=Path(str(path)).name) from None
    glossary = from_json(data)
    if glossary.name in ("", "Glossary"):
        glossary = Glossary(glossary.id, Path(str(path)).stem, glossary.entries, glossary.case_sensitive)
    return glossary


def preview_markdown(engine, info: EngineInfo | None, text: str, glossary: Glossary, lang: str) -> str:
    """How `text` will be read with `glossary`: the loaded engine's own reading (its normalisation and
    segments) when one is loaded, else the glossary-applied text; then the entries this model cannot use."""
    if not (text or "").strip():
        return ""
    model = info.name if info is not None else "-"
    lines = preview(engine, text, glossary, info)
    head = strings.label("glossary_reading" if engine is not None else "glossary_reading_no_model", lang)
    parts = [head.format(model=plain(model)),
             "\n".join(f"{n}. {plain(line)}" for n, line in enumerate(lines, 1)) or "-"]
    outcome = applied(text, glossary, info)
    if outcome.skipped:
        words = ", ".join(f"“{plain(entry.word)}”" for entry, _ in outcome.skipped)
        parts.append(strings.label("glossary_skipped", lang).format(model=plain(model), words=words))
    elif not outcome.used:
        parts.append(strings.label("glossary_unused_none", lang))
    return "\n\n".join(parts)


def model_reads(info: EngineInfo | None, lang: str) -> str:
    """One line: which pronunciation kinds the loaded model reads (respellings always)."""
    if info is None:
        return ""
    kinds = [k for k in info.pronunciation if f"glossary_kind_{k}" in strings.LABELS_EN]
    if not kinds:
        return strings.label("glossary_model_reads_respell", lang).format(model=info.name)
    names = [strings.label(f"glossary_kind_{k}", lang) for k in (*kinds, RESPELL)]
    return strings.label("glossary_model_reads", lang).format(model=info.name,
                                                               kinds=("、" if lang == "zh" else ", ").join(names))


# --- the tab --------------------------------------------------------------------------------------------------

def build_glossary(page: Page) -> GlossaryTab:
    import gradio as gr

    t, options, store = page.t, page.options, page.handlers.glossaries
    exports = page.handlers.output_dir / "glossaries"
    with gr.Tab(t("tab_glossary"), id="glossary"):
        gr.Markdown(t("glossary_help"))
        reads = gr.Markdown(model_reads(page.manager.info(), "en"))
        with gr.Row():
            saved = gr.Dropdown(options.glossary_choices(), value="", label=t("glossary_saved_list"), scale=3)
            new = gr.Button(t("glossary_new"), scale=0, min_width=80)
            delete = gr.Button(t("glossary_delete"), variant="stop", scale=0, min_width=80)
        with gr.Row():
            name = gr.Textbox(label=t("glossary_name"), scale=3)
            case = gr.Checkbox(value=False, label=t("glossary_case"), scale=1)
        headers = list(HEADERS)  # table headers are plain text (gr.I18n does not reach them)
        # Fixed columns: the cell menu then offers row actions only (no "Delete column" to lose a column by).
        table = gr.Dataframe(value=[list(r) for r in EMPTY_ROWS], headers=headers, label=t("glossary_table"),
                             type="array", interactive=True, column_count=(COLUMNS, "fixed"),
                             row_count=1, datatype=["str"] * COLUMNS, wrap=True,
                             elem_id="glossary-table")
        with gr.Row():
            add_row = gr.Button(t("glossary_add_row"), size="sm", scale=0, min_width=120)
            remove_row = gr.Button(t("glossary_remove_row"), size="sm", scale=0, min_width=120)
        with gr.Row():
            save = gr.Button(t("glossary_save"), variant="primary")
            upload = gr.UploadButton(t("glossary_import"), file_types=[".json"], file_count="single")
            export = gr.Button(t("glossary_export"))
        status = gr.Markdown(elem_id="glossary-status")  # under Save: what was saved, or why not
        download = gr.File(label=t("glossary_export"), interactive=False, visible=False)
        with gr.Row():
            sentence = gr.Textbox(label=t("glossary_preview_text"), placeholder=t("glossary_preview_ph"), scale=4)
            try_it = gr.Button(t("glossary_preview"), scale=0, min_width=100)
        reading = gr.Markdown()

    def lang_of(data: dict) -> str:
        return options.language(data)

    def choices(value: str):
        return gr.update(choices=options.glossary_choices(), value=value)

    def open_saved(data: dict):
        glossary = store.get(data[saved]) if data[saved] else None
        if glossary is None:
            return "", False, rows_of(None), ""
        return glossary.name, glossary.case_sensitive, rows_of(glossary), ""

    def start_new():
        return "", "", False, rows_of(None), ""

    # A refused action changes nothing but the status line (gr.skip() keeps the table, its rows and the list).
    def add_one(data: dict):
        try:
            return with_row_added(data[table]), ""
        except InvalidRequest as exc:
            return gr.skip(), refusal(exc, lang_of(data))

    def remove_one(data: dict):
        return with_last_row_removed(data[table])

    def save_it(data: dict):
        lang = lang_of(data)
        try:
            glossary = save_edited(store, data[saved], data[name], data[table], data[case])
        except InvalidRequest as exc:
            return gr.skip(), gr.skip(), gr.skip(), refusal(exc, lang)
        message = strings.label("glossary_saved_msg", lang)
        gr.Info(message.format(name=plain_html(glossary.name)))
        return (choices(glossary.id), options.refreshed_glossaries(), rows_of(glossary),
                message.format(name=plain(glossary.name)))

    def delete_it(data: dict):
        lang = lang_of(data)
        glossary = store.get(data[saved]) if data[saved] else None
        if glossary is None:
            return *[gr.skip()] * 5, refusal(strings.label("glossary_pick_first", lang), lang)
        store.remove(glossary.id)
        chosen = data[options.glossary]
        message = strings.label("glossary_deleted_msg", lang).format(name=plain(glossary.name))
        return (choices(""), options.refreshed_glossaries("" if chosen == glossary.id else chosen), "", False,
                rows_of(None), message)

    def import_it(data: dict):
        try:
            glossary = import_file(data[upload])
        except InvalidRequest as exc:
            return *[gr.skip()] * 4, refusal(exc, lang_of(data))
        message = strings.label("glossary_imported_msg", lang_of(data)).format(count=len(glossary.entries))
        return "", glossary.name, glossary.case_sensitive, rows_of(glossary), message

    def export_it(data: dict):
        try:
            glossary = edited_glossary(data[name], data[table], data[case], data[saved])
        except InvalidRequest as exc:
            return gr.skip(), refusal(exc, lang_of(data))
        exports.mkdir(parents=True, exist_ok=True)
        return gr.update(value=str(export_file(glossary, exports)), visible=True), ""

    def try_sentence(data: dict):
        try:
            glossary = edited_glossary(data[name], data[table], data[case])
        except InvalidRequest as exc:
            return refusal(exc, lang_of(data))
        return preview_markdown(page.manager.loaded, page.manager.info(), data[sentence], glossary, lang_of(data))

    private = dict(api_visibility="private")
    lang = options.lang
    saved.input(open_saved, inputs={saved}, outputs=[name, case, table, status], **private)
    new.click(start_new, outputs=[saved, name, case, table, status], queue=False, **private)
    add_row.click(add_one, inputs={table, lang}, outputs=[table, status], queue=False, **private)
    remove_row.click(remove_one, inputs={table}, outputs=table, queue=False, **private)
    save.click(save_it, inputs={saved, name, table, case, lang}, outputs=[saved, options.glossary, table, status],
               **private)
    delete.click(delete_it, inputs={saved, options.glossary, lang},
                 outputs=[saved, options.glossary, name, case, table, status], **private)
    upload.upload(import_it, inputs={upload, lang}, outputs=[saved, name, case, table, status], **private)
    export.click(export_it, inputs={saved, name, table, case, lang}, outputs=[download, status], **private)
    preview_inputs = dict(inputs={name, table, case, sentence, lang}, outputs=reading, **private)
    try_it.click(try_sentence, **preview_inputs)
    sentence.submit(try_sentence, **preview_inputs)
    return GlossaryTab(saved, name, case, table, reads, lang)
