"""CosyVoice2-0.5B and Fun-CosyVoice3-0.5B end to end on tiny random official-format folders: every mode whole
and streamed, saved voices, instruct with a voice (instruct2), v3's transcript check, `<|endofprompt|>` never
doubled, and reproducibility."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui import InvalidRequest, Mode, SynthesisRequest, load_engine
from cosyvoice_ui.cosyvoice.families import V2, V3
from cosyvoice_ui.cosyvoice.frontend.qwen_tokenizer import QWEN_FOLDER
from cosyvoice_ui.cosyvoice.recipes import END_OF_PROMPT, SYSTEM_PREFIX
from cosyvoice_ui.testing.signals import voice_clip

TEXT = "Hello world, this is a test."
TRANSCRIPT = "hello there, how are you today"
PROMPT = voice_clip(4.0, seed=1)
SOURCE = voice_clip(2.0, pitch=180.0, seed=3)
ENDOFPROMPT_ID = 151646


@pytest.fixture(scope="module")
def v2_engine(tiny_v2: Path):
    return load_engine(tiny_v2, device="cpu")


@pytest.fixture(scope="module")
def v3_engine(tiny_v3: Path):
    return load_engine(tiny_v3, device="cpu")


@pytest.fixture(params=["v2", "v3"])
def engine(request: pytest.FixtureRequest):
    return request.getfixturevalue(f"{request.param}_engine")


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
def test_voice_conversion_keeps_the_source_length(engine, stream: bool) -> None:
    wave, _ = run(engine, SynthesisRequest(Mode.VC, prompt_audio=PROMPT, source_audio=SOURCE, stream=stream))
    assert abs(len(wave) / engine.info.sample_rate - SOURCE.duration) < 0.1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_v2_preset_speakers(v2_engine, stream: bool) -> None:
    wave, _ = run(v2_engine, SynthesisRequest(Mode.SFT, text=TEXT, speaker=v2_engine.info.speakers[0], stream=stream))
    assert_plausible_text_length(v2_engine, wave)


def test_streamed_audio_has_the_whole_length(engine) -> None:
    whole, _ = run(engine, text_request(Mode.CROSS_LINGUAL))
    streamed, _ = run(engine, text_request(Mode.CROSS_LINGUAL, stream=True))
    assert len(streamed) == len(whole)


def test_same_seed_same_audio(engine) -> None:
    first, _ = run(engine, text_request(Mode.ZERO_SHOT, seed=11))
    again, _ = run(engine, text_request(Mode.ZERO_SHOT, seed=11))
    other, _ = run(engine, text_request(Mode.ZERO_SHOT, seed=12))
    assert np.array_equal(first, again)
    assert len(first) != len(other) or not np.array_equal(first, other)


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
