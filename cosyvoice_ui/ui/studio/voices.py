"""The voice rows of the Script and Audiobook tabs: for one name, a kind of voice (default, saved, preset,
sample recording with its transcript and a Transcribe button) and an optional style instruction.

A bounded set of rows is built once (`MAX_VOICES`) and shown or hidden to fit the script's names, so the page
can re-fit them to the loaded model (`adapt`): presets only where the model has them, instructions only where
it follows them, clones only where it clones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...studio.voice_map import VoiceChoice
from ...studio.workspace import VoiceRow
from ...types import EngineInfo, Mode
from ..markup import MARKDOWN_OPTIONS, plain
from ..transcribe import add_transcribe

MAX_VOICES = 8
CLONE_MODES = (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL)


def can_clone(info: EngineInfo | None) -> bool:
    return info is None or any(mode in info.modes for mode in CLONE_MODES)


def has_presets(info: EngineInfo | None) -> bool:
    return info is None or bool(info.presets)


def takes_instruction(info: EngineInfo | None) -> bool:
    return info is not None and Mode.INSTRUCT in info.modes


def kinds(info: EngineInfo | None, saved_enabled: bool) -> list[str]:
    """The kinds of voice the model can speak in (default first)."""
    out = ["default"]
    if saved_enabled and can_clone(info):
        out.append("saved")
    if has_presets(info):
        out.append("preset")
    if can_clone(info):
        out.append("sample")
    return out


@dataclass(frozen=True)
class VoiceRowWidgets:
    group: object
    name: object  # a Markdown with the speaker's name
    kind: object
    saved: object
    preset: object
    sample_box: object  # the sample, its transcript and the Transcribe button
    sample: object
    transcript: object
    instruct: object
    consent: object  # beside the sample: its speaker agreed (shown where the server requires it)

    @property
    def inputs(self) -> set:
        return {self.kind, self.saved, self.preset, self.sample, self.transcript, self.instruct, self.consent}

    @property
    def outputs(self) -> list:
        return [self.group, self.name, self.kind, self.saved, self.preset, self.sample_box, self.sample,
                self.transcript, self.instruct, self.consent]

    def value(self, data: dict) -> VoiceRow:
        return VoiceRow(data[self.kind] or "default", data[self.saved] or "", data[self.preset] or "",
                        data[self.sample] or None, data[self.transcript] or "", data[self.instruct] or "",
                        bool(data[self.consent]))

    def shown(self, kind: str) -> dict:
        """Which of the row's widgets the kind needs."""
        import gradio as gr

        return {self.saved: gr.update(visible=kind == "saved"), self.preset: gr.update(visible=kind == "preset"),
                self.sample_box: gr.update(visible=kind == "sample")}

    def fill(self, name: str | None, choice: VoiceChoice | None, sample_path: Path | None, info: EngineInfo | None,
             saved_enabled: bool, saved_ids: list[str]) -> dict:
        """The row showing `name`'s voice (hidden when `name` is None)."""
        import gradio as gr

        if name is None:
            return {self.group: gr.update(visible=False)}
        choice = choice or VoiceChoice()
        allowed = kinds(info, saved_enabled)
        kind = choice.kind if choice.kind in allowed else "default"
        presets = list(info.presets) if info is not None else []
        return {
            self.group: gr.update(visible=True),
            self.name: gr.update(value=f"**{plain(name)}**"),
            self.kind: gr.update(value=kind),
            self.saved: gr.update(value=choice.value if kind == "saved" and choice.value in saved_ids else "",
                                  visible=kind == "saved"),
            self.preset: gr.update(choices=presets, value=choice.value if choice.value in presets else
                                   (presets[0] if presets else None), visible=kind == "preset"),
            self.sample_box: gr.update(visible=kind == "sample"),
            self.sample: gr.update(value=str(sample_path) if sample_path is not None else None),
            self.transcript: gr.update(value=choice.transcript),
            self.instruct: gr.update(value=choice.instruct, visible=takes_instruction(info)),
            self.consent: gr.update(value=choice.consent),
        }

    def adapt(self, info: EngineInfo | None, t, saved_enabled: bool) -> dict:
        import gradio as gr

        presets = list(info.presets) if info is not None else []
        return {self.kind: gr.update(choices=kind_choices(t, kinds(info, saved_enabled))),
                self.preset: gr.update(choices=presets),
                self.instruct: gr.update(visible=takes_instruction(info))}


def choice_of(row: VoiceRow) -> tuple[VoiceChoice, str | None]:
    """What a row shows, as (choice, sample file) — to move it to another place when the names change."""
    kind = row.kind if row.kind in ("default", "saved", "preset", "sample") else "default"
    value = {"saved": row.saved, "preset": row.preset}.get(kind, "")
    return VoiceChoice(kind, value or "", row.transcript or "", row.instruct or "", bool(row.consent)), row.sample


