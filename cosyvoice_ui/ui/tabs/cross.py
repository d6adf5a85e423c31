"""The cross-lingual / instruct tab: a sample's voice (or a saved voice) reads a text in another language,
or a preset speaker reads it in a style described in words (models that follow instructions)."""

from __future__ import annotations

from dataclasses import dataclass

from ...types import EngineInfo, Mode
from ..page import Page, approximate
from ..requests import cross_meta
from .controls import Controls, build_controls, wire_generate

TAGS = ("[laughter]", "[breath]", "<strong></strong>", "<laughter></laughter>", "[noise]", "[cough]")
EXAMPLES = [  # text in another language than the sample (v1 adds the language tag itself)
    ["Cross-lingual cloning keeps the voice and changes the language."],
    ["今天的天气非常好，我们一起去公园散步吧。"],
    ["こんにちは、今日はいい天気ですね。"],
    ["안녕하세요, 만나서 반갑습니다."],
]


@dataclass(frozen=True)
class CrossTab:
    submode: object  # "cross" | "instruct"
    prompt: object
    saved: object
    match: object
    speaker: object
    instruct: object
    instruct_examples: object
    note: object  # "this model cannot follow instructions"
    text: object
    controls: Controls

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        instruct = data.get(self.submode) == "instruct"
        can_instruct = bool(info and Mode.INSTRUCT in info.modes)
        shown = instruct and can_instruct
        speakers = list(info.speakers) if info else []
        return {
            self.prompt: gr.update(visible=not instruct),
            self.speaker: gr.update(visible=shown, choices=speakers, value=speakers[0] if speakers else None),
            self.instruct: gr.update(visible=shown),
            self.instruct_examples: gr.update(visible=shown,
                                              samples=[[e] for e in (info.instruct_examples if info else ())]),
            self.note: gr.update(visible=instruct and not can_instruct),
            self.match: gr.update(visible=approximate(info) and not instruct),
        }


def build_cross(page: Page) -> CrossTab:
    import gradio as gr

    t, info = page.t, page.manager.info()
    with gr.Tab(t("tab_cross"), id="cross"):
        submode = gr.Radio([(t("submode_cross"), "cross"), (t("submode_instruct"), "instruct")], value="cross",
                           label=t("submode"))
        prompt = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("prompt_audio"))
        saved = page.saved.dropdown()
        match = gr.Radio([(t("match_quick"), "quick"), (t("match_refine"), "refine")], value="quick",
                         label=t("voice_match"), visible=approximate(info))
        speaker = gr.Dropdown(list(info.speakers) if info else [], label=t("speaker"), visible=False)
        instruct = gr.Textbox(label=t("instruct_text"), placeholder=t("instruct_ph"), visible=False)
        instruct_examples = gr.Dataset(components=[gr.Textbox(visible=False)], label=t("instruct_examples"),
                                       samples=[[e] for e in (info.instruct_examples if info else ())],
                                       visible=False)
        note = gr.Markdown(t("instruct_unavailable"), visible=False)
        text = gr.Textbox(label=t("text"), placeholder=t("cross_text_ph"), lines=3)
        with gr.Row():
            tags = [gr.Button(tag, size="sm", min_width=40) for tag in TAGS]
        controls = build_controls(page)
        gr.Examples(EXAMPLES, inputs=[text], label=t("examples"))

    for button in tags:
        button.click(lambda typed, tag=button.value: (typed or "") + tag, inputs=text, outputs=text, queue=False,
                     api_visibility="private")
    instruct_examples.click(lambda sample: sample[0], inputs=instruct_examples, outputs=instruct, queue=False,
                            api_visibility="private")
    wire_generate(page, controls, {"submode": submode, "prompt": prompt, "saved": saved, "speaker": speaker,
                                   "instruct_text": instruct, "text": text, "voice_match": match}, cross_meta)
    return CrossTab(submode, prompt, saved, match, speaker, instruct, instruct_examples, note, text, controls)
