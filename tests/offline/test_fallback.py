"""The espeak-ng last-resort engine (skipped where espeak-ng is not installed)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cosyvoice_ui.errors import Cancelled, CheckpointError, InvalidRequest
from cosyvoice_ui.offline import fallback
from cosyvoice_ui.offline.fallback import ESPEAK_RATE, EspeakEngine, fallback_available, load_fallback_engine
from cosyvoice_ui.types import Audio, Mode, SynthesisRequest

needs_espeak = pytest.mark.skipif(
    not fallback_available()[0], reason="espeak-ng is not installed (apt-get install espeak-ng)"
)


def test_unavailable_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fallback.shutil, "which", lambda name: None)
    ok, reason = fallback_available()
    assert not ok and "apt-get install espeak-ng" in reason
    with pytest.raises(CheckpointError, match="espeak-ng is not installed"):
        load_fallback_engine()


@pytest.fixture(scope="module")
def engine() -> EspeakEngine:
    if not fallback_available()[0]:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    return EspeakEngine()


def test_info_is_clearly_labelled(engine: EspeakEngine) -> None:
    info = engine.info
    assert info.name == "Fallback (espeak-ng)"
    assert info.family == "offline"
    assert info.modes == (Mode.SFT,)
    assert info.sample_rate == ESPEAK_RATE
    assert "robotic" in info.notes and "requirements-offline.txt" in info.notes


def test_check(engine: EspeakEngine) -> None:
    with pytest.raises(InvalidRequest) as err:
        engine.check(SynthesisRequest(mode=Mode.ZERO_SHOT, text="hi", prompt_audio=Audio(np.ones(16000, np.float32), 16000)))
    assert err.value.code == "mode_unsupported" and "CosyVoice" in err.value.message
    with pytest.raises(InvalidRequest) as err:
        engine.check(SynthesisRequest(mode=Mode.SFT, text="hi", speaker="jf_alpha"))
    assert err.value.code == "speaker_unknown" and "espeak_male" in err.value.message
    with pytest.raises(InvalidRequest) as err:
        engine.check(SynthesisRequest(mode=Mode.SFT, text="", speaker="espeak_male"))
    assert err.value.code == "text_empty"


@needs_espeak
def test_speaks_english_and_mandarin(engine: EspeakEngine) -> None:
    request = SynthesisRequest(mode=Mode.SFT, text="Hello there, my friend. 你好，朋友。", speaker="espeak_female", stream=True)
    chunks = list(engine.synthesize(request))
    assert [c.segment for c in chunks] == [0, 1] and chunks[-1].final
    for c in chunks:
        assert c.sample_rate == ESPEAK_RATE
        assert c.samples.dtype == np.float32 and np.abs(c.samples).max() > 0.05
    whole = list(engine.synthesize(SynthesisRequest(mode=Mode.SFT, text="Hello there, my friend. 你好，朋友。", speaker="espeak_female")))
    assert len(whole) == 1
    np.testing.assert_array_equal(whole[0].samples, np.concatenate([c.samples for c in chunks]))


@needs_espeak
def test_speed_and_leading_dash(engine: EspeakEngine) -> None:
    def seconds(text: str, speed: float) -> float:
        (chunk,) = engine.synthesize(SynthesisRequest(mode=Mode.SFT, text=text, speaker="espeak_male", speed=speed))
        return chunk.samples.size / ESPEAK_RATE

    assert seconds("This is a fairly long test sentence.", 2.0) < 0.7 * seconds("This is a fairly long test sentence.", 1.0)
    assert seconds("-v is not an option here", 1.0) > 0.5  # text goes through stdin, never argv


@needs_espeak
def test_cancel(engine: EspeakEngine) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        list(engine.synthesize(SynthesisRequest(mode=Mode.SFT, text="Hello.", speaker="espeak_male"), cancel=cancel))


def test_default_engine_falls_back_to_espeak(monkeypatch: pytest.MonkeyPatch) -> None:
    import cosyvoice_ui.offline as offline

    monkeypatch.setattr(offline, "offline_available", lambda: (False, "offline voice packages missing: misaki"))
    if fallback_available()[0]:
        assert offline.load_default_engine().info.name == "Fallback (espeak-ng)"
    monkeypatch.setattr(offline, "fallback_available", lambda: (False, "espeak-ng is not installed"))
    with pytest.raises(CheckpointError, match="misaki.*espeak-ng is not installed"):
        offline.load_default_engine()


def test_espeak_failure_is_a_clear_error() -> None:
    from cosyvoice_ui.errors import CosyVoiceError

    broken = EspeakEngine(executable="false")  # the coreutils program: exits 1 without output
    with pytest.raises(CosyVoiceError, match="espeak-ng failed"):
        list(broken.synthesize(SynthesisRequest(mode=Mode.SFT, text="Hello there.", speaker="espeak_male")))
