"""Orchestration of the offline engine with a fake model: checks, chunking, streaming, progress, cancel, voices.

The text front end and the voices are real (so these tests skip without the Kokoro packages); the
model is `FakeKokoro`, so every test runs in milliseconds.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.errors import Cancelled, InvalidRequest
from cosyvoice_ui.offline.engine import ENGINE_NAME, OfflineEngine
from cosyvoice_ui.offline.store import MatchResult
from cosyvoice_ui.offline.styles import VoiceStyle
from cosyvoice_ui.types import Audio, Mode, ProgressEvent, SynthesisRequest

STOCK = ("jf_gongitsune", "jf_alpha", "jf_nezumi", "jf_tebukuro", "jm_kumo")  # the default first


def sft(text: str = "Hello there, this is a test.", **kw: object) -> SynthesisRequest:
    kw.setdefault("speaker", "jf_alpha")
    return SynthesisRequest(mode=Mode.SFT, text=text, **kw)  # type: ignore[arg-type]


def prompt(seconds: float = 3.0, seed: int = 0) -> Audio:
    rng = np.random.default_rng(seed)
    return Audio((0.1 * rng.standard_normal(int(16000 * seconds))).astype(np.float32), 16000)


def codes(engine: OfflineEngine, request: SynthesisRequest) -> str:
    with pytest.raises(InvalidRequest) as info:
        engine.check(request)
    return info.value.code


class FakeMatcher:
    """Returns a fixed style and counts how often it was asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def match(self, samples: np.ndarray, sample_rate: int, level: str = "quick", **_: object) -> MatchResult:
        self.calls.append(level)
        style = VoiceStyle(weights={"jm_kumo": 1.0} if level == "quick" else {"jf_nezumi": 1.0})
        return MatchResult(style, 0.7 if level == "quick" else 0.8, 0.5, "jm_kumo", level, 2, 0.01)


def test_info(fake_engine: OfflineEngine) -> None:
    info = fake_engine.info
    assert info.name == ENGINE_NAME == "Offline default (Kokoro-82M)"
    assert info.family == "offline"
    assert info.sample_rate == 24000
    assert info.modes == (Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL)
    assert not info.supports(Mode.INSTRUCT) and not info.supports(Mode.VC)
    assert info.speakers[:5] == STOCK
    assert info.default_speaker == "jf_gongitsune"
    assert any(s.startswith("blend_") for s in info.speakers)
    for phrase in ("gender", "pitch", "timbre", "CosyVoice"):
        assert phrase in info.notes


@pytest.mark.parametrize("mode", [Mode.INSTRUCT, Mode.VC])
def test_check_refuses_unsupported_modes(fake_engine: OfflineEngine, mode: Mode) -> None:
    with pytest.raises(InvalidRequest) as info:
        fake_engine.check(SynthesisRequest(mode=mode, text="hi", speaker="jf_alpha", instruct_text="happy"))
    assert info.value.code == "mode_unsupported" and info.value.params["mode"] == mode.value
    assert info.value.params["supported"] == "sft, zero_shot, cross_lingual"  # what it can do instead
    if mode is Mode.INSTRUCT:
        assert "CosyVoice-300M-Instruct" in info.value.params["needs"]


