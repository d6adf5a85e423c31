"""Prompt transcription (issue 15, point 6): `serving/transcription.py` over `asr/`.

The Whisper path runs end to end on a tiny random checkpoint in the hub's folder layout
(`testing/tiny_asr.py`): its text is garbage, but every step from a 24 kHz recording to a `Transcript` is the
real one. pocketsphinx is checked on English speech made by the offline voice (skipped without its packages).
Downloads never touch the network: `snapshot_download` is replaced by a fake that drives the real progress bars.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.asr import catalogue
from cosyvoice_ui.asr.signal import ASR_RATE, to_asr_rate
from cosyvoice_ui.errors import DownloadError, InvalidRequest
from cosyvoice_ui.serving.transcription import (POCKETSPHINX, Transcriber, Transcript, check_transcript_fits,
                                                 normalize_language, speaking_time)
from cosyvoice_ui.types import Audio

TINY = "tiny-whisper"


def babble(seconds: float, rate: int = 24000, seed: int = 0) -> Audio:
    """A speech-like test signal: a voiced buzz whose loudness rises and falls at a syllable rate."""
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(seed)
    voiced = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)
    return Audio((0.1 * voiced * envelope + 0.01 * rng.standard_normal(t.size)).astype(np.float32), rate)


@pytest.fixture(scope="session")
def tiny_whisper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cosyvoice_ui.testing.tiny_asr import write_tiny_whisper

    return write_tiny_whisper(tmp_path_factory.mktemp("asr_build") / TINY)


@pytest.fixture()
def models_dir(tmp_path: Path, tiny_whisper: Path) -> Path:
    """A models folder with the tiny Whisper placed as `asr/tiny-whisper`."""
    shutil.copytree(tiny_whisper, tmp_path / "asr" / TINY)
    return tmp_path


@pytest.fixture()
def whisper_only(models_dir: Path):
    transcriber = Transcriber(models_dir, use_pocketsphinx=False)
    yield transcriber
    transcriber.close()


# --- resampling -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [24000, 22050, 44100, 8000])
def test_resampling_keeps_length_pitch_and_level(rate: int) -> None:
    seconds, freq = 1.0, 440.0
    t = np.arange(int(rate * seconds)) / rate
    tone = (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    out = to_asr_rate(tone, rate)
    assert out.dtype == np.float32
    assert abs(out.size - seconds * ASR_RATE) <= 1
    spectrum = np.abs(np.fft.rfft(out * np.hanning(out.size)))
    peak_hz = np.argmax(spectrum) * ASR_RATE / out.size
    assert abs(peak_hz - freq) <= 2.0
    middle = out[ASR_RATE // 10: -ASR_RATE // 10]  # away from the filter's edges
    assert np.sqrt(np.mean(middle**2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.02)


def test_16k_passes_through_unchanged() -> None:
    x = np.random.default_rng(0).standard_normal(1600).astype(np.float32)
    np.testing.assert_array_equal(to_asr_rate(x, ASR_RATE), x)


# --- the tiny stand-in ------------------------------------------------------------------------------------


def test_tiny_whisper_has_the_hub_layout(tiny_whisper: Path) -> None:
    names = {p.name for p in tiny_whisper.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "preprocessor_config.json",
            "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "added_tokens.json",
            "special_tokens_map.json", "normalizer.json"} <= names
    assert catalogue.is_whisper_folder(tiny_whisper)
    config = json.loads((tiny_whisper / "config.json").read_text())
    generation = json.loads((tiny_whisper / "generation_config.json").read_text())
    added = json.loads((tiny_whisper / "added_tokens.json").read_text())
    vocab = json.loads((tiny_whisper / "vocab.json").read_text())
    assert config["model_type"] == "whisper" and config["num_mel_bins"] == 80
    assert vocab["<|endoftext|>"] == config["eos_token_id"] == len(vocab) - 1
    assert added["<|startoftranscript|>"] == config["decoder_start_token_id"] == vocab["<|endoftext|>"] + 1
    assert generation["lang_to_id"]["<|en|>"] == added["<|en|>"] and "<|zh|>" in generation["lang_to_id"]
    assert generation["task_to_id"]["transcribe"] == added["<|transcribe|>"]
    assert generation["no_timestamps_token_id"] == added["<|notimestamps|>"]
    # Whisper's order: languages, then the task tokens, then the timestamps.
    assert added["<|en|>"] < added["<|translate|>"] < added["<|transcribe|>"] < added["<|notimestamps|>"]
    assert added["<|0.00|>"] == added["<|notimestamps|>"] + 1 and "<|30.00|>" in added


@pytest.mark.parametrize("drop_tokenizer_json", [False, True])
def test_tiny_tokenizer_loads_from_either_file_set(tiny_whisper: Path, tmp_path: Path,
                                                   drop_tokenizer_json: bool) -> None:
    from transformers import WhisperTokenizer

    folder = tmp_path / "copy"
    shutil.copytree(tiny_whisper, folder)
    if drop_tokenizer_json:  # the vocab.json + merges.txt + added_tokens.json set alone
        (folder / "tokenizer.json").unlink()
    tokenizer = WhisperTokenizer.from_pretrained(str(folder))
    added = json.loads((tiny_whisper / "added_tokens.json").read_text())
    for token in ("<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"):
        assert tokenizer.convert_tokens_to_ids(token) == added[token]
    ids = tokenizer("The birch canoe 早上好").input_ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == "The birch canoe 早上好"


# --- Whisper through the service ----------------------------------------------------------------------------


def test_tiny_whisper_runs_end_to_end(whisper_only: Transcriber) -> None:
    assert whisper_only.available() == [TINY]
    events = []
    result = whisper_only.transcribe(babble(2.0), progress=events.append)
    assert isinstance(result, Transcript) and isinstance(result.text, str) and result.text
    assert result.backend == TINY
    assert re.fullmatch(r"[a-z]{2,3}", result.language)  # the language it detected
    stages = [e.stage for e in events]
    assert stages[0] == "load" and stages[-1] == "done" and "transcribe" in stages
    assert whisper_only.loaded == [TINY]
    # Loaded once: the second call reports no load, and greedy decoding repeats itself.
    events.clear()
    again = whisper_only.transcribe(babble(2.0), progress=events.append)
    assert again == result and "load" not in [e.stage for e in events]


def test_whisper_takes_the_language_given(whisper_only: Transcriber) -> None:
    assert whisper_only.transcribe(babble(1.5, rate=22050), language="Chinese").language == "zh"
    assert whisper_only.transcribe(babble(1.5), language="en-US").language == "en"
    with pytest.raises(InvalidRequest) as refused:
        whisper_only.transcribe(babble(1.5), language="klingon")
    assert refused.value.code == "asr_language_unknown"


@pytest.mark.slow
def test_whisper_long_recording_uses_long_form(whisper_only: Transcriber) -> None:
    result = whisper_only.transcribe(babble(31.0, rate=ASR_RATE))
    assert isinstance(result.text, str) and result.text


def test_concurrent_jobs_share_one_model(whisper_only: Transcriber) -> None:
    results: list[Transcript] = []
    threads = [threading.Thread(target=lambda: results.append(whisper_only.transcribe(babble(1.0))))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3 and len(set(results)) == 1
    assert whisper_only.loaded == [TINY]


def test_idle_release(models_dir: Path) -> None:
    now = [100.0]
    transcriber = Transcriber(models_dir, idle_release_s=60.0, use_pocketsphinx=False, clock=lambda: now[0])
    try:
        transcriber.transcribe(babble(1.0))
        assert transcriber.loaded == [TINY]
        now[0] += 30.0
        assert not transcriber.release_if_idle() and transcriber.loaded == [TINY]
        now[0] += 31.0
        assert transcriber.release_if_idle() and transcriber.loaded == []
        transcriber.transcribe(babble(1.0))  # loads again on the next use
        assert transcriber.loaded == [TINY] and transcriber.release() and not transcriber.release()
    finally:
        transcriber.close()


# --- what a request may be ------------------------------------------------------------------------------------


def test_bad_recordings_are_refused_before_any_model_loads(whisper_only: Transcriber) -> None:
    cases = {
        "asr_audio_too_short": Audio(babble(0.1).samples, 24000),
        "asr_no_speech": Audio(np.zeros(24000 * 2, dtype=np.float32), 24000),
        "asr_audio_too_long": Audio(np.zeros(ASR_RATE * 601, dtype=np.float32), ASR_RATE),
    }
    for code, audio in cases.items():
        with pytest.raises(InvalidRequest) as refused:
            whisper_only.transcribe(audio)
        assert refused.value.code == code
    assert whisper_only.loaded == []


def test_nothing_installed_says_how_to_get_a_recogniser(tmp_path: Path) -> None:
    transcriber = Transcriber(tmp_path, use_pocketsphinx=False)
    assert transcriber.available() == []
    with pytest.raises(InvalidRequest) as refused:
        transcriber.transcribe(babble(1.0))
    assert refused.value.code == "asr_unavailable"
    assert "python -m cosyvoice_ui download whisper-small" in refused.value.message


def test_pocketsphinx_alone_refuses_other_languages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cosyvoice_ui.asr import sphinx

    monkeypatch.setattr(sphinx, "sphinx_installed", lambda: True)
    transcriber = Transcriber(tmp_path)
    assert transcriber.available() == [POCKETSPHINX]
    assert transcriber.pick(None) == transcriber.pick("English") == POCKETSPHINX
    with pytest.raises(InvalidRequest) as refused:
        transcriber.transcribe(babble(1.0), language="zh")
    assert refused.value.code == "asr_language_unsupported" and refused.value.params["language"] == "zh"
    assert "only English" in refused.value.message
    assert "download a Whisper model: python -m cosyvoice_ui download whisper-small" in refused.value.message
    assert transcriber.loaded == []


def test_whisper_is_preferred_and_backends_can_be_forced(models_dir: Path, monkeypatch) -> None:
    from cosyvoice_ui.asr import sphinx

    monkeypatch.setattr(sphinx, "sphinx_installed", lambda: True)
    transcriber = Transcriber(models_dir)
    assert transcriber.available() == [TINY, POCKETSPHINX]
    assert transcriber.pick("zh") == transcriber.pick("en") == TINY
    assert transcriber.pick("en", backend=POCKETSPHINX) == POCKETSPHINX
    with pytest.raises(InvalidRequest) as refused:
        transcriber.pick(backend="whisper-small")
    assert refused.value.code == "asr_unknown"
    choices = {c.name: c for c in transcriber.choices()}
    assert choices[TINY].ready and choices[POCKETSPHINX].ready and not choices["whisper-small"].ready


def test_language_names_and_codes() -> None:
    assert [normalize_language(x) for x in (None, "", "auto", "EN", "en_US", "English", "Mandarin", "ja")] == [
        None, None, None, "en", "en", "en", "zh", "ja"]


# --- download ----------------------------------------------------------------------------------------------------


def test_download_reports_byte_progress(tmp_path: Path, tiny_whisper: Path, monkeypatch) -> None:
    import huggingface_hub

    calls = []

    def fake_snapshot_download(repo_id, local_dir, allow_patterns, tqdm_class, **kwargs):
        """Like huggingface-hub 2.x: one byte bar for the whole snapshot whose total grows as each file starts."""
        calls.append((repo_id, allow_patterns))
        with tqdm_class(total=0, initial=0, unit="B", unit_scale=True, desc="Downloading bytes") as bar:
            for source in sorted(tiny_whisper.iterdir()):
                size = source.stat().st_size
                bar.total += size
                bar.refresh()
                bar.update(size // 2)
                bar.update(size - size // 2)
                shutil.copy(source, Path(local_dir) / source.name)
        return local_dir

    monkeypatch.setattr(catalogue, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    transcriber = Transcriber(tmp_path, use_pocketsphinx=False)
    events = []
    folder = transcriber.download("whisper-small", events.append)
    assert folder == tmp_path / "asr" / "whisper-small" and catalogue.is_whisper_folder(folder)
    assert calls == [("openai/whisper-small", catalogue.ALLOW_PATTERNS)]
    assert not any(p.endswith((".bin", ".h5", ".msgpack")) for p in catalogue.ALLOW_PATTERNS)
    fractions = [e.fraction for e in events]
    assert all(e.stage == "download" for e in events) and fractions == sorted(fractions)
    assert fractions[-1] == 1.0 and any(0.0 < f < 1.0 for f in fractions) and "MB" in events[-2].message
    assert transcriber.available() == ["whisper-small"]
    # Already there: nothing is fetched again.
    transcriber.download("openai/whisper-small")
    assert len(calls) == 1


def test_download_offline_or_unknown_fails_with_instructions(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(catalogue, "hub_reachable", lambda timeout=3.0: False)
    transcriber = Transcriber(tmp_path)
    with pytest.raises(DownloadError) as info:
        transcriber.download("whisper-small")
    # The command named downloads into the asr folder the app looks in, with huggingface-hub's `hf`.
    assert f"hf download openai/whisper-small --local-dir {tmp_path / 'asr' / 'whisper-small'}" in str(info.value)
    with pytest.raises(DownloadError, match="whisper-large-v3-turbo"):
        transcriber.download("whisper-huge")
    assert not (tmp_path / "asr" / "whisper-small").exists()


def test_incomplete_folders_are_not_listed(tmp_path: Path, tiny_whisper: Path) -> None:
    partial = tmp_path / "asr" / "whisper-base"
    shutil.copytree(tiny_whisper, partial)
    (partial / "model.safetensors").unlink()
    (tmp_path / "asr" / "notes").mkdir()
    assert Transcriber(tmp_path, use_pocketsphinx=False).available() == []


# --- does the transcript fit the recording? ----------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [
    ("The museum opens at nine, and the tickets are free on Mondays.", 4.5),  # the offline voice's 4.5 s
    ("The museum opens at nine, and the tickets are free on Mondays.", 7.0),  # slower, with pauses
    ("今天天气很好，我们去公园散步吧。", 3.5),
    ("今日はとても良い天気ですね。", 2.5),
    ("안녕하세요, 만나서 반갑습니다.", 2.5),
    ("我们用 Python 写了一个 demo。", 3.0),
    ("Hello.", 1.5),
])
def test_matching_transcripts_fit(text: str, seconds: float) -> None:
    check_transcript_fits(text, seconds)
    check_transcript_fits(Transcript(text, "", ""), seconds)


@pytest.mark.parametrize("text, seconds, problem", [
    ("Hello.", 10.0, "too_short"),  # most of the recording's words are missing
    ("早上好。", 8.0, "too_short"),
    ("The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. "
     "It is easy to tell the depth of a well.", 3.0, "too_long"),  # another, longer recording's text
    ("他每天早上骑自行车去上班，今天天气很好，我们去公园散步吧。", 2.0, "too_long"),
])
def test_mismatched_transcripts_are_refused(text: str, seconds: float, problem: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_transcript_fits(text, seconds)
    assert refused.value.code == "transcript_mismatch" and refused.value.params["problem"] == problem
    assert f"{seconds:.1f} s" in refused.value.message and "Transcribe" in refused.value.message


def test_empty_transcript_is_missing() -> None:
    for text in ("", "  ", "。，!", "<|endofprompt|>"):
        with pytest.raises(InvalidRequest) as refused:
            check_transcript_fits(text, 3.0)
        assert refused.value.code == "transcript_missing"


def test_speaking_time_adds_scripts() -> None:
    fast_en, slow_en = speaking_time("abcdefghij")  # 10 letters
    fast_zh, slow_zh = speaking_time("一二三四五")  # 5 characters
    fast_mix, slow_mix = speaking_time("abcdefghij 一二三四五")
    assert fast_mix == pytest.approx(fast_en + fast_zh) and slow_mix == pytest.approx(slow_en + slow_zh)
    assert speaking_time("[breath] <|endofprompt|> abc") == speaking_time("abc")


# --- pocketsphinx on real English speech ----------------------------------------------------------------------

# Two prompt-length sentences said by the offline voice's default speaker. Measured on the development
# machine: pocketsphinx heard 10 of the 11 distinct words of the first and all 9 of the second (recall 0.95),
# and its transcripts fit the recordings. The threshold leaves margin for other CPUs' numerics.
PROMPTS = ("The museum opens at nine, and the tickets are free on Mondays.",
           "Could you please close the window before you leave?")
MIN_SPHINX_RECALL = 0.75


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


@pytest.fixture(scope="module")
def offline_speech() -> list[Audio]:
    pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx==5.1.1 for the offline recogniser")
    from cosyvoice_ui.offline.assets import offline_available

    ok, reason = offline_available()
    if not ok:
        pytest.skip(reason)
    from cosyvoice_ui.offline import load_offline_engine
    from cosyvoice_ui.types import Mode, SynthesisRequest

    engine = load_offline_engine(voices_dir=Path(tempfile.mkdtemp(prefix="asr_test_voices_")))
    recordings = []
    for text in PROMPTS:
        chunks = list(engine.synthesize(SynthesisRequest(mode=Mode.SFT, text=text,
                                                         speaker=engine.info.default_speaker)))
        recordings.append(Audio(np.concatenate([c.samples for c in chunks]), chunks[0].sample_rate))
    engine.close()
    return recordings


@pytest.mark.slow
def test_pocketsphinx_transcribes_offline_english(offline_speech: list[Audio], tmp_path: Path) -> None:
    transcriber = Transcriber(tmp_path)  # nothing downloaded: pocketsphinx
    heard_total = expected_total = 0
    try:
        for text, audio in zip(PROMPTS, offline_speech):
            assert audio.sample_rate != ASR_RATE  # resampled on the way in (24 kHz)
            result = transcriber.transcribe(audio)
            assert result.backend == POCKETSPHINX and result.language == "en"
            assert result.text[0].isupper() and result.text.endswith(".")
            heard = set(words(result.text))
            expected = set(words(text))
            heard_total += len(expected & heard)
            expected_total += len(expected)
            print(f"\npocketsphinx heard {result.text!r} for {text!r}")
            check_transcript_fits(result, audio.duration)  # what it heard passes the pre-clone check
    finally:
        transcriber.close()
    recall = heard_total / expected_total
    print(f"distinct-word recall {recall:.2f}")
    assert recall >= MIN_SPHINX_RECALL


# --- pocketsphinx's worker process: it holds the GIL while it decodes, so it must not run in the server ----------

FAKE_WORKER = """
import struct, sys
out = sys.stdout.buffer
mode = {mode!r}
if mode == "no-start":
    out.write(struct.pack("<BI", 1, 5) + b"nope!"); out.flush(); sys.exit(1)
