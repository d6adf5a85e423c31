"""The cross-lingual / instruct tab: a sample's voice (or a saved voice) reads a text in another language,
or reads it in a style described in words (models that follow instructions): with a preset speaker where
the model's instruct mode takes one, with the sample's voice where it takes a voice (`EngineInfo.instruct_voice`).
The instruction picker lists the model's known-good instructions (`EngineInfo.instructions`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...types import EngineInfo, Mode
from .. import strings
from ..page import Page, approximate
from ..requests import cross_meta
from .controls import Controls, build_controls, wire_generate
from .text_tools import TextTools, build_text_tools

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
    picker: object  # the model's known-good instructions
    note: object  # "this model cannot follow instructions" (and which models can)
    voice_note: object  # "instructions are spoken in your sample's voice here"
    text: object
    tools: TextTools
    controls: Controls
    lang: object  # the browser's language (the picker's labels are data, not gr.I18n keys)
    consent: object = None  # "the speaker agreed": beside the sample, where the server requires it
    asks_consent: bool = False

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        instruct = data.get(self.submode) == "instruct"
        shown = instruct and bool(info and Mode.INSTRUCT in info.modes)
        with_voice = bool(info and info.instruct_voice)  # instruct2: the sample's voice, no preset
        speakers = list(info.speakers) if info else []
        preset = shown and not with_voice
        examples = [[e] for e in (info.instruct_examples if info else ())]
        lang = strings.language_of(data.get(self.lang))
        listed = bool(info and info.instructions)  # the picker lists them; the free-text examples are for the rest
        instruct_box = {"placeholder": strings.label("instruct_ph_for", lang).format(example=examples[0][0])} \
            if examples else {}
        return {
            self.prompt: gr.update(visible=not instruct or (shown and with_voice)),
            self.consent: gr.update(visible=self.asks_consent and (not instruct or (shown and with_voice))),
            self.speaker: gr.update(visible=preset, choices=speakers,
                                    value=speakers[0] if speakers and preset else None),
            self.instruct: gr.update(visible=shown, **instruct_box),
            self.picker: gr.update(visible=shown and listed, value=None, choices=picker_choices(info, lang)),
            self.instruct_examples: gr.update(visible=shown and bool(examples) and not listed, samples=examples),
            self.note: gr.update(visible=instruct and not shown),
            self.voice_note: gr.update(visible=shown and with_voice),
            self.match: gr.update(visible=approximate(info) and not instruct),
            **self.tools.adapt(info, data),
        }


def picker_choices(info: EngineInfo | None, lang: str) -> list[tuple[str, str]]:
    """The instruction picker's (label, instruction text) pairs for the model, labelled in `lang`."""
    return [(strings.instruction_label(item, lang), item.text) for item in (info.instructions if info else ())]


def build_cross(page: Page) -> CrossTab:
    import gradio as gr

    t, info = page.t, page.manager.info()
    with gr.Tab(t("tab_cross"), id="cross"):
        submode = gr.Radio([(t("submode_cross"), "cross"), (t("submode_instruct"), "instruct")], value="cross",
                           label=t("submode"))
        prompt = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("prompt_audio"))
        consent = page.consent_box()
        saved = page.saved.dropdown()
        match = gr.Radio([(t("match_quick"), "quick"), (t("match_refine"), "refine")], value="quick",
                         label=t("voice_match"), visible=approximate(info))
        speaker = gr.Dropdown(list(info.speakers) if info else [], label=t("speaker"), visible=False)
        picker = gr.Dropdown(picker_choices(info, "en"), value=None, label=t("instruct_picker"), visible=False)
        instruct = gr.Textbox(label=t("instruct_text"), placeholder=t("instruct_ph"), visible=False)
        instruct_examples = gr.Dataset(components=[gr.Textbox(visible=False)], label=t("instruct_examples"),
                                       samples=[[e] for e in (info.instruct_examples if info else ())],
                                       visible=False)
        note = gr.Markdown(t("instruct_unavailable"), visible=False)
        voice_note = gr.Markdown(t("instruct_voice_note"), visible=False)
        text = gr.Textbox(label=t("text"), placeholder=t("cross_text_ph"), lines=3)
        tools = build_text_tools(page, text)
        controls = build_controls(page)
        gr.Examples(EXAMPLES, inputs=[text], label=t("examples"))

    picker.input(lambda chosen, typed: chosen or typed, inputs=[picker, instruct], outputs=instruct, queue=False,
                 api_visibility="private")
    instruct_examples.click(lambda sample: sample[0], inputs=instruct_examples, outputs=instruct, queue=False,
                            api_visibility="private")
    wire_generate(page, controls, {"submode": submode, "prompt": prompt, "saved": saved, "speaker": speaker,
                                   "instruct_text": instruct, "text": text, "voice_match": match, "consent": consent},
                  cross_meta)
    return CrossTab(submode, prompt, saved, match, speaker, instruct, instruct_examples, picker, note, voice_note,
                    text, tools, controls, page.options.lang, consent, page.asks_consent)