def test_check_messages(fake_engine: OfflineEngine) -> None:
    assert codes(fake_engine, sft("")) == "text_empty"
    assert codes(fake_engine, sft("   ")) == "text_empty"
    assert codes(fake_engine, sft("x" * 6000)) == "text_too_long"
    assert codes(fake_engine, sft("ありがとう")) == "text_unsupported_language"
    assert codes(fake_engine, sft(speed=2.5)) == "speed_out_of_range"
    assert codes(fake_engine, sft(speed=0.2)) == "speed_out_of_range"
    assert codes(fake_engine, sft(speaker=None)) == "speaker_unknown"
    with pytest.raises(InvalidRequest) as info:
        fake_engine.check(sft(speaker="nobody"))
    assert info.value.code == "speaker_unknown"
    assert "jf_alpha" in info.value.message and "jm_kumo" in info.value.message
    clone = SynthesisRequest(mode=Mode.CROSS_LINGUAL, text="hello")
    assert codes(fake_engine, clone) == "prompt_missing"
    short = SynthesisRequest(mode=Mode.CROSS_LINGUAL, text="hello", prompt_audio=prompt(0.5))
    assert codes(fake_engine, short) == "prompt_too_short"
    silent = SynthesisRequest(mode=Mode.CROSS_LINGUAL, text="hello", prompt_audio=Audio(np.zeros(48000, np.float32), 16000))
    assert codes(fake_engine, silent) == "prompt_silent"
    # Zero-shot means "with the transcript", as on every backend (here it is not used for matching).
    untranscribed = SynthesisRequest(mode=Mode.ZERO_SHOT, text="hello", prompt_audio=prompt())
    assert codes(fake_engine, untranscribed) == "transcript_missing"
    unknown_voice = SynthesisRequest(mode=Mode.CROSS_LINGUAL, text="hello", speaker="nobody")
    assert codes(fake_engine, unknown_voice) == "voice_unknown"


def test_check_accepts_valid_requests(fake_engine: OfflineEngine) -> None:
    fake_engine.check(sft(speed=0.5))
    fake_engine.check(sft(speed=2.0, speaker="blend_kumo_alpha"))
    fake_engine.check(SynthesisRequest(mode=Mode.ZERO_SHOT, text="hello", prompt_audio=prompt(), prompt_text="hi"))
    # A clone mode may name a voice instead of giving a recording.
    fake_engine.check(SynthesisRequest(mode=Mode.CROSS_LINGUAL, text="你好", speaker="jm_kumo"))


TEXT = "The first sentence is right here. 第二句话在这里。And a third one, to finish."


def test_stream_yields_one_chunk_per_text_chunk(fake_engine: OfflineEngine) -> None:
    chunks = list(fake_engine.synthesize(sft(TEXT, stream=True)))
    model = fake_engine.model
    assert len(chunks) == len(model.calls) == 3
    assert [c.segment for c in chunks] == [0, 1, 2]
    assert all(c.segments == 3 and c.sample_rate == 24000 for c in chunks)
    assert [c.final for c in chunks] == [False, False, True]
    assert chunks[1].text == "第二句话在这里。"
    assert all(c.samples.dtype == np.float32 and c.samples.size > 0 for c in chunks)


def test_whole_equals_stream(fake_engine: OfflineEngine) -> None:
    streamed = np.concatenate([c.samples for c in fake_engine.synthesize(sft(TEXT, stream=True))])
    whole = list(fake_engine.synthesize(sft(TEXT)))
    assert len(whole) == 1 and whole[0].final
    np.testing.assert_array_equal(whole[0].samples, streamed)


def test_long_sentence_is_chunked_within_the_model_limit(fake_engine: OfflineEngine) -> None:
    long_text = ", ".join(["the quick brown fox jumps over the lazy dog"] * 30) + "."
    chunks = list(fake_engine.synthesize(sft(long_text, stream=True)))
    lengths = [len(ids) for ids, _ in fake_engine.model.calls]
    assert len(chunks) == len(lengths) >= 3
    assert max(lengths) <= 510
    assert {c.segment for c in chunks} == {0}  # one sentence, several chunks


def test_text_frontend_off_keeps_one_segment(fake_engine: OfflineEngine) -> None:
    chunks = list(fake_engine.synthesize(sft(TEXT, stream=True, text_frontend=False)))
    assert {c.segment for c in chunks} == {0}


def test_speed_reaches_the_model(fake_engine: OfflineEngine) -> None:
    slow = list(fake_engine.synthesize(sft(speed=0.5)))[0].samples.size
    fast = list(fake_engine.synthesize(sft(speed=2.0)))[0].samples.size
    assert {s for _, s in fake_engine.model.calls} == {0.5, 2.0}
    assert fast < slow


