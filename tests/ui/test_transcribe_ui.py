"""The "Transcribe" buttons and the transcript check before a clone job, without a browser (a fake recogniser):
the button fills its box from the sample through the process's shared transcriber with the settings' recogniser,
says in the user's language when there is no sample or no recogniser for the language, and a transcript that
cannot be what the recording says stops a zero-shot job on the transcript box."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import soundfile as sf

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.serving.transcription import Transcript
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip

gr = pytest.importorskip("gradio")

from cosyvoice_ui.ui import strings  # noqa: E402
from cosyvoice_ui.ui.handlers import Handlers  # noqa: E402
from cosyvoice_ui.ui.requests import clone_meta, cross_meta, field_of, request_from_meta  # noqa: E402
from cosyvoice_ui.ui.transcribe import add_transcribe, transcribe_file  # noqa: E402

SPOKEN = "希望你以后能够做的比我还好呦。"


class FakeTranscriber:
    """Hears `text`, or raises `error`; records what each call asked for."""

    def __init__(self, text: str = "Hello there, this is my voice.", error: InvalidRequest | None = None) -> None:
        self.text = text
        self.error = error
        self.calls: list[dict] = []

    def transcribe(self, audio, language=None, progress=None, backend=None) -> Transcript:
        self.calls.append({"seconds": round(audio.duration, 2), "language": language, "backend": backend})
        if progress is not None:
            from cosyvoice_ui.types import ProgressEvent

            progress(ProgressEvent("transcribe", 0.5, "transcribing"))
        if self.error is not None:
            raise self.error
        return Transcript(self.text, language or "en", backend or "fake")


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("sample") / "sample.wav"
    clip = voice_clip(4.0)
    sf.write(path, clip.samples, clip.sample_rate)
    return str(path)


def test_transcribe_file_reads_the_recording_and_passes_language_and_recogniser(sample: str) -> None:
    fake = FakeTranscriber()
    events = []
    heard = transcribe_file(fake, sample, "zh", "whisper-small", events.append)
    assert heard.text == "Hello there, this is my voice." and not heard.rough
    assert fake.calls == [{"seconds": 4.0, "language": "zh", "backend": "whisper-small"}]
    assert events and events[0].stage == "transcribe"


def test_no_sample_is_a_clear_message_in_both_languages() -> None:
    with pytest.raises(InvalidRequest) as info:
        transcribe_file(FakeTranscriber(), None)
    assert info.value.code == "asr_no_audio" and "upload or record" in info.value.message
    assert strings.message(info.value, "zh") == "没有可识别的声音样本：请先上传或录制。"


def test_pocketsphinx_alone_says_it_cannot_do_chinese(sample: str, tmp_path: Path) -> None:
    pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx==5.1.1")
    from cosyvoice_ui.serving.transcription import Transcriber

    with pytest.raises(InvalidRequest) as info:
        transcribe_file(Transcriber(tmp_path), sample, "zh")  # nothing downloaded: English only
    assert info.value.code == "asr_language_unsupported"
    message = strings.message(info.value, "zh")
    assert "只懂英语" in message and "whisper-small" in message


def button_app(fake: FakeTranscriber, language=None, backend: str | None = None):
    """A page with one sample, one transcript box and its Transcribe button."""
    with gr.Blocks() as demo:
        lang = gr.Textbox(value="en", visible=False)
        options = SimpleNamespace(lang=lang, language=lambda data: strings.language_of(data[lang]))
        handlers = SimpleNamespace(transcriber=lambda: fake, asr_backend=lambda: backend)
        page = SimpleNamespace(t=strings.i18n(), options=options, handlers=handlers)
        audio = gr.Audio(type="filepath")
        box = gr.Textbox()
        chosen = gr.Dropdown(["en", "zh"], value="zh") if language == "component" else language
        button = add_transcribe(page, audio, box, chosen)
    fn = next(f for f in demo.fns.values() if f.name == "transcribe")
    return fn, audio, box, lang, button, chosen


def test_the_button_fills_its_box_and_says_when_the_transcript_is_rough(sample: str) -> None:
    fake = FakeTranscriber()
    fn, audio, box, lang, button, _ = button_app(fake, language="en", backend="pocketsphinx")
    box_out, note = fn.outputs
    assert box_out is box and fn.api_visibility == "private" and '"key": "transcribe"' in str(button.value)
    assert '"key": "transcript_rough"' in str(note.value) and note.visible is False  # hidden until needed
    result = fn.fn({audio: sample, lang: "en-US"})
    assert result[box] == "Hello there, this is my voice." and result[note]["visible"] is True
    assert fake.calls[0]["language"] == "en" and fake.calls[0]["backend"] == "pocketsphinx"
    # A Whisper transcript needs no warning (and hides one left from an earlier rough transcript).
    fn, audio, box, lang, _, _ = button_app(FakeTranscriber(), language="en", backend="whisper-small")
    assert fn.fn({audio: sample, lang: "en"})[fn.outputs[1]]["visible"] is False


@pytest.mark.parametrize("lang, words", [("en", ("pocketsphinx", "correct", "whisper-small")),
                                         ("zh", ("pocketsphinx", "核对", "whisper-small"))])
def test_the_rough_note_tells_what_to_do_in_both_languages(lang: str, words: tuple[str, ...]) -> None:
    text = strings.label("transcript_rough", lang)
    assert all(word in text for word in words), text


def test_the_language_can_come_from_a_widget(sample: str) -> None:
    fake = FakeTranscriber()
    fn, audio, box, lang, _, chosen = button_app(fake, language="component")
    fn.fn({audio: sample, lang: "en", chosen: "zh"})
    assert fake.calls[0]["language"] == "zh"


def test_a_recogniser_error_is_shown_in_the_browsers_language(sample: str) -> None:
    error = InvalidRequest("asr_language_unsupported", "pocketsphinx understands only English", language="ko")
    fn, audio, _, lang, _, _ = button_app(FakeTranscriber(error=error))
    with pytest.raises(gr.Error) as info:
        fn.fn({audio: sample, lang: "zh-CN"})
    assert "只懂英语" in str(info.value) and "ko" in str(info.value)
    with pytest.raises(gr.Error) as missing:
        fn.fn({audio: None, lang: "en"})
    assert "no voice sample to transcribe" in str(missing.value)


def test_the_handlers_use_the_shared_transcriber_and_the_settings_recogniser(tmp_path: Path, monkeypatch) -> None:
    from cosyvoice_ui.serving import transcription

    made = []
    monkeypatch.setattr(transcription, "shared_transcriber", lambda models_dir, *a, **k: made.append(models_dir)
                        or "shared")
    manager = ModelManager("fake", loader=lambda *a: FakeEngine(), idle_unload_s=0)
    handlers = Handlers(manager, Settings(models_dir=tmp_path / "models", asr_model="whisper-base"), tmp_path / "o")
    assert handlers.transcriber() == "shared" and made == [tmp_path / "models"]
    assert handlers.asr_backend() == "whisper-base"
    assert Handlers(manager, Settings(), tmp_path / "o2").asr_backend() is None  # "auto"


# --- the transcript against the recording, before a clone job -------------------------------------------------

@pytest.fixture()
def handlers(tmp_path: Path) -> Handlers:
    engine = FakeEngine()
    manager = ModelManager("fake", loader=lambda *a: engine, idle_unload_s=0, describe_model=lambda m: engine.info)
    return Handlers(manager, Settings(), tmp_path / "out")


def test_a_transcript_too_long_for_the_recording_stops_the_clone(handlers: Handlers, sample: str) -> None:
    long_text = "This transcript goes on and on about many things the recording never says at all. " * 3
    with pytest.raises(InvalidRequest) as info:
        handlers.check(request_from_meta(clone_meta(sample, None, long_text, "Hello.")))
    assert info.value.code == "transcript_mismatch" and field_of(info.value) == "prompt_text"
    assert "more words than the recording" in strings.message(info.value, "en")
    assert "识别文字" in strings.message(info.value, "zh") and "4.0 秒" in strings.message(info.value, "zh")


def test_a_transcript_too_short_for_the_recording_stops_the_clone(handlers: Handlers, tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    clip = voice_clip(25.0)
    sf.write(path, clip.samples, clip.sample_rate)
    with pytest.raises(InvalidRequest) as info:
        handlers.check(request_from_meta(clone_meta(str(path), None, "Hi.", "Hello.")))
    assert info.value.code == "transcript_mismatch" and info.value.params["problem"] == "too_short"


def test_a_fitting_transcript_and_voices_without_a_recording_pass(handlers: Handlers, sample: str) -> None:
    handlers.check(request_from_meta(clone_meta(sample, None, SPOKEN, "Hello.")))
    handlers.check(request_from_meta(cross_meta("cross", sample, None, None, None, "Hello.")))  # needs no transcript


def test_the_clone_tabs_validator_marks_the_transcript_box(tmp_path: Path, sample: str) -> None:
    from cosyvoice_ui.ui.layout import build_ui

    engine = FakeEngine()
    manager = ModelManager("fake", loader=lambda *a: engine, idle_unload_s=0, describe_model=lambda m: engine.info)
    app = build_ui(manager, Settings(), output_dir=tmp_path / "out")
    key = lambda c: getattr(getattr(c, "label", None), "key", "")  # noqa: E731
    run = next(fn for fn in app.fns.values() if fn.name == "run" and fn.validator is not None
               and "prompt_text" in {key(c) for c in fn.inputs})
    data = {c: c.value for c in run.inputs}
    by_key = {key(c): c for c in run.inputs}
    data[by_key["prompt_audio"]] = sample
    data[by_key["text"]] = "Hello there."
    data[by_key["prompt_text"]] = "Far too many words for a four second sample of speech, it just keeps going. " * 3
    bad = {key(c): v["message"] for c, v in run.validator(data).items() if not v["is_valid"]}
    assert list(bad) == ["prompt_text"] and "Transcribe" in bad["prompt_text"]
    transcribe = [fn for fn in app.fns.values() if fn.name == "transcribe"]
    assert transcribe and by_key["prompt_text"] in transcribe[0].outputs  # the clone tab's button fills that box
