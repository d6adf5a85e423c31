"""The top of the page: title, subtitle and the one-line notices (no password, no model, what the backend
can do with a button to get a real cloning model, the public share link)."""

# No `from __future__ import annotations`: Gradio finds `request: gr.Request` by its evaluated annotation.
from dataclasses import dataclass

from ..known_models import recommended_model
from ..serving.manager import ModelManager
from ..settings import Settings
from ..types import EngineInfo
from . import strings


@dataclass(frozen=True)
class Notices:
    notes_row: object
    notes: object
    get_model: object  # downloads the recommended model (`known_models`; wired to the model panel by `wire`)
    t: object
    header: object = None  # which model answers Generate, and its state (kept current by the model panel)

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        import gradio as gr

        text = strings.notes_markdown(info, self.t)
        return {self.notes_row: gr.update(visible=bool(text)), self.notes: gr.update(value=text)}

    def wire(self, panel) -> None:
        """The download button fills the model panel (its dropdown and state line)."""
        import gradio as gr

        def download_recommended(request: gr.Request, progress=gr.Progress()):
            recommended = recommended_model()  # presets + cloning; the button's label names it
            return panel.download(recommended.name if recommended else "", progress, request)

        self.get_model.click(download_recommended, outputs=[panel.model, panel.state], api_visibility="private")


def nothing_installed(manager: ModelManager, info: EngineInfo | None) -> bool:
    """No model to choose but the current one, and that one cannot run: the user has to download one."""
    return info is None and len(manager.choices()) <= 1


def build_notices(manager: ModelManager, settings: Settings, t, share=None) -> Notices:
    """`share`: the process's share-link status (`url`, `error`), shown while a `--share` link is made."""
    import gradio as gr

    info = manager.info()
    gr.Markdown(t("title"), elem_id="title")
    gr.Markdown(t("subtitle"))
    header = gr.Markdown(elem_id="model-header")  # filled in the browser's language on load (model_panel)
    gr.Markdown(t("public_warning"), visible=settings.is_public and not settings.auth, elem_id="public-warning")
    gr.Markdown(t("no_model"), visible=nothing_installed(manager, info), elem_id="no-model")
    # Text and button share a line where both fit (text >= 300 px, button >= 220 px); on a phone the
    # row wraps and the button, growing, takes the full width under the text.
    with gr.Row(visible=bool(strings.notes_markdown(info, t)), elem_id="backend-notes") as notes_row:
        with gr.Column(scale=4, min_width=300):  # a Markdown ignores min_width; its column does not
            notes = gr.Markdown(strings.notes_markdown(info, t), elem_id="backend-notes-text")
        get_model = gr.Button(t("get_cosyvoice"), size="sm", scale=1, min_width=220, elem_id="get-cosyvoice")
    if share is not None and settings.share:
        _share_status(share, t)
    return Notices(notes_row, notes, get_model, t, header)


def _share_status(share, t) -> None:
    import gradio as gr

    share_md = gr.Markdown(t("share_pending"), elem_id="share-status")
    timer = gr.Timer(1.0)

    def share_text():
        # One translated key per string: Gradio's frontend translates the first key it finds.
        if share.url:
            return f"{t('share_ready')} [{share.url}]({share.url})", gr.Timer(active=False)
        if share.error:
            return (f"<details><summary>{t('share_failed')}</summary>\n\n{share.error}\n\n</details>",
                    gr.Timer(active=False))
        return gr.skip(), gr.skip()

    timer.tick(share_text, outputs=[share_md, timer], queue=False, api_visibility="private")
