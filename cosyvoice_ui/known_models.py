"""The models this build knows by name and what each can do: the one table behind every message that names
models ("load CosyVoice2-0.5B or … for instruct", the model the app offers to download first, which models read
pronunciation hints), in English and Chinese.

The root may not import a backend, so a backend fills the table: it adds a *source* (a function returning its
models as they are now) when its light data module is imported. The CosyVoice backend's `cosyvoice/families.py`
does, from each `FamilySpec`'s checkpoints, and the package's `__init__` imports that module, so the table is full
wherever the package is used. Sources are read at every call, so a family registered later is named at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .types import Mode


@dataclass(frozen=True)
class KnownModel:
    """One model a user can download or load, as the messages name it."""

    name: str  # its download and folder name, e.g. "CosyVoice-300M-SFT"
    family: str  # `EngineInfo.family` of a folder of it
    modes: tuple[Mode, ...]  # what a folder of it can do as published (its preset speakers included)
    instruct_voice: bool = False  # instruct speaks in a cloned voice (else with a preset speaker)
    pronunciation: tuple[str, ...] = ()  # inline hints it reads: "pinyin", "cmu"
    size_gb: float = 0.0
    recommended: bool = False  # the download the app offers first


ModelSource = Callable[[], Iterable[KnownModel]]
_sources: list[ModelSource] = []

_WORDS = {"en": (", ", " or ", " (or {})"), "zh": ("、", " 或 ", "（或 {}）")}


def add_source(source: ModelSource) -> None:
    """Name the models `source` returns in every message from now on (once per source)."""
    if source not in _sources:
        _sources.append(source)


def known_models() -> tuple[KnownModel, ...]:
    """Every known model, in the order its backend lists them."""
    return tuple(model for source in _sources for model in source())


def models_for(mode: Mode, *, instruct_voice: bool | None = None) -> tuple[str, ...]:
    """The names of the models that can do `mode`; with `instruct_voice`, only those whose instruct mode does
    (True) or does not (False) speak in a cloned voice."""
    return tuple(m.name for m in known_models()
                 if mode in m.modes and (instruct_voice is None or m.instruct_voice == instruct_voice))


def models_reading(hint: str | None) -> tuple[str, ...]:
    """The names of the models that read the inline pronunciation `hint` ("pinyin", "cmu"); None: those that
    read none."""
    return tuple(m.name for m in known_models() if (hint in m.pronunciation if hint else not m.pronunciation))


def recommended_model() -> KnownModel | None:
    """The model the app offers to download first (the first known one when none is marked)."""
    models = known_models()
    return next((m for m in models if m.recommended), models[0] if models else None)


def name_list(names: Iterable[str], lang: str = "en") -> str:
    """Names as a phrase: "A, B or C" ("A、B 或 C"); a name that extends an earlier one is said as its tail,
    "CosyVoice-300M (or -SFT), CosyVoice2-0.5B"."""
    comma, last, variants = _WORDS.get(lang, _WORDS["en"])
    groups: list[tuple[str, list[str]]] = []
    for name in names:
        head = next((g for g in groups if name.startswith(g[0] + "-")), None)
        if head is None:
            groups.append((name, []))
        else:
            head[1].append(name[len(head[0]):])
    items = [name + (variants.format(comma.join(tails)) if tails else "") for name, tails in groups]
    if len(items) < 2:
        return "".join(items)
    return comma.join(items[:-1]) + last + items[-1]


def mode_hint(mode: Mode, lang: str = "en") -> str:
    """The models to load for `mode`, as a phrase ("a model that can do it" when none is known)."""
    names = models_for(mode)
    if names:
        return name_list(names, lang)
    return "能做到这一点的模型" if lang == "zh" else "a model that can do it"


def facts(lang: str = "en") -> dict[str, str]:
    """The placeholders of messages that name models (the UI's string tables, the studio's voice checks), in
    `lang`: which models have preset speakers, clone, follow instructions (with a preset / in a cloned voice),
    read pinyin / CMU hints or none, and the recommended download."""
    recommended = recommended_model()
    return {
        "preset_models": mode_hint(Mode.SFT, lang),
        "clone_models": mode_hint(Mode.ZERO_SHOT, lang),
        "instruct_models": mode_hint(Mode.INSTRUCT, lang),
        "instruct_preset_models": name_list(models_for(Mode.INSTRUCT, instruct_voice=False), lang),
        "instruct_voice_models": name_list(models_for(Mode.INSTRUCT, instruct_voice=True), lang),
        "pinyin_models": name_list(models_reading("pinyin"), lang),
        "cmu_models": name_list(models_reading("cmu"), lang),
        "plain_models": name_list(models_reading(None), lang),
        "recommended_model": recommended.name if recommended else "",
        "recommended_gb": f"{recommended.size_gb:.1f}" if recommended else "",
    }
