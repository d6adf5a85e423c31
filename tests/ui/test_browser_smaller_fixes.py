"""Issue 25's smaller first-five-minutes fixes, in headless Chromium on the real app with a tiny CosyVoice-300M-SFT model
(it has inline tags and presets): a tag chip goes in at the caret and wraps a selection; the Script tab starts
with the stems unticked, offers Regenerate and Lock only on rendered lines and keeps 5 lines compact (the page
height at 1300x900 is printed); the History tab names subtitle downloads readably."""

from __future__ import annotations

from pathlib import Path

import pytest

from .launch import running_app
from .test_browser import CHROMIUM, FLAGS, open_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]
FIVE_LINES = ("Alice: Good morning, everyone.\n[Bob] Morning, Alice.\nThe kettle clicked off.\nAlice: Tea, anyone?\n"
              "Bob: Yes please.")
# At 1300x900 with 5 rendered lines (tiny SFT model): 2,947 px and 207 px a line before the rows were compacted,
# 2,694 px and 157 px after (the audio player's own height is most of a row).
MAX_SCRIPT_PAGE_PX = 2750
MAX_LINE_ROW_PX = 180


@pytest.fixture(scope="module")
def app_url(tiny_sft: Path, tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    work = tmp_path_factory.mktemp("smaller-fixes")
    with running_app(tiny_sft, work, "--take-retries", "0") as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield instance
        instance.close()


def test_a_tag_goes_in_at_the_caret_and_wraps_a_selection(app_url: str, browser) -> None:
    from playwright.sync_api import expect

    context = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    page = context.new_page()
    open_app(page, app_url)
    page.get_by_role("tab", name="Cross-lingual / instruct").click()
    panel = page.get_by_role("tabpanel").filter(has=page.get_by_role("button", name="[laughter]")).last
    box = panel.get_by_label("Text to speak").first
    box.fill("Hello world")
    box.evaluate("el => el.setSelectionRange(5, 5)")  # the caret after "Hello"
    panel.get_by_role("button", name="[laughter]", exact=True).click()
    expect(box).to_have_value("Hello[laughter] world", timeout=10_000)
    # The caret follows the tag, so a second chip goes after the first.
    page.wait_for_function("() => document.activeElement && document.activeElement.selectionStart === 15",
                           timeout=5_000)
    panel.get_by_role("button", name="[breath]", exact=True).click()
    expect(box).to_have_value("Hello[laughter][breath] world", timeout=10_000)
    box.evaluate("el => el.setSelectionRange(24, 29)")  # "world"
    panel.get_by_role("button", name="<strong></strong>", exact=True).click()
    expect(box).to_have_value("Hello[laughter][breath] <strong>world</strong>", timeout=10_000)
    context.close()


def test_the_script_tab_is_compact_with_stems_off_and_no_fixes_before_a_take(app_url: str, browser) -> None:
    context = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    page = context.new_page()
    open_app(page, app_url)
    page.get_by_role("tab", name="Script").click(timeout=60_000)
    page.locator(".studio-script textarea").fill(FIVE_LINES)
    page.get_by_label("New project name").fill("Five lines")
    page.get_by_role("button", name="Create project").click()
    status = page.locator(".studio-status")
    status.get_by_text("Saved “Five lines”: 5 lines", exact=False).wait_for(timeout=30_000)
    line = page.locator(".studio-line-L0001").first
    line.wait_for(timeout=30_000)
    # Before a take there is nothing to regenerate or lock.
    assert line.get_by_role("button", name="Regenerate (new seed)").count() == 0
    assert line.get_by_role("button", name="Lock", exact=True).count() == 0
    before_render = page.evaluate("() => document.documentElement.scrollHeight")
    # Stems are opt-in: the mix and the subtitles are ticked, the two stem exports are not.
    parts = {label: page.get_by_label(label, exact=True) for label in
             ("Mixed file", "Stems (one zip)", "Stems (one file each)", "Subtitles (SRT)", "Subtitles (VTT)")}
    assert [parts[k].is_checked() for k in parts] == [True, False, False, True, True]

    page.get_by_role("button", name="Render all").click()
    status.get_by_text("Done: 5 line(s) rendered", exact=False).wait_for(timeout=240_000)
    page.locator(".studio-line-L0005 .studio-line-info").filter(has_text="take 1").first.wait_for(timeout=30_000)
    assert line.get_by_role("button", name="Regenerate (new seed)").count() == 1
    assert line.get_by_role("button", name="Lock", exact=True).count() == 1
    height = page.evaluate("() => document.documentElement.scrollHeight")
    rows = [page.locator(f".studio-line-L{n:04d}").first.bounding_box()["height"] for n in range(1, 6)]
    print(f"\nScript tab at 1300x900 with 5 lines: page {height} px rendered ({before_render} px before), "
          f"line rows {[round(r) for r in rows]} px")
    assert height <= MAX_SCRIPT_PAGE_PX and max(rows) <= MAX_LINE_ROW_PX, (height, rows)
    context.close()


def test_history_names_the_subtitle_files(app_url: str, browser) -> None:
    context = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    page = context.new_page()
    open_app(page, app_url)
    page.get_by_role("tab", name="Preset speakers").click()
    panel = page.get_by_role("tabpanel").filter(has=page.get_by_role("button", name="Generate")).last
    panel.get_by_label("Text to speak").first.fill("Hello there. This is a test.")
    panel.get_by_role("button", name="Generate").first.click()
    page.locator(".result-file a[download]").first.wait_for(timeout=120_000)
    page.get_by_role("tab", name="History").click()
    for fmt in ("SRT", "VTT"):
        button = page.get_by_role("button", name=f"{fmt} subtitles")
        button.first.wait_for(timeout=30_000)
        assert button.first.inner_text().strip() == f"{fmt} subtitles"  # the whole name, not ".s" / ".v"
    with page.expect_download(timeout=30_000) as event:
        page.get_by_role("button", name="SRT subtitles").first.click()
    assert event.value.suggested_filename.endswith(".srt")
    context.close()
