"""An ordinary refusal in the UI is a message for the user and one log line, never a traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import gradio as gr
import pytest

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode, SynthesisRequest
from cosyvoice_ui.ui.handlers import Handlers, OutputOptions
from cosyvoice_ui.ui.markup import refusal


def _page(session: str):
    """A stand-in for the gr.Request of one browser page (its session and language)."""

    class Page:
        session_hash = session
        headers = {"accept-language": "en"}

    return Page()


def _recording_handlers(tmp_path: Path):
    """(engine, manager, handlers) over a `RecordingEngine` that records the texts it renders."""
    from cosyvoice_ui.testing.fakes import RecordingEngine

    engine = RecordingEngine()
    manager = ModelManager("fake", loader=lambda *_: engine, idle_unload_s=0, describe_model=lambda _: engine.info)
    return engine, manager, Handlers(manager, Settings(glossary_dir=tmp_path / "g"), tmp_path / "out")


def test_a_refusal_is_escaped_text_and_one_log_line(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="cosyvoice_ui.ui.markup"):
        error = refusal("Text <b>empty</b>", InvalidRequest("text_empty", "the text is empty"))
    assert isinstance(error, gr.Error) and error.print_exception is False
    assert error.message == "Text &lt;b&gt;empty&lt;/b&gt;"
    assert [r.getMessage() for r in caplog.records] == ["refused in the UI: text_empty"]
    assert all(r.exc_info is None for r in caplog.records)


def test_a_bad_request_from_a_tab_is_refused_without_a_traceback(tmp_path: Path, caplog) -> None:
    engine = FakeEngine()
    manager = ModelManager("fake", loader=lambda *_: engine, idle_unload_s=0, describe_model=lambda _: engine.info)
    handlers = Handlers(manager, Settings(glossary_dir=tmp_path / "g"), tmp_path / "out")
    with caplog.at_level(logging.INFO), pytest.raises(gr.Error) as refused:
        list(handlers.generate(SynthesisRequest(Mode.SFT, text="   ", speaker="A"), OutputOptions(), [], None, None))
    assert refused.value.print_exception is False
    assert "empty" in refused.value.message
    assert not any(r.exc_info for r in caplog.records)


def test_a_page_closed_while_its_job_was_prepared_never_runs_it(tmp_path: Path) -> None:
    """The validator prepared the job, then the page closed before the run started: the run stops at once, holds
    no slot and renders nothing."""
    engine, manager, handlers = _recording_handlers(tmp_path)
    page = _page("gone")
    request = SynthesisRequest(Mode.SFT, text="Nobody is listening.", speaker="A")
    job = handlers.prepare(request)
    handlers.page_closed(page)
    *_, (audio, path, _subtitles, info, _takes, _history) = handlers.generate(request, OutputOptions(), [], page,
                                                                              None, job=job)
    assert info == "Stopped." and engine.texts == []
    assert manager.status().running == 0 and manager.status().queued == 0
    # another page of the same app is not affected
    *_, (_a, path, *_rest) = handlers.generate(request, OutputOptions(), [], None, None)
    assert Path(path).is_file() and engine.texts == ["Nobody is listening."]


def test_stop_pressed_before_the_checked_run_starts_stops_it_and_idle_stop_does_nothing(tmp_path: Path) -> None:
    engine, _, handlers = _recording_handlers(tmp_path)
    page = _page("waiting")
    request = SynthesisRequest(Mode.SFT, text="Not yet.", speaker="A")
    assert handlers.stop(page) is False  # nothing running, nothing on the way: Stop changes nothing
    # the validator passed; the run waits in the queue (the page's Stop names its click)
    handlers.check(request, key="click", http_request=page, click="click")
    assert handlers.stop(page, "click") is True
    *_, last = handlers.generate(request, OutputOptions(), [], page, None, job=handlers.checked("click"),
                                 click="click")
    assert last[3] == "Stopped." and engine.texts == []
    # the next click is not stopped by that Stop
    handlers.check(request, key="again", http_request=page, click="again")
    *_, last = handlers.generate(request, OutputOptions(), [], page, None, job=handlers.checked("again"),
                                 click="again")
    assert Path(last[1]).is_file() and engine.texts == ["Not yet."]
    assert handlers.stop(page, "again") is False
    assert handlers.stop(page) is False


def test_stop_pressed_while_the_click_is_checked_stops_its_run_and_a_refusal_forgets_it(tmp_path: Path) -> None:
    """The page shows a job as running from the click on, while the validator is still checking the request (a
    slow check on a busy machine): a Stop pressed then stops the run that follows. A click the check refuses has no
    run, and its Stop does not stop the next click."""
    import threading

    engine, _, handlers = _recording_handlers(tmp_path)
    page = _page("checking")
    request = SynthesisRequest(Mode.SFT, text="Checked slowly.", speaker="A")
    checking, go_on = threading.Event(), threading.Event()
    prepare = handlers.speech.prepare

    def slow_prepare(*args, **kwargs):
        checking.set()
        assert go_on.wait(10)
        return prepare(*args, **kwargs)

    handlers.speech.prepare = slow_prepare
    validator = threading.Thread(target=handlers.check, args=(request,),
                                 kwargs={"key": "c1", "http_request": page, "click": "c1"})
    validator.start()
    assert checking.wait(10)
    assert handlers.stop(page, "c1") is True  # pressed while the check runs
    go_on.set()
    validator.join(10)
    *_, last = handlers.generate(request, OutputOptions(), [], page, None, job=handlers.checked("c1"), click="c1")
    assert last[3] == "Stopped." and engine.texts == []

    # a refused click, stopped while it was checked: its Stop is for nothing, and the next click runs
    checking.clear()
    go_on.clear()
    refused: list[Exception] = []

    def check_bad() -> None:
        try:
            handlers.check(SynthesisRequest(Mode.SFT, text="   ", speaker="A"), key="bad", http_request=page,
                           click="bad")
        except InvalidRequest as exc:
            refused.append(exc)

    validator = threading.Thread(target=check_bad)
    validator.start()
    assert checking.wait(10)
    assert handlers.stop(page, "bad") is True
    go_on.set()
    validator.join(10)
    assert len(refused) == 1
    assert handlers.stop(page, "bad") is False  # nothing on the way any more
    handlers.speech.prepare = prepare
    handlers.check(request, key="c2", http_request=page, click="c2")
    *_, last = handlers.generate(request, OutputOptions(), [], page, None, job=handlers.checked("c2"), click="c2")
    assert Path(last[1]).is_file() and engine.texts == ["Checked slowly."]
