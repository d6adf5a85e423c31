"""The Dubbing tab in headless Chromium on the real app (issue 28's "the browser produces a dubbed MP4").

With a tiny CosyVoice3 model: a 20-second test video and a 5-cue Chinese SRT with two speakers are uploaded, dubbed
cross-lingually in each speaker's voice cut from the video, and the dubbed MP4 downloaded: ffprobe shows the copied
video stream and two language-tagged audio tracks.

With the offline default voice (real speech, so cues fit): the video's sound is the offline voice speaking the
English lines; the SRT's cue 4 is a translation too long for its time. The table shows four cues that fit and cue 4
flagged with its overrun; with SAVE_SCREENSHOTS=1 this screenshot replaces docs/images/tab_dub.png (the README's).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.studio.dub_media_kit import LINES, make_video, srt_of, streams
from tests.studio.test_dub import LONG, RATE, source_track

from .launch import running_app
from .test_browser import _shots_dir, open_app
from .test_browser_studio import CHROMIUM, browser, download  # noqa: F401  (browser: the shared fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def dub_app(tiny_v3: Path, tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    work = tmp_path_factory.mktemp("dub-app")
    with running_app(tiny_v3, work, "--take-retries", "0") as url:
        yield url, work


def dub_in_tab(page, url: str, video: Path, cues: Path, done: str) -> None:
    """Open the app, upload the video and its subtitles in the Dubbing tab, dub, and wait for `done` and the
    preview's first frame."""
    open_app(page, url)
    page.get_by_role("tab", name="Dubbing").click(timeout=60_000)
    page.locator("input[type=file][accept*='.mp4']").first.set_input_files(str(video))
    page.locator("input[type=file][accept*='.srt']").first.set_input_files(str(cues))
    page.get_by_label("Video's language (en, zh, ...; empty: not known)").fill("en")
    page.wait_for_timeout(1500)  # the uploads finish
    page.get_by_role("button", name="Dub / Continue").click()
    page.locator(".dub-status").get_by_text(done, exact=False).wait_for(timeout=300_000)
    page.locator("video").first.wait_for(timeout=30_000)
    page.wait_for_function("() => { const v = document.querySelector('video'); return v && v.readyState >= 2; }",
                           timeout=30_000)  # the preview's first frame is drawn


def test_the_dubbing_tab_makes_a_dubbed_mp4(dub_app, browser, tmp_path: Path) -> None:
    url, work = dub_app
    video = make_video(tmp_path / "talk.mp4", source_track(), RATE)
    cues = tmp_path / "talk.zh.srt"
    cues.write_text(srt_of(), encoding="utf-8")
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1400}, accept_downloads=True)
    page = context.new_page()
    dub_in_tab(page, url, video, cues, "Done: 5 cue(s) dubbed")
    page.screenshot(path=str(tmp_path / "tab_dub_tiny.png"), full_page=True)  # random takes: every cue overruns
    link = page.locator("a[download][href*='dubbed.mp4']").first
    dubbed = download(page, link, tmp_path)
    context.close()
    source, got = streams(video), streams(dubbed)
    assert [s["codec_type"] for s in got] == ["video", "audio", "audio"]
    assert (got[0]["codec_name"], got[0]["width"], got[0]["height"]) == (
        source[0]["codec_name"], source[0]["width"], source[0]["height"])
    assert [s["tags"]["language"] for s in got[1:]] == ["chi", "eng"]
    assert (work / "projects" / "dubs" / "talk" / "project" / "dub.json").is_file()


@pytest.fixture(scope="module")
def offline_app(tmp_path_factory):
    from cosyvoice_ui.offline.assets import offline_available

    ok, reason = offline_available()
    if not ok:
        pytest.skip(reason)
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    work = tmp_path_factory.mktemp("dub-offline-app")
    (work / "models").mkdir()
    with running_app(Path("offline-default"), work, "--take-retries", "0") as url:
        yield url, work


def test_the_offline_voice_dubs_in_the_tab_and_flags_the_cue_that_does_not_fit(offline_app, browser,
                                                                                tmp_path: Path) -> None:
    from tests.studio.test_dub_models import offline_source

    url, work = offline_app
    video = make_video(tmp_path / "talk.mp4", offline_source(tmp_path), RATE)
    lines = list(LINES)
    lines[3] = (*lines[3][:4], LONG)  # a wordy translation: too long for cue 4 even at 1.2x and its gap
    cues = tmp_path / "talk.zh.srt"
    cues.write_text(srt_of(lines), encoding="utf-8")
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    dub_in_tab(page, url, video, cues, "Done: 5 cue(s) dubbed, 1 overrun")
    table = page.inner_text("body")  # the cue table as shown (its rows are not all inside a <table>)
    assert len(re.findall(r"\d\.\d\dx · fits", table)) == 4, table
    assert len(re.findall(r"1\.20x · overrun \d+\.\d\d s", table)) == 1, table
    top = page.get_by_role("tab", name="Dubbing").bounding_box()["y"] - 8  # from the tab bar to the preview
    bottom = page.locator("video").first.bounding_box()
    page.mouse.move(0, 0)
    page.screenshot(path=str(_shots_dir(tmp_path) / "tab_dub.png"), full_page=True, clip={
        "x": 0, "y": top, "width": 1280, "height": bottom["y"] + bottom["height"] + 12 - top})
    context.close()
    state = json.loads((work / "projects" / "dubs" / "talk" / "project" / "dub.json").read_text(encoding="utf-8"))
    overruns = [cue["fit_result"]["overrun"] for cue in state["cues"]]
    assert overruns[3] > 0 and overruns[:3] + overruns[4:] == [0, 0, 0, 0]
