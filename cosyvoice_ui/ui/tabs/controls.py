"""What every generating tab has under its own widgets (speed, seed, stream, Generate / Stop, the result with
its subtitle files and take-check line), and the wiring of its Generate button: validator, streamed run, Stop.

The events take dict inputs (`inputs={...}`): Gradio then calls the function with one dict keyed by
component, so a tab names its widgets once, by field, and no signature has to be spelled out for it.
"""

# No `from __future__ import annotations`: Gradio finds `request: gr.Request` by its evaluated annotation.
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import InvalidRequest
from .. import clicks, strings
from ..page import Page
from ..requests import field_of, request_from_meta
from ..markup import plain_html, refusal


@dataclass(frozen=True)
class Controls:
    speed: object
    seed: object
    stream: object
    generate: object
    stop: object
    audio: object
    file: object
    info: object
    subtitles: object = None  # the result's SRT and VTT files
    takes: object = None  # one line: how the bad-take checks went
    alert: object = None  # beside Generate: the click's refusal, copied there from its field (page.js)
    click: object = None  # hidden: the id the page gives each Generate click (`clicks.py`), sent by its Stop too

    @property
    def outputs(self) -> list:
        """What `Handlers.generate` fills, in its order (the history state comes after); a tab without subtitle
        files leaves them out (`wire_generate` drops that value)."""
        return [c for c in (self.audio, self.file, self.subtitles, self.info, self.takes) if c is not None]


# Where a refusal is shown beside Generate: page.js copies the field's message into it (role=alert reads it out).
ALERT_HTML = '<div class="job-alert" role="alert" aria-live="assertive" hidden></div>'

def build_controls(page: Page, subtitles: bool = True) -> Controls:
    """`subtitles`: the tab's results have a text to time (voice conversion's do not: no subtitle files)."""
    import gradio as gr

    t = page.t
    with gr.Row():
        speed = gr.Slider(0.5, 2.0, value=1.0, step=0.05, label=t("speed"))
        seed = gr.Number(value=0, precision=0, minimum=0, label=t("seed"), scale=1)
        dice = gr.Button(t("dice"), scale=0, min_width=110, size="sm")
        stream = gr.Checkbox(value=False, label=t("stream"), visible=page.can_stream)
    alert = gr.HTML(ALERT_HTML, padding=False, elem_classes=["job-alert-box"])
    with gr.Row(elem_classes=["job-buttons"]):
        generate = gr.Button(t("generate"), variant="primary", scale=3, min_width=160, elem_classes=["job-generate"])
        # Secondary until a job runs (page.css turns it red while the tab's result is being made).
        stop = gr.Button(t("stop"), variant="secondary", scale=1, min_width=90, elem_classes=["job-stop"])
    audio = gr.Audio(label=t("output"), streaming=True, autoplay=True, interactive=False, elem_classes=["result"])
    takes = gr.Markdown(elem_classes=["take-info"])
    # Empty download boxes look like upload areas: they appear once there is a file to download.
    with gr.Row():
        file = gr.File(label=t("download_file"), interactive=False, visible=False, elem_classes=["result-file"])
        subtitle_files = gr.File(label=t("download_subtitles"), file_count="multiple", interactive=False,
                                 visible=False, elem_classes=["result-subtitles"]) if subtitles else None
    info = gr.Markdown(elem_classes=["result-info"])
    click = clicks.field()
    dice.click(lambda: random.randint(1, 100_000_000), outputs=seed, queue=False, api_visibility="private")
    return Controls(speed, seed, stream, generate, stop, audio, file, info, subtitle_files, takes, alert, click)


def shown(values: tuple, subtitles: bool) -> tuple:
    """`Handlers.generate`'s values for a tab: the download boxes made visible with their files (hidden when
    there are none), and the subtitle files left out on a tab without them."""
    import gradio as gr

    audio, path, cues, *rest = values
    if isinstance(path, str):
        path = gr.update(value=path, visible=True)
    if isinstance(cues, list) or cues is None:
        cues = gr.update(value=cues, visible=bool(cues))
    return (audio, path, cues, *rest) if subtitles else (audio, path, *rest)


