"""The model panel: pick a model folder, see its state (loaded / unloaded / loading), load or release
it, and download catalogue models with progress.

Texts follow the browser's language: labels through gr.I18n, the state line and messages by the
request's Accept-Language (handlers take a `request: gr.Request`).
"""

# No `from __future__ import annotations`: Gradio finds `request: gr.Request` by evaluated annotations.
import logging
from dataclasses import dataclass
from pathlib import Path

from ..errors import CosyVoiceError
from ..redact import without_paths
from ..serving.manager import ModelManager
from ..settings import Settings
from ..types import ProgressEvent
from . import strings
from .events import event_text
from .markup import plain, refusal

log = logging.getLogger(__name__)


@dataclass
class ModelPanel:
    changed: object  # the event that fires after the model choice changed (chain `.then` on it)
    model: object  # the model dropdown
    state: object  # the state markdown
    # fn(name, progress, request=None) -> (model dropdown update, state markdown): reuse for other buttons
    # (pass the event's gr.Request for messages in the browser's language; without one they are English)
    download: object


def _lang(request) -> str:
    headers = getattr(request, "headers", None) or {}
    return strings.language_of(headers.get("accept-language"))


def state_markdown(manager: ModelManager, lang: str = "en") -> str:
    """One line: the model, its state, device, jobs, memory and when it is released (in `lang`)."""
    s = manager.status()
    state = s.state
    key = f"state_{state}"
    name_key = strings.name_key(s)  # a name the serving layer gives in English only: show the localised one
    model = strings.label(name_key, lang) if name_key else s.model
    parts = [f"**{model}** — {strings.label(key, lang) if key in strings.LABELS_EN else state}"]
    if state == "loading":  # the loader's detail is English: Chinese gets the percentage only
        detail = f" {s.load_message}" if lang != "zh" and s.load_message else ""
        parts.append(f"{s.load_fraction * 100:.0f}%{detail}")
    if state == "loaded" and s.device:
        parts.append(strings.label("state_device", lang).format(device=s.device))
    if s.running or s.queued:
        parts.append(strings.label("state_jobs", lang).format(running=s.running, queued=s.queued))
    parts.append(strings.label("state_memory", lang).format(mb=s.rss_mb))
    if manager.idle_unload_s > 0 and state == "loaded":
        left = max(0.0, manager.idle_unload_s - s.idle_for_s)
        parts.append(strings.label("state_release", lang).format(seconds=left))
    text = " · ".join(parts)
    roots = (getattr(manager, "models_dir", None), Path(str(getattr(manager, "model_id", ""))).parent, Path.cwd())
    error = without_paths(s.error, roots)
    return text + (f"\n\n{strings.prefixed('state_failed', error, lang)}" if s.error else "")


def header_markdown(manager: ModelManager, lang: str = "en") -> str:
    """The header's line: which model answers Generate and whether it is ready, loading or waiting for its first
    job (and, once loaded, its precision mode)."""
    s = manager.status()
    name_key = strings.name_key(s)
    model = strings.label(name_key, lang) if name_key else s.model
    parts = [strings.label("header_model", lang).format(model=plain(model))]
    if s.state == "loaded":
        parts.append(strings.label("header_ready", lang))
        info = manager.info()
        mode = getattr(getattr(info, "precision", None), "mode", None)
        if mode and f"precision_{mode.replace('-', '_')}" in strings.LABELS_EN:
            precision = strings.label(f"precision_{mode.replace('-', '_')}", lang)
            parts.append(strings.label("header_precision", lang).format(precision=precision))
    elif s.state == "loading":
        parts.append(strings.label("header_loading", lang).format(percent=s.load_fraction * 100))
    elif s.state == "error":
        parts.append(strings.label("header_error", lang))
    else:
        parts.append(strings.label("header_waiting", lang))
    return " · ".join(parts)


