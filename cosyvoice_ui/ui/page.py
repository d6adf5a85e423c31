"""What every part of the page shares: the manager and settings, the handlers, the label table, the
per-browser inputs (`Options`) and the saved-voice dropdowns. Built once per app by `build_ui`."""

from __future__ import annotations

from dataclasses import dataclass

from ..serving.manager import ModelManager
from ..settings import Settings
from ..types import EngineInfo, Mode
from .handlers import Handlers
from .options import Options
from .saved_voices import SavedVoices


@dataclass(frozen=True)
class Page:
    manager: ModelManager
    settings: Settings
    handlers: Handlers
    t: object  # the gr.I18n label table
    can_stream: bool  # streaming needs ffmpeg
    options: Options
    saved: SavedVoices

    def __post_init__(self) -> None:
        # The glossary dropdown lists the handlers' store (the app's --glossary-dir), however the options were built.
        if self.options.glossary_store is not self.handlers.glossaries:
            object.__setattr__(self.options, "glossary_store", self.handlers.glossaries)

    @property
    def asks_consent(self) -> bool:
        """This server requires the speaker's consent for a new recording (serving/consent.py)."""
        return self.handlers.speech.consent.required

    def consent_box(self):
        """The box beside a sample where the user confirms its speaker agreed (shown only where consent is
        required; its answer goes with the request, and the one rule in `SpeechJobs` decides)."""
        import gradio as gr

        return gr.Checkbox(False, label=self.t("consent_label"), info=self.t("consent_info"),
                           visible=self.asks_consent, elem_classes=["consent-box"])

    def default_preset(self, info: EngineInfo | None) -> str | None:
        """The preset the preset tab starts on: the default voice when it is a preset."""
        ref = self.handlers.resolver.default(info)
        return ref.id if ref is not None and ref.is_preset else None


def approximate(info: EngineInfo | None) -> bool:
    """Backends that only approximate a prompt's voice offer a quick/refine switch."""
    return bool(info and info.voice_match == "approximate")


def opening_tab(info: EngineInfo | None) -> str:
    """The tab the page opens on: the clone tab, unless the model cannot really clone (the offline default voice):
    then the preset tab, where a text and one click speak."""
    if info is not None and (approximate(info) or Mode.ZERO_SHOT not in info.modes):
        return "sft"
    return "clone"
