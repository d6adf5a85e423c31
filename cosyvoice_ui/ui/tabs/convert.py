"""The voice-conversion tab: a recording's words, re-spoken in a target voice (a sample or a saved voice).
Example recordings fill the tab and convert in one click."""

# No `from __future__ import annotations`: Gradio finds `request: gr.Request` by its evaluated annotation.
from dataclasses import dataclass

from ...errors import CosyVoiceError
from ...types import EngineInfo
from .. import strings
from ..examples import example_source, example_voice, source_available
from ..handlers import failure_text, progress_adapter
from ..page import Page
from ..requests import vc_meta
from .controls import Controls, build_controls, wire_generate
from ..markup import refusal


@dataclass(frozen=True)
class ConvertTab:
    source: object
    target: object
    saved: object
    example: object
    controls: Controls
    page: Page

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        return {self.example: gr.update(visible=source_available(info, self.page.handlers.output_dir / "examples"))}


def build_convert(page: Page) -> ConvertTab:
    import gradio as gr

    t, folder = page.t, page.handlers.output_dir / "examples"
    with gr.Tab(t("tab_vc"), id="vc"):
        source = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("source_audio"))
        target = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("target_audio"))
        consent = page.consent_box()
        saved = page.saved.dropdown()
        example = gr.Button(t("try_example_vc"), size="sm", visible=source_available(page.manager.info(), folder))
        controls = build_controls(page, subtitles=False)

    def fill_example(data: dict, request: gr.Request, progress=gr.Progress()):
        """The speech to convert (recorded through the model queue on first use) and the example voice."""
        lang = page.options.language(data)
        try:
            spoken = example_source(folder, page.manager, progress_adapter(progress, lang),
                                    page.handlers.cancel_flag(request))
        except CosyVoiceError as exc:
            raise refusal(failure_text(exc, lang), exc) from None
        if spoken is None:
            raise refusal(strings.label("example_unavailable", lang), "example_unavailable")
        voice, _ = example_voice(folder)
        return spoken, voice, ""

    filled = example.click(fill_example, inputs={page.options.lang}, outputs=[source, target, saved],
                           api_visibility="private")
    wire_generate(page, controls, {"source": source, "prompt": target, "saved": saved, "consent": consent}, vc_meta,
                  trigger=filled)
    return ConvertTab(source, target, saved, example, controls, page)
