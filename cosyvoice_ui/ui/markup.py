"""Text from books, scripts and projects shown as text in Markdown and HTML widgets.

A book titled `<img src=x onerror=...>`, `**bold**` or `[link](javascript:...)`, or a speaker called `# Big`,
must read exactly like that: `plain` escapes what HTML and Markdown would act on (HTML's `& < >` as entities,
Markdown's punctuation with a backslash, `:` and `@` as entities so no autolink forms) and folds line breaks,
so the text cannot start a heading, a list or a new paragraph either. `MARKDOWN_OPTIONS` turns off LaTeX in a
`gr.Markdown` that shows such text (`$$` would otherwise be typeset).
"""

from __future__ import annotations

import html
import logging

log = logging.getLogger(__name__)

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", ":": "&#58;", "@": "&#64;", '"': "&quot;"}
_BACKSLASHED = "\\`*_{}[]()#+-.!|~$=^"
_TABLE = str.maketrans({**{ch: "\\" + ch for ch in _BACKSLASHED}, **_ENTITIES})
MARKDOWN_OPTIONS = {"latex_delimiters": []}


def plain(text: object) -> str:
    """`text` as literal Markdown (and HTML) text, on one line."""
    return " ".join(str(text if text is not None else "").split()).translate(_TABLE)


def plain_html(text: object) -> str:
    """`text` escaped for an HTML context (a gr.Error modal, gr.HTML): entities only, no backslashes."""
    return html.escape(str(text if text is not None else ""), quote=False)  # text content, not an attribute


def refusal(text: str, reason: object = None):
    """A `gr.Error` for an ordinary refusal (a bad input, a stopped or failed job): the user reads `text`; the log
    gets one line with the reason's code, not a traceback. Raise it: `raise refusal(...) from None`."""
    import gradio as gr

    code = reason if isinstance(reason, str) else getattr(reason, "code", None) or type(reason).__name__
    log.info("refused in the UI: %s", code)
    return gr.Error(plain_html(text), print_exception=False)
