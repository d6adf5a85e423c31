"""The table of known models (`known_models.py`): filled from the families' checkpoints, read by every message
that names models, in English and Chinese."""

from __future__ import annotations

from pathlib import Path

from cosyvoice_ui import known_models
from cosyvoice_ui.cosyvoice.families import SUPPORTED, checkpoint_modes, detect, modes_for
from cosyvoice_ui.types import Mode


def test_the_table_is_the_runnable_checkpoints_with_their_modes() -> None:
    table = known_models.known_models()
    assert [m.name for m in table] == [c.name for f in SUPPORTED for c in f.checkpoints]
    by_name = {m.name: m for m in table}
    assert by_name["CosyVoice-300M"].modes == (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC)
    assert Mode.SFT in by_name["CosyVoice-300M-SFT"].modes and not by_name["CosyVoice-300M-SFT"].recommended
    assert Mode.INSTRUCT in by_name["CosyVoice-300M-Instruct"].modes
    assert Mode.CROSS_LINGUAL not in by_name["CosyVoice-300M-Instruct"].modes  # upstream refuses it there
    assert by_name["Fun-CosyVoice3-0.5B"].pronunciation == ("pinyin", "cmu")
    assert known_models.recommended_model().name == "Fun-CosyVoice3-0.5B"  # the newest generation


def test_a_checkpoints_modes_are_what_its_folder_offers(tiny_base: Path, tiny_sft: Path, tiny_instruct: Path) -> None:
    family = detect(tiny_base).family
    checkpoint = {c.name: c for c in family.checkpoints}
    for folder, name, speakers in ((tiny_base, "CosyVoice-300M", ()), (tiny_sft, "CosyVoice-300M-SFT", ("a",)),
                                   (tiny_instruct, "CosyVoice-300M-Instruct", ("a",))):
        assert checkpoint_modes(family, checkpoint[name]) == modes_for(detect(folder), speakers)


def test_mode_hints_in_both_languages() -> None:
    assert known_models.mode_hint(Mode.INSTRUCT) == "CosyVoice-300M-Instruct, CosyVoice2-0.5B or Fun-CosyVoice3-0.5B"
    assert known_models.mode_hint(Mode.CROSS_LINGUAL) == \
        "CosyVoice-300M (or -SFT), CosyVoice2-0.5B or Fun-CosyVoice3-0.5B"
    assert known_models.mode_hint(Mode.INSTRUCT, "zh") == "CosyVoice-300M-Instruct、CosyVoice2-0.5B 或 Fun-CosyVoice3-0.5B"
    assert known_models.models_for(Mode.INSTRUCT, instruct_voice=False) == ("CosyVoice-300M-Instruct",)
    assert known_models.models_reading("pinyin") == ("Fun-CosyVoice3-0.5B",)


def test_name_lists() -> None:
    say = known_models.name_list
    assert say([]) == "" and say(["A"]) == "A" and say(["A", "B"]) == "A or B" and say(["A", "B", "C"]) == "A, B or C"
    assert say(["X-1", "X-1-SFT", "X-1-Instruct", "Y"]) == "X-1 (or -SFT, -Instruct) or Y"
    assert say(["A", "B", "C"], "zh") == "A、B 或 C" and say(["X", "X-SFT"], "zh") == "X（或 -SFT）"


def test_a_new_source_is_read_at_every_call() -> None:
    extra = [known_models.KnownModel("Extra-1B", "x", (Mode.SFT,))]
    source = lambda: list(extra)  # noqa: E731
    known_models.add_source(source)
    try:
        assert known_models.mode_hint(Mode.SFT).endswith("or Extra-1B")
        extra.clear()
        assert "Extra-1B" not in known_models.mode_hint(Mode.SFT)
    finally:
        known_models._sources.remove(source)
