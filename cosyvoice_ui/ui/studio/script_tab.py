"""The Script tab (issue 15): a multi-voice script as a project. Paste or upload the script, give each name a
voice (remembered per name), render every line in order (resumable), fix single lines (regenerate, edit, lock)
and export the mix, a stem per speaker and subtitles.

The widgets live here and in `voices.py` / `lines.py`; the work is `studio/workspace.py` (a `Workspace` over the
app's speech jobs).
"""

# No `from __future__ import annotations`: Gradio finds `request: gr.Request` by its evaluated annotation.
import time
from dataclasses import dataclass

from ...errors import InvalidRequest
from ...studio.script import parse_script, speakers
from ...studio.workspace import EXPORT_PARTS, Workspace, read_script_file
from ...types import EngineInfo
from .. import clicks, strings
from ..markup import MARKDOWN_OPTIONS, plain
from ..page import Page
from .events import chosen_options, guarded, live, option_inputs, workspace_for
from .lines import build_lines
from .voices import VoiceRows, build_voice_rows, choice_of

SCRIPT_FILE_TYPES = [".txt", ".md", ".text"]
# Ticked at first: the mix and its subtitles. Stems are opt-in (a zip and a file per speaker, each the length of
# the whole mix: about 34 MB for 5 short lines).
DEFAULT_PARTS = tuple(part for part in EXPORT_PARTS if not part.startswith("stems"))


@dataclass(frozen=True)
class ScriptTab:
    workspace: Workspace
    voices: VoiceRows
    current: object  # gr.State: the open project's folder name ("" = none)
    revision: object  # gr.State: bumped by every change, redraws the lines
    pick: object
    new_name: object
    script: object
    gap: object
    save: object
    render: object
    stop: object
    status: object
    parts: object
    export: object
    files: object
    t: object
    saved_enabled: bool

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        return self.voices.adapt(info, self.t, self.saved_enabled)


