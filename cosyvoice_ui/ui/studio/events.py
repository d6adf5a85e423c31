"""The glue between the studio tabs' events and `studio/` (`workspace.py`, `books.py`): the app's one
workspace, a long job run beside the event so its progress shows as it happens (a gr.Progress bar and a status
line), errors in the user's language, and the job options chosen in the output options.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator

from ...errors import CosyVoiceError
from ...serving.jobs import JobOptions
from ...studio.workspace import Workspace
from ...types import ProgressEvent
from .. import strings
from ..events import event_text
from ..handlers import caller_of, failure_text
from ..markup import plain, refusal

log = logging.getLogger(__name__)

_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def workspace_for(page) -> Workspace:
    """The app's one `Workspace` over its speech jobs (the Script and Audiobook tabs share its project locks and
    voice memory)."""
    found = _SHARED.get(page.handlers)
    if found is None:
        found = _SHARED[page.handlers] = Workspace(page.handlers.speech)
    return found


def option_inputs(page) -> set:
    """The output options an event reads: language, format, loudness, the glossary and the take-check switch."""
    return set(page.options.inputs)


def chosen_options(page, data: dict, request=None, surface: str = "script") -> JobOptions:
    """The job options of this event, as every tab's: the glossary picked in the output options and this
    browser's take switch (the server's policy decides the rest); who asks, for the audit trail (`surface`:
    script or book). Each sample's consent is its voice row's (`VoiceChoice.consent`)."""
    return page.handlers.job_options(page.options.output(data), caller=caller_of(request, surface))


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

    raise refusal(error_text(exc, lang), exc) from None  # the modal renders HTML; this is text


def guarded(lang: str, work: Callable[[], object]) -> object:
    """`work()`, with its InvalidRequest (or other failure) shown as a translated gr.Error."""
    try:
        return work()
    except (CosyVoiceError, OSError, ValueError) as exc:
        raise_shown(exc, lang)


def live(page, request, progress, lang: str, work: Callable[[Callable, object], object], click: str | None = None) \
        -> Iterator[tuple[str, object]]:
    """Run `work(report, cancel)` beside this event: yields ("status", text) for each progress event (the bar
    follows too), then ("done", result). Stop (the page's stop flag for this browser) cancels it; `click`: the
    page's id of the click that asked for it (`clicks.py`), so a Stop that came first stops it as it starts."""
    cancel = page.handlers.cancel_flag(request, click)
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


def stream_work(work: Callable[[Callable[[ProgressEvent], None]], object], cancel: threading.Event) \
        -> Iterator[ProgressEvent | tuple[str, object]]:
    """Run `work(progress)` on a worker thread and yield its progress events as they come, then ("done",
    result); an exception is raised here. Leaving early (the browser stopped the event) sets `cancel`."""
    import queue

    events: queue.Queue = queue.Queue()
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["result"] = work(events.put)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc
        finally:
            events.put(None)

    thread = threading.Thread(target=target, name="studio-job", daemon=True)
    thread.start()
    finished = False
    try:
        while True:
            event = events.get()
            if event is None:
                finished = True
                break
            yield event
    finally:
        if not finished:
            cancel.set()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    yield "done", outcome.get("result")
