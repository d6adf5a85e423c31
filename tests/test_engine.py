"""End to end on tiny random models: every mode, streaming, seeds, progress, cancel, and the
specific errors bad requests get."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui import Cancelled, InvalidRequest, Mode, SynthesisRequest, load_engine
from cosyvoice_ui.types import Audio

from cosyvoice_ui.testing.signals import voice_clip

PROMPT = voice_clip(4.0)
TRANSCRIPT = "希望你以后能够做的比我还好呦。"


@pytest.fixture(scope="module")
def sft_engine(tiny_sft: Path):
    return load_engine(tiny_sft, device="cpu")


@pytest.fixture(scope="module")
def instruct_engine(tiny_instruct: Path):
    return load_engine(tiny_instruct, device="cpu")


def run(engine, request: SynthesisRequest) -> tuple[np.ndarray, list]:
    chunks = list(engine.synthesize(request))
    assert chunks, "no audio"
    assert chunks[-1].final and not any(c.final for c in chunks[:-1])
    wave = np.concatenate([c.samples for c in chunks])
    assert wave.dtype == np.float32 and np.all(np.isfinite(wave))
    assert np.abs(wave).max() <= 0.99 + 1e-6
    return wave, chunks


def n_text_tokens(engine, text: str) -> int:
    return len(engine.tokenizer.encode(text))


@pytest.mark.parametrize("mode", [Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL])
def test_text_modes_produce_plausible_length(sft_engine, mode: Mode) -> None:
    text = "Hello world, this is a short test."
    request = SynthesisRequest(mode, text=text, speaker="英文女" if mode is Mode.SFT else None,
                               prompt_audio=None if mode is Mode.SFT else PROMPT,
                               prompt_text=TRANSCRIPT if mode is Mode.ZERO_SHOT else "", seed=3)
    wave, chunks = run(sft_engine, request)
    # The LLM emits between 2x and 20x the text ids as 50 Hz tokens; each token is 22050/50 samples.
    n = n_text_tokens(sft_engine, ("<|en|>" if mode is Mode.CROSS_LINGUAL else "") + chunks[0].text)
    seconds = len(wave) / sft_engine.info.sample_rate
    assert 2 * n / 50 * 0.9 <= seconds <= 20 * n / 50 + 0.1
    assert chunks[0].sample_rate == 22050


def test_instruct_mode(instruct_engine) -> None:
    request = SynthesisRequest(Mode.INSTRUCT, text="Good morning!", speaker="中文女",
                               instruct_text="A female speaker with normal pitch and sad emotion.", seed=1)
    wave, _ = run(instruct_engine, request)
    assert len(wave) > 0.1 * 22050


def test_voice_conversion_keeps_source_length(sft_engine) -> None:
    source = voice_clip(2.0, pitch=200.0, seed=1)
    wave, _ = run(sft_engine, SynthesisRequest(Mode.VC, prompt_audio=PROMPT, source_audio=source, seed=1))
    # The source's 50 Hz tokens are re-synthesised 1:1, so the duration is kept (within a frame).
    assert abs(len(wave) / 22050 - 2.0) < 0.1


def test_same_seed_same_audio_other_seed_differs(sft_engine) -> None:
    request = SynthesisRequest(Mode.SFT, text="你好，世界。", speaker="中文女", seed=11)
    a, _ = run(sft_engine, request)
    b, _ = run(sft_engine, request)
    c, _ = run(sft_engine, replace(request, seed=12))
    assert np.array_equal(a, b)
    assert len(a) != len(c) or not np.allclose(a, c)


def test_long_text_is_split_and_streamed_in_chunks(sft_engine) -> None:
    text = " ".join(["The quick brown fox jumps over the lazy dog near the river bank today."] * 8)
    request = SynthesisRequest(Mode.SFT, text=text, speaker="英文男", seed=5, stream=True)
    wave, chunks = run(sft_engine, request)
    assert chunks[0].segments >= 2, "long text should be split into segments"
    assert [c.segment for c in chunks] == sorted(c.segment for c in chunks)
    per_segment = {}
    for c in chunks:
        per_segment.setdefault(c.segment, []).append(c)
    assert any(len(v) > 1 for v in per_segment.values()), "a long segment should stream in several chunks"


def test_streaming_matches_whole_segment_length(sft_engine) -> None:
    request = SynthesisRequest(Mode.SFT, text="Streaming and whole rendering give the same token count.",
                               speaker="英文男", seed=9)
    whole, _ = run(sft_engine, request)
    streamed, chunks = run(sft_engine, replace(request, stream=True))
    assert len(chunks) >= 2
    # Same seed → same tokens; the chunked vocoding keeps the total length exactly.
    assert len(streamed) == len(whole)


def test_speed_changes_duration(sft_engine) -> None:
    request = SynthesisRequest(Mode.SFT, text="Speed test sentence.", speaker="英文女", seed=2)
    normal, _ = run(sft_engine, request)
    fast, _ = run(sft_engine, replace(request, speed=2.0))
    assert abs(len(fast) / len(normal) - 0.5) < 0.05


def test_progress_events_and_cancel(sft_engine) -> None:
    events = []
    request = SynthesisRequest(Mode.SFT, text="One. Two. Three.", speaker="中文男", seed=1)
    list(sft_engine.synthesize(request, progress=events.append))
    assert events[0].stage == "frontend" and events[-1].stage == "done"
    assert all(0.0 <= e.fraction <= 1.0 for e in events)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        list(sft_engine.synthesize(request, cancel=cancel))


@pytest.mark.parametrize(("request_", "code"), [
    (SynthesisRequest(Mode.SFT, text="", speaker="中文女"), "text_empty"),
    (SynthesisRequest(Mode.SFT, text="x" * 6000, speaker="中文女"), "text_too_long"),
    (SynthesisRequest(Mode.SFT, text="hi", speaker="nobody"), "speaker_unknown"),
    (SynthesisRequest(Mode.SFT, text="hi", speaker="中文女", speed=3.0), "speed_out_of_range"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_text="hello"), "prompt_missing"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_audio=PROMPT), "transcript_missing"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_text="x", prompt_audio=voice_clip(1.5)), "prompt_too_short"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_text="x", prompt_audio=voice_clip(31.0)), "prompt_too_long"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_text="x", prompt_audio=voice_clip(4.0, rate=8000)),
     "prompt_low_rate"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_text="x",
                      prompt_audio=Audio(np.zeros(64000, np.float32), 16000)), "prompt_silent"),
    (SynthesisRequest(Mode.INSTRUCT, text="hi", speaker="中文女", instruct_text="calm"), "mode_unsupported"),
    (SynthesisRequest(Mode.SFT, text="。。！", speaker="中文女"), "text_unspeakable"),
    (SynthesisRequest(Mode.VC, prompt_audio=PROMPT), "prompt_missing"),
])
def test_bad_requests_get_specific_errors(sft_engine, request_: SynthesisRequest, code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        list(sft_engine.synthesize(request_))
    assert info.value.code == code
    assert len(str(info.value)) > 20  # a sentence that says what to do, not a bare code


def test_instruct_needs_instruct_text(instruct_engine) -> None:
    with pytest.raises(InvalidRequest) as info:
        instruct_engine.check(SynthesisRequest(Mode.INSTRUCT, text="hi", speaker="中文女", instruct_text="  "))
    assert info.value.code == "instruct_missing"


def test_base_model_without_speakers_names_the_sft_model(tiny_base: Path) -> None:
    engine = load_engine(tiny_base, device="cpu")
    assert Mode.SFT not in engine.info.modes and engine.info.speakers == ()
    with pytest.raises(InvalidRequest) as info:
        engine.check(SynthesisRequest(Mode.SFT, text="hi", speaker="x"))
    assert info.value.code == "mode_unsupported" and "SFT" in str(info.value)


def test_stereo_and_other_rates_are_accepted_silently(sft_engine) -> None:
    mono = voice_clip(4.0, rate=44100)
    stereo = Audio(np.stack([mono.samples, mono.samples], axis=1), 44100)
    wave, _ = run(sft_engine, SynthesisRequest(Mode.CROSS_LINGUAL, text="hi there", prompt_audio=stereo, seed=1))
    assert len(wave) > 0
