"""The "Saved voice" dropdowns of the clone, cross-lingual and conversion tabs, and saving a sample as a
voice: one list for all of them, refreshed on page load and after each save."""

# No `from __future__ import annotations`: Gradio finds `progress=gr.Progress()` by its default value.
from ..errors import InvalidRequest
from ..serving.jobs import SpeechJobs
from . import strings
from .handlers import caller_of
from .options import Options
from .requests import prompt_from_file
from .markup import refusal


class SavedVoices:
    """`library`: the process's `VoiceLibrary`, or None when saved voices are off."""

    def __init__(self, library, t) -> None:
        self.library = library
        self.t = t
        self.dropdowns: list = []

    @property
    def enabled(self) -> bool:
        return self.library is not None

    def choices(self) -> list[tuple[str, str]]:
        saved = [(f"{v.name} ({v.id})" if v.name != v.id else v.id, v.id) for v in self.library.list()] \
            if self.library is not None else []
        return [("—", "")] + saved

    def dropdown(self):
        """A new "Saved voice" dropdown, kept in step with the others."""
        import gradio as gr

        found = gr.Dropdown(self.choices(), value="", label=self.t("saved_voice"))
        self.dropdowns.append(found)
        return found

    def wire(self, page_blocks, speech: SpeechJobs, options: Options, *, button, prompt, transcript, name,
             select, consent) -> None:
        """Save `prompt` + `transcript` under `name` on `button` (`consent`: the box beside the sample; the one
        saving path, `SpeechJobs.save_voice`, applies the consent rule), then pick the new voice in `select`.
        Call it once every dropdown exists."""
        import gradio as gr

        dropdowns = list(self.dropdowns)

        def save(data: dict, request: gr.Request, progress=gr.Progress()):
            lang = options.language(data)
            label = (data[name] or "").strip()
            if not label:
                raise refusal(strings.label("voice_name_missing", lang), "voice_name_missing")
            try:
                audio = prompt_from_file(data[prompt])
                if audio is None:
                    raise InvalidRequest("prompt_missing", "no prompt audio was given: upload or record the voice "
                                         "(3-30 seconds of clear speech)", what="prompt audio")
                voice, _ = speech.save_voice(label, audio, data[transcript] or "", bool(data[consent]),
                                             caller_of(request), self.library)
            except InvalidRequest as exc:
                raise refusal(strings.message(exc, lang), exc) from None
            gr.Info(strings.label("voice_saved", lang).format(name=voice.name))
            return [gr.update(choices=self.choices(), value=voice.id if d is select else None) for d in dropdowns]

        def refresh():
            return [gr.update(choices=self.choices()) for _ in dropdowns]

        button.click(save, inputs={prompt, transcript, name, consent, options.lang}, outputs=dropdowns,
                     api_visibility="private")
        page_blocks.load(refresh, outputs=dropdowns, queue=False, api_visibility="private")
