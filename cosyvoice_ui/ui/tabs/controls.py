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
from .. import strings
from ..page import Page
from ..requests import field_of, request_from_meta
from ..markup import plain_html


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

    @property
    def outputs(self) -> list:
        """What `Handlers.generate` fills, in its order (the history state comes after)."""
        return [self.audio, self.file, self.subtitles, self.info, self.takes]


def build_controls(page: Page) -> Controls:
    import gradio as gr

    t = page.t
    with gr.Row():
        speed = gr.Slider(0.5, 2.0, value=1.0, step=0.05, label=t("speed"))
        seed = gr.Number(value=0, precision=0, minimum=0, label=t("seed"), scale=1)
        dice = gr.Button(t("dice"), scale=0, min_width=60)
        stream = gr.Checkbox(value=False, label=t("stream"), visible=page.can_stream)
    with gr.Row():
        generate = gr.Button(t("generate"), variant="primary")
        stop = gr.Button(t("stop"), variant="stop")
    audio = gr.Audio(label=t("output"), streaming=True, autoplay=True, interactive=False, elem_classes=["result"])
    takes = gr.Markdown(elem_classes=["take-info"])
    with gr.Row():
        file = gr.File(label=t("download_file"), interactive=False, elem_classes=["result-file"])
        subtitles = gr.File(label=t("download_subtitles"), file_count="multiple", interactive=False,
                            elem_classes=["result-subtitles"])
    info = gr.Markdown()
    dice.click(lambda: random.randint(1, 100_000_000), outputs=seed, queue=False, api_visibility="private")
    return Controls(speed, seed, stream, generate, stop, audio, file, info, subtitles, takes)


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
    inputs = {*fields.values(), controls.speed, controls.seed, controls.stream, *options.inputs}

    def request_of(data: dict):
        meta = make_meta(*(data[component] for component in fields.values()))
        return meta, request_from_meta(meta, data[controls.speed], data[controls.seed], data[controls.stream])

    def run(data: dict, request: gr.Request, progress=gr.Progress()):
        lang = options.language(data)
        try:
            meta, req = request_of(data)
        except InvalidRequest as exc:  # an unreadable upload, when no validator ran first (a trigger)
            raise gr.Error(plain_html(strings.message(exc, lang))) from None
        yield from handlers.generate(req, options.output(data), options.past(data), request, progress, meta, lang,
                                     job=handlers.checked(click_key(data)))

    def validate(data: dict):
        verdicts = {component: gr.validate(True, "") for component in inputs}
        try:
            handlers.check(request_of(data)[1], options.output(data), key=click_key(data))
        except InvalidRequest as exc:
            target = at_field.get(field_of(exc), first)
            verdicts[target] = gr.validate(False, strings.message(exc, options.language(data)))
        return verdicts

    def stop(request: gr.Request) -> None:
        handlers.stop(request)

    # Private: the tab events carry browser state (history, language); the public API is api_tools.py.
    shared = dict(outputs=controls.outputs + [options.history], concurrency_limit=page.settings.concurrency,
                  concurrency_id="synthesis", api_visibility="private")
    cancels = [controls.generate.click(run, inputs=inputs, validator=validate, **shared)]
    if trigger is not None:  # Stop also ends the filling (an example may be recording)
        cancels += [trigger, trigger.success(run, inputs=inputs, **shared)]
    controls.stop.click(stop, cancels=cancels, queue=False, api_visibility="private")
