"""The glue between the studio tabs' events and `studio_handlers`: a long job run beside the event so its
progress shows as it happens (a gr.Progress bar and a status line), errors in the user's language, and the
glossary chosen in the output options.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from ..errors import CosyVoiceError
from ..types import ProgressEvent
from . import strings
from .events import event_text
from .handlers import failure_text
from .markup import plain, plain_html
from .studio_handlers import stream_work

log = logging.getLogger(__name__)



def option_inputs(page) -> set:
    """The output options an event reads: language, format, loudness, the glossary and the take-check switch."""
    return set(page.options.inputs)


def chosen_glossary(page, data: dict):
    """The glossary picked in the output options (a saved id; None = none)."""
    reader = getattr(page.options, "glossary_id", None)
    if callable(reader):
        return reader(data) or None
    component = getattr(page.options, "glossary", None)
    return data.get(component) if component is not None else None


def chosen_policy(page, data: dict):
    """The bad-take policy for this event: the settings', off where this browser switched checks off."""
    policy = getattr(page.handlers, "policy", None)
    return policy(page.options.output(data)) if callable(policy) else None


def status_text(event: ProgressEvent, lang: str) -> str:
    """A render's progress as the status line, e.g. "line 3/12 · Bob · segment 1/2: retry 1/2 (too long ...)",
    read from the event's code and parameters in the user's language (`ui/events.py`)."""
    return event_text(event, lang)


def error_text(exc: Exception, lang: str) -> str:
    """What the user reads when a studio event fails: a translated message, never a traceback or a path."""
    if isinstance(exc, CosyVoiceError):
        return failure_text(exc, lang)
    log.error("studio event failed", exc_info=exc)
    return strings.label("studio_failed", lang)


def raise_shown(exc: Exception, lang: str):
    import gradio as gr

    raise gr.Error(plain_html(error_text(exc, lang))) from None  # the modal renders HTML; this is text


def guarded(lang: str, work: Callable[[], object]) -> object:
    """`work()`, with its InvalidRequest (or other failure) shown as a translated gr.Error."""
    try:
        return work()
    except (CosyVoiceError, OSError, ValueError) as exc:
        raise_shown(exc, lang)


def live(page, request, progress, lang: str, work: Callable[[Callable, object], object]) \
        -> Iterator[tuple[str, object]]:
    """Run `work(report, cancel)` beside this event: yields ("status", text) for each progress event (the bar
    follows too), then ("done", result). Stop (the page's stop flag for this browser) cancels it."""
    cancel = page.handlers.cancel_flag(request)
    last = None
    try:
        for item in stream_work(lambda report: work(report, cancel), cancel):
            if isinstance(item, tuple):
                yield item
                return
            if progress is not None:
                try:
                    progress(max(0.0, min(1.0, float(item.fraction))), desc=event_text(item, lang))
                except Exception:  # cosmetic
                    log.debug("progress update failed", exc_info=True)
            text = status_text(item, lang)
            if text and text != last:
                last = text
                yield "status", plain(text)  # shown in a gr.Markdown; speaker names are the script's words
    except (CosyVoiceError, OSError, ValueError) as exc:
        raise_shown(exc, lang)