def kind_choices(t, allowed: list[str]) -> list[tuple[object, str]]:
    return [(t(f"studio_kind_{kind}"), kind) for kind in allowed]


def build_voice_row(page, visible: bool = True, show_name: bool = True) -> VoiceRowWidgets:
    """One voice row, wired: the kind shows the widgets it needs; the sample has a Transcribe button."""
    import gradio as gr

    t = page.t
    info = page.manager.info()
    allowed = kinds(info, page.saved.enabled)
    presets = list(info.presets) if info is not None else []
    with gr.Group(visible=visible, elem_classes=["studio-voice"]) as group:
        with gr.Row():
            name = gr.Markdown("", visible=show_name, elem_classes=["studio-voice-name"], **MARKDOWN_OPTIONS)
            # A dropdown that keeps a value the new model lacks (the render then says why it cannot use it).
            kind = gr.Dropdown(kind_choices(t, allowed), value="default", label=t("studio_kind"), scale=3,
                               allow_custom_value=True, elem_classes=["studio-voice-kind"])
        with gr.Row():
            saved = page.saved.dropdown()
            saved.visible = False
            preset = gr.Dropdown(presets, value=presets[0] if presets else None, label=t("studio_preset"),
                                 visible=False, allow_custom_value=True)
            instruct = gr.Textbox(label=t("studio_instruct"), lines=1, visible=takes_instruction(info))
        with gr.Column(visible=False) as sample_box:
            sample = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("studio_sample"))
            consent = page.consent_box()
            transcript = gr.Textbox(label=t("studio_transcript"), lines=1)
            add_transcribe(page, sample, transcript)
    row = VoiceRowWidgets(group, name, kind, saved, preset, sample_box, sample, transcript, instruct, consent)
    kind.change(lambda value: list(row.shown(value or "default").values()), inputs=kind,
                outputs=[saved, preset, sample_box], queue=False, api_visibility="private")
    return row


@dataclass(frozen=True)
class VoiceRows:
    """The Script tab's rows, and which name each shows (`speakers`, a gr.State list)."""

    rows: list[VoiceRowWidgets]
    speakers: object
    more: object  # the note shown when the script has more names than rows

    @property
    def inputs(self) -> set:
        return {self.speakers, *(component for row in self.rows for component in row.inputs)}

    @property
    def outputs(self) -> list:
        return [self.speakers, self.more, *(component for row in self.rows for component in row.outputs)]

    def values(self, data: dict) -> dict[str, VoiceRow]:
        names = list(data[self.speakers] or [])
        return {name: row.value(data) for name, row in zip(names, self.rows)}

    def fill(self, project, info: EngineInfo | None, saved_enabled: bool, saved_ids: list[str], lang: str) -> dict:
        """Rows for `project`'s names (None: every row hidden)."""
        names = project.speakers() if project is not None else []
        voices = {}
        for name in names:
            choice = project.voice_for(name)
            sample = None
            if choice.kind == "sample" and choice.value:
                path = project.voices_dir / Path(choice.value).name
                sample = path if path.is_file() else None
            voices[name] = (choice, sample)
        return self.fill_names(names, voices, info, saved_enabled, saved_ids, lang)

    def fill_names(self, names: list[str], voices: dict, info: EngineInfo | None, saved_enabled: bool,
                   saved_ids: list[str], lang: str) -> dict:
        """Rows for `names`; `voices`: name → (VoiceChoice, sample file or None) (missing: the default voice)."""
        import gradio as gr

        from .. import strings

        updates = {self.speakers: names[:MAX_VOICES],
                   self.more: gr.update(value=strings.label("studio_more_voices", lang).format(n=MAX_VOICES),
                                        visible=len(names) > MAX_VOICES)}
        for index, row in enumerate(self.rows):
            name = names[index] if index < len(names) else None
            choice, sample = voices.get(name, (None, None)) if name is not None else (None, None)
            updates.update(row.fill(name, choice, sample, info, saved_enabled, saved_ids))
        return updates

    def adapt(self, info: EngineInfo | None, t, saved_enabled: bool) -> dict:
        return {component: update for row in self.rows for component, update in
                row.adapt(info, t, saved_enabled).items()}


def build_voice_rows(page) -> VoiceRows:
    import gradio as gr

    rows = [build_voice_row(page, visible=False) for _ in range(MAX_VOICES)]
    more = gr.Markdown(visible=False)
    return VoiceRows(rows, gr.State([]), more)
