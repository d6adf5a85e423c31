"""The History tab's "Check a file" panel: does an audio or video file carry this app's watermark?

The check is `serving/watermarking.check_file`, the one the CLI's `detect` and POST /v1/audio/detect run; the
answer (or why there is none) is a line under the button in the user's language, never an error badge.
"""

from ...errors import InvalidRequest
from ...serving.watermarking import WatermarkUnavailable, check_file, status
from .. import strings
from ..markup import MARKDOWN_OPTIONS, plain
from ..page import Page


def check_text(path: str | None, lang: str) -> str:
    """What the panel says about the file at `path` (a gr.File filepath value)."""
    if not path:
        return strings.label("check_no_file", lang)
    try:
        verdict = check_file(path, "file")
    except WatermarkUnavailable:
        return strings.label("check_unavailable", lang)
    except InvalidRequest as exc:
        return plain(strings.message(exc, lang))
    key = "check_marked" if verdict.marked else "check_unmarked"
    return strings.label(key, lang).format(confidence=verdict.confidence)


def build_check(page: Page) -> None:
    import gradio as gr

    t = page.t
    with gr.Accordion(t("check_title"), open=False, elem_id="check-file"):
        gr.Markdown(t("check_help"))
        gr.Markdown(t("check_outputs_unmarked"), visible=not status(page.settings)["marked"])
        file = gr.File(label=t("check_file"), file_count="single", type="filepath", file_types=["audio", "video"])
        button = gr.Button(t("check_button"), size="sm", variant="secondary")
        answer = gr.Markdown("", **MARKDOWN_OPTIONS)

    def check(data: dict) -> str:
        return check_text(data[file], page.options.language(data))

    button.click(check, inputs={file, page.options.lang}, outputs=answer, concurrency_limit=1,
                 concurrency_id="watermark_check", api_visibility="private")
