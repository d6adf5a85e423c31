"""The first five minutes of a new user, in headless Chromium at 1300×900 and 390×844, in English and Chinese.

- With no model, the page opens on a tab where one text and one click speak (the offline default voice).
- A refusal appears in the viewport that holds the Generate button just pressed, and its field is outlined.
- Stop shows "Stopped" and leaves no error badge, also when it reaches the server before its click.
- Closing the page while the model loads frees the queue: the job never runs.

With SAVE_SCREENSHOTS=1 the screenshots replace the README's in docs/images/.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
import soundfile as sf

from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import RecordingEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Mode
from cosyvoice_ui.ui.strings import LABELS_EN, LABELS_ZH
from cosyvoice_ui.web.server import create_app
from tests.ui.test_browser import CHROMIUM, _serve, _shots_dir, browser, open_app  # noqa: F401 (fixture)
from tests.web_client import free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCREENS = {"desktop": {"width": 1300, "height": 900}, "phone": {"width": 390, "height": 844}}
# (screen, locale): the four first screens; the longer walks run on two of them
FIRST_SCREENS = [("desktop", "en-US"), ("phone", "zh-CN"), ("desktop", "zh-CN"), ("phone", "en-US")]


@pytest.fixture(scope="module")
def offline_app(tmp_path_factory):
    """The app as a fresh clone starts it: no model anywhere, so the offline default voice speaks."""
    work = tmp_path_factory.mktemp("first-minutes")
    (work / "models").mkdir()
    yield from _serve(work, "--models-dir", str(work / "models"))


@pytest.fixture()
def contexts(browser):  # noqa: F811 (the fixture imported above)
    """Browser contexts for one test (closed after it, so no page keeps the app's connections open)."""
    opened = []

    def make(screen: str, locale: str):
        phone = screen == "phone"
        opened.append(browser.new_context(locale=locale, viewport=SCREENS[screen], is_mobile=phone, has_touch=phone))
        return opened[-1]

    yield make
    for context in opened:
        context.close()


def _labels(locale: str) -> dict[str, str]:
    return LABELS_ZH if locale.startswith("zh") else LABELS_EN


def _tab_button(page, name: str):
    """A tab's button where the user sees it: in the tab bar, or (on a phone) among the folded tabs shown below."""
    return page.locator("[role=tablist] button, .overflow-dropdown button").filter(
        has_text=re.compile(f"^{re.escape(name)}$")).first


def _tab(page):
    """The tab panel on screen."""
    return page.locator(".tabitem:visible")


def _generate(page, labels):
    return _tab(page).get_by_role("button", name=labels["generate"], exact=True)


def _in_viewport(locator, viewport: dict) -> bool:
    box = locator.bounding_box()
    # one pixel of slack: "nearest" scrolling aligns an edge to the viewport's at sub-pixel positions
    return box is not None and box["y"] >= -1 and box["y"] + box["height"] <= viewport["height"] + 1


def _no_error_badges(page) -> int:
    """Gradio's red "Error" overlays on outputs (a failed event leaves one on each)."""
    return page.locator(".wrap.error, .error.svelte-1uj8rng").count()


@pytest.mark.parametrize("screen, locale", FIRST_SCREENS)
def test_the_offline_first_screen_speaks_after_one_text_and_one_click(offline_app: str, contexts, screen: str,
                                                                       locale: str, tmp_path: Path) -> None:
    labels = _labels(locale)
    context = contexts(screen, locale)
    page = context.new_page()
    open_app(page, offline_app)
    # It opens on the preset tab (a text is all it needs), and the header names the model and its state.
    assert page.get_by_role("tab", selected=True).inner_text().strip() == labels["tab_sft"]
    # (filled by a load event, which on a busy machine lands after the page is drawn: wait for it)
    model_label = labels["header_model"].split("{")[0].replace("**", "").strip()
    page.wait_for_function("([el, want]) => el.innerText.includes(want)",
                           arg=[page.locator("#model-header").element_handle(), model_label], timeout=30_000)
    # Every tab keeps its name on screen (no unlabelled "more" menu on a phone).
    for key in ("tab_clone", "tab_cross", "tab_sft", "tab_vc", "tab_history"):
        assert _in_viewport(_tab_button(page, labels[key]), SCREENS[screen]), key
    text = _tab(page).locator("textarea").first
    text.fill("你好，欢迎使用。" if locale.startswith("zh") else "Hello there, and welcome.")
    generate = _generate(page, labels)
    generate.scroll_into_view_if_needed()
    # Generate is within one screen of the text box.
    assert generate.bounding_box()["y"] + generate.bounding_box()["height"] - text.bounding_box()["y"] \
        <= SCREENS[screen]["height"]
    # The download boxes take no room before there is something to download.
    assert not _tab(page).locator(".result-file").is_visible()
    shots = _shots_dir(tmp_path)
    page.screenshot(path=str(shots / f"first_{screen}_{locale[:2]}.png"))
    generate.click()
    download = _tab(page).locator(".result-file")
    download.wait_for(state="visible", timeout=120_000)
    assert _tab(page).locator(".result audio").count() == 1
    assert _no_error_badges(page) == 0
    if (screen, locale) == ("desktop", "en-US"):
        page.screenshot(path=str(shots / "first_result.png"))


@pytest.mark.parametrize("screen, locale", FIRST_SCREENS[:2])
def test_each_refusal_shows_beside_the_generate_button_pressed(offline_app: str, contexts, screen: str, locale: str,
                                                               tmp_path: Path) -> None:
    labels = _labels(locale)
    viewport = SCREENS[screen]
    context = contexts(screen, locale)
    page = context.new_page()
    open_app(page, offline_app)

    def press_and_read() -> str:
        generate = _generate(page, labels)
        generate.scroll_into_view_if_needed()
        generate.click()
        alert = _tab(page).locator(".job-alert")
        alert.wait_for(state="visible", timeout=30_000)
        page.wait_for_timeout(300)  # the page settles (the alert pushed the buttons down, then scrolled them back)
        assert _in_viewport(alert, viewport) and _in_viewport(generate, viewport), \
            (alert.bounding_box(), generate.bounding_box())
        return alert.inner_text()

    # An empty text on the first tab.
    assert press_and_read().strip()
    # Typing clears it.
    _tab(page).locator("textarea").first.fill("Hello.")
    page.wait_for_timeout(500)
    assert not _tab(page).locator(".job-alert").is_visible()

    # The clone tab with no voice sample: the message is beside Generate, the sample box is outlined.
    _tab_button(page, labels["tab_clone"]).click()
    page.wait_for_timeout(500)
    _tab(page).locator("textarea").last.fill("Hello there.")
    message = press_and_read()
    assert ("voice sample" in message or "prompt audio" in message) if locale == "en-US" else message.strip()
    outlined = page.evaluate("() => [...document.querySelectorAll('.tabitem .block')].filter(b => "
                             "getComputedStyle(b).outlineStyle === 'solid' && b.querySelector('.validation-error'))"
                             ".length")
    assert outlined == 1
    page.screenshot(path=str(_shots_dir(tmp_path) / f"refusal_{screen}_{locale[:2]}.png"))
    # Clicking the message brings the field it is about into view.
    _tab(page).locator(".job-alert").click()
    page.wait_for_timeout(1200)
    assert _in_viewport(_tab(page).locator(".validation-error").first, viewport)

    # A transcript that cannot fit a 3.5 s recording.
    sample = tmp_path / "sample.wav"
    clip = voice_clip(3.5, 16000)
    sf.write(sample, clip.samples, clip.sample_rate)
    _tab(page).locator("input[type=file]").first.set_input_files(str(sample))
    page.wait_for_timeout(1500)
    _tab(page).locator("textarea").first.fill("This transcript is far too long to be what was said in three "
                                              "seconds of audio, by any speaker at any speed at all. " * 3)
    assert press_and_read().strip()
    assert _no_error_badges(page) == 0


@pytest.mark.parametrize("screen, locale", [("desktop", "zh-CN"), ("phone", "en-US")])
def test_stop_shows_stopped_and_no_error_badge(offline_app: str, contexts, screen: str, locale: str) -> None:
    labels = _labels(locale)
    context = contexts(screen, locale)
    page = context.new_page()
    open_app(page, offline_app)
    _tab(page).locator("textarea").first.fill("This is a longer text, so that there is time to stop it. " * 12)
    _generate(page, labels).click()
    _tab(page).locator(".result .progress-text").first.wait_for(timeout=60_000)
    stop = _tab(page).get_by_role("button", name=labels["stop"], exact=True)
    red = "e => getComputedStyle(e).backgroundColor.includes('239, 68, 68')"
    page.wait_for_function(f"el => ({red})(el)", arg=stop.element_handle(), timeout=5_000)  # red while running
    stop.click()
    info = _tab(page).locator(".block.result-info")
    page.wait_for_function("([el, want]) => el.innerText.includes(want)",
                           arg=[info.element_handle(), labels["stopped"]], timeout=30_000)
    page.wait_for_timeout(1500)
    assert _no_error_badges(page) == 0
    assert page.get_by_text("Error", exact=True).count() == 0
    # quiet again once the run has ended (a Stop pressed while the click was still checked ends it as it starts)
    page.wait_for_function(f"el => !({red})(el)", arg=stop.element_handle(), timeout=30_000)


def test_a_stop_that_overtakes_its_click_stops_it(offline_app: str, contexts) -> None:
    """The click's request is held in the browser until its Stop has been answered (what a busy server does by
    chance: CI saw it): the Stop says "Stopped" at once, the click's run then ends as it starts, and nothing is
    rendered. The next click renders."""
    labels = _labels("en-US")
    page = contexts("desktop", "en-US").new_page()
    open_app(page, offline_app)
    held = []
    page.route("**/gradio_api/queue/join*", lambda route: held.append(route))
    _tab(page).locator("textarea").first.fill("Held back until its Stop is answered.")
    _generate(page, labels).click()
    stop = _tab(page).get_by_role("button", name=labels["stop"], exact=True)
    red = "e => getComputedStyle(e).backgroundColor.includes('239, 68, 68')"
    page.wait_for_function(f"el => ({red})(el)", arg=stop.element_handle(), timeout=10_000)
    deadline = time.monotonic() + 10
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert held, "the click's request never left the page"
    stop.click()
    info = _tab(page).locator(".block.result-info")
    page.wait_for_function("([el, want]) => el.innerText.includes(want)",
                           arg=[info.element_handle(), labels["stopped"]], timeout=10_000)
    held[0].continue_()
    page.unroute("**/gradio_api/queue/join*")
    page.wait_for_function(f"el => !({red})(el)", arg=stop.element_handle(), timeout=30_000)
    page.wait_for_timeout(500)
    assert labels["stopped"] in info.inner_text()
    assert not _tab(page).locator(".result-file").first.is_visible()  # no download: nothing was rendered
    assert _no_error_badges(page) == 0
    _generate(page, labels).click()  # that Stop was for that click alone
    _tab(page).locator(".result-file").first.wait_for(state="visible", timeout=60_000)


@pytest.fixture()
def loading_app(tmp_path: Path):
    """An app whose model takes a few seconds to load (a stand-in for a 3.4 GB CosyVoice3)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    import uvicorn

    engine = RecordingEngine(name="slow-model", speakers=("alice", "bob"), modes=(Mode.SFT, Mode.ZERO_SHOT))
    loading, proceed = threading.Event(), threading.Event()

    def slow_loader(model_id, options, progress):
        loading.set()
        proceed.wait(60)
        return engine

    manager = ModelManager("slow", loader=slow_loader, idle_unload_s=0, describe_model=lambda mid: engine.info)
    settings = Settings(voices_dir=tmp_path / "voices", glossary_dir=tmp_path / "glossaries",
                        projects_dir=tmp_path / "projects", idle_unload_s=0, rate_limit_per_min=0,
                        extra={"output_dir": str(tmp_path / "out")})
    port = free_port("127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(create_app(settings, manager), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, name="loading-app", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{port}/", manager, engine, loading, proceed
    proceed.set()
    server.should_exit = True
    thread.join(10)


def test_closing_the_page_while_the_model_loads_frees_the_queue(loading_app, contexts) -> None:
    url, manager, engine, loading, proceed = loading_app
    context = contexts("desktop", "en-US")
    page = context.new_page()
    open_app(page, url)
    _tab_button(page, LABELS_EN["tab_sft"]).click()
    page.wait_for_timeout(500)
    _tab(page).locator("textarea").first.fill("Nobody will hear this.")
    _generate(page, LABELS_EN).click()
    assert loading.wait(30), "the job did not start loading the model"
    page.close()  # the user gives up while the model loads
    time.sleep(2)  # Gradio notices the closed page (its heartbeat stream ends)
    proceed.set()  # the load finishes
    deadline = time.monotonic() + 20
    while manager.status().running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert manager.status().running == 0 and manager.status().queued == 0
    assert engine.texts == []  # the job gave its slot back without rendering a take
    # The next user is served at once.
    with manager.job() as ready:
        assert ready is engine
