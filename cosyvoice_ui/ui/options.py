"""The output options (loudness, file format, precision) and the per-browser state every generate event
carries besides its tab's widgets: this browser's history and language."""

from __future__ import annotations

from dataclasses import dataclass

from ..serving.backends import precision_modes
from ..serving.manager import ModelManager
from ..types import EngineInfo
from . import strings
from .handlers import OutputOptions


@dataclass(frozen=True)
class Options:
    normalize: object
    fmt: object
    precision: object  # stock / fast / extra-fast: reloads the model; shown only where the backend has the switch
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

        return {self.precision: gr.update(visible=switchable(info))}


def switchable(info: EngineInfo | None) -> bool:
    """Backends with a precision record (every CosyVoice generation) can reload in another precision mode; the
    others (offline voice, remote engine) cannot."""
    return bool(info and info.precision is not None)


def precision_choices(t) -> list[tuple[object, str]]:
    """The radio's (label, mode) pairs, one per precision mode the backends know (stock first)."""
    return [(t(f"precision_{mode.replace('-', '_')}"), mode) for mode in precision_modes()]


def build_options(manager: ModelManager, t) -> Options:
    import gradio as gr

    with gr.Accordion(t("options"), open=False):
        with gr.Row():
            normalize = gr.Checkbox(value=True, label=t("normalize"))
            fmt = gr.Dropdown(["wav", "mp3", "flac"], value="wav", label=t("format"))
            precision = gr.Radio(precision_choices(t), value=manager.load_options.precision, label=t("precision"),
                                 info=t("precision_info"), visible=switchable(manager.info()))
    history = gr.BrowserState([], storage_key="cosyvoice_history")
    # Messages follow the browser's language (labels use gr.I18n, which the frontend translates itself).
    lang = gr.Textbox(value="en", visible=False)
    options = Options(normalize, fmt, precision, history, lang)

    def switch_precision(data: dict) -> None:
        mode = data[precision]
        if mode in precision_modes() and manager.set_load_options(precision=mode):
            gr.Info(strings.label("precision_switched", options.language(data)))

    precision.change(switch_precision, inputs={precision, lang}, api_visibility="private")
    return options
