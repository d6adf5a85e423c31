"""The output options (loudness, file format, precision, the pronunciation glossary, bad-take checks) and the
per-browser state every generate event carries besides its tab's widgets: this browser's history and language."""

from __future__ import annotations

from dataclasses import dataclass

from ..serving.backends import precision_modes
from ..serving.manager import ModelManager
from ..settings import Settings
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
    glossary: object = None  # the saved glossary applied to every tab's text ("" = none)
    check_takes: object = None  # bad-take checks on (the server's policy) or off for this browser
    glossary_store: object = None  # the `GlossaryStore` the dropdown lists

    @property
    def inputs(self) -> set:
        """The components an event adds to its dict inputs to get `output`, `language` and `past`."""
        return {c for c in (self.normalize, self.fmt, self.lang, self.history, self.glossary, self.check_takes)
                if c is not None}

    def output(self, data: dict) -> OutputOptions:
        return OutputOptions(bool(data[self.normalize]), data[self.fmt] or "wav", self.glossary_id(data),
                             bool(data.get(self.check_takes, True)))

    def glossary_id(self, data: dict) -> str:
        """The chosen saved glossary's id ("" = none); the speech job applies it (`JobOptions.glossary`)."""
        return str(data.get(self.glossary) or "")

    def glossary_choices(self) -> list[tuple[str, str]]:
        return glossary_choices(self.glossary_store)

    def refreshed_glossaries(self, value: str | None = None):
        """An update for the glossary dropdown after a save or delete (`value`: what to select, None = keep)."""
        import gradio as gr

        choices = self.glossary_choices()
        if value is not None and value not in {v for _, v in choices}:
            value = ""
        return gr.update(choices=choices) if value is None else gr.update(choices=choices, value=value)

    def language(self, data: dict) -> str:
        return strings.language_of(data[self.lang])

    def past(self, data: dict) -> list:
        return data[self.history] or []

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        updates = {self.precision: gr.update(visible=switchable(info))}
        if self.glossary is not None:  # the saved glossaries, listed again on page load and model change
            updates[self.glossary] = self.refreshed_glossaries()
        return updates


def glossary_choices(store) -> list[tuple[str, str]]:
    """A glossary dropdown's (label, id) pairs: none, then every saved glossary of `store` by name."""
    saved = store.list() if store is not None else []
    names = [g.name.casefold() for g in saved]
    return [("—", "")] + [(g.name if names.count(g.name.casefold()) == 1 else f"{g.name} ({g.id})", g.id)
                          for g in saved]


def switchable(info: EngineInfo | None) -> bool:
    """Backends with a precision record (every CosyVoice generation) can reload in another precision mode; the
    others (offline voice, remote engine) cannot."""
    return bool(info and info.precision is not None)


def precision_choices(t) -> list[tuple[object, str]]:
    """The radio's (label, mode) pairs, one per precision mode the backends know (stock first)."""
    return [(t(f"precision_{mode.replace('-', '_')}"), mode) for mode in precision_modes()]


def build_options(manager: ModelManager, t, settings: Settings | None = None) -> Options:
    """The options accordion. `settings`: where saved glossaries live and whether take checks are on (the
    defaults when not given)."""
    import gradio as gr

    from ..serving.glossary import GlossaryStore

    settings = settings or Settings()
    store = GlossaryStore(settings.glossary_dir, settings.max_glossaries)
    with gr.Accordion(t("options"), open=False):
        with gr.Row():
            normalize = gr.Checkbox(value=True, label=t("normalize"))
            fmt = gr.Dropdown(["wav", "mp3", "flac"], value="wav", label=t("format"))
            precision = gr.Radio(precision_choices(t), value=manager.load_options.precision, label=t("precision"),
                                 info=t("precision_info"), visible=switchable(manager.info()))
        with gr.Row():
            glossary = gr.Dropdown(glossary_choices(store), value="", label=t("glossary_choice"),
                                   info=t("glossary_choice_info"))
            check_takes = gr.Checkbox(value=settings.check_takes, label=t("check_takes"),
                                      info=t("check_takes_info" if settings.check_takes else "check_takes_server_off"),
                                      interactive=settings.check_takes)
    history = gr.BrowserState([], storage_key="cosyvoice_history")
    # Messages follow the browser's language (labels use gr.I18n, which the frontend translates itself).
    lang = gr.Textbox(value="en", visible=False)
    options = Options(normalize, fmt, precision, history, lang, glossary, check_takes, store)

    def switch_precision(data: dict) -> None:
        mode = data[precision]
        if mode in precision_modes() and manager.set_load_options(precision=mode):
            gr.Info(strings.label("precision_switched", options.language(data)))

    precision.change(switch_precision, inputs={precision, lang}, api_visibility="private")
    return options
