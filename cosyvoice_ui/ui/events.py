"""Progress events in the user's language, read from their code and parameters (`types.ProgressEvent`), the way
errors are: no pattern over our own English.

A code names a label `progress_<code>` in the string tables; its parameters fill it (reasons of a take check
are translated, a studio line's or a book piece's inner event is rendered after it). An event without a code
(a backend's own detail) shows its stage, then its English detail (in Chinese: only its stage).
"""

from __future__ import annotations

from ..types import ProgressEvent
from . import strings

# Codes whose text is the whole label; the others come after their stage ("生成语音标记 1/3").
WHOLE = frozenset({"queue_position", "line", "book_piece", "book_chapter", "book_writing", "lines_done"})


def event_text(event: ProgressEvent, lang: str) -> str:
    """One progress event as a short label in `lang`."""
    coded = _coded(event.stage, event.code, event.params, lang)
    if coded is not None:
        return coded
    return strings.stage_text(event, lang)


def _coded(stage: str, code: str, params: dict, lang: str, prefix: bool = True) -> str | None:
    if not code or f"progress_{code}" not in strings.LABELS_EN:
        return None
    values = dict(params)
    if code.startswith("take_"):
        values["why"] = strings.take_reasons(values.get("reasons") or (), lang)
        values["segment"] = f"{values.get('segment')}/{values.get('total')}"
        if "attempt" in values:
            values["attempt"] = f"{values['attempt']}/{values.get('retries')}"
    if code == "book_piece":
        values["eta"] = eta_text(values.get("eta_s"), lang)
    try:
        text = strings.label(f"progress_{code}", lang).format(**values)
    except (KeyError, IndexError, ValueError):
        return None
    inner = params.get("then")
    if isinstance(inner, dict):
        inner_text = _coded(inner.get("stage", stage), inner.get("code", ""), inner.get("params") or {}, lang,
                            prefix=False)
        if inner_text is None and lang != "zh" and inner.get("message"):
            inner_text = str(inner["message"])
        if inner_text:
            text = f"{text} · {inner_text}"
    if code in WHOLE or not prefix:
        return text
    joiner = " · " if lang == "zh" else ": "
    return f"{strings.stage_label(stage, lang)}{joiner}{text}"


def nested(event: ProgressEvent) -> dict:
    """An event as the `then` parameter of an outer one (a studio line, a book piece)."""
    return {"stage": event.stage, "code": event.code, "params": dict(event.params), "message": event.message}


def eta_text(seconds: float | None, lang: str) -> str:
    """A book's time left: "ETA 3 min", "<1 min", "1 h 05 min", or unknown."""
    if seconds is None:
        return strings.label("book_eta_unknown", lang)
    if seconds < 60:
        return strings.label("book_eta_soon", lang)
    minutes = int(round(seconds / 60))
    if minutes < 60:
        return strings.label("book_eta_minutes", lang).format(minutes=minutes)
    return strings.label("book_eta_hours", lang).format(hours=minutes // 60, minutes=minutes % 60)
