"""How the web UI says things in the user's language: the tables are `ui/i18n/` (one module per language), this
module reads them.

Labels go through `gr.I18n` (the browser's language picks the table); messages raised from handlers
are translated by `message(code, params, lang)` with the language read from the request headers.
"""

from __future__ import annotations

import re

from .. import known_models
from ..errors import InvalidRequest
from ..types import Mode
from .i18n import en, zh, zh_messages

LABELS_EN: dict[str, str] = en.LABELS
LABELS_ZH: dict[str, str] = zh.LABELS
MESSAGES_ZH: dict[str, str] = zh_messages.MESSAGES  # English messages are the errors' own,
MESSAGES_EN: dict[str, str] = en.MESSAGES  # but for the few that speak to API callers

WHAT_ZH = {"prompt audio": "声音样本", "source audio": "待转换语音"}


def instruction_label(instruction, lang: str) -> str:
    """An `Instruction` as the picker lists it: its category, then its name, in the user's language."""
    category = f"instr_{instruction.category}"
    head = label(category, lang) if category in LABELS_EN else instruction.category
    return f"{head} · {instruction.zh if lang == 'zh' else instruction.en}"


def language_of(accept_language: str | None) -> str:
    """'zh' when the browser prefers Chinese, else 'en'."""
    first = (accept_language or "").split(",")[0].strip().lower()
    return "zh" if first.startswith("zh") else "en"


def message(error: InvalidRequest, lang: str) -> str:
    """The error in the user's language (English is the error's own message)."""
    if lang != "zh" and error.code in MESSAGES_EN:
        return MESSAGES_EN[error.code]
    if lang != "zh" or error.code not in MESSAGES_ZH:
        return error.message[:1].upper() + error.message[1:]
    params = dict(error.params)
    if "needs" in params and "mode" in params:  # the models to load, named from the same table, in Chinese
        try:
            params["needs"] = known_models.mode_hint(Mode.parse(params["mode"]), lang)
        except ValueError:
            pass
    params["what_zh"] = WHAT_ZH.get(str(params.get("what", "prompt audio")), "音频")
    params["where_zh"] = where_zh(error.message)
    try:
        return MESSAGES_ZH[error.code].format(**params)
    except (KeyError, ValueError, IndexError):
        return error.message


def label(key: str, lang: str) -> str:
    text = (LABELS_ZH if lang == "zh" else LABELS_EN).get(key, LABELS_EN.get(key, key))
    return text.format(**known_models.facts(lang)) if key in MODEL_NAMED else text


def prefixed(key: str, detail: object, lang: str) -> str:
    """`detail` (often an engine's English explanation) introduced by label `key`, e.g. "生成失败：…"."""
    head = label(key, lang)
    return f"{head}{'' if head.endswith('：') else ' '}{detail}"


def stage_label(stage: str, lang: str) -> str:
    """A progress stage ("llm", "queue", ...) in `lang`; an unknown stage is "working"."""
    key = f"stage_{stage}"
    return label(key if key in LABELS_EN else "stage_working", lang)


def stage_text(event, lang: str) -> str:
    """An event without a code (`ui/events.py` reads coded ones): its stage in the user's language, then the
    backend's English detail; in Chinese the stage alone."""
    stage = stage_label(event.stage, lang)
    detail = str(event.message or "")
    if lang != "zh":
        return f"{stage}: {detail}" if detail else stage
    return stage


def notes_markdown(info, t):
    """The backend notes for the UI: the backend's localised notice (`info.notes_key`, summary + details)
    or, for a backend without one, its English `notes` behind a localised "About this model" summary."""
    if info is None or not (info.notes or info.notes_key):
        return ""
    if info.notes_key in LABELS_EN:
        return t(info.notes_key)
    return f"<details><summary>{t('notes_other')}</summary>\n\n{info.notes}\n\n</details>"


# Display names the serving layer gives in English only → the key of their localised name. Interim: remove
# once `ModelChoice.label_key` / `ManagerStatus.model_key` carry the key themselves (see `name_key`).
def name_key(record) -> str:
    """The string-table key of a model's localised name ("" = show its name as it is), for a `ModelChoice`
    (`label_key`, `label`) or a `ManagerStatus` (`model_key`, `model`)."""
    return getattr(record, "label_key", "") or getattr(record, "model_key", "")


def history_line(entry: dict, lang: str) -> str:
    """The first line of a history entry: when, what kind of job, which voice, which seed."""
    mode = str(entry.get("mode", ""))
    voice = entry.get("voice") or "-"
    return label("history_entry", lang).format(
        time=entry.get("time", ""), mode=label(f"mode_{mode}", lang) if f"mode_{mode}" in LABELS_EN else mode,
        voice=label("history_sample", lang) if voice == "sample" else voice, seed=entry.get("seed"))


def example_label(text: str, seed: object, lang: str) -> str:
    """An example's button text: the start of the sentence and the seed it plays with."""
    short = f"{text[:48]}{'…' if len(text) > 48 else ''}"
    return label("example_label", lang).format(text=short, seed=seed)


# Labels that carry a number of the backend's, filled in when the gr.I18n table is built (the frontend translates
# by key, so the number must be in the table's text).
FILLED = ("precision_info",)
# Labels that name models: filled from the table of known models (`known_models.facts`) in the label's language,
# by `label` and when the gr.I18n table is built, so a model family added to the backend is named in them too.
MODEL_NAMED = ("no_speakers_note", "get_cosyvoice", "instruct_unavailable", "glossary_help")


def filled(table: dict[str, str], lang: str = "en") -> dict[str, str]:
    """`table` (of `lang`) with the `FILLED` labels' numbers and the `MODEL_NAMED` labels' models in place."""
    from ..serving.backends import fast_flow_steps

    facts = {"fast_steps": fast_flow_steps(), **known_models.facts(lang)}
    return {**table, **{key: table[key].format(**facts) for key in FILLED + MODEL_NAMED}}


def i18n():
    """The gr.I18n table for component labels (Chinese for zh-* browsers)."""
    import gradio as gr

    en, zh = filled(LABELS_EN), filled(LABELS_ZH, "zh")
    return gr.I18n(en=en, zh=zh, **{"zh-CN": zh, "zh-TW": zh})


# What each pronunciation chip inserts (`EngineInfo.pronunciation` → text), and its label key.
PRONUNCIATION_CHIPS = {"pinyin": ("chip_pinyin", "[j][ǐ]"), "cmu": ("chip_cmu", "[R][EH1][D]")}


def where_zh(message: str) -> str:
    """"glossary row 3 ('Xi'an'): ..." → "第 3 行（Xi'an）": where a glossary error is, for its Chinese message."""
    found = re.match(r"glossary (row|entry) (\d+)(?: \((.*?)\))?:", message)
    if not found:
        return ""
    kind, number, word = found.groups()
    word = (word or "").strip("'\"")
    return f"第 {number} {'行' if kind == 'row' else '项'}" + (f"（{word}）" if word else "")


def take_reasons(reasons, lang: str) -> str:
    """A take check's reasons ("too_long", "repeat", ...) as words in the user's language."""
    return ("、" if lang == "zh" else ", ").join(label(f"take_reason_{r}", lang) for r in reasons) or "-"
