"""Stop names the click it is for.

The page shows a job as running from the Generate click on, before the click's request reaches the server; on a
busy server the Stop pressed then can arrive before the click is even checked. Each click gets an id in the page
(`ui/clicks.py`), the tab's Stop sends the id of its last click, and the handlers keep a Stop for a click they
have not seen yet for that click's run alone. The browser side is checked in tests/ui/test_first_minutes.py and
tests/ui/test_browser_studio.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode, SynthesisRequest
from cosyvoice_ui.ui import handlers as handlers_module
from cosyvoice_ui.ui.handlers import OutputOptions
from tests.ui.test_refusals import _page, _recording_handlers

REQUEST = SynthesisRequest(Mode.SFT, text="Said after the Stop.", speaker="A")


def _render(handlers, page, click: str, key: str | None = None):
    """The click's validator step then its run, as Gradio calls them; the run's last outputs."""
    handlers.check(REQUEST, key=key or click, http_request=page, click=click)
    *_, last = handlers.generate(REQUEST, OutputOptions(), [], page, None, job=handlers.checked(key or click),
                                 click=click)
    return last


def test_a_stop_that_overtakes_its_click_stops_that_click_and_no_other(tmp_path: Path) -> None:
    engine, _, handlers = _recording_handlers(tmp_path)
    page = _page("overtaken")
    assert handlers.stop(page, "click1") is True  # the click's request is still on the way: "Stopped" is shown
    last = _render(handlers, page, "click1")
    assert last[3] == "Stopped." and engine.texts == []
    # the next click of the page is not stopped by it, and a Stop after its run changes nothing
    last = _render(handlers, page, "click2")
    assert Path(last[1]).is_file() and engine.texts == [REQUEST.text]
    assert handlers.stop(page, "click2") is False
    assert handlers.stop(page, "click1") is False
    # a Stop with no id (a page whose table of clicks is gone) finds nothing once all is over
    assert handlers.stop(page) is False


def test_a_stop_for_the_next_click_does_not_stop_the_run_still_ending(tmp_path: Path) -> None:
    """The run of click 1 is still ending on the server when the page's click 2 and its Stop arrive: the Stop is for
    click 2, whose run then starts stopped; click 1 ends as it would have."""
    _, _, handlers = _recording_handlers(tmp_path)
    page = _page("overlap")
    first = handlers.cancel_flag(page, "one")
    assert handlers.stop(page, "two") is True
    assert not first.is_set()
    handlers.forget_flag(page, first)
    assert handlers.cancel_flag(page, "two").is_set()


def test_a_running_click_is_stopped_by_its_id_or_by_a_stop_without_one(tmp_path: Path) -> None:
    """A run without an id (one the page started without a click) is stopped by any Stop of its page."""
    _, _, handlers = _recording_handlers(tmp_path)
    page = _page("running")
    flag = handlers.cancel_flag(page, "one")
    assert handlers.stop(page, "one") is True and flag.is_set()
    assert handlers.stop(page, "one") is True  # pressed again: still "Stopped"
    handlers.forget_flag(page, flag)
    flag = handlers.cancel_flag(page, "two")
    handlers.page_closed(page)  # the page's unload has no id: whatever runs stops
    assert flag.is_set()
    other = _page("example")
    flag = handlers.cancel_flag(other)  # a run the page started without a click (an example that generates)
    assert handlers.stop(other, "an-old-click") is True and flag.is_set()


def test_a_refused_click_has_no_run_and_its_stop_changes_nothing(tmp_path: Path) -> None:
    engine, _, handlers = _recording_handlers(tmp_path)
    page = _page("refused")
    assert handlers.stop(page, "bad") is True  # before the check: kept for the click
    with pytest.raises(InvalidRequest):
        handlers.check(SynthesisRequest(Mode.SFT, text="   ", speaker="A"), key="bad", http_request=page,
                       click="bad")
    assert handlers.stop(page, "bad") is False  # refused: nothing is on the way
    last = _render(handlers, page, "good")
    assert Path(last[1]).is_file() and engine.texts == [REQUEST.text]


@pytest.mark.parametrize("click", ["", "x" * 65, "a b", "<script>", "../../etc", None, 7, ["list"]])
def test_an_id_the_page_does_not_make_counts_as_none(click, tmp_path: Path) -> None:
    """The id comes from the page (untrusted): anything but a short word is no id, and such a Stop acts as one
    without an id (nothing running, nothing checked: nothing happens)."""
    _, _, handlers = _recording_handlers(tmp_path)
    page = _page("hostile")
    assert handlers.stop(page, click) is False
    assert not handlers.cancel_flag(page, click).is_set()


def test_the_remembered_clicks_are_bounded(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(handlers_module, "CLICKS_KEPT", 8)
    _, _, handlers = _recording_handlers(tmp_path)
    page = _page("flood")
    for number in range(50):
        assert handlers.stop(page, f"c{number}") is True
    assert len(handlers._stopped_clicks) == 8
    assert handlers.cancel_flag(page, "c49").is_set()  # the newest are kept
    assert not handlers.cancel_flag(page, "c0").is_set()  # the oldest forgotten
    for number in range(50):
        handlers.forget_flag(page, handlers.cancel_flag(page, f"e{number}"))
    assert len(handlers._ended_clicks) == 8


def test_the_page_puts_each_id_where_the_server_reads_it(tmp_path: Path) -> None:
    """Every job's click and every Stop carries the click id in the hidden field's place among the values the page
    sends (`clicks.payload_index` assumes Gradio's order for dict inputs; this reads the order from the built
    config), on every tab that runs jobs: the four generating tabs, Script, Audiobook and Dubbing."""
    from cosyvoice_ui.ui.layout import build_ui

    engine = FakeEngine()
    manager = ModelManager("fake", loader=lambda *_: engine, idle_unload_s=0, describe_model=lambda _: engine.info)
    settings = Settings(glossary_dir=tmp_path / "g", projects_dir=tmp_path / "p")
    config = build_ui(manager, settings, output_dir=tmp_path / "out").config
    carrying = [dep for dep in config["dependencies"] if "cosyvoiceClicks" in (dep.get("js") or "")]
    tabs: dict[int, dict[str, int]] = {}
    for dep in carrying:
        key = int(re.search(r"cosyvoiceClicks[^\[]*\[(\d+)\]", dep["js"]).group(1))
        placed = re.search(r"values\[(\d+)\] =", dep["js"])
        if placed:
            assert dep["inputs"][int(placed.group(1))] == key, dep["js"]
        # a Stop sends its id and at most the page's language; a render after a save sends it with the job's values
        kind = "makes" if "Math.random" in dep["js"] else "stop" if len(dep["inputs"]) <= 2 else "sends"
        tabs.setdefault(key, {}).setdefault(kind, 0)
        tabs[key][kind] += 1
    assert len(tabs) == 7
    assert all(kinds.get("makes") and kinds.get("stop") == 1 for kinds in tabs.values()), tabs



