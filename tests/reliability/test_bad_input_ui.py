"""The bad-input corpus through the UI without a browser (tiny SFT model): the tabs' Generate events (their
validator and their run), the save-voice event, the public Gradio API functions, and Gradio's upload route
for a file over the cap. Each refusal stops with a message (gr.Error, and the validator's verdict where one
runs) that names the problem and leaks nothing; the next valid request is served normally."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from cosyvoice_ui.serving.voice_service import delete_voice
from cosyvoice_ui.serving.voices import VoiceLibrary
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.web.server import create_manager

from .corpus import (AUDIO_CASES, SPEAKER, TEXT_CASES, TRANSCRIPT, TRAVERSAL, UPLOAD_CAP_MB, VALID_TEXT, AudioCase,
                     Refusal, TextCase, ValueCase, check_clean, value_cases, voice, wav_bytes)
from tests.web_client import LOOPBACK

gr = pytest.importorskip("gradio")

READ_AUDIO_CASES = [case for case in AUDIO_CASES if not case.over_cap]
# Refused only inside the job (the model's text frontend), or when the result is written: no validator sees them.
IN_JOB = ("text_unspeakable", "bad_format")


@pytest.fixture(scope="module")
def ui(tiny_sft: Path, tmp_path_factory):
    from cosyvoice_ui.ui.layout import build_ui

    work = tmp_path_factory.mktemp("ui-corpus")
    # Take checks off: the tiny model's random speech is never the right length, and retries are not what this
    # corpus tests.
    settings = Settings(model_dir=tiny_sft, voices_dir=work / "voices", device="cpu", idle_unload_s=0,
                        glossary_dir=work / "glossaries", projects_dir=work / "projects", check_takes=False,
                        extra={"output_dir": str(work / "outputs")})
    manager = create_manager(settings)
    library = VoiceLibrary(settings.voices_dir)
    demo = build_ui(manager, settings, output_dir=work / "outputs", voices=library)
    return SimpleNamespace(demo=demo, work=work, manager=manager, library=library, settings=settings)


def label_key(component) -> str:
    return getattr(getattr(component, "label", None), "key", "") or ""


def event(ui, name: str, *keys: str, without: tuple[str, ...] = ()):
    """The event `name` whose inputs carry the label keys `keys` (and none of `without`)."""
    for fn in ui.demo.fns.values():
        labels = {label_key(c) for c in fn.inputs}
        if fn.name == name and set(keys) <= labels and not set(without) & labels and \
                (name != "run" or fn.validator is not None):
            return fn
    raise AssertionError(f"no {name} event with {keys}")


def api(ui, name: str):
    return next(fn for fn in ui.demo.fns.values() if fn.api_name == name)


def values(fn, **by_key) -> dict:
    """A value for every input of `fn`: the named ones by their label key, the others their defaults."""
    return {c: by_key[label_key(c)] if label_key(c) in by_key else c.value for c in fn.inputs}


def upload(ui, case: AudioCase) -> str:
    """The case's bytes as the file Gradio hands a handler (type="filepath")."""
    folder = ui.work / "uploads" / case.id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / case.filename
    path.write_bytes(case.make())
    return str(path)


def assert_stops(ui, fn, data: dict, expect: Refusal, validated: bool = True) -> None:
    """The run stops with gr.Error naming the problem; the validator (when it sees it) marks it too."""
    if validated and fn.validator is not None:
        flagged = [v["message"] for v in fn.validator(data).values() if not v["is_valid"]]
        assert len(flagged) == 1, flagged
        assert all(w.lower() in flagged[0].lower() for w in expect.words), flagged[0]
        check_clean(flagged[0], str(ui.work))
    with pytest.raises(gr.Error) as stopped:
        list(fn.fn(data, None, None))
    message = stopped.value.message
    assert all(w.lower() in message.lower() for w in expect.words), message
    check_clean(message, str(ui.work))


def assert_audio(outputs: list) -> None:
    audio, download, _subtitles, info, _takes, history = outputs[-1]
    rate, wave = audio
    assert download["visible"] is True  # the tab's download box appears with its file
    assert rate == 22050 and len(wave) > 0 and np.isfinite(wave).all() and Path(download["value"]).is_file()


def assert_still_serving(ui) -> None:
    """The next valid request on the preset tab is served normally (unseeded: the model runs)."""
    fn = event(ui, "run", "speaker", "text", without=("submode",))
    assert_audio(list(fn.fn(values(fn, speaker=SPEAKER, text=VALID_TEXT), None, None)))


