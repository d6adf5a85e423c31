"""The Dubbing tab in headless Chromium on the real app with a tiny CosyVoice3 model (issue 28's "the browser
produces a dubbed MP4"): a 20-second test video and a 5-cue Chinese SRT with two speakers are uploaded, dubbed
cross-lingually in each speaker's voice cut from the video, and the dubbed MP4 downloaded: ffprobe shows the copied
video stream and two language-tagged audio tracks. With SAVE_SCREENSHOTS=1 the tab's screenshot replaces
docs/images/tab_dub.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.studio.dub_media_kit import make_video, srt_of, streams
from tests.studio.test_dub import RATE, source_track

from .launch import running_app
from .test_browser import _shots_dir, open_app
from .test_browser_studio import CHROMIUM, FLAGS, download

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def dub_app(tiny_v3: Path, tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    work = tmp_path_factory.mktemp("dub-app")
    with running_app(tiny_v3, work, "--take-retries", "0") as url:
        yield url, work


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield instance
        instance.close()


def test_the_dubbing_tab_makes_a_dubbed_mp4(dub_app, browser, tmp_path: Path) -> None:
    url, work = dub_app
    video = make_video(tmp_path / "talk.mp4", source_track(), RATE)
    cues = tmp_path / "talk.zh.srt"
    cues.write_text(srt_of(), encoding="utf-8")
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1400}, accept_downloads=True)
    page = context.new_page()
    open_app(page, url)
    page.get_by_role("tab", name="Dubbing").click(timeout=60_000)
    page.locator("input[type=file][accept*='.mp4']").first.set_input_files(str(video))
    page.locator("input[type=file][accept*='.srt']").first.set_input_files(str(cues))
    page.get_by_label("Video's language (en, zh, ...; empty: not known)").fill("en")
    page.wait_for_timeout(1500)  # the uploads finish
    page.get_by_role("button", name="Dub / Continue").click()
    page.locator(".dub-status").get_by_text("Done: 5 cue(s) dubbed", exact=False).wait_for(timeout=240_000)
    page.locator("video").first.wait_for(timeout=30_000)
    page.wait_for_function("() => { const v = document.querySelector('video'); return v && v.readyState >= 2; }",
                           timeout=30_000)  # the preview's first frame is drawn
    page.screenshot(path=str(_shots_dir(tmp_path) / "tab_dub.png"), full_page=True)
    link = page.locator("a[download][href*='dubbed.mp4']").first
    dubbed = download(page, link, tmp_path)
    context.close()
    source, got = streams(video), streams(dubbed)
    assert [s["codec_type"] for s in got] == ["video", "audio", "audio"]
    assert (got[0]["codec_name"], got[0]["width"], got[0]["height"]) == (
        source[0]["codec_name"], source[0]["width"], source[0]["height"])
    assert [s["tags"]["language"] for s in got[1:]] == ["chi", "eng"]
    assert (work / "projects" / "dubs" / "talk" / "project" / "dub.json").is_file()
