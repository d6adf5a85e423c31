"""The Script tab in headless Chromium on the real app with a tiny model (issue 15's Done-when): a 3-speaker
script renders, one line is regenerated and locked, and the mixed file, the stems and the SRT download; the
SRT's times match the downloaded audio within 50 ms (the last cue ends where the mix ends, and each line's first
cue starts where its take starts). Then the Audiobook tab lists an uploaded book's chapters, and a Chinese browser
reopens the project as it was."""

from __future__ import annotations

import io
import json
import re
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.serving import subtitles
from cosyvoice_ui.testing.ebooks import sample_markdown

from .launch import running_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]
SCRIPT = "Alice: Good morning, everyone.\n[Bob] Morning, Alice.\nThe kettle clicked off.\nAlice: Tea, anyone?"
TOLERANCE_S = 0.05


@pytest.fixture(scope="module")
def studio_app(tiny_sft: Path, tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    work = tmp_path_factory.mktemp("studio-app")
    # Projects live under the app's working folder (the default "projects"), which Gradio may serve.
    with running_app(tiny_sft, work, "--take-retries", "0") as url:
        yield url, work


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield instance
        instance.close()


def download(page, link, folder: Path) -> Path:
    """Click a download link and keep the file (a real browser download event)."""
    with page.expect_download(timeout=30_000) as event:
        link.click()
    item = event.value
    path = folder / item.suggested_filename
    item.save_as(path)
    return path


def new_project(browser, url: str, name: str, **context_options):
    """An English page on the Script tab with SCRIPT saved as the new project `name`: (context, page)."""
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1200}, **context_options)
    page = context.new_page()
    page.goto(url, wait_until="load")
    page.get_by_role("tab", name="Script").click(timeout=60_000)
    page.locator(".studio-script textarea").fill(SCRIPT)
    page.get_by_label("New project name").fill(name)
    page.get_by_role("button", name="Create project").click()
    page.locator(".studio-status").get_by_text(f"Saved “{name}”: 4 lines, 3 speakers.").wait_for(timeout=30_000)
    return context, page