out.write(struct.pack("<BI", 0, 5) + b"ready"); out.flush()
header = sys.stdin.buffer.read(5)
sys.exit(3)  # dies while "decoding"
"""


def fake_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    from cosyvoice_ui.asr import sphinx

    script = tmp_path / f"worker_{mode}.py"
    script.write_text(FAKE_WORKER.format(mode=mode))
    monkeypatch.setattr(sphinx, "WORKER", script)


def test_pocketsphinx_decodes_in_a_worker_process_that_restarts(offline_speech: list[Audio]) -> None:
    import os

    from cosyvoice_ui.asr.sphinx import SphinxRecognizer

    recogniser = SphinxRecognizer()
    try:
        worker = recogniser._worker
        assert worker is not None and worker.pid != os.getpid() and worker.poll() is None
        pcm = to_asr_rate(offline_speech[1].samples, offline_speech[1].sample_rate)
        first = recogniser.transcribe(pcm)
        assert "window" in first.lower()
        worker.kill()
        worker.wait()
        assert recogniser.transcribe(pcm) == first  # a dead worker is started again for the next recording
        assert recogniser._worker is not worker
    finally:
        recogniser.close()
    assert recogniser._worker is None and worker.poll() is not None


def test_a_worker_that_dies_while_decoding_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cosyvoice_ui.asr.sphinx import SphinxRecognizer
    from cosyvoice_ui.errors import RecognizerFailed

    fake_worker(tmp_path, monkeypatch, "dies")
    recogniser = SphinxRecognizer()
    with pytest.raises(RecognizerFailed) as failed:
        recogniser.transcribe(np.zeros(16000, dtype=np.float32))
    assert failed.value.code == "asr_failed" and "try again" in str(failed.value)
    assert str(tmp_path) not in str(failed.value) and recogniser._worker is None
    recogniser.close()
    fake_worker(tmp_path, monkeypatch, "no-start")
    with pytest.raises(RecognizerFailed) as failed:
        SphinxRecognizer()
    assert "pip install pocketsphinx==5.1.1" in str(failed.value)
