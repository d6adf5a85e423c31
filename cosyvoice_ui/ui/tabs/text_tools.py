"""Helpers under a tab's text box: chips that insert the inline tags and pronunciation hints the model
reads (`EngineInfo.text_tags`, `.pronunciation`), and the note that Japanese kanji may be misread
(`EngineInfo.text_caveats`). Chips are built once and re-fitted to each model by `adapt`."""

from __future__ import annotations

from dataclasses import dataclass

from ...types import EngineInfo
from ..page import Page
from ..strings import PRONUNCIATION_CHIPS
from ..text_hints import kanji_hint_shown

MAX_TAG_CHIPS = 8  # chips built per tab; a model's first MAX_TAG_CHIPS tags get one each


@dataclass(frozen=True)
class TextTools:
    tags: tuple  # gr.Button per tag slot (its value is the tag it inserts)
    pronunciation: dict  # "pinyin" | "cmu" → gr.Button
    help: object  # how to write a pronunciation hint
    kanji: object  # "kana are read right, kanji may not be"

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        tags = list(info.text_tags if info else ())[:MAX_TAG_CHIPS]
        hints = set(info.pronunciation if info else ())
        updates = {button: gr.update(value=tags[i] if i < len(tags) else "", visible=i < len(tags))
                   for i, button in enumerate(self.tags)}
        updates.update({button: gr.update(visible=kind in hints) for kind, button in self.pronunciation.items()})
        updates[self.help] = gr.update(visible=bool(hints & set(self.pronunciation)))
        return updates


def build_text_tools(page: Page, text, chips: bool = True) -> TextTools:
    """The helpers of the text box `text`; `chips` False: only the kanji note."""
    import gradio as gr

    t, info = page.t, page.manager.info()
    tags: list = []
    pronunciation: dict = {}
    if chips:
        model_tags = list(info.text_tags if info else ())
        hints = info.pronunciation if info else ()
        with gr.Row():
            for i in range(MAX_TAG_CHIPS):
                tags.append(gr.Button(model_tags[i] if i < len(model_tags) else "", size="sm", min_width=40,
                                      visible=i < len(model_tags)))
            for kind, (key, _) in PRONUNCIATION_CHIPS.items():
                pronunciation[kind] = gr.Button(t(key), size="sm", min_width=40, visible=kind in hints)
    shown = chips and any(kind in (info.pronunciation if info else ()) for kind in PRONUNCIATION_CHIPS)
    help_note = gr.Markdown(t("pronunciation_help"), visible=shown)
    kanji = gr.Markdown(t("ja_kanji_note"), visible=False)

    for button in tags:  # the chip's current value: adapt changes it with the model
        button.click(insert, inputs=[text, button], outputs=text, queue=False, api_visibility="private")
    for kind, button in pronunciation.items():
        button.click(lambda typed, hint=PRONUNCIATION_CHIPS[kind][1]: insert(typed, hint), inputs=text,
                     outputs=text, queue=False, api_visibility="private")
    text.change(lambda typed: gr.update(visible=kanji_hint_shown(page.manager.info(), typed)), inputs=text,
                outputs=kanji, queue=False, api_visibility="private")
    return TextTools(tuple(tags), pronunciation, help_note, kanji)


def insert(typed: str | None, tag: str | None) -> str:
    """The text with `tag` added at its end (a browser cannot tell the server where the cursor is)."""
    return (typed or "") + (tag or "")
