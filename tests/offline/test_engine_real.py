"""The real offline engine (Kokoro-82M ONNX from PyPI): it speaks, intelligibly, and voice matching helps.

Skipped when the Kokoro packages are missing. The short checks take a few seconds; the ones marked
`slow` run speech recognition or voice matching (tens of seconds on 2 cores). Test prompts are made
by the engine itself with styles it does not offer, so no audio lives in the repository.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.errors import Cancelled
from cosyvoice_ui.offline.engine import OfflineEngine
from cosyvoice_ui.offline.styles import VoiceStyle
from cosyvoice_ui.types import Audio, Mode, SynthesisRequest

SHORT = "Good morning."
# Five Harvard sentences (IEEE 1969 recommended practice): plain words, all in CMUdict.
HARVARD = (
    "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. "
    "It is easy to tell the depth of a well. These days a chicken leg is a rare dish. "
    "Rice is often served in round bowls."
)
# Measured on the development machine (README, "Works offline out of the box"): the default
# speaker reaches about 0.6 of the distinct reference words with pocketsphinx's generic English
# model (WER about 0.43). The threshold leaves margin for other CPUs' numerics.
MIN_WORD_RECALL = 0.45
MAX_WER = 0.7


def render(engine: OfflineEngine, text: str, **kw: object) -> np.ndarray:
    kw.setdefault("speaker", engine.info.default_speaker)
    kw.setdefault("mode", Mode.SFT)
    chunks = list(engine.synthesize(SynthesisRequest(text=text, **kw)))  # type: ignore[arg-type]
    return np.concatenate([c.samples for c in chunks])


def test_speaks_english_and_mandarin(real_engine: OfflineEngine) -> None:
    for text in (SHORT, "早上好。"):
        audio = render(real_engine, text)
        seconds = audio.size / 24000
        assert 0.3 < seconds < 4.0, f"{text!r} gave {seconds:.2f} s"
        assert 0.05 < np.abs(audio).max() <= 1.0, "silent or clipping output"
        assert np.isfinite(audio).all()


def test_deterministic(real_engine: OfflineEngine) -> None:
    a = render(real_engine, SHORT, seed=3)
    b = render(real_engine, SHORT, seed=3)
    np.testing.assert_array_equal(a, b)


def test_speed_changes_duration(real_engine: OfflineEngine) -> None:
    normal = render(real_engine, SHORT).size
    fast = render(real_engine, SHORT, speed=1.6).size
    slow = render(real_engine, SHORT, speed=0.6).size
    assert fast < 0.8 * normal < slow * 0.8


def test_cancel_stops_a_long_request(real_engine: OfflineEngine) -> None:
    cancel = threading.Event()
    stream = real_engine.synthesize(
        SynthesisRequest(mode=Mode.SFT, text="One. Two sentences here. Three more words.", speaker="jm_kumo", stream=True),
        cancel=cancel,
    )
    next(stream)
    cancel.set()
    with pytest.raises(Cancelled):
        list(stream)


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def word_error_rate(reference: list[str], hypothesis: list[str]) -> float:
    """Levenshtein distance over words divided by the reference length."""
    row = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        prev, row[0] = row[:], i
        for j, hyp in enumerate(hypothesis, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ref != hyp))
    return row[-1] / max(1, len(reference))


@pytest.mark.slow
def test_intelligible_to_offline_asr(real_engine: OfflineEngine) -> None:
    pocketsphinx = pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx==5.1.1 for the ASR check")
    from cosyvoice_ui.offline.dsp import resample

    audio = render(real_engine, HARVARD)
    pcm = (np.clip(resample(audio, 24000, 16000), -1.0, 1.0) * 32767).astype(np.int16)
    decoder = pocketsphinx.Decoder(samprate=16000, loglevel="FATAL")  # bundled en-us model + LM
    decoder.start_utt()
    decoder.process_raw(pcm.tobytes(), full_utt=True)
    decoder.end_utt()
    hypothesis = decoder.hyp().hypstr if decoder.hyp() is not None else ""
    reference = words(HARVARD)
    heard = set(words(hypothesis))
    recall = sum(w in heard for w in set(reference)) / len(set(reference))
    wer = word_error_rate(reference, words(hypothesis))
    print(f"\npocketsphinx heard: {hypothesis!r}\nWER {wer:.3f}, distinct reference words recognised {recall:.2f}")
    assert recall >= MIN_WORD_RECALL, f"only {recall:.2f} of the reference words were recognised: {hypothesis!r}"
    assert wer <= MAX_WER


# A voice the engine does not offer: an uneven blend pushed off the stock voices by a fixed offset.
HELD_OUT = VoiceStyle(
    weights={"jf_alpha": 0.4, "jf_nezumi": 0.3, "jm_kumo": 0.3},
    offset=np.clip(np.random.default_rng(1001).standard_normal(256) * 2.0, -2.5, 2.5).astype(np.float32),
)
PROMPT_TEXT = "The museum opens at nine, and the tickets are free on Mondays."
NEW_TEXT = "Could you please close the window before you leave? 他每天早上骑自行车去上班。"


def speak_style(engine: OfflineEngine, style: VoiceStyle, text: str) -> np.ndarray:
    pack = engine.space.pack(style)
    return np.concatenate([engine.model.render(ids, pack) for s in engine.frontend.prepare(text) for ids in s.ids])


@pytest.mark.slow
def test_voice_match_beats_the_nearest_preset(real_engine: OfflineEngine, tmp_path: Path) -> None:
    prompt = Audio(speak_style(real_engine, HELD_OUT, PROMPT_TEXT), 24000)
    started = time.perf_counter()
    result = real_engine.match_voice(prompt, level="quick")
    quick_s = time.perf_counter() - started
    matcher = real_engine.matcher()
    target = matcher.embed_prompt(prompt.samples, prompt.sample_rate)

    def similarity_on_new_text(style: VoiceStyle) -> float:
        return float(matcher.encoder.embed(speak_style(real_engine, style, NEW_TEXT), 24000) @ target)

    matched = similarity_on_new_text(result.style)
    nearest = similarity_on_new_text(real_engine.space.stock(result.baseline_voice))
    print(
        f"\nquick match in {quick_s:.1f}s: {result.similarity:.3f} on calibration (nearest preset "
        f"{result.baseline_voice} {result.baseline:.3f}); on new sentences {matched:.3f} vs {nearest:.3f}"
    )
    assert matched > nearest + 0.03, f"matched {matched:.3f} is not closer than the nearest preset {nearest:.3f}"
    # The result is cached per recording, and a library voice of the same recording reuses it.
    assert real_engine.match_voice(prompt).cached
    real_engine.register_voice("matched-test-voice", prompt, PROMPT_TEXT, tmp_path)
    try:
        out = render(real_engine, SHORT, speaker="matched-test-voice")
        assert out.size > 0
    finally:  # the engine is shared by the session's tests
        real_engine.unregister_voice("matched-test-voice")


@pytest.mark.slow
def test_refine_only_improves(real_engine: OfflineEngine) -> None:
    prompt = Audio(speak_style(real_engine, HELD_OUT, "Rice is often served in round bowls."), 24000)
    matcher = real_engine.matcher()
    events = []
    quick = matcher.match(prompt.samples, prompt.sample_rate, level="quick")
    refined = matcher.match(prompt.samples, prompt.sample_rate, level="refine", seed=0, evaluations=2, progress=events.append)
    assert refined.similarity >= quick.similarity
    assert refined.evaluations == quick.evaluations + 2
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    again = matcher.match(prompt.samples, prompt.sample_rate, level="refine", seed=0, evaluations=2)
    assert again.similarity == refined.similarity  # same seed, same search
