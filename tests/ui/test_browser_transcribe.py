"""In the browser: "Transcribe" fills the clone tab's transcript box from the uploaded voice sample, and says the
transcript is rough. The sample is
English said by the offline voice and heard by pocketsphinx (nothing downloaded); skipped when the offline voice's
packages, pocketsphinx, Chromium or Playwright are missing."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from .launch import running_app
from .test_browser import CHROMIUM, FLAGS

pytestmark = [pytest.mark.browser, pytest.mark.slow]
SENTENCE = "Could you please close the window before you leave?"
MIN_RECALL = 0.6  # pocketsphinx heard all 9 words of this sentence on the development machine


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


@pytest.fixture(scope="module")
def english_sample(tmp_path_factory) -> Path:
    """The sentence said by the offline voice's default speaker, as a WAV file to upload."""
    pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx==5.1.1 for the offline recogniser")
    from cosyvoice_ui.offline.assets import offline_available

    ok, reason = offline_available()
    if not ok:
        pytest.skip(reason)
    from cosyvoice_ui.offline import load_offline_engine
    from cosyvoice_ui.types import Mode, SynthesisRequest

    engine = load_offline_engine(voices_dir=Path(tempfile.mkdtemp(prefix="browser_asr_voices_")))
    try:
        chunks = list(engine.synthesize(SynthesisRequest(mode=Mode.SFT, text=SENTENCE,
                                                         speaker=engine.info.default_speaker)))
    finally:
        engine.close()
    path = tmp_path_factory.mktemp("sample") / "english.wav"
    sf.write(path, np.concatenate([c.samples for c in chunks]), chunks[0].sample_rate)
    return path


def test_transcribe_fills_the_clone_transcript(english_sample: Path, tiny_sft: Path, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (test.sh installs it with apt)")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with running_app(tiny_sft, tmp_path) as url, playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_context(locale="en-US").new_page()
            page.goto(url, wait_until="load", timeout=60_000)
            box = page.get_by_label("Transcript of the voice sample")
            box.wait_for(timeout=60_000)
            page.locator("input[type=file]").first.set_input_files(str(english_sample))
            # The upload is done when the sample's player is drawn in place of the drop zone.
            page.locator("audio").first.wait_for(state="attached", timeout=30_000)
            page.get_by_role("button", name="Transcribe", exact=True).first.click()
            playwright.expect(box).not_to_have_value("", timeout=60_000)
            heard = box.input_value()
            # pocketsphinx is rough: the tab says so under the button, with what to do.
            note = page.locator(".block.transcript-rough:visible")
            playwright.expect(note).to_contain_text("Rough transcript", timeout=10_000)
            assert "correct the text" in note.inner_text()
        finally:
            browser.close()
    recall = len(words(heard) & words(SENTENCE)) / len(words(SENTENCE))
    print(f"\nthe clone tab's transcript after Transcribe: {heard!r} (recall {recall:.2f})")
    assert recall >= MIN_RECALL, f"pocketsphinx heard {heard!r}"