def build_script(page: Page) -> ScriptTab:
    import gradio as gr

    t = page.t
    workspace = workspace_for(page)
    options = page.options
    with gr.Tab(t("tab_script"), id="script") as tab:
        current = gr.State("")
        revision = gr.State(0)
        with gr.Row(equal_height=True):
            pick = gr.Dropdown(choices=workspace.projects(), value=None, label=t("studio_open"), scale=2,
                               allow_custom_value=True, elem_classes=["studio-open"])
            new_name = gr.Textbox(label=t("studio_new_name"), scale=2, elem_classes=["studio-new-name"])
            create = gr.Button(t("studio_create"), scale=1, elem_classes=["studio-create"])
        script = gr.Textbox(label=t("studio_script"), placeholder=t("studio_script_ph"), lines=8, max_lines=30,
                            elem_classes=["studio-script"])
        upload = gr.UploadButton(t("studio_upload"), file_types=SCRIPT_FILE_TYPES, size="sm")
        with gr.Accordion(t("studio_voices"), open=True):
            voices = build_voice_rows(page)
        gap = gr.Slider(0.0, 3.0, value=0.4, step=0.05, label=t("studio_gap"))
        with gr.Row():
            save = gr.Button(t("studio_save"), elem_classes=["studio-save"])
            render = gr.Button(t("studio_render_all"), variant="primary", elem_classes=["studio-render-all"])
            stop = gr.Button(t("stop"), variant="stop")
        click = clicks.field()
        status = gr.Markdown(elem_classes=["studio-status"], **MARKDOWN_OPTIONS)
        with gr.Accordion(t("studio_lines"), open=True):
            build_lines(page, workspace, current, revision, status)
        with gr.Accordion(t("studio_export"), open=True):
            parts = gr.CheckboxGroup([(t(f"studio_part_{part}"), part) for part in EXPORT_PARTS],
                                     value=list(DEFAULT_PARTS), label=t("studio_export_parts"))
            export = gr.Button(t("studio_export_button"), elem_classes=["studio-export"])
            files = gr.File(label=t("studio_downloads"), file_count="multiple", interactive=False,
                            elem_classes=["studio-downloads"])
    view = [current, revision, pick, script, gap, status, *voices.outputs]

    def shown(project, lang: str, message_key: str) -> dict:
        """Every widget showing `project` (the voices, its script, its lines)."""
        done = sum(line.take is not None for line in project.lines)
        message = strings.label(message_key, lang).format(name=plain(project.name), lines=len(project.lines),
                                                          speakers=len(project.speakers()), done=done)
        saved_ids = [value for _, value in page.saved.choices()]
        return {current: project.folder.name, revision: time.time_ns(), script: project.script,
                pick: gr.update(choices=workspace.projects(), value=project.folder.name),
                gap: project.settings.gap_s, status: message,
                **voices.fill(project, page.manager.info(), page.saved.enabled, saved_ids, lang)}

    def open_project(data: dict):
        lang = options.language(data)
        if not data[pick]:
            return {}
        project = guarded(lang, lambda: workspace.open(data[pick]))
        return shown(project, lang, "studio_opened")

    def create_project(data: dict):
        lang = options.language(data)
        project = guarded(lang, lambda: workspace.create(data[new_name], data[script] or ""))
        return {**shown(project, lang, "studio_saved"), new_name: ""}

    def save_project(data: dict):
        lang = options.language(data)
        project = guarded(lang, lambda: workspace.save(data[current], data[new_name], data[script] or "",
                                                    voices.values(data), data[gap]))
        return {**shown(project, lang, "studio_saved"), new_name: ""}

    def render_lines(data: dict, request: gr.Request, progress=gr.Progress()):
        lang = options.language(data)
        folder, chosen = data[current], chosen_options(page, data, request)
        line_label = None
        for kind, value in live(page, request, progress, lang,
                                lambda report, cancel: workspace.render_all(folder, chosen, report, cancel),
                                click=data[click]):
            if kind == "status":
                label = value.split(" · ")[0]
                changed = line_label is not None and label != line_label  # the line before is saved
                line_label = label
                yield (time.time_ns() if changed else gr.skip()), value
            else:
                yield time.time_ns(), strings.label("studio_rendered", lang).format(
                    rendered=len(value.rendered), skipped=len(value.skipped))

    def export_files(data: dict):
        lang = options.language(data)
        output = options.output(data)
        paths = guarded(lang, lambda: workspace.export(data[current], output.fmt, tuple(data[parts] or ()),
                                                    output.normalize))
        return [str(path) for path in paths], strings.label("studio_exported", lang).format(count=len(paths))

    def load_script(path, lang_value):
        return guarded(strings.language_of(lang_value), lambda: read_script_file(path))

    def names_changed(data: dict):
        """The voice rows follow the names of the script as typed (before it is saved): a name keeps its row's
        voice, a new one gets its remembered voice (else the default)."""
        try:
            names = speakers(parse_script(data[script] or ""))
        except InvalidRequest:
            return {}
        if names == list(data[voices.speakers] or []):
            return {}
        shown_now = {name: choice_of(row) for name, row in voices.values(data).items()}
        remembered = {name: workspace.remembered(name) for name in names if name not in shown_now}
        saved_ids = [value for _, value in page.saved.choices()]
        known = {name: voice for name, voice in remembered.items() if voice[0] is not None}
        return voices.fill_names(names, {**known, **shown_now}, page.manager.info(), page.saved.enabled,
                                 saved_ids, options.language(data))

    def stop_render(data: dict, request: gr.Request) -> None:
        page.handlers.stop(request, data[click])

    private = dict(api_visibility="private")
    edits = {current, new_name, script, gap, options.lang, *voices.inputs}
    pick.input(open_project, inputs={pick, options.lang}, outputs=view, **private)
    create.click(create_project, inputs={new_name, script, options.lang}, outputs=[*view, new_name], **private)
    save.click(save_project, inputs=edits, outputs=[*view, new_name], **private)
    upload.upload(load_script, inputs=[upload, options.lang], outputs=script, **private).then(
        names_changed, inputs={script, options.lang, *voices.inputs}, outputs=voices.outputs, **private)
    script.blur(names_changed, inputs={script, options.lang, *voices.inputs}, outputs=voices.outputs, **private)
    # Render all saves first: the click's id is made then, and the render that follows sends it (`clicks.py`)
    rendering_inputs = {current, click, *option_inputs(page)}
    rendering = render.click(save_project, inputs=edits, outputs=[*view, new_name], js=clicks.making_only(click),
                             **private).success(
        render_lines, inputs=rendering_inputs, outputs=[revision, status], js=clicks.sending(rendering_inputs, click),
        concurrency_limit=page.settings.concurrency, concurrency_id="synthesis", **private)
    stop.click(stop_render, inputs={click}, js=clicks.sending({click}, click), cancels=[rendering], queue=False,
               **private)
    export.click(export_files, inputs={current, parts, *options.inputs}, outputs=[files, status], **private)
    tab.select(lambda: gr.update(choices=workspace.projects()), outputs=pick, queue=False, **private)
    return ScriptTab(workspace, voices, current, revision, pick, new_name, script, gap, save, render, stop, status,
                     parts, export, files, t, page.saved.enabled)