# --- audio ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", READ_AUDIO_CASES, ids=lambda c: c.id)
def test_audio_on_the_clone_tab(ui, case: AudioCase) -> None:
    fn = event(ui, "run", "prompt_audio", "prompt_text")
    data = values(fn, prompt_audio=upload(ui, case), prompt_text=TRANSCRIPT, text=VALID_TEXT, seed=1)
    if case.expect is None:
        assert all(v["is_valid"] for v in fn.validator(data).values())
        assert_audio(list(fn.fn(data, None, None)))
    else:
        assert_stops(ui, fn, data, case.expect)
    assert_still_serving(ui)


@pytest.mark.parametrize("case", READ_AUDIO_CASES, ids=lambda c: c.id)
def test_audio_saved_as_a_voice(ui, case: AudioCase) -> None:
    fn = event(ui, "save", "prompt_audio", "voice_name")
    data = values(fn, prompt_audio=upload(ui, case), prompt_text="hello", voice_name=f"ui {case.id}")
    before = set(ui.library.ids())
    if case.expect is None:
        fn.fn(data, None)  # no gr.Request: a handler called directly, as on loopback
        added = set(ui.library.ids()) - before
        assert len(added) == 1 and delete_voice(ui.manager, ui.library, added.pop())
    else:
        with pytest.raises(gr.Error) as stopped:
            fn.fn(data, None)
        assert all(w.lower() in stopped.value.message.lower() for w in case.expect.words), stopped.value.message
        check_clean(stopped.value.message, str(ui.work))
        assert set(ui.library.ids()) == before, "a refused recording left a voice behind"
    assert_still_serving(ui)


def file_data(path: str) -> dict:
    return {"path": path, "orig_name": Path(path).name, "meta": {"_type": "gradio.FileData"}}


def api_refusal(fn, *args, expect: Refusal, ui) -> None:
    with pytest.raises(gr.Error) as stopped:
        fn.fn(*args)
    message = stopped.value.message
    assert all(w.lower() in message.lower() for w in expect.words), message
    check_clean(message, str(ui.work))


@pytest.mark.parametrize("case", READ_AUDIO_CASES, ids=lambda c: c.id)
def test_audio_through_the_gradio_api_save_voice(ui, case: AudioCase) -> None:
    fn = api(ui, "save_voice")
    audio = file_data(upload(ui, case))
    if case.expect is None:
        saved = json.loads(fn.fn(f"api {case.id}", audio, "hello"))  # the endpoint answers JSON text
        assert delete_voice(ui.manager, ui.library, saved["id"])
    else:
        api_refusal(fn, f"api {case.id}", audio, "hello", expect=case.expect, ui=ui)
    assert_still_serving(ui)


def test_an_upload_over_the_cap_is_refused_by_gradio_and_by_the_api(ui) -> None:
    """Gradio's upload route enforces the cap (`max_file_size`) before any handler; the Gradio API's
    recording check repeats it for files that reach it another way."""
    from fastapi.testclient import TestClient

    from cosyvoice_ui.web.server import create_app

    case = next(c for c in AUDIO_CASES if c.over_cap)
    with TestClient(create_app(ui.settings, ui.manager), base_url=LOOPBACK) as client:
        response = client.post("/gradio_api/upload", files={"files": (case.filename, case.make(), "audio/wav")})
        assert response.status_code == 413 and "maximum allowed size" in response.text
        check_clean(response.text, str(ui.work))
        small = client.post("/gradio_api/upload", files={"files": ("voice.wav", wav_bytes(voice()), "audio/wav")})
        assert small.status_code == 200
    api_refusal(api(ui, "save_voice"), "too big", file_data(upload(ui, case)), "",
                expect=Refusal("payload_too_large", ("MB", f"limit is {UPLOAD_CAP_MB} MB")), ui=ui)
    assert_still_serving(ui)


# --- text -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", TEXT_CASES, ids=lambda c: c.id)
def test_text_on_the_preset_tab(ui, case: TextCase) -> None:
    fn = event(ui, "run", "speaker", "text", without=("submode",))
    data = values(fn, speaker=SPEAKER, text=case.text, seed=2)
    if case.expect is None:
        assert_audio(list(fn.fn(data, None, None)))
    else:
        assert_stops(ui, fn, data, case.expect, validated=case.expect.code not in IN_JOB)
    assert_still_serving(ui)


