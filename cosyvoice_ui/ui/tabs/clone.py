"""The 3-second clone tab: a voice sample (or a saved voice) and its transcript read a new text; the sample
can be saved as a voice, and an example voice fills the tab and generates in one click."""

# No `from __future__ import annotations`: Gradio reads the handlers' annotations at runtime.
from dataclasses import dataclass

from ...types import EngineInfo
from .. import strings
from ..examples import EXAMPLE_TEXT, example_available, example_voice
from ..page import Page, approximate
from ..requests import clone_meta
from ..transcribe import add_transcribe
from .controls import Controls, build_controls, wire_generate
from .text_tools import build_text_tools

EXAMPLES = [
    ["Hello! This voice was cloned from just a few seconds of audio.", 1],
    ["收到好友从远方寄来的生日礼物，那份意外的惊喜让我心中充满了快乐。", 2],
]


@dataclass(frozen=True)
class CloneTab:
    prompt: object
    saved: object
    match: object
    transcript: object
    text: object
    voice_name: object
    save: object
    controls: Controls
    consent: object = None  # "the speaker agreed": shown where the server requires it
    offline_note: object = None  # "the offline voice cannot clone": what it does here instead

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        return {self.match: gr.update(visible=approximate(info)),
                self.offline_note: gr.update(visible=approximate(info))}


def build_clone(page: Page) -> CloneTab:
    import gradio as gr

    t = page.t
    with gr.Tab(t("tab_clone"), id="clone"):
        offline_note = gr.Markdown(t("clone_offline_note"), visible=approximate(page.manager.info()),
                                   elem_classes=["clone-offline-note"])
        prompt = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("prompt_audio"))
        consent = page.consent_box()
        example = gr.Button(t("try_example"), size="sm", visible=example_available())
        saved = page.saved.dropdown()
        match = gr.Radio([(t("match_quick"), "quick"), (t("match_refine"), "refine")], value="quick",
                         label=t("voice_match"), visible=approximate(page.manager.info()))
        transcript = gr.Textbox(label=t("prompt_text"), placeholder=t("prompt_text_ph"), lines=1)
        add_transcribe(page, prompt, transcript)
        text = gr.Textbox(label=t("text"), placeholder=t("text_ph"), lines=3)
        build_text_tools(page, text, chips=False)
        with gr.Accordion(t("save_voice"), open=False, visible=page.saved.enabled):
            with gr.Row():
                voice_name = gr.Textbox(label=t("voice_name"), scale=3)
                save = gr.Button(t("save_voice"), scale=1)
        controls = build_controls(page)
        examples = gr.Examples(EXAMPLES, inputs=[text, controls.seed], label=t("examples"),
                               example_labels=example_labels("en"))
    # Example buttons are plain strings (the frontend does not translate them): rewritten once the
    # browser's language is known.
    page.options.lang.change(lambda lang: gr.update(sample_labels=example_labels(strings.language_of(lang))),
                             inputs=page.options.lang, outputs=examples.dataset, queue=False,
                             api_visibility="private")

    def fill_example(data: dict):
        path, spoken = example_voice(page.handlers.output_dir / "examples")
        typed = data[text]
        return path, "", spoken, typed if (typed or "").strip() else EXAMPLE_TEXT

    filled = example.click(fill_example, inputs={text}, outputs=[prompt, saved, transcript, text],
                           api_visibility="private")
    wire_generate(page, controls, {"prompt": prompt, "saved": saved, "prompt_text": transcript, "text": text,
                                   "voice_match": match, "consent": consent}, clone_meta, trigger=filled)
    return CloneTab(prompt, saved, match, transcript, text, voice_name, save, controls, consent, offline_note)


def example_labels(lang: str) -> list[str]:
    return [strings.example_label(text, seed, lang) for text, seed in EXAMPLES]

