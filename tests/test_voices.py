"""Saved voices: the on-disk library, feature files computed once and reused, registration on load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cosyvoice_ui import InvalidRequest, Mode, SynthesisRequest, load_engine
from cosyvoice_ui.engine import Engine
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Audio, EngineInfo
from cosyvoice_ui.cosyvoice.voice_features import file_fingerprint, load_features, save_features
from cosyvoice_ui.serving.voice_service import register_all
from cosyvoice_ui.serving.voices import VoiceLibrary, slugify

TRANSCRIPT = "希望你以后能够做的比我还好呦。"


def padded_clip() -> Audio:
    """A 4 s voice with a second of silence either side (the library stores it trimmed)."""
    clip = voice_clip(4.0)
    silence = np.zeros(16000, np.float32)
    return Audio(np.concatenate([silence, clip.samples, silence]), clip.sample_rate)


@pytest.fixture(scope="module")
def engine(tiny_sft: Path):
    return load_engine(tiny_sft, device="cpu")


def test_slugify() -> None:
    assert slugify("My Voice!") == "my-voice"
    assert slugify("  Dr. Jekyll & Mr. Hyde ") == "dr-jekyll-mr-hyde"
    assert slugify("中文 旁白") == "中文-旁白"
    assert slugify("../../etc") == "etc" and slugify("!!!") == "voice"


def test_add_stores_trimmed_prompt_and_record(tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path)
    voice = library.add("Narrator", padded_clip(), f"  {TRANSCRIPT} ")
    assert voice.id == "narrator" and voice.transcript == TRANSCRIPT and voice.sample_rate == 16000
    assert 4.0 <= voice.duration_s < 4.5  # silent edges trimmed (0.1 s padding kept each side)
    stored = library.audio("narrator")
    assert stored.duration == pytest.approx(voice.duration_s, abs=1e-3)
    assert stored.samples.dtype == np.float32
    record = json.loads((tmp_path / "narrator" / "voice.json").read_text(encoding="utf-8"))
    assert record["name"] == "Narrator" and record["transcript"] == TRANSCRIPT
    assert library.ids() == ("narrator",) and library.get("narrator") == voice


def test_ids_are_unique_and_avoid_reserved_names(tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path)
    assert library.add("Alice", voice_clip(4.0)).id == "alice"
    assert library.add("alice", voice_clip(4.0)).id == "alice-2"
    assert library.add("Bob", voice_clip(4.0), reserved=("bob",)).id == "bob-2"
    assert library.ids() == ("alice", "alice-2", "bob-2")


def test_bad_voices_are_rejected_and_leave_nothing(tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path)
    with pytest.raises(InvalidRequest) as short:
        library.add("Short", voice_clip(1.0))
    assert short.value.code == "prompt_too_short"
    with pytest.raises(InvalidRequest) as nameless:
        library.add("  ", voice_clip(4.0))
    assert nameless.value.code == "voice_name_missing"
    assert library.ids() == ()


def test_unknown_and_malicious_ids(tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path / "voices")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "voice.json").write_text("{}")
    for bad in ("../secret", "..", "a/b", ".hidden", ""):
        assert library.get(bad) is None
        assert library.remove(bad) is False
    with pytest.raises(InvalidRequest) as unknown:
        library.require("ghost")
    assert unknown.value.code == "voice_unknown"
    assert (tmp_path / "secret" / "voice.json").exists()


def test_interrupted_add_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "half").mkdir()  # a folder without voice.json (e.g. the process died mid-add)
    library = VoiceLibrary(tmp_path)
    assert library.ids() == ()
    assert library.add("Half", voice_clip(4.0)).id == "half-2"


def test_remove_deletes_folder(tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path)
    library.add("Temp", voice_clip(4.0))
    assert library.remove("temp") is True and not (tmp_path / "temp").exists()
    assert library.remove("temp") is False


def test_feature_file_round_trip_and_fingerprint(tmp_path: Path) -> None:
    tensors = {"speech_tokens": torch.arange(6).reshape(1, 6), "mel": torch.randn(1, 10, 80),
               "embedding": torch.randn(1, 192)}
    path = tmp_path / "features-v1.safetensors"
    save_features(path, tensors, "abc")
    loaded = load_features(path, "abc")
    assert set(loaded) == set(tensors)
    for key, value in tensors.items():
        assert torch.equal(loaded[key], value)
    assert load_features(path, "other frontend") is None
    path.write_bytes(b"truncated")
    assert load_features(path, "abc") is None
    assert load_features(tmp_path / "missing.safetensors", "abc") is None


def test_file_fingerprint_sees_content(tmp_path: Path) -> None:
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(b"x" * 3_000_000)
    b.write_bytes(b"x" * 2_999_999 + b"y")  # same size, differs in the last MiB
    assert file_fingerprint(a) != file_fingerprint(b)
    assert file_fingerprint(a) == file_fingerprint(a)


def test_engine_computes_features_once_then_reads_them(engine, tiny_sft: Path, tmp_path: Path, monkeypatch) -> None:
    library = VoiceLibrary(tmp_path)
    voice = library.add("Clone", voice_clip(4.0), TRANSCRIPT)
    engine.register_voice(voice.id, library.audio(voice.id), voice.transcript, library.path(voice.id))
    stored = tmp_path / "clone" / "features-v1.safetensors"
    assert stored.is_file()
    first = engine.saved_voices["clone"][0]

    fresh = load_engine(tiny_sft, device="cpu")

    def no_encoding(audio):
        raise AssertionError("features should come from the file")

    monkeypatch.setattr(fresh, "encode_voice", no_encoding)
    fresh.register_voice(voice.id, library.audio(voice.id), voice.transcript, library.path(voice.id))
    second, transcript = fresh.saved_voices["clone"]
    assert transcript == TRANSCRIPT and "clone" in fresh.info.saved_voices
    assert torch.equal(first.speech_tokens, second.speech_tokens) and torch.equal(first.mel, second.mel)

    # the saved voice speaks like its recording does (same features → same audio for the same seed)
    text = "The saved voice speaks."
    by_id = np.concatenate([c.samples for c in fresh.synthesize(SynthesisRequest(
        Mode.ZERO_SHOT, text=text, speaker="clone", seed=4))])
    by_audio = np.concatenate([c.samples for c in engine.synthesize(SynthesisRequest(
        Mode.ZERO_SHOT, text=text, prompt_audio=library.audio("clone"), prompt_text=TRANSCRIPT, seed=4))])
    np.testing.assert_allclose(by_id, by_audio, atol=1e-6)
    fresh.unregister_voice("clone")
    assert "clone" not in fresh.saved_voices


def test_features_from_another_frontend_are_recomputed(engine, tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path)
    voice = library.add("Clone", voice_clip(4.0), TRANSCRIPT)
    path = tmp_path / "clone" / "features-v1.safetensors"
    save_features(path, {"speech_tokens": torch.zeros(1, 3, dtype=torch.long), "mel": torch.zeros(1, 4, 80),
                         "embedding": torch.zeros(1, 192)}, "made-by-another-speaker-encoder")
    engine.register_voice(voice.id, library.audio(voice.id), voice.transcript, library.path(voice.id))
    assert engine.saved_voices["clone"][0].mel.shape[1] > 4  # not the stale placeholder
    assert load_features(path, engine._frontend_fingerprint) is not None  # replaced by the right ones
    engine.unregister_voice("clone")


class NoVoicesEngine(Engine):
    """A backend that keeps the default (unsupported) saved-voice methods."""

    info = EngineInfo("plain", "offline", 24000, (Mode.SFT,), speakers=("a",))

    def _synthesize(self, request, progress, cancel):
        yield from ()


def test_register_all_skips_backends_without_saved_voices(tmp_path: Path) -> None:
    library = VoiceLibrary(tmp_path)
    library.add("One", voice_clip(4.0))
    with pytest.raises(InvalidRequest) as unsupported:
        NoVoicesEngine().register_voice("one", voice_clip(4.0), "", tmp_path)
    assert unsupported.value.code == "voices_unsupported" and "plain" in unsupported.value.message
    assert register_all(NoVoicesEngine(), library) == 0
    NoVoicesEngine().unregister_voice("one")  # a no-op, never an error


def test_manager_registers_library_voices_on_every_load(tiny_sft: Path, tmp_path: Path) -> None:
    from cosyvoice_ui.web.server import create_manager
    from cosyvoice_ui.settings import Settings

    library = VoiceLibrary(tmp_path / "voices")
    library.add("Anna", voice_clip(4.0), TRANSCRIPT)
    library.add("Ben", voice_clip(4.0, pitch=200.0, seed=2))
    manager: ModelManager = create_manager(Settings(model_dir=tiny_sft, voices_dir=tmp_path / "voices",
                                                    device="cpu", idle_unload_s=0))
    with manager.job() as loaded:
        assert set(loaded.info.saved_voices) == {"anna", "ben"}
    assert manager.unload()
    with manager.job() as reloaded:
        assert set(reloaded.info.saved_voices) == {"anna", "ben"}