@pytest.mark.parametrize("case", TEXT_CASES, ids=lambda c: c.id)
def test_text_through_the_gradio_api_synthesize(ui, case: TextCase) -> None:
    fn = api(ui, "synthesize")
    if case.expect is None:
        result = fn.fn(case.text, SPEAKER, "", 1.0, 3, "wav")
        assert Path(result["path"]).stat().st_size > 44
    else:
        api_refusal(fn, case.text, SPEAKER, "", 1.0, 3, "wav", expect=case.expect, ui=ui)
    assert_still_serving(ui)


# --- names and values ---------------------------------------------------------------------------------------


def tab_request(ui, case: ValueCase):
    """The tab and widget values that send `case.value` for `case.field`."""
    if case.field == "voice":
        fn = event(ui, "run", "prompt_audio", "prompt_text")
        return fn, values(fn, saved_voice=case.value, prompt_text="", text=VALID_TEXT)
    if case.field == "mode":
        fn = event(ui, "run", "submode")
        return fn, values(fn, submode=case.value, speaker=SPEAKER, instruct_text="A calm voice.", text=VALID_TEXT)
    fn = event(ui, "run", "speaker", "text", without=("submode",))
    widget = {"speaker": "speaker", "speed": "speed", "seed": "seed", "format": "format"}[case.field]
    return fn, values(fn, **{"speaker": SPEAKER, "text": VALID_TEXT, widget: case.value})


@pytest.mark.parametrize("case", value_cases("ui"), ids=lambda c: c.id)
def test_bad_values_on_the_tabs(ui, case: ValueCase) -> None:
    fn, data = tab_request(ui, case)
    assert_stops(ui, fn, data, Refusal(case.codes["ui"], case.words), validated=case.codes["ui"] not in IN_JOB)
    assert_still_serving(ui)


API_VALUE_CASES = [c for c in value_cases("rest") if c.field in ("speaker", "speed", "seed", "format")]


@pytest.mark.parametrize("case", API_VALUE_CASES, ids=lambda c: c.id)
def test_bad_values_through_the_gradio_api_preset(ui, case: ValueCase) -> None:
    args = {"text": VALID_TEXT, "speaker": SPEAKER, "speed": 1.0, "seed": 4, "format": "wav", case.field: case.value}
    api_refusal(api(ui, "preset"), *args.values(), expect=Refusal(case.codes["rest"], case.words), ui=ui)
    assert_still_serving(ui)


@pytest.mark.parametrize("audio", [TRAVERSAL, {"path": TRAVERSAL}, {"path": TRAVERSAL, "meta": {}}],
                         ids=["a-bare-path", "file-data-without-meta", "file-data-with-empty-meta"])
def test_traversal_in_file_fields_of_the_gradio_api(ui, audio) -> None:
    api_refusal(api(ui, "clone"), VALID_TEXT, audio, TRANSCRIPT, expect=Refusal(
        "audio_not_uploaded", ("uploaded audio file", "handle_file")), ui=ui)
    assert_still_serving(ui)


@pytest.mark.parametrize("name", [TRAVERSAL, "..\\..\\windows", "/abs/path"])
def test_traversal_in_voice_names_stays_in_the_voices_folder(ui, name: str) -> None:
    path = upload(ui, next(c for c in AUDIO_CASES if c.id == "float32"))
    saved = json.loads(api(ui, "save_voice").fn(name, file_data(path), ""))
    assert (ui.work / "voices" / saved["id"] / "voice.json").is_file() and "/" not in saved["id"]
    assert sorted(p.name for p in ui.work.iterdir()) == ["outputs", "uploads", "voices"]
    assert delete_voice(ui.manager, ui.library, saved["id"])
    assert_still_serving(ui)


def test_a_blank_voice_name_is_refused(ui) -> None:
    path = upload(ui, next(c for c in AUDIO_CASES if c.id == "float32"))
    api_refusal(api(ui, "save_voice"), "   ", file_data(path), "", expect=Refusal("voice_name_missing", ("name",)),
                ui=ui)
    fn = event(ui, "save", "prompt_audio", "voice_name")
    with pytest.raises(gr.Error) as stopped:
        fn.fn(values(fn, prompt_audio=path, voice_name="  "), None)
    check_clean(stopped.value.message, str(ui.work))
    assert "name" in stopped.value.message.lower()
    assert_still_serving(ui)
