"""The Script tab's list of lines, drawn with `@gr.render` from the project on disk, one compact row each: the
take's info (seed, seconds, attempts, check) over its text to edit, the take (play), and beside them Regenerate
(a new seed), render the edited text, Lock / Unlock and the take picker (a line not rendered yet offers only to
render it). Any change bumps `revision`, which redraws the list.
"""

# No `from __future__ import annotations`: Gradio finds `request: gr.Request` by its evaluated annotation.
import time

from ...errors import InvalidRequest
from .. import strings
from ..markup import MARKDOWN_OPTIONS, plain
from .events import chosen_options, guarded, live, option_inputs

PAGE_SIZE = 20


def take_info(line, lang: str) -> str:
    """"take 2 · seed 123 · 1.84 s · 1 attempt(s) · check: ok" (or "not rendered yet"), and the lock."""
    take = line.take
    if take is None:
        text = strings.label("studio_not_rendered", lang)
    else:
        text = strings.label("studio_take_info", lang).format(number=take.number, seed=take.seed,
                                                              seconds=take.seconds, attempts=take.attempts,
                                                              check=check_text(take.check, lang))
    return text + (f" · {strings.label('studio_locked', lang)}" if line.locked else "")


def check_text(check: dict, lang: str) -> str:
    if not check:
        return strings.label("studio_check_none", lang)
    if check.get("ok", True):
        return strings.label("studio_check_ok", lang)
    reasons = [strings.label(f"studio_reason_{r}", lang) if f"studio_reason_{r}" in strings.LABELS_EN else str(r)
               for r in check.get("reasons", [])]
    return strings.label("studio_check_bad", lang).format(reasons=", ".join(reasons) or "?")


def build_lines(page, workspace, current, revision, status) -> None:
    """The list under the Script tab's buttons; `current` (the open project's folder) and `revision` (bumped by
    every change) redraw it."""
    import gradio as gr

    t = page.t
    options = page.options
    page_no = gr.State(0)
    shared = dict(outputs=[revision, status], api_visibility="private")
    synthesis = dict(concurrency_limit=page.settings.concurrency, concurrency_id="synthesis")
    inputs = option_inputs(page)

    def regenerate_event(folder: str, line_id: str, textbox=None):
        def regenerate(data: dict, request: gr.Request, progress=gr.Progress()):
            lang = options.language(data)
            text = data[textbox] if textbox is not None else None
            chosen = chosen_options(page, data, request)
            for kind, value in live(page, request, progress, lang, lambda report, cancel: workspace.regenerate(
                    folder, line_id, text, chosen, report, cancel)):
                if kind == "status":
                    yield gr.skip(), value
                else:
                    position = _position(workspace, folder, line_id)
                    yield time.time_ns(), strings.label("studio_line_done", lang).format(position=position,
                                                                                         number=value.number)
        return regenerate

    def lock_event(folder: str, line_id: str, on: bool):
        def lock(data: dict):
            lang = options.language(data)
            guarded(lang, lambda: workspace.set_lock(folder, line_id, on))
            return time.time_ns(), gr.skip()
        return lock

    def choose_event(folder: str, line_id: str, picker):
        def choose(data: dict):
            lang = options.language(data)
            guarded(lang, lambda: workspace.choose(folder, line_id, int(data[picker])))
            return time.time_ns(), gr.skip()
        return choose

    @gr.render(inputs=[current, revision, page_no, options.lang])
    def draw(folder, _revision, page_index, browser_lang):
        lang = strings.language_of(browser_lang)
        if not folder:
            gr.Markdown(strings.label("studio_no_project", lang))
            return
        try:
            project = workspace.open(folder)
        except InvalidRequest as exc:
            gr.Markdown(plain(strings.message(exc, lang)), **MARKDOWN_OPTIONS)
            return
        pages = max(1, -(-len(project.lines) // PAGE_SIZE))
        index = min(max(0, int(page_index or 0)), pages - 1)
        first = index * PAGE_SIZE
        for position, line in enumerate(project.lines[first:first + PAGE_SIZE], start=first + 1):
            take = line.take
            path = project.take_path(take) if take is not None else None
            heard = path is not None and path.is_file()
            # One row per line (its words, its take, its buttons side by side): five lines fit a screen. A line
            # without a take has no player and nothing to regenerate or lock, only "render".
            with gr.Group(elem_classes=["studio-line", f"studio-line-{line.id}"]):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3, min_width=240):
                        gr.Markdown(f"**{position}. {plain(line.speaker)}** · {plain(take_info(line, lang))}",
                                    elem_classes=["studio-line-info"], **MARKDOWN_OPTIONS)
                        text = gr.Textbox(line.text, show_label=False, lines=1, interactive=not line.locked,
                                          elem_classes=["studio-line-text"])
                    if heard:
                        gr.Audio(value=str(path), type="filepath", interactive=False, show_label=False, scale=2,
                                 elem_classes=["studio-take"])
                    with gr.Column(scale=0, min_width=180):
                        if take is not None:
                            regen = gr.Button(t("studio_regenerate"), size="sm", interactive=not line.locked,
                                              elem_classes=["studio-regenerate"])
                            regen.click(regenerate_event(folder, line.id), inputs=inputs, **shared, **synthesis)
                        edit = gr.Button(t("studio_rerender"), size="sm", interactive=not line.locked,
                                         elem_classes=["studio-rerender"])
                        edit.click(regenerate_event(folder, line.id, text), inputs={text, *inputs}, **shared,
                                   **synthesis)
                        if take is not None:
                            lock = gr.Button(t("studio_unlock" if line.locked else "studio_lock"), size="sm",
                                             elem_classes=["studio-lock"])
                            lock.click(lock_event(folder, line.id, not line.locked), inputs=inputs, **shared)
                        if len(line.takes) > 1:
                            word = strings.label("studio_take_pick", lang)
                            picker = gr.Dropdown([(f"{word} {x.number}", str(x.number)) for x in line.takes],
                                                 value=str(line.chosen), show_label=False, container=False,
                                                 interactive=not line.locked, min_width=100,
                                                 elem_classes=["studio-take-pick"])
                            picker.input(choose_event(folder, line.id, picker), inputs={picker, *inputs}, **shared)
        if pages > 1:
            chooser = gr.Radio([str(n) for n in range(1, pages + 1)], value=str(index + 1), label=t("studio_page"))
            chooser.input(lambda value: int(value) - 1, inputs=chooser, outputs=page_no, api_visibility="private")


def _position(workspace, folder: str, line_id: str) -> int:
    try:
        lines = workspace.open(folder).lines
    except InvalidRequest:
        return 0
    return next((n for n, line in enumerate(lines, start=1) if line.id == line_id), 0)
