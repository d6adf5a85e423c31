"""What a preset-speaker list shows: the model's presets alone (not the saved voices a backend also accepts as a
speaker), each labelled in the user's language. A preset whose name says nothing to a listener (the offline
voice's "jf_gongitsune", "blend_kumo_nezumi") gets its gender and the language of its training data, from the
backend's `EngineInfo.speaker_traits`; the id stays the value, so requests and the APIs are unchanged."""

from __future__ import annotations

from ..types import EngineInfo
from . import strings

BLEND_PREFIX = "blend_"


def display_name(name: str) -> str:
    """"jf_gongitsune" → "Gongitsune", "blend_kumo_nezumi" → "Kumo + Nezumi"."""
    if name.startswith(BLEND_PREFIX):
        return " + ".join(part.capitalize() for part in name[len(BLEND_PREFIX):].split("_") if part)
    return name.split("_", 1)[-1].replace("_", " ").capitalize()


def preset_label(name: str, traits: tuple[str, str] | None, lang: str) -> str:
    """The label of preset `name`: with (language, gender) "Gongitsune · female, Japanese-trained voice
    (jf_gongitsune)"; without, the name itself (CosyVoice's presets say it: "中文女")."""
    if traits is None:
        return name
    language, gender = traits
    language_key, gender_key = f"voice_lang_{language}", f"voice_gender_{gender}"
    return strings.label("preset_label", lang).format(
        name=display_name(name), id=name,
        language=strings.label(language_key, lang) if language_key in strings.LABELS_EN else language,
        gender=strings.label(gender_key, lang) if gender_key in strings.LABELS_EN else gender)


def preset_choices(info: EngineInfo | None, lang: str) -> list[tuple[str, str]]:
    """(label, id) of each preset of the model, in its order; saved voices are left out."""
    if info is None:
        return []
    traits = {name: (language, gender) for name, language, gender in info.speaker_traits}
    return [(preset_label(name, traits.get(name), lang), name) for name in info.presets]