def click_key(data: dict) -> str:
    """What identifies one click's inputs: the validator's checked job is kept under it for the run that
    follows (the same inputs give the same request, seed included)."""
    values = sorted((getattr(component, "_id", id(component)), repr(value)) for component, value in data.items())
    return hashlib.sha256(repr(values).encode()).hexdigest()


def wire_generate(page: Page, controls: Controls, fields: dict, make_meta: Callable[..., dict],
                  trigger=None) -> None:
    """Generate runs `make_meta(*field values)` (fields: `requests.field_of` name → component, in
    `make_meta`'s order) as a request; a validation error is shown on the field it is about (else on the
    first). `trigger`: another event that fills the fields; when it succeeds, it generates too."""
    import gradio as gr

    handlers, options = page.handlers, page.options
    at_field = {**fields, "speed": controls.speed}
    first = next(iter(fields.values()))
    inputs = {*fields.values(), controls.speed, controls.seed, controls.stream, controls.click, *options.inputs}
    stop_inputs = {options.lang, controls.click}

    def request_of(data: dict):
        meta = make_meta(*(data[component] for component in fields.values()))
        return meta, request_from_meta(meta, data[controls.speed], data[controls.seed], data[controls.stream])

    def run(data: dict, request: gr.Request, progress=gr.Progress()):
        lang = options.language(data)
        try:
            meta, req = request_of(data)
        except InvalidRequest as exc:  # an unreadable upload, when no validator ran first (a trigger)
            raise refusal(strings.message(exc, lang), exc) from None
        for values in handlers.generate(req, options.output(data), options.past(data), request, progress, meta, lang,
                                        job=handlers.checked(click_key(data)), click=data[controls.click]):
            yield shown(values, controls.subtitles is not None)

    def validate(data: dict, request: gr.Request = None):
        verdicts = {component: gr.validate(True, "") for component in inputs}
        try:
            meta, req = request_of(data)
            handlers.check(req, options.output(data), key=click_key(data), http_request=request,
                           consent=bool(meta.get("consent")), click=data[controls.click])
        except InvalidRequest as exc:
            target = at_field.get(field_of(exc), first)
            verdicts[target] = gr.validate(False, strings.message(exc, options.language(data)))
        return verdicts

    def stop(data: dict, request: gr.Request):
        # Stop is a state: the run's line says "Stopped" (and nothing changes when none ran)
        if not handlers.stop(request, data[controls.click]):
            return gr.skip(), gr.skip()
        return plain_html(strings.label("stopped", options.language(data))), ""

    # Private: the tab events carry browser state (history, language); the public API is api_tools.py.
    shared = dict(outputs=controls.outputs + [options.history], concurrency_limit=page.settings.concurrency,
                  concurrency_id="synthesis", api_visibility="private")
    # Stop ends a run through the handlers' stop flag (the run then says "Stopped"), not through Gradio's cancel,
    # which would leave "Error" on every output; only the filling of an example is cancelled outright.
    controls.generate.click(run, inputs=inputs, validator=validate, js=clicks.making(inputs, controls.click), **shared)
    cancels = []
    if trigger is not None:
        cancels.append(trigger)
        trigger.success(run, inputs=inputs, **shared)
    controls.stop.click(stop, inputs=stop_inputs, outputs=[controls.info, controls.takes], cancels=cancels or None,
                        js=clicks.sending(stop_inputs, controls.click),
                        queue=False, show_progress="hidden", api_visibility="private")


def wire_page_close(demo, handlers) -> None:
    """Closing (or reloading) the page stops its job in every phase, so a tab left behind does not hold the queue."""
    import gradio as gr

    def closed(request: gr.Request) -> None:
        handlers.page_closed(request)

    demo.unload(closed)
