"""The preset-speaker tab: one of the model's preset speakers reads a text (a model without presets speaks
with the default voice, and says which models have presets; where style instructions take a voice sample,
it points to the instruct tab)."""

from __future__ import annotations

from dataclasses import dataclass

from ...types import EngineInfo, Mode
from .. import strings
from ..page import Page
from ..requests import sft_meta
from ..speaker_labels import preset_choices
from .controls import Controls, build_controls, wire_generate
from .text_tools import build_text_tools

EXAMPLES = [  # text only: the speaker list depends on the loaded model
    ["你好，欢迎使用语音合成工作室。今天天气真不错。"],
    ["Welcome! This is a preset speaker reading a short sentence."],
]


@dataclass(frozen=True)
class PresetTab:
    note: object  # "this model has no presets"
    instruct_note: object  # "instructions take a voice sample here: use the instruct tab"
    speaker: object
    text: object
    controls: Controls
    page: Page

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        # The presets alone (saved voices have their own picker), labelled in the browser's language.
        speakers = preset_choices(info, strings.language_of(data.get(self.page.options.lang)))
        return {self.speaker: gr.update(choices=speakers, value=listed_default(self.page, info)),
                self.note: gr.update(visible=not speakers),
                self.instruct_note: gr.update(visible=instruct_takes_voice(info))}


def listed_default(page: Page, info: EngineInfo | None) -> str | None:
    """The default voice when it is one of the listed presets (a saved voice the offline backend also takes as a
    speaker is not listed here)."""
    chosen = page.default_preset(info)
    return chosen if info is not None and chosen in info.presets else None


def instruct_takes_voice(info: EngineInfo | None) -> bool:
    return bool(info and info.instruct_voice and Mode.INSTRUCT in info.modes)


def build_preset(page: Page) -> PresetTab:
    import gradio as gr

    t, info = page.t, page.manager.info()
    with gr.Tab(t("tab_sft"), id="sft"):
        note = gr.Markdown(t("no_speakers_note"), visible=not (info and info.presets))
        instruct_note = gr.Markdown(t("preset_instruct_note"), visible=instruct_takes_voice(info))
        speaker = gr.Dropdown(preset_choices(info, "en"), label=t("speaker"), value=listed_default(page, info))
        text = gr.Textbox(label=t("text"), placeholder=t("text_ph"), lines=3)
        build_text_tools(page, text, chips=False)
        controls = build_controls(page)
        gr.Examples(EXAMPLES, inputs=[text], label=t("examples"))
    wire_generate(page, controls, {"speaker": speaker, "text": text}, sft_meta)
    return PresetTab(note, instruct_note, speaker, text, controls, page)
