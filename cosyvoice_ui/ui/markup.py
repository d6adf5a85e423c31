"""Text from books, scripts and projects shown as text in Markdown and HTML widgets.

A book titled `<img src=x onerror=...>`, `**bold**` or `[link](javascript:...)`, or a speaker called `# Big`,
must read exactly like that: `plain` escapes what HTML and Markdown would act on (HTML's `& < >` as entities,
Markdown's punctuation with a backslash, `:` and `@` as entities so no autolink forms) and folds line breaks,
so the text cannot start a heading, a list or a new paragraph either. `MARKDOWN_OPTIONS` turns off LaTeX in a
`gr.Markdown` that shows such text (`$$` would otherwise be typeset).
"""

from __future__ import annotations

import html

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
