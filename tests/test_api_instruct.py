"""The REST API's side of each family's instruct mode and text helpers (FakeEngine, no model): /v1/models
says what a model's text and instruct mode take, and `instructions` with a cloned or saved voice runs in
instruct mode where the model's instruct takes a voice (CosyVoice2/3's instruct2), and is refused, saying
why, where it takes a preset speaker."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cosyvoice_ui.testing.fakes import RecordingEngine
from cosyvoice_ui.types import Instruction, Mode

from .test_api import PROMPT_B64, TRANSCRIPT, error_of, fake_client

pytest.importorskip("fastapi")

INSTRUCTIONS = (Instruction("dialect", "四川话", "Sichuanese", "用四川话说这句话"),
                Instruction("emotion", "开心", "Happy", "用开心的语气说"))
ALL_MODES = (Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC)


class InstructEngine(RecordingEngine):
    def __init__(self, **facts) -> None:
        super().__init__(**{"name": "fake-model", "speakers": ("alice", "bob"), "chunks": 1, "chunk_samples": 800,
                            **facts})

    def register_voice(self, voice_id, audio, transcript, cache_dir) -> None:  # saved voices as a clone model has
        self._info = replace(self._info, saved_voices=(*self._info.saved_voices, voice_id))


def voice_instruct(**facts) -> InstructEngine:
    """A model like CosyVoice2/3: instruct takes a voice, no presets."""
    return InstructEngine(**{"modes": ALL_MODES[1:], "speakers": (), "instruct_voice": True,
                              "instructions": INSTRUCTIONS, "text_tags": ("[breath]", "<strong></strong>"),
                              "pronunciation": ("pinyin", "cmu"), "text_caveats": ("ja_kanji",), **facts})


def preset_instruct() -> InstructEngine:
    """A model like CosyVoice-300M-Instruct: instruct takes a preset speaker."""
    return InstructEngine(modes=(Mode.INSTRUCT, Mode.SFT, Mode.ZERO_SHOT, Mode.VC), text_tags=("[laughter]",))


def save_voice(client) -> str:
    added = client.post("/v1/voices", json={"name": "Narrator", "transcript": TRANSCRIPT, "audio": PROMPT_B64})
    assert added.status_code == 201, added.text
    return added.json()["id"]


def test_models_say_what_each_family_can_do(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path / "a", voice_instruct())
    [model] = client.get("/v1/models").json()["data"]
    assert model["instruct_needs"] == "voice"
    assert model["instructions"][0] == {"category": "dialect", "label_zh": "四川话", "label_en": "Sichuanese",
                                        "text": "用四川话说这句话"}
    assert model["text_tags"] == ["[breath]", "<strong></strong>"]
    assert model["pronunciation"] == ["pinyin", "cmu"] and model["text_caveats"] == ["ja_kanji"]

    client, _, _ = fake_client(tmp_path / "b", preset_instruct())
    [model] = client.get("/v1/models").json()["data"]
    assert model["instruct_needs"] == "preset" and model["instructions"] == [] and model["pronunciation"] == []

    client, _, _ = fake_client(tmp_path / "c", InstructEngine(modes=(Mode.SFT, Mode.ZERO_SHOT)))
    assert client.get("/v1/models").json()["data"][0]["instruct_needs"] is None


def test_instructions_with_a_saved_voice_run_in_instruct_mode_where_instruct_takes_a_voice(tmp_path: Path) -> None:
    # The fake's fixed-length audio is too short for these texts: no take checks, so each request runs once.
    client, _, engine = fake_client(tmp_path, voice_instruct(), check_takes=False)
    voice = save_voice(client)
    speech = client.post("/v1/audio/speech", json={"input": "今天天气很好。", "voice": voice,
                                                   "instructions": "用四川话说这句话", "response_format": "wav"})
    assert speech.status_code == 200, speech.text
    [ran] = engine.received
    assert ran.mode is Mode.INSTRUCT and ran.speaker == voice and ran.instruct_text == "用四川话说这句话"

    plain = client.post("/v1/audio/speech", json={"input": "Hello there.", "voice": voice, "response_format": "wav"})
    assert plain.status_code == 200 and engine.received[-1].mode is Mode.ZERO_SHOT  # no instructions: a clone


def test_tts_with_a_sample_and_an_instruction_is_instruct_where_instruct_takes_a_voice(tmp_path: Path) -> None:
    client, _, engine = fake_client(tmp_path, voice_instruct())
    sample = client.post("/tts", json={"text": "你好。", "prompt_audio": PROMPT_B64, "instruct_text": "用开心的语气说"})
    assert sample.status_code == 200, sample.text
    assert engine.received[-1].mode is Mode.INSTRUCT and engine.received[-1].prompt_audio is not None
    voice = save_voice(client)
    saved = client.post("/tts", json={"text": "你好。", "mode": "instruct", "voice_id": voice,
                                      "instruct_text": "用开心的语气说"})
    assert saved.status_code == 200, saved.text
    assert engine.received[-1].mode is Mode.INSTRUCT and engine.received[-1].speaker == voice


def test_instructions_need_a_preset_where_instruct_takes_one(tmp_path: Path) -> None:
    client, _, engine = fake_client(tmp_path, preset_instruct())
    voice = save_voice(client)
    refused = client.post("/v1/audio/speech", json={"input": "hi", "voice": voice, "instructions": "whisper"})
    assert error_of(refused) == (422, "instructions_need_preset")
    assert "Fun-CosyVoice3-0.5B" in refused.json()["error"]["message"]  # says which models take a voice
    preset = client.post("/v1/audio/speech", json={"input": "hi", "voice": "alice", "instructions": "whisper",
                                                   "response_format": "wav"})
    assert preset.status_code == 200, preset.text
    assert engine.received[-1].mode is Mode.INSTRUCT and engine.received[-1].speaker == "alice"


def test_a_preset_with_instructions_is_refused_where_instruct_takes_a_voice(tmp_path: Path) -> None:
    client, _, _ = fake_client(tmp_path, voice_instruct(modes=ALL_MODES, speakers=("alice",)))
    refused = client.post("/v1/audio/speech", json={"input": "hi", "voice": "alice", "instructions": "用开心的语气说"})
    assert error_of(refused) == (422, "instructions_need_voice")
