"""The history tab: this browser's recent results (kept in its local storage), each playable (with its subtitle
files) and re-runnable with the same request and seed; above them, the "Check a file" panel (`check.py`)."""

# No `from __future__ import annotations`: Gradio finds `request: gr.Request` by its evaluated annotation.
from pathlib import Path

from ...errors import InvalidRequest
from .. import strings
from ..page import Page
from ..requests import request_from_meta
from ..markup import MARKDOWN_OPTIONS, plain, refusal
from .check import build_check


def inside(path, folders: list[Path]) -> bool:
    """True when `path` (a history entry's file, from the browser) lies in one of `folders`."""
    try:
        resolved = Path(str(path)).resolve()
    except (OSError, ValueError):
        return False
    return any(resolved.is_relative_to(folder) for folder in folders)


def subtitle_downloads(files: list[str], lang: str) -> list[tuple[str, str]]:
    """(button label, file) per subtitle file, named by its format ("SRT subtitles"): a file list in the row's
    narrow column cut the names down to ".s" and ".v"."""
    return [(strings.label("history_subtitle", lang).format(fmt=Path(f).suffix.lstrip(".").upper() or "?"), f)
            for f in files]


def build_history(page: Page) -> None:
    import gradio as gr
    from gradio.utils import get_upload_folder

    t, options, handlers = page.t, page.options, page.handlers
    # A history entry comes from the browser's storage, so anyone can forge one: its result is only played from
    # our output folder, and its recordings only read back from there or Gradio's uploads, never from elsewhere.
    results = [handlers.output_dir.resolve()]
    recordings = results + [Path(get_upload_folder()).resolve()]

    def checked_meta(meta: dict) -> dict:
        for key, what in (("prompt", "prompt audio"), ("source", "source audio")):
            if meta.get(key) and not inside(meta[key], recordings):
                raise InvalidRequest("audio_unreadable", f"the {what} of this history entry is no longer on the "
                                     "server; upload it again on its tab", what=what)
        return meta

    def rerun_of(entry: dict):
        def rerun(data: dict, request: gr.Request, progress=gr.Progress()):
            meta = entry.get("request") or {}
            result = None
            try:
                req = request_from_meta(checked_meta(meta), entry.get("speed"), entry.get("seed"))
            except InvalidRequest as exc:  # the recording of an old entry is gone or unreadable
                raise refusal(strings.message(exc, options.language(data)), exc) from None
            for result in handlers.run(req, options.output(data), options.past(data), request, progress, meta,
                                       options.language(data)):
                pass
            return result[3] if result else options.past(data)

        return rerun

    with gr.Tab(t("tab_history"), id="history"):
        build_check(page)
        clear = gr.Button(t("clear_history"), size="sm")

        @gr.render(inputs=[options.history, options.lang])
        def show_history(entries, browser_lang):
            if not entries:
                gr.Markdown(t("history_empty"))
                return
            lang = strings.language_of(browser_lang)
            for entry in entries:
                with gr.Row(variant="panel"):
                    gr.Markdown(f"{strings.history_line(entry, lang)}\n\n{plain(entry.get('text', ''))}",
                                **MARKDOWN_OPTIONS)
                    played = entry.get("file") if inside(entry.get("file"), results) else None
                    gr.Audio(played, interactive=False, show_label=False)
                    listed = entry.get("subtitles") if isinstance(entry.get("subtitles"), list) else []
                    cues = [str(f) for f in listed if inside(f, results) and Path(str(f)).is_file()]
                    if cues:
                        with gr.Column(scale=0, min_width=130):
                            for label, cue_file in subtitle_downloads(cues, lang):
                                gr.DownloadButton(label, value=cue_file, size="sm", elem_classes=["history-subtitle"])
                    rerun = gr.Button(t("rerun"), size="sm", scale=0)
                    rerun.click(rerun_of(entry), inputs=options.inputs, outputs=options.history,
                                api_visibility="private")

        clear.click(lambda: [], outputs=options.history, queue=False, api_visibility="private")
