"""The preset-speaker tab: one of the model's preset speakers reads a text (a model without presets speaks
with the default voice)."""

from __future__ import annotations

from dataclasses import dataclass

from ...types import EngineInfo
from ..page import Page
from ..requests import sft_meta
from .controls import Controls, build_controls, wire_generate

EXAMPLES = [  # text only: the speaker list depends on the loaded model
    ["你好，欢迎使用语音合成工作室。今天天气真不错。"],
    ["Welcome! This is a preset speaker reading a short sentence."],
]


@dataclass(frozen=True)
class PresetTab:
    note: object  # "this model has no presets"
    speaker: object
    text: object
    controls: Controls
    page: Page

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        speakers = list(info.speakers) if info else []
        return {self.speaker: gr.update(choices=speakers, value=self.page.default_preset(info)),
                self.note: gr.update(visible=not speakers)}


def build_preset(page: Page) -> PresetTab:
    import gradio as gr

    t, info = page.t, page.manager.info()
    with gr.Tab(t("tab_sft"), id="sft"):
        note = gr.Markdown(t("no_speakers_note"), visible=not (info and info.speakers))
        speaker = gr.Dropdown(list(info.speakers) if info else [], label=t("speaker"), value=page.default_preset(info))
        text = gr.Textbox(label=t("text"), placeholder=t("text_ph"), lines=3)
        controls = build_controls(page)
        gr.Examples(EXAMPLES, inputs=[text], label=t("examples"))
    wire_generate(page, controls, {"speaker": speaker, "text": text}, sft_meta)
    return PresetTab(note, speaker, text, controls, page)
