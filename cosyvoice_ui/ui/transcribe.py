"""The "Transcribe" button under a transcript box: it fills the box with the words of a voice sample.

Every tab with a transcript (the clone tab, the Script tab's voice samples) calls `add_transcribe`; the work is
the process's one `serving.transcription.Transcriber` (shared with the REST route and the CLI), reached through
`Handlers.transcriber()`.
"""

# No `from __future__ import annotations`: Gradio finds `progress=gr.Progress()` by its default value.
from ..audio import TRANSCRIPTION_LIMITS
from ..errors import InvalidRequest
from ..serving.transcription import Transcript
from ..types import ProgressEvent
from . import strings
from .handlers import progress_adapter
from .requests import prompt_from_file
from .markup import refusal


def transcribe_file(transcriber, path: str | None, language: str | None = None, backend: str | None = None,
                    progress=None) -> Transcript:
    """What is said in the recording at `path` (a gr.Audio filepath value): its text, and whether a rough
    recogniser heard it; InvalidRequest when there is no recording, nothing to hear, or no recogniser for
    `language`."""
    audio = prompt_from_file(path, limits=TRANSCRIPTION_LIMITS)
    if audio is None:
        raise InvalidRequest("asr_no_audio", "there is no voice sample to transcribe: upload or record one first")
    if progress is not None:
        progress(ProgressEvent("transcribe", 0.0, f"transcribing {audio.duration:.1f} s"))
    return transcriber.transcribe(audio, language=language, progress=progress, backend=backend)


def add_transcribe(page, audio_component, textbox, language=None):
    """A "Transcribe" button (placed where this is called, under `textbox`) that fills `textbox` from
    `audio_component` (a gr.Audio of type "filepath"). `language`: a code ("en", "zh"; None = detect) or a
    component whose value is one. Shows progress, and a message in the user's language when no recogniser
    can do the language. A rough transcript (pocketsphinx) comes with a note under the button, in the user's
    language, to check and correct it. Returns the button."""
    import gradio as gr

    options = page.options
    button = gr.Button(page.t("transcribe"), size="sm", variant="secondary")
    rough_note = gr.Markdown(page.t("transcript_rough"), visible=False, elem_classes=["transcript-rough"])
    language_input = language if isinstance(language, gr.components.Component) else None
    inputs = {audio_component, options.lang} | ({language_input} if language_input is not None else set())

    def transcribe(data: dict, progress=gr.Progress()):
        lang = options.language(data)
        wanted = data[language_input] if language_input is not None else language
        try:
            heard = transcribe_file(page.handlers.transcriber(), data[audio_component], wanted or None,
                                    page.handlers.asr_backend(), progress_adapter(progress, lang))
        except InvalidRequest as exc:
            raise refusal(strings.message(exc, lang), exc) from None
        return {textbox: heard.text, rough_note: gr.update(visible=heard.rough)}

    button.click(transcribe, inputs=inputs, outputs=[textbox, rough_note], concurrency_limit=1,
                 concurrency_id="transcribe", api_visibility="private")
    return button
