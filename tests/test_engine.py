"""End to end on tiny random official-format folders: CosyVoice-300M (v1: SFT and instruct folders),
CosyVoice2-0.5B and Fun-CosyVoice3-0.5B. Every mode whole and streamed, seeds, progress and cancel, saved voices,
instruct with a voice (instruct2), v3's transcript check, `<|endofprompt|>` never doubled, and the specific errors
bad requests get. What the three generations share (seeds, voice conversion's length, streamed length) is one
parametrised test."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui import Cancelled, InvalidRequest, Mode, SynthesisRequest, load_engine
from cosyvoice_ui.cosyvoice.families import V2, V3
from cosyvoice_ui.cosyvoice.frontend.qwen_tokenizer import QWEN_FOLDER
from cosyvoice_ui.cosyvoice.recipes import END_OF_PROMPT, SYSTEM_PREFIX
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Audio

TEXT = "Hello world, this is a test."
TRANSCRIPT = "hello there, how are you today"
PROMPT = voice_clip(4.0, seed=1)
SOURCE = voice_clip(2.0, pitch=180.0, seed=3)
ENDOFPROMPT_ID = 151646
V1_PROMPT = voice_clip(4.0)
V1_TRANSCRIPT = "希望你以后能够做的比我还好呦。"


@pytest.fixture(scope="module")
def sft_engine(tiny_sft: Path):
    return load_engine(tiny_sft, device="cpu")


@pytest.fixture(scope="module")
def instruct_engine(tiny_instruct: Path):
    return load_engine(tiny_instruct, device="cpu")


@pytest.fixture(scope="module")
def v2_engine(tiny_v2: Path):
    return load_engine(tiny_v2, device="cpu")


@pytest.fixture(scope="module")
def v3_engine(tiny_v3: Path):
    return load_engine(tiny_v3, device="cpu")


@pytest.fixture(params=["v2", "v3"])
def engine(request: pytest.FixtureRequest):
    return request.getfixturevalue(f"{request.param}_engine")


@pytest.fixture(params=["v1", "v2", "v3"])
def any_engine(request: pytest.FixtureRequest):
    """Each generation's engine (v1: the SFT folder, which also clones)."""
    return request.getfixturevalue("sft_engine" if request.param == "v1" else f"{request.param}_engine")


def run(engine, request: SynthesisRequest) -> tuple[np.ndarray, list]:
    chunks = list(engine.synthesize(request))
    assert chunks and chunks[-1].final and not any(c.final for c in chunks[:-1])
    wave = np.concatenate([c.samples for c in chunks])
    assert wave.dtype == np.float32 and np.all(np.isfinite(wave)) and np.abs(wave).max() <= 0.99 + 1e-6
    assert all(c.sample_rate == engine.info.sample_rate for c in chunks)
    return wave, chunks


def text_request(mode: Mode, **options) -> SynthesisRequest:
    voice = {} if "speaker" in options else {"prompt_audio": PROMPT}
    extra = {Mode.ZERO_SHOT: {"prompt_text": TRANSCRIPT}, Mode.INSTRUCT: {"instruct_text": "speak slowly"}}
    return SynthesisRequest(mode, **{"text": TEXT, **voice, **extra.get(mode, {}), "seed": 3, **options})


def assert_plausible_text_length(engine, wave: np.ndarray) -> None:
    seconds = len(wave) / engine.info.sample_rate
    n_text = len(engine.tokenizer.encode(SYSTEM_PREFIX + TEXT))  # v3's cross-lingual text has the prefix
    # At most upstream's max_token_text_ratio (20) speech tokens per text id, at 25 tokens a second.
    assert 0.1 < seconds <= 20 * n_text / 25 + 0.5


# --- every generation -----------------------------------------------------------------------------------------


def test_same_seed_same_audio_other_seed_differs(any_engine) -> None:
    first, _ = run(any_engine, text_request(Mode.ZERO_SHOT, seed=11))
    again, _ = run(any_engine, text_request(Mode.ZERO_SHOT, seed=11))
    other, _ = run(any_engine, text_request(Mode.ZERO_SHOT, seed=12))
    assert np.array_equal(first, again)
    assert len(first) != len(other) or not np.array_equal(first, other)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_voice_conversion_keeps_the_source_length(any_engine, stream: bool) -> None:
    wave, _ = run(any_engine, SynthesisRequest(Mode.VC, prompt_audio=PROMPT, source_audio=SOURCE, stream=stream,
                                               seed=1))
    # The source's speech tokens are re-synthesised 1:1, so the duration is kept (within a frame).
    assert abs(len(wave) / any_engine.info.sample_rate - SOURCE.duration) < 0.1