def build_model_panel(manager: ModelManager, settings: Settings, t, page=None, header=None) -> ModelPanel:
    """The panel; with `page` (the gr.Blocks) its state line is written in the browser's language on load.
    `header`: the page header's model line (`header_markdown`), kept current with the panel's state."""
    import gradio as gr

    from ..serving.backends import download_model, downloadable_models

    # The page sees each model by its public key (its folder below --models-dir), never by its path.
    def choices():
        return [(t(key) if (key := strings.name_key(c)) else c.label, c.public_key) for c in manager.choices()]

    def key_of(model_id: str) -> str:
        return next((c.public_key for c in manager.choices() if c.model_id == str(model_id)), "")

    def model_of(key: str) -> str | None:
        return next((c.model_id for c in manager.choices() if c.public_key == key), None)

    with gr.Accordion(t("model_panel"), open=False, elem_id="model-panel"):
        with gr.Row():
            model = gr.Dropdown(choices(), value=key_of(manager.model_id), label=t("model"), scale=3)
            refresh = gr.Button(t("refresh"), size="sm", scale=0)
        state = gr.Markdown(state_markdown(manager), elem_id="model-state")
        with gr.Row():
            load = gr.Button(t("load"), size="sm")
            unload = gr.Button(t("unload"), size="sm", elem_id="unload")
        with gr.Row():
            names = downloadable_models()
            catalogue = gr.Dropdown(names, value=names[0] if names else None,
                                    label=t("download_model"), scale=3)
            fetch = gr.Button(t("download"), size="sm", scale=0)
    timer = gr.Timer(2.0)  # outside the accordion: a timer inside a collapsed one never ticks

    def on_select(key: str, request: gr.Request):
        lang = _lang(request)
        model_id = model_of(key)
        if model_id is None:  # a folder removed since the list was drawn
            gr.Warning(strings.label("model_gone", lang))
            return state_markdown(manager, lang)
        try:
            manager.select(model_id)
        except CosyVoiceError as exc:
            gr.Warning(strings.prefixed("load_failed", exc, lang))
        return state_markdown(manager, lang)

    def on_load(request: gr.Request, progress=gr.Progress()):
        lang = _lang(request)
        try:
            manager.engine(lambda e: progress(e.fraction, desc=event_text(e, lang)))
        except CosyVoiceError as exc:
            raise refusal(strings.prefixed("load_failed", exc, lang), exc) from None
        return state_markdown(manager, lang)

    def on_unload(request: gr.Request):
        lang = _lang(request)
        if not manager.unload():
            gr.Info(strings.label("unload_nothing", lang))
        return state_markdown(manager, lang)

    def on_download(name: str, progress=gr.Progress(), request: gr.Request = None):
        lang = _lang(request)

        def report(event: ProgressEvent) -> None:
            progress(event.fraction, desc=event_text(event, lang))

        try:
            path = download_model(name, settings.models_dir, progress=report)
        except CosyVoiceError as exc:
            gr.Warning(strings.prefixed("download_failed", exc, lang))
            return gr.update(choices=choices()), state_markdown(manager, lang)
        gr.Info(strings.label("download_ready", lang).format(name=name))
        return gr.update(choices=choices(), value=key_of(str(path))), state_markdown(manager, lang)

    def refresh_state(request: gr.Request):
        lang = _lang(request)
        return (state_markdown(manager, lang), header_markdown(manager, lang)) if header is not None \
            else state_markdown(manager, lang)

    watched = [state, header] if header is not None else state

    changed = model.change(on_select, inputs=model, outputs=state, api_visibility="private")
    refresh.click(lambda: gr.update(choices=choices()), outputs=model, queue=False, api_visibility="private")
    load.click(on_load, outputs=state, api_visibility="private")
    unload.click(on_unload, outputs=state, queue=False, api_visibility="private")
    fetch.click(on_download, inputs=catalogue, outputs=[model, state], api_visibility="private")
    # no progress overlay: a line that refreshes itself would otherwise flash its timer ("0.4s") every tick
    quiet = dict(queue=False, show_progress="hidden", api_visibility="private")
    timer.tick(refresh_state, outputs=watched, **quiet)
    if page is not None:
        page.load(refresh_state, outputs=watched, **quiet)
    return ModelPanel(changed=changed, model=model, state=state, download=on_download)
