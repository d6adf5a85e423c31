"""`build_ui(manager, settings) -> gr.Blocks`: the page, put together from its parts.

A factory: nothing happens at import. The notices (`notices.py`), the model panel, the output options
(`options.py`) and one module per tab (`tabs/`) build and wire their own widgets; this file orders them
and re-fits them to the current model (`adapt`) on page load, on a model change and on the cross tab's
submode change.
"""

from __future__ import annotations

from pathlib import Path

from ..audio import ensure_ffmpeg
from ..serving.manager import ModelManager
from ..settings import Settings
from . import strings
from .api_tools import add_endpoints
from .handlers import Handlers
from .model_panel import build_model_panel
from .notices import build_notices
from .options import build_options
from .page import Page, opening_tab
from .saved_voices import SavedVoices
from .studio.book_tab import build_book
from .studio.dub_tab import build_dub
from .studio.script_tab import build_script
from .tabs.clone import build_clone
from .tabs.controls import wire_page_close
from .tabs.convert import build_convert
from .tabs.cross import build_cross
from .tabs.glossary import build_glossary
from .tabs.history import build_history
from .tabs.preset import build_preset


def build_ui(manager: ModelManager, settings: Settings, output_dir: Path | None = None, voices=None, share=None,
             service=None):
    """The Gradio Blocks app for one `ModelManager` (`voices`: the saved-voice library, None = off; `share`:
    the share-link status to display).

    `service`: the REST API's `ApiService`, which the public Gradio API and MCP tools run through
    (`api_tools.py`); one is made when not given.
    """
    import gradio as gr

    t = strings.i18n()
    if service is None:
        from ..api.service import ApiService

        service = ApiService(manager, settings, library=voices)
    # the tabs run the same speech jobs as the REST API and the Gradio API (one queue, one rule set)
    handlers = Handlers(manager, settings, output_dir or Path("outputs"), voices=voices, speech=service.speech)
    with gr.Blocks(title="CosyVoice Studio", fill_width=True) as demo:
        notices = build_notices(manager, settings, t, share)
        panel = build_model_panel(manager, settings, t, page=demo, header=notices.header)
        notices.wire(panel)
        page = Page(manager, settings, handlers, t, ensure_ffmpeg(), build_options(manager, t, settings),
                    SavedVoices(voices, t))
        with gr.Tabs(selected=opening_tab(manager.info())):
            clone = build_clone(page)
            cross = build_cross(page)
            preset = build_preset(page)
            convert = build_convert(page)
            script = build_script(page)
            book = build_book(page)
            dub = build_dub(page)
            glossary = build_glossary(page)
            build_history(page)
        if page.saved.enabled:
            page.saved.wire(demo, handlers.speech, page.options, button=clone.save, prompt=clone.prompt,
                            transcript=clone.transcript, name=clone.voice_name, select=clone.saved,
                            consent=clone.consent)

        # Each part says what it shows for the current model (`adapt`): one event updates them all.
        parts = [notices, page.options, clone, cross, preset, convert, script, book, dub, glossary]
        info = manager.info()
        outputs = [component for part in parts for component in part.adapt(info, {})]

        def adapt(data: dict) -> dict:
            current = manager.info()
            return {component: update for part in parts for component, update in part.adapt(current, data).items()}

        # The browser's language too: the instruction picker's labels are data (EngineInfo), not gr.I18n keys.
        fit = dict(inputs={cross.submode, page.options.lang}, outputs=outputs, queue=False, api_visibility="private")
        cross.submode.change(adapt, **fit)
        page.options.lang.change(adapt, **fit)
        panel.changed.then(adapt, **fit)
        demo.load(adapt, **fit)
        demo.load(None, js="() => navigator.language || 'en'", outputs=page.options.lang, api_visibility="private")

        wire_page_close(demo, handlers)
        # The public API ("Use via API", gradio_client) and the MCP tools: API-only endpoints.
        add_endpoints(service, handlers.output_dir)

    demo.queue(max_size=settings.queue_size, default_concurrency_limit=settings.concurrency)
    return demo