def test_a_three_speaker_script_renders_regenerates_locks_and_exports(studio_app, browser, tmp_path: Path) -> None:
    url, work = studio_app
    context, page = new_project(browser, url, "Morning show", accept_downloads=True)
    status = page.locator(".studio-status")
    for name in ("Alice", "Bob", "Narrator"):  # one voice row per name
        assert page.locator(".studio-voice-name", has_text=name).first.is_visible()

    page.get_by_role("button", name="Render all").click()
    status.get_by_text("Done: 4 line(s) rendered", exact=False).wait_for(timeout=90_000)
    line = {n: page.locator(f".studio-line-L{n:04d}").first for n in range(1, 6)}  # a new project's line ids
    info = {n: line[n].locator(".studio-line-info").first for n in range(1, 5)}
    info[4].filter(has_text="take 1").wait_for(timeout=30_000)
    assert line[5].count() == 0

    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    regenerate = line[2].get_by_role("button", name="Regenerate (new seed)")
    regenerate.click()
    try:
        info[2].filter(has_text="take 2").wait_for(timeout=45_000)
    except PlaywrightTimeout:
        # Seen once in four full CI runs: no new take after 60 s. A tiny model renders a line in seconds, so the
        # click was lost, most likely on a line button the lines' @gr.render replaced just then. A listener
        # clicks again; the take must then come (a second loss fails the test).
        regenerate.click()
        info[2].filter(has_text=re.compile(r"take [23]\b")).wait_for(timeout=60_000)
    line[2].get_by_role("button", name="Lock").click()
    info[2].filter(has_text="locked").wait_for(timeout=30_000)
    assert line[2].get_by_role("button", name="Unlock").count() == 1
    assert line[2].get_by_role("button", name="Regenerate (new seed)").is_disabled()

    for stems in ("Stems (one zip)", "Stems (one file each)"):  # opt-in: unticked at first
        page.get_by_label(stems, exact=True).check()
    page.locator("button.studio-export").click()
    links = page.locator(".studio-downloads a[download]")
    links.nth(6).wait_for(timeout=60_000)  # mix, stems zip, 3 stems, srt, vtt
    page.screenshot(path=str(tmp_path / "script_tab.png"), full_page=True)
    files = {}
    for name in ("Morning_show.wav", "Morning_show.stems.zip", "Morning_show.srt", "Morning_show.Bob.wav"):
        link = page.locator(f".studio-downloads a[download][href$='/{name}']").first
        files[name] = download(page, link, tmp_path)

    # The Audiobook tab lists the chapters of an uploaded book.
    book = tmp_path / "journey.md"
    book.write_text(sample_markdown(), encoding="utf-8")
    page.get_by_role("tab", name="Audiobook").click()
    page.locator("input[type=file][accept*='.epub']").first.set_input_files(str(book))
    chapters = page.locator(".book-chapters").first
    chapters.get_by_text("The Town (", exact=False).wait_for(timeout=30_000)
    assert chapters.locator("li").all_inner_texts()[0].startswith("The Harbour (")
    assert chapters.locator("li").count() == 3 and "A Short Journey" in chapters.inner_text()
    page.screenshot(path=str(tmp_path / "book_tab.png"), full_page=True)
    context.close()

    # Reopened in a Chinese browser, the project shows its takes and the lock in Chinese.
    context = browser.new_context(locale="zh-CN", viewport={"width": 1280, "height": 1200})
    page = context.new_page()
    page.goto(url, wait_until="load")
    page.get_by_role("tab", name="剧本").click(timeout=60_000)
    page.locator(".studio-open input").first.click()
    page.get_by_role("option", name="Morning show").click()
    line_two = page.locator(".studio-line-L0002 .studio-line-info").first
    line_two.filter(has_text="第 2 版").wait_for(timeout=30_000)
    assert "已锁定" in line_two.inner_text()
    assert page.locator(".studio-script textarea").input_value() == SCRIPT
    context.close()

    project = json.loads((work / "projects" / "Morning-show" / "project.json").read_text(encoding="utf-8"))
    locked = project["lines"][1]
    assert locked["locked"] and locked["chosen"] == 2 and len(locked["takes"]) == 2
    assert locked["takes"][0]["seed"] != locked["takes"][1]["seed"]

    mix, rate = sf.read(files["Morning_show.wav"], dtype="float32")
    with zipfile.ZipFile(files["Morning_show.stems.zip"]) as archive:
        stems = {name: sf.read(io.BytesIO(archive.read(name)), dtype="float32")[0] for name in archive.namelist()}
    assert sorted(stems) == ["Morning_show.Alice.wav", "Morning_show.Bob.wav", "Morning_show.Narrator.wav"]
    assert all(len(track) == len(mix) for track in stems.values())
    assert np.allclose(sum(stems.values()), mix, atol=3 / 32768)  # the stems add up to the mix
    bob, _ = sf.read(files["Morning_show.Bob.wav"], dtype="float32")
    assert np.array_equal(bob, stems["Morning_show.Bob.wav"])

    cues = subtitles.parse(files["Morning_show.srt"].read_text(encoding="utf-8"))
    assert abs(cues[-1].end - len(mix) / rate) < TOLERANCE_S
    gap = project["settings"]["gap_s"]
    starts, position = [], 0.0
    for line in project["lines"]:
        take = next(t for t in line["takes"] if t["number"] == line["chosen"])
        starts.append(position)
        position += take["seconds"] + gap
    assert abs(position - gap - len(mix) / rate) < TOLERANCE_S
    for start, line in zip(starts, project["lines"]):
        first = min((cue for cue in cues if cue.start >= start - TOLERANCE_S), key=lambda cue: cue.start)
        assert abs(first.start - start) < TOLERANCE_S, (line["id"], first.start, start)
        assert first.speaker == line["speaker"] or line["speaker"] in first.text
    for start in starts[1:]:  # the gap before each take is silence in the decoded mix
        silence = mix[int((start - gap + 0.02) * rate):int((start - 0.02) * rate)]
        assert len(silence) and np.abs(silence).max() < 1e-3


def _carries_a_click_id(request) -> bool:
    """A job's request with a click id made by the page (`ui/clicks.py`) among its values."""
    try:
        values = json.loads(request.post_data or "{}").get("data") or []
    except ValueError:
        return False
    return any(isinstance(value, str) and re.fullmatch(r"[0-9a-z]{14,20}", value) for value in values)


def test_a_stop_that_overtakes_render_all_stops_it(studio_app, browser) -> None:
    """Render all's request is held in the browser until its Stop has been sent (what a busy server does by
    chance): the render then starts stopped and renders no line; the next Render all renders them all."""
    url, _ = studio_app
    context, page = new_project(browser, url, "Held back")
    status = page.locator(".studio-status").first
    held = []
    page.route("**/gradio_api/queue/join*",
               lambda route: held.append(route) if _carries_a_click_id(route.request) else route.continue_())
    page.get_by_role("button", name="Render all").click()
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert held, "Render all's request never left the page"
    page.locator(".tabitem:visible").get_by_role("button", name="Stop", exact=True).click()
    page.wait_for_timeout(1500)  # the Stop's own request (not held) is answered
    held[0].continue_()
    page.unroute("**/gradio_api/queue/join*")
    page.wait_for_timeout(5000)
    infos = page.locator(".studio-line-info")
    assert infos.count() and all("not rendered yet" in text for text in infos.all_inner_texts())
    page.get_by_role("button", name="Render all").click()  # that Stop was for that click alone
    status.get_by_text("Done: 4 line(s) rendered", exact=False).wait_for(timeout=90_000)
    context.close()
