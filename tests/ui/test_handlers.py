"""UI handlers on a tiny random model: every validation message (en + zh), synthesis, streaming,
history entries, stop. The Gradio layout itself is exercised by the browser test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import LoadOptions
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.ui import strings
from cosyvoice_ui.ui.handlers import Handlers, OutputOptions
from cosyvoice_ui.ui.requests import (clone_meta, cross_meta, field_of, request_from_meta, sft_meta, vc_meta)


@pytest.fixture(scope="module")
def handlers(tiny_sft: Path, tmp_path_factory) -> Handlers:
    manager = ModelManager(str(tiny_sft), load_options=LoadOptions(device="cpu"), idle_unload_s=0)
    return Handlers(manager, Settings(max_text_chars=400), tmp_path_factory.mktemp("out"))


@pytest.fixture(scope="module")
def wavs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("wavs")
    files = {}

    def write(name: str, seconds: float, rate: int = 16000, silent: bool = False, stereo: bool = False) -> None:
        clip = voice_clip(seconds, rate)
        data = np.zeros_like(clip.samples) if silent else clip.samples
        if stereo:
            data = np.stack([data, data * 0.5], axis=1)
        path = folder / f"{name}.wav"
        sf.write(path, data, rate)
        files[name] = str(path)

    write("good", 4.0)
    write("stereo44k", 4.0, rate=44100, stereo=True)
    write("short", 2.0)
    write("long", 31.0)
    write("lowrate", 4.0, rate=8000)
    write("silent", 4.0, silent=True)
    broken = folder / "broken.wav"
    broken.write_text("this is not audio")
    files["broken"] = str(broken)
    return files


def problem(handlers: Handlers, meta: dict, **kw) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        handlers.check(request_from_meta(meta, **kw))
    return info.value


CASES = [
    # (meta builder, code, field the UI marks)
    (lambda w: clone_meta(None, None, "hi", "hello"), "prompt_missing", "prompt"),
    (lambda w: clone_meta(w["short"], None, "hi", "hello"), "prompt_too_short", "prompt"),
    (lambda w: clone_meta(w["long"], None, "hi", "hello"), "prompt_too_long", "prompt"),
    (lambda w: clone_meta(w["lowrate"], None, "hi", "hello"), "prompt_low_rate", "prompt"),
    (lambda w: clone_meta(w["silent"], None, "hi", "hello"), "prompt_silent", "prompt"),
    (lambda w: clone_meta(w["good"], None, "hi", ""), "text_empty", "text"),
    (lambda w: clone_meta(w["good"], None, "hi", "x" * 401), "text_too_long", "text"),
    (lambda w: clone_meta(w["good"], None, "", "hello"), "transcript_missing", "prompt_text"),
    (lambda w: cross_meta("instruct", None, None, "中文女", "", "hello"), "mode_unsupported", "mode"),
    (lambda w: sft_meta("nobody", "hello"), "speaker_unknown", "speaker"),
    (lambda w: vc_meta(None, w["good"], None), "prompt_missing", "source"),
]


@pytest.mark.parametrize(("build", "code", "field"), CASES)
def test_validation_messages(handlers: Handlers, wavs, build, code: str, field: str) -> None:
    error = problem(handlers, build(wavs))
    assert error.code == code
    assert field_of(error) == field
    english, chinese = strings.message(error, "en"), strings.message(error, "zh")
    assert english and chinese and english != chinese
    assert any("\u4e00" <= ch <= "\u9fff" for ch in chinese), "the zh message is in Chinese"


def test_mode_message_names_the_model_that_can(handlers: Handlers) -> None:
    error = problem(handlers, cross_meta("instruct", None, None, "中文女", "speak sadly", "hello"))
    assert "Instruct" in strings.message(error, "en") and "Instruct" in strings.message(error, "zh")


def test_unreadable_audio_is_a_clear_error(handlers: Handlers, wavs) -> None:
    with pytest.raises(InvalidRequest) as info:
        request_from_meta(clone_meta(wavs["broken"], None, "hi", "hello"))
    assert info.value.code == "audio_unreadable" and "WAV" in str(info.value)


def test_missing_instruct_text_on_an_instruct_model(tiny_instruct: Path, tmp_path: Path) -> None:
    manager = ModelManager(str(tiny_instruct), load_options=LoadOptions(device="cpu"), idle_unload_s=0)
    h = Handlers(manager, Settings(), tmp_path)
    error = problem(h, cross_meta("instruct", None, None, "中文女", "  ", "hello"))
    assert error.code == "instruct_missing" and field_of(error) == "instruct_text"


def test_stereo_and_44k_prompt_is_accepted_silently(handlers: Handlers, wavs) -> None:
    handlers.check(request_from_meta(cross_meta("cross", wavs["stereo44k"], None, None, None, "hello there")))


def test_run_produces_audio_file_and_history(handlers: Handlers, wavs) -> None:
    meta = clone_meta(wavs["good"], None, "希望你以后能够做的比我还好呦。", "Hello world.")
    outputs = list(handlers.run(request_from_meta(meta, seed=3), OutputOptions(fmt="mp3"), [], None, None, meta))
    assert len(outputs) == 1
    (rate, wave), path, info, history = outputs[0]
    assert rate == 22050 and len(wave) > 0 and np.isfinite(wave).all()
    assert Path(path).suffix == ".mp3" and Path(path).stat().st_size > 0
    assert "seed 3" in info
    assert history[0]["mode"] == "zero_shot" and history[0]["file"] == path and history[0]["seed"] == 3
    assert history[0]["request"]["prompt"] == wavs["good"]


def test_streaming_yields_chunks_before_the_final_file(handlers: Handlers) -> None:
    import gradio as gr

    text = " ".join(["This sentence is long enough to stream in more than one chunk today."] * 3)
    meta = sft_meta("英文女", text)
    outputs = list(handlers.run(request_from_meta(meta, seed=1, stream=True), OutputOptions(), [], None, None, meta))
    streamed = [o for o in outputs if isinstance(o[0], tuple)]
    assert len(streamed) >= 2, "several audio chunks are streamed"
    final = outputs[-1]
    assert final[0] == gr.skip() and Path(final[1]).is_file(), "the last yield carries the whole file"


def test_loudness_normalised_output_is_near_target(handlers: Handlers) -> None:
    from cosyvoice_ui.audio import integrated_loudness

    meta = sft_meta("中文女", "你好，世界。今天天气很好，我们出去走走吧。")
    outputs = list(handlers.run(request_from_meta(meta, seed=2), OutputOptions(normalize=True), [], None, None, meta))
    data, rate = sf.read(outputs[-1][1])
    loudness = integrated_loudness(data.astype(np.float32), rate)
    assert loudness == pytest.approx(-20.0, abs=1.5) or np.max(np.abs(data)) > 0.95  # peak-limited stays quieter


def test_stop_flag_cancels_the_job_as_a_state_not_an_error(handlers: Handlers) -> None:
    class Req:
        session_hash = "s1"
        headers = {"accept-language": "zh-CN"}

    meta = sft_meta("中文女", "你好。" * 30)
    run = handlers.generate(request_from_meta(meta, seed=1, stream=True), OutputOptions(), [], Req(), None, meta)
    next(run)  # the job has started and streamed once
    handlers.stop(Req())
    *_, (audio, path, subtitles, info, takes, history) = list(run)  # no gr.Error: Stop is not a failure
    assert info == "已停止。" and takes == ""
    skip = {"__type__": "update"}
    assert audio == path == subtitles == history == skip  # the last result and the history stay as they were


def test_saved_voice_from_the_ui_is_used_by_id(tiny_sft: Path, tmp_path: Path) -> None:
    from cosyvoice_ui.serving.voice_service import register_all, save_voice
    from cosyvoice_ui.serving.voices import VoiceLibrary

    library = VoiceLibrary(tmp_path / "voices")
    manager = ModelManager(str(tiny_sft), load_options=LoadOptions(device="cpu"), idle_unload_s=0,
                           on_load=lambda engine: register_all(engine, library))
    h = Handlers(manager, Settings(), tmp_path / "out", voices=library)
    voice, ready = save_voice(manager, library, "My voice", voice_clip(4.0), "希望你以后能够做的比我还好呦。")
    assert ready and voice.id in library.ids()
    meta = clone_meta(None, voice.id, "", "Hello again.")  # no sample, no transcript: the saved ones are used
    outputs = list(h.run(request_from_meta(meta, seed=4), OutputOptions(), [], None, None, meta))
    assert len(outputs[-1][0][1]) > 0
    with pytest.raises(InvalidRequest) as info:  # a saved voice is not a preset speaker
        h.check(request_from_meta(sft_meta(voice.id, "hello")))
    assert info.value.code == "speaker_unknown"
