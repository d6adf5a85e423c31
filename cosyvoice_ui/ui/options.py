"""The output options (loudness, file format, fast mode) and the per-browser state every generate event
carries besides its tab's widgets: this browser's history and language."""

from __future__ import annotations

from dataclasses import dataclass

from ..serving.manager import ModelManager
from ..types import EngineInfo
from . import strings
from .handlers import OutputOptions


@dataclass(frozen=True)
class Options:
    normalize: object
    fmt: object
    fast: object  # reloads the model in fast mode; shown only where the backend has a precision switch
    history: object  # gr.BrowserState: this browser's past results
    lang: object  # the browser's language (hidden), filled in on page load

    @property
    def inputs(self) -> set:
        """The components an event adds to its dict inputs to get `output`, `language` and `past`."""
        return {self.normalize, self.fmt, self.lang, self.history}

    def output(self, data: dict) -> OutputOptions:
        return OutputOptions(bool(data[self.normalize]), data[self.fmt] or "wav")

    def language(self, data: dict) -> str:
        return strings.language_of(data[self.lang])

    def past(self, data: dict) -> list:
        return data[self.history] or []

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        return {self.fast: gr.update(visible=switchable(info))}


def switchable(info: EngineInfo | None) -> bool:
    """Backends with a precision record can reload in fast mode; the others cannot."""
    return bool(info and info.precision is not None)


def build_options(manager: ModelManager, t) -> Options:
    import gradio as gr

    with gr.Accordion(t("options"), open=False):
        with gr.Row():
            normalize = gr.Checkbox(value=True, label=t("normalize"))
            fmt = gr.Dropdown(["wav", "mp3", "flac"], value="wav", label=t("format"))
            fast = gr.Checkbox(value=manager.load_options.precision == "fast", label=t("fast"),
                               visible=switchable(manager.info()))
    history = gr.BrowserState([], storage_key="cosyvoice_history")
    # Messages follow the browser's language (labels use gr.I18n, which the frontend translates itself).
    lang = gr.Textbox(value="en", visible=False)
    options = Options(normalize, fmt, fast, history, lang)

    def switch_precision(data: dict) -> None:
        if manager.set_load_options(precision="fast" if data[fast] else "stock"):
            gr.Info(strings.label("precision_switched", options.language(data)))

    fast.change(switch_precision, inputs={fast, lang}, api_visibility="private")
    return options
