"""Helpers under a tab's text box: chips that insert the inline tags and pronunciation hints the model
reads (`EngineInfo.text_tags`, `.pronunciation`), and the note that Japanese kanji may be misread
(`EngineInfo.text_caveats`). Chips are built once and re-fitted to each model by `adapt`.

A chip inserts at the caret, or around the selection for a paired tag ("<strong></strong>" wraps it): the
browser does that (`INSERT_JS`, reading the textarea's selection) and sends the server the result; where it
cannot (no textarea found), the server appends the tag at the end (`insert`).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from ...types import EngineInfo
from ..page import Page
from ..strings import PRONUNCIATION_CHIPS
from ..text_hints import kanji_hint_shown

MAX_TAG_CHIPS = 8  # chips built per tab; a model's first MAX_TAG_CHIPS tags get one each
_BOX_IDS = itertools.count(1)

# (typed, chip value) → [text with the tag at the caret or around the selection, ""]; the empty second value
# tells the server the browser inserted it. `FIXED` (a JSON string or null) is the chip's text when its label is
# not what it inserts (pronunciation hints). A pair "<x></x>" wraps the selection; a single tag goes after it
# (nothing typed is replaced). The caret then sits after the tag, or inside an empty pair.
INSERT_JS = r"""(typed, chip) => {
  const fixed = FIXED;
  const tag = fixed === null ? chip : fixed;
  const box = document.querySelector("#BOX textarea");
  if (!box || !tag) return [typed, chip];
  const text = typed || "";
  const start = Math.min(box.selectionStart ?? text.length, text.length);
  const end = Math.min(box.selectionEnd ?? start, text.length);
  const pair = tag.match(/^(<([A-Za-z_]+)>)(<\/\2>)$/);
  let out, caret;
  if (pair) {
    out = text.slice(0, start) + pair[1] + text.slice(start, end) + pair[3] + text.slice(end);
    caret = start === end ? start + pair[1].length : end + tag.length;
  } else {
    out = text.slice(0, end) + tag + text.slice(end);
    caret = end + tag.length;
  }
  let tries = 0;
  const place = () => {
    if (box.value === out) { box.focus(); box.setSelectionRange(caret, caret); }
    else if (tries++ < 80) setTimeout(place, 25);
  };
  setTimeout(place, 0);
  return [out, ""];
}"""


def insert_js(box_id: str, fixed: str | None = None) -> str:
    """The chip's browser-side insertion for the text box with elem_id `box_id`."""
    return INSERT_JS.replace("FIXED", json.dumps(fixed)).replace("BOX", box_id)


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

    text.elem_id = text.elem_id or f"text-tools-box-{next(_BOX_IDS)}"  # where the chips' script finds the caret
    for button in tags:  # the chip's current value: adapt changes it with the model
        button.click(insert, inputs=[text, button], outputs=text, queue=False, api_visibility="private",
                     js=insert_js(text.elem_id))
    for kind, button in pronunciation.items():
        hint = PRONUNCIATION_CHIPS[kind][1]
        # Second input: the chip's label, or "" when the browser inserted the hint already.
        button.click(lambda typed, label, hint=hint: insert(typed, hint if label else ""), inputs=[text, button],
                     outputs=text, queue=False, api_visibility="private", js=insert_js(text.elem_id, hint))
    text.change(lambda typed: gr.update(visible=kanji_hint_shown(page.manager.info(), typed)), inputs=text,
                outputs=kanji, queue=False, api_visibility="private")
    return TextTools(tuple(tags), pronunciation, help_note, kanji)


def insert(typed: str | None, tag: str | None) -> str:
    """The text with `tag` added at its end: the server's fallback when the browser did not insert it at the
    caret (then `tag` is "")."""
    return (typed or "") + (tag or "")
