"""The model panel: pick a model folder, see its state (loaded / unloaded / loading), load or release
it, and download catalogue models with progress."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..errors import CosyVoiceError
from ..manager import ModelManager
from ..settings import Settings
from ..types import ProgressEvent

log = logging.getLogger(__name__)


@dataclass
class ModelPanel:
    changed: object  # the event that fires after the model choice changed (chain `.then` on it)
    model: object  # the model dropdown
    state: object  # the state markdown
    download: object  # fn(name, progress) -> (model dropdown update, state markdown): reuse for other buttons


def state_markdown(manager: ModelManager) -> str:
    s = manager.status()
    state = s["state"]
    icon = {"loaded": "🟢", "unloaded": "⚪", "loading": "🟡", "error": "🔴"}.get(state, "⚪")
    parts = [f"{icon} **{s['model']}** — {state}"]
    if state == "loading":
        parts.append(f"{s['load_fraction'] * 100:.0f}% {s['load_message']}")
    if state == "loaded" and s["device"]:
        parts.append(f"on {s['device']}")
    if s["running"] or s["queued"]:
        parts.append(f"{s['running']} running, {s['queued']} queued")
    parts.append(f"process memory {s['rss_mb']:.0f} MB")
    if manager.idle_unload_s > 0 and state == "loaded":
        left = max(0.0, manager.idle_unload_s - s["idle_for_s"])
        parts.append(f"released after {left:.0f} s idle")
    text = " · ".join(parts)
    return text + (f"\n\n{s['error']}" if s["error"] else "")


def build_model_panel(manager: ModelManager, settings: Settings, t) -> ModelPanel:
    import gradio as gr

    from ..hub import CATALOGUE, download

    def choices():
        return [(c.label, c.model_id) for c in manager.choices()]

    with gr.Accordion(t("model_panel"), open=False, elem_id="model-panel"):
        with gr.Row():
            model = gr.Dropdown(choices(), value=manager.model_id, label=t("model"), scale=3)
            refresh = gr.Button(t("refresh"), size="sm", scale=0)
        state = gr.Markdown(state_markdown(manager), elem_id="model-state")
        with gr.Row():
            load = gr.Button(t("load"), size="sm")
            unload = gr.Button(t("unload"), size="sm", elem_id="unload")
        with gr.Row():
            catalogue = gr.Dropdown([e.name for e in CATALOGUE if e.supported], value=CATALOGUE[0].name,
                                    label=t("download_model"), scale=3)
            fetch = gr.Button(t("download"), size="sm", scale=0)
    timer = gr.Timer(2.0)  # outside the accordion: a timer inside a collapsed one never ticks

    def on_select(model_id: str):
        try:
            manager.select(model_id)
        except CosyVoiceError as exc:
            gr.Warning(str(exc))
        return state_markdown(manager)

    def on_load(progress=gr.Progress()):
        try:
            manager.engine(lambda e: progress(e.fraction, desc=e.message))
        except CosyVoiceError as exc:
            raise gr.Error(str(exc)) from None
        return state_markdown(manager)

    def on_unload():
        if not manager.unload():
            gr.Info("The model is busy or not loaded; nothing was released.")
        return state_markdown(manager)

    def on_download(name: str, progress=gr.Progress()):
        def report(event: ProgressEvent) -> None:
            progress(event.fraction, desc=event.message)

        try:
            path = download(name, settings.models_dir, progress=report)
        except CosyVoiceError as exc:
            gr.Warning(str(exc))
            return gr.update(choices=choices()), state_markdown(manager)
        gr.Info(f"{name} is ready in {Path(path).parent.name}/{Path(path).name}")
        return gr.update(choices=choices(), value=str(path)), state_markdown(manager)

    changed = model.change(on_select, inputs=model, outputs=state, api_visibility="private")
    refresh.click(lambda: gr.update(choices=choices()), outputs=model, queue=False, api_visibility="private")
    load.click(on_load, outputs=state, api_visibility="private")
    unload.click(on_unload, outputs=state, queue=False, api_visibility="private")
    fetch.click(on_download, inputs=catalogue, outputs=[model, state], api_visibility="private")
    timer.tick(lambda: state_markdown(manager), outputs=state, queue=False, api_visibility="private")
    return ModelPanel(changed=changed, model=model, state=state, download=on_download)
