"""The Audiobook tab (issue 15): an EPUB, TXT or Markdown book read aloud by one voice, chapter by chapter,
with progress and an ETA; Stop keeps what is done, and Start (or Resume after a restart) continues it. Outputs:
one file and one SRT per chapter, and the whole book as M4B or MP3 with chapter marks.

The widgets live here; the work is `studio/books.py` (a `Bookshelf` beside the Script tab's workspace).
"""

# No `from __future__ import annotations`: Gradio finds `request: gr.Request` by its evaluated annotation.
from dataclasses import dataclass

from ...studio.book import BOOK_EXTENSIONS
from ...studio.books import Bookshelf, chapter_rows
from ...studio.chapters import BOOK_FORMATS
from ...types import EngineInfo
from .. import clicks, strings
from ..markup import MARKDOWN_OPTIONS, plain
from ..page import Page
from .events import chosen_options, guarded, live, option_inputs, workspace_for
from .voices import VoiceRowWidgets, build_voice_row


@dataclass(frozen=True)
class BookTab:
    books: Bookshelf
    unfinished: object
    resume: object
    file: object
    chapters: object
    voice: VoiceRowWidgets
    book_format: object
    start: object
    stop: object
    status: object
    outputs: object
    t: object
    saved_enabled: bool

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        return self.voice.adapt(info, self.t, self.saved_enabled)


def unfinished_choices(books: Bookshelf, lang: str) -> list[tuple[str, str]]:
    return [(strings.label("book_resume_row", lang).format(title=job.title, finished=job.finished), job.folder)
            for job in books.unfinished()]


def chapters_markdown(book, lang: str) -> str:
    """The chapters found, as Markdown: the book's own words (title, author, chapter titles) shown as text."""
    rows = [strings.label("book_chapter_row", lang).format(number=n, title=plain(title), chars=chars)
            for n, title, chars in chapter_rows(book)]
    head = f"#### {plain(book.title)}" + (f" — {plain(book.author)}" if book.author else "")
    return "\n".join([head, "", *rows])  # the rows start "1. ": an ordered list


def build_book(page: Page) -> BookTab:
    import gradio as gr

    t = page.t
    options = page.options
    books = Bookshelf(workspace_for(page))
    with gr.Tab(t("tab_book"), id="book") as tab:
        waiting = unfinished_choices(books, "en")  # jobs a restart (or Stop) left: offered for resuming
        with gr.Row(equal_height=True, visible=bool(waiting)) as resume_row:
            unfinished = gr.Dropdown(waiting, value=waiting[0][1] if waiting else None, label=t("book_unfinished"),
                                     scale=3, allow_custom_value=True)
            resume = gr.Button(t("book_resume"), scale=1)
        file = gr.File(label=t("book_file"), file_types=list(BOOK_EXTENSIONS), type="filepath")
        chapters = gr.Markdown(t("book_none"), elem_classes=["book-chapters"], **MARKDOWN_OPTIONS)
        with gr.Accordion(t("book_voice"), open=True):
            voice = build_voice_row(page, show_name=False)
        book_format = gr.Radio(list(BOOK_FORMATS), value="m4b", label=t("book_format"))
        with gr.Row():
            start = gr.Button(t("book_start"), variant="primary")
            stop = gr.Button(t("stop"), variant="stop")
        click = clicks.field()
        status = gr.Markdown(elem_classes=["book-status"], **MARKDOWN_OPTIONS)
        outputs = gr.File(label=t("book_outputs"), file_count="multiple", interactive=False)

    def offered(lang: str) -> tuple:
        """The unfinished jobs' dropdown and its row (hidden when there are none)."""
        choices = unfinished_choices(books, lang)
        return (gr.update(choices=choices, value=choices[0][1] if choices else None),
                gr.update(visible=bool(choices)))

    def show_chapters(path, lang_value):
        lang = strings.language_of(lang_value)
        if not path:
            return strings.label("book_none", lang)
        return chapters_markdown(guarded(lang, lambda: books.read(path)), lang)

    def finished(result, lang: str):
        files = [result.book_file, *result.chapter_files, *result.subtitle_files]
        text = strings.label("book_done", lang).format(chapters=len(result.chapter_files),
                                                       minutes=result.seconds / 60, rendered=result.rendered,
                                                       reused=result.reused)
        return [str(path) for path in files], text, *offered(lang)

    def run_book(work, data: dict, request, progress):
        lang = options.language(data)
        chosen = chosen_options(page, data, request, "book")
        for kind, value in live(page, request, progress, lang, lambda report, cancel: work(chosen, report, cancel),
                                click=data[click]):
            if kind == "status":
                yield gr.skip(), value, gr.skip(), gr.skip()
            else:
                yield finished(value, lang)

    def start_book(data: dict, request: gr.Request, progress=gr.Progress()):
        row = voice.value(data)
        yield from run_book(lambda chosen, report, cancel: books.start(
            data[file], row, data[book_format], chosen, report, cancel), data, request, progress)

    def resume_book(data: dict, request: gr.Request, progress=gr.Progress()):
        yield from run_book(lambda chosen, report, cancel: books.resume(
            data[unfinished], chosen, report, cancel), data, request, progress)

    def stop_book(data: dict, request: gr.Request) -> None:
        page.handlers.stop(request, data[click])

    private = dict(api_visibility="private")
    job = dict(outputs=[outputs, status, unfinished, resume_row], concurrency_limit=page.settings.concurrency,
               concurrency_id="synthesis", **private)
    common = option_inputs(page)
    file.change(show_chapters, inputs=[file, options.lang], outputs=chapters, **private)
    starting_inputs, resuming_inputs = {file, book_format, click, *voice.inputs, *common}, {unfinished, click, *common}
    starting = start.click(start_book, inputs=starting_inputs, js=clicks.making(starting_inputs, click), **job)
    resuming = resume.click(resume_book, inputs=resuming_inputs, js=clicks.making(resuming_inputs, click), **job)
    stop.click(stop_book, inputs={click}, js=clicks.sending({click}, click), cancels=[starting, resuming],
               queue=False, **private)
    tab.select(lambda lang: offered(strings.language_of(lang)), inputs=options.lang, outputs=[unfinished, resume_row],
               queue=False, **private)
    return BookTab(books, unfinished, resume, file, chapters, voice, book_format, start, stop, status, outputs, t,
                   page.saved.enabled)
