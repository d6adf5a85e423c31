"""OpenAI voice names (alloy, nova, ...) → this server's voices, so OpenAI clients work unchanged.

Open WebUI, SillyTavern, AnythingLLM and the `openai` SDK examples send OpenAI's voice names. Each name
maps to a voice of the loaded backend:

- by default, by the voice's character: OpenAI's female-sounding names go to female presets and the
  others to male presets (English-labelled presets first, round robin; presets of unknown kind are
  shared out in turn), and to the default voice when the backend has no presets (a base model);
- a JSON mapping file (`--voice-aliases FILE`) overrides any of them, either flat
  `{"alloy": "英文女", "onyx": "narrator"}` or per backend family
  `{"v1": {...}, "offline": {...}, "*": {...}}` (a family's section wins over "*").

A target that the loaded backend does not have falls back to the default mapping (logged once).
Nothing here imports torch.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..errors import ConfigError
from ..types import EngineInfo

log = logging.getLogger(__name__)

# OpenAI's built-in voices and the character each is usually described with.
OPENAI_VOICES: dict[str, str] = {
    "alloy": "female", "ash": "male", "ballad": "male", "coral": "female", "echo": "male", "fable": "male",
    "onyx": "male", "nova": "female", "sage": "female", "shimmer": "female", "verse": "male",
    "marin": "female", "cedar": "male",  # gpt-4o-mini-tts's newer voices (wyoming-openai offers them)
}
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
GENERIC_MODELS = ("cosyvoice",)  # this server by its product name (older docs used it)
_FEMALE_MARKS = ("女", "female", "woman", "girl")
_MALE_MARKS = ("男", "male", "man", "boy")
_ENGLISH_MARKS = ("英", "english", "en_", "en-")


def speaker_gender(name: str, info: EngineInfo) -> str | None:
    """'female' / 'male' / None for a preset, from the backend's own table or the name itself."""
    table = dict(info.speaker_genders)
    if name in table:
        return str(table[name])
    lowered = name.lower()
    if any(mark in lowered for mark in _FEMALE_MARKS):  # "female" before "male": it contains it
        return "female"
    if any(mark in lowered for mark in _MALE_MARKS):
        return "male"
    return None


def default_aliases(info: EngineInfo | None, default_voice: str | None) -> dict[str, str]:
    """The built-in mapping for a backend: alias → preset name, or `default_voice` where none fits."""
    speakers = list(info.speakers) if info is not None else []
    by_gender: dict[str, list[str]] = {"female": [], "male": []}
    for name in speakers:
        gender = speaker_gender(name, info)
        if gender in by_gender:
            by_gender[gender].append(name)
    for gender, names in by_gender.items():
        english = [n for n in names if any(mark in n.lower() for mark in _ENGLISH_MARKS)]
        by_gender[gender] = english or names
    if not by_gender["female"] and not by_gender["male"]:
        by_gender = {"female": speakers, "male": speakers}  # presets of unknown kind: spread over all
    mapping: dict[str, str] = {}
    used = {"female": 0, "male": 0}
    for alias, gender in OPENAI_VOICES.items():
        names = by_gender[gender] or by_gender["female" if gender == "male" else "male"]
        if names:
            mapping[alias] = names[used[gender] % len(names)]
            used[gender] += 1
        elif default_voice:
            mapping[alias] = default_voice
    return mapping


def read_alias_file(path: Path | None) -> dict:
    """The raw mapping file ({} without one); a broken file is a startup error naming the problem."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the voice alias file {Path(path).name} ({exc.strerror})") from exc
    except ValueError as exc:
        raise ConfigError(f"the voice alias file {Path(path).name} is not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or not all(isinstance(v, (str, dict)) for v in data.values()):
        raise ConfigError(f"the voice alias file {Path(path).name} must map names to voices, e.g. "
                          '{"alloy": "英文女"} or {"v1": {"alloy": "英文女"}}')
    return data


class VoiceAliases:
    """Resolves alias names for the backend that is loaded now (the mapping follows model switches)."""

    def __init__(self, overrides: dict | None = None) -> None:
        self.overrides = overrides or {}
        self._warned: set[tuple[str, str]] = set()

    @classmethod
    def from_file(cls, path: Path | None) -> VoiceAliases:
        return cls(read_alias_file(path))

    def configured(self, info: EngineInfo | None) -> dict[str, str]:
        """The file's entries that apply to this backend ("*" first, then the family's section)."""
        flat = {k: v for k, v in self.overrides.items() if isinstance(v, str)}
        merged = dict(flat)
        for section in ("*", info.family if info is not None else None):
            entries = self.overrides.get(section) if section else None
            if isinstance(entries, dict):
                merged.update({str(k): str(v) for k, v in entries.items()})
        return merged

    def mapping(self, info: EngineInfo | None, default_voice: str | None,
                exists=lambda name: True) -> dict[str, str]:
        """alias → voice name for this backend; `exists(name)` tells whether a target can be used."""
        mapping = default_aliases(info, default_voice)
        for alias, target in self.configured(info).items():
            if exists(target):
                mapping[alias.lower()] = target
            elif (alias, target) not in self._warned:
                self._warned.add((alias, target))
                log.warning("voice alias %s → %s: no such voice on this model; using %s", alias, target,
                            mapping.get(alias.lower(), "the default voice"))
        return mapping