def test_progress(fake_engine: OfflineEngine) -> None:
    events: list[ProgressEvent] = []
    list(fake_engine.synthesize(sft(TEXT), progress=events.append))
    segments = [e.fraction for e in events if e.stage == "segment"]
    assert len(segments) == 3 and segments == sorted(segments)
    assert events[-1].stage == "done" and events[-1].fraction == 1.0


def test_cancel_before_start(fake_engine: OfflineEngine) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        list(fake_engine.synthesize(sft(TEXT), cancel=cancel))
    assert fake_engine.model.calls == []


def test_cancel_mid_stream(fake_engine: OfflineEngine) -> None:
    cancel = threading.Event()
    stream = fake_engine.synthesize(sft(TEXT, stream=True), cancel=cancel)
    next(stream)
    cancel.set()
    with pytest.raises(Cancelled):
        next(stream)
    assert len(fake_engine.model.calls) == 1


def test_styles_differ_per_speaker(fake_engine: OfflineEngine) -> None:
    a = list(fake_engine.synthesize(sft(speaker="jf_alpha")))[0].samples
    b = list(fake_engine.synthesize(sft(speaker="jm_kumo")))[0].samples
    assert a.shape == b.shape and not np.allclose(a, b)


def test_clone_mode_matches_once_per_prompt(fake_engine: OfflineEngine) -> None:
    matcher = FakeMatcher()
    fake_engine.speakers._matcher = matcher  # inject instead of loading the speaker encoder
    request = SynthesisRequest(mode=Mode.CROSS_LINGUAL, text="Hello there.", prompt_audio=prompt(seed=1))
    first = list(fake_engine.synthesize(request))[0].samples
    second = list(fake_engine.synthesize(request))[0].samples
    assert matcher.calls == ["quick"]  # the second request hit the cache
    np.testing.assert_array_equal(first, second)
    # A refine search replaces the cached quick result; later quick requests reuse the refined one.
    refined = fake_engine.match_voice(request.prompt_audio, level="refine")
    assert refined.level == "refine" and matcher.calls == ["quick", "refine"]
    again = fake_engine.match_voice(request.prompt_audio, level="quick")
    assert again.cached and again.level == "refine"
    # A different recording is matched anew.
    fake_engine.match_voice(prompt(seed=2))
    assert matcher.calls == ["quick", "refine", "quick"]


def test_library_voices_register_once_and_become_speakers(fake_engine: OfflineEngine, tmp_path: Path) -> None:
    from cosyvoice_ui.offline.engine import OfflineEngine as Engine
    from cosyvoice_ui.offline.speakers import LIBRARY_STYLE_FILE
    from cosyvoice_ui.serving.voice_service import register_all
    from cosyvoice_ui.serving.voices import VoiceLibrary

    library = VoiceLibrary(tmp_path / "library")
    voice = library.add("Narrator", prompt(seed=3), "what the narrator says")
    matcher = FakeMatcher()
    fake_engine.speakers._matcher = matcher
    assert register_all(fake_engine, library) == 1
    assert matcher.calls == ["quick"]
    assert (library.path(voice.id) / LIBRARY_STYLE_FILE).is_file()
    info = fake_engine.info
    assert voice.id in info.speakers and info.saved_voices == (voice.id,)
    for request in (
        sft(speaker=voice.id),
        SynthesisRequest(mode=Mode.CROSS_LINGUAL, text="Hello there.", speaker=voice.id),
        SynthesisRequest(mode=Mode.ZERO_SHOT, text="Hello there.", speaker=voice.id),
    ):
        assert list(fake_engine.synthesize(request))[0].samples.size > 0
    # A fresh engine reads the stored style instead of matching again.
    other = Engine(fake_engine.model, fake_engine.frontend, fake_engine.space, tmp_path / "other")
    second = FakeMatcher()
    other.speakers._matcher = second
    register_all(other, library)
    assert second.calls == [] and voice.id in other.info.speakers
    fake_engine.unregister_voice(voice.id)
    assert voice.id not in fake_engine.info.speakers