# --- v1 ----------------------------------------------------------------------------------------------------------


def n_text_tokens(engine, text: str) -> int:
    return len(engine.tokenizer.encode(text))


@pytest.mark.parametrize("mode", [Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL])
def test_text_modes_produce_plausible_length(sft_engine, mode: Mode) -> None:
    text = "Hello world, this is a short test."
    request = SynthesisRequest(mode, text=text, speaker="英文女" if mode is Mode.SFT else None,
                               prompt_audio=None if mode is Mode.SFT else V1_PROMPT,
                               prompt_text=V1_TRANSCRIPT if mode is Mode.ZERO_SHOT else "", seed=3)
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
    """v1 without a flow prompt (SFT): the chunked vocoding keeps the total length exactly (with a prompt, each join
    may round a frame: tests/test_streaming.py)."""
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
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_audio=V1_PROMPT), "transcript_missing"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_text="x", prompt_audio=voice_clip(1.5)), "prompt_too_short"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_text="x", prompt_audio=voice_clip(31.0)), "prompt_too_long"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_text="x", prompt_audio=voice_clip(4.0, rate=8000)),
     "prompt_low_rate"),
    (SynthesisRequest(Mode.ZERO_SHOT, text="hi", prompt_text="x",
                      prompt_audio=Audio(np.zeros(64000, np.float32), 16000)), "prompt_silent"),
    (SynthesisRequest(Mode.INSTRUCT, text="hi", speaker="中文女", instruct_text="calm"), "mode_unsupported"),
    (SynthesisRequest(Mode.SFT, text="。。！", speaker="中文女"), "text_unspeakable"),
    (SynthesisRequest(Mode.VC, prompt_audio=V1_PROMPT), "prompt_missing"),
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

# --- v2 and v3 ----------------------------------------------------------------------------------------------------


def test_folders_load_as_their_family(v2_engine, v3_engine) -> None:
    assert (v2_engine.info.family, v3_engine.info.family) == (V2.name, V3.name)
    assert v2_engine.info.sample_rate == V3.sample_rate == 24000
    assert v2_engine.info.instruct_voice and v3_engine.info.instruct_voice
    assert Mode.SFT in v2_engine.info.modes and Mode.SFT not in v3_engine.info.modes  # v3 tiny: no spk2info
    for engine in (v2_engine, v3_engine):
        assert {Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC} <= set(engine.info.modes)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("mode", [Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT])
def test_text_modes(engine, mode: Mode, stream: bool) -> None:
    wave, chunks = run(engine, text_request(mode, stream=stream))
    assert_plausible_text_length(engine, wave)
    if stream:
        assert len(chunks) > 1  # ≥ 100 tokens: several 25/50/100-token chunks


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_v2_preset_speakers(v2_engine, stream: bool) -> None:
    wave, _ = run(v2_engine, SynthesisRequest(Mode.SFT, text=TEXT, speaker=v2_engine.info.speakers[0], stream=stream))
    assert_plausible_text_length(v2_engine, wave)


def test_streamed_audio_has_the_whole_length(engine) -> None:
    whole, _ = run(engine, text_request(Mode.CROSS_LINGUAL))
    streamed, _ = run(engine, text_request(Mode.CROSS_LINGUAL, stream=True))
    assert len(streamed) == len(whole)


def test_saved_voices_in_every_voice_mode(engine) -> None:
    engine.add_voice("saved", engine.encode_voice(PROMPT), TRANSCRIPT)
    try:
        assert "saved" in engine.info.saved_voices
        for mode in (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT):
            wave, _ = run(engine, text_request(mode, speaker="saved"))
            assert_plausible_text_length(engine, wave)
        wave, _ = run(engine, SynthesisRequest(Mode.VC, speaker="saved", source_audio=SOURCE))
        assert abs(len(wave) / engine.info.sample_rate - SOURCE.duration) < 0.1
        spoken, _ = run(engine, text_request(Mode.ZERO_SHOT, speaker="saved"))
        uploaded, _ = run(engine, text_request(Mode.ZERO_SHOT))
        assert np.array_equal(spoken, uploaded)  # the saved voice is the recording's features
    finally:
        engine.remove_voice("saved")


def test_instruct_needs_a_voice_not_a_preset(v2_engine, v3_engine) -> None:
    with pytest.raises(InvalidRequest) as missing:
        list(v3_engine.synthesize(SynthesisRequest(Mode.INSTRUCT, text=TEXT, instruct_text="speak slowly")))
    assert missing.value.code == "prompt_missing"
    with pytest.raises(InvalidRequest) as preset:  # a preset name is not a voice in instruct2
        list(v2_engine.synthesize(SynthesisRequest(Mode.INSTRUCT, text=TEXT, instruct_text="speak slowly",
                                                   speaker=v2_engine.info.speakers[0])))
    assert preset.value.code == "voice_unknown"


@pytest.mark.parametrize("transcript", ["a", "word " * 60], ids=["too-short", "too-long"])
def test_v3_refuses_a_transcript_that_does_not_fit_the_prompt(v3_engine, transcript: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        list(v3_engine.synthesize(text_request(Mode.ZERO_SHOT, prompt_text=transcript)))
    assert refused.value.code == "transcript_mismatch" and "4.0 s" in refused.value.message


def test_v3_refuses_a_missing_transcript(v3_engine) -> None:
    with pytest.raises(InvalidRequest) as refused:
        list(v3_engine.synthesize(text_request(Mode.ZERO_SHOT, prompt_text="...")))
    assert refused.value.code == "transcript_missing"
    v3_engine.add_voice("untranscribed", v3_engine.encode_voice(PROMPT), "")
    try:
        with pytest.raises(InvalidRequest) as saved:
            list(v3_engine.synthesize(text_request(Mode.ZERO_SHOT, speaker="untranscribed", prompt_text="")))
        assert saved.value.code == "transcript_missing"
    finally:
        v3_engine.remove_voice("untranscribed")


def test_v2_takes_any_transcript_length(v2_engine) -> None:
    run(v2_engine, text_request(Mode.ZERO_SHOT, prompt_text="a"))


def _end_of_prompt_count(engine, request: SynthesisRequest) -> int:
    jobs = engine._segment_jobs(request)
    assert len(jobs) == 1
    model_input = jobs[0][1]
    ids = model_input.prompt_text[0].tolist() + model_input.text[0].tolist()
    return ids.count(ENDOFPROMPT_ID)


@pytest.mark.parametrize("typed", [False, True], ids=["added", "typed"])
def test_end_of_prompt_is_never_doubled(v2_engine, v3_engine, typed: bool) -> None:
    mark = END_OF_PROMPT if typed else ""
    instruct = text_request(Mode.INSTRUCT, instruct_text=f"speak slowly{mark}")
    assert _end_of_prompt_count(v2_engine, instruct) == 1
    assert _end_of_prompt_count(v3_engine, instruct) == 1
    zero_shot = text_request(Mode.ZERO_SHOT, prompt_text=f"You are a helpful assistant.{mark}{TRANSCRIPT}")
    assert _end_of_prompt_count(v3_engine, zero_shot) == 1
    assert _end_of_prompt_count(v3_engine, text_request(Mode.CROSS_LINGUAL, text=f"{mark}{TEXT}")) == 1
    assert _end_of_prompt_count(v2_engine, text_request(Mode.ZERO_SHOT)) == 0  # v2 adds it to instruct text only


def test_tiny_folders_are_official_format(tiny_v2: Path, tiny_v3: Path) -> None:
    for folder, family in ((tiny_v2, V2), (tiny_v3, V3)):
        for name in family.required_files:
            assert (folder / name).is_file(), name
        assert (folder / QWEN_FOLDER / "tokenizer_config.json").is_file()
    assert (tiny_v2 / "spk2info.pt").is_file() and not (tiny_v3 / "spk2info.pt").is_file()


@pytest.mark.parametrize("family", ["v2", "v3"])
def test_fast_precision_streams(request: pytest.FixtureRequest, family: str) -> None:
    engine = load_engine(request.getfixturevalue(f"tiny_{family}"), device="cpu", precision="fast")
    assert engine.info.precision.mode == "fast"
    wave, chunks = run(engine, text_request(Mode.ZERO_SHOT, stream=True, prompt_audio=voice_clip(8.0, seed=1)))
    assert len(chunks) > 1 and len(wave) > 0  # a 3 s flow prompt, trimmed at the 2:1 token/mel ratio
