"""Which click a Stop is for.

A page shows a job as running from the click on, before the click's request reaches the server, and on a busy
server the Stop pressed then can arrive first. So each click that starts a job gets an id made in the page, sent in
place of a hidden field's value (`field`), and the tab's Stop sends the id of the tab's last click: the server
keeps a Stop for a click it has not seen yet for that click's run alone (`Handlers.stop`).

The ids live in the page's table `window.cosyvoiceClicks`, one entry per tab, keyed by the tab's hidden field.
"""

from __future__ import annotations

_NEW_ID = "Date.now().toString(36) + Math.random().toString(36).slice(2, 10)"
_TABLE = "(window.cosyvoiceClicks = window.cosyvoiceClicks || {})"


def field():
    """The hidden field whose place in a job's values carries the click's id (its own value stays empty)."""
    import gradio as gr

    return gr.Textbox(value="", visible=False)


def payload_index(inputs: set, component) -> int:
    """Where `component`'s value is among the values the page sends for an event with these dict inputs
    (Gradio orders them by component id; tests/ui/test_stop_click.py checks it against the built config)."""
    return sorted(inputs, key=lambda each: each._id).index(component)


def making(inputs: set, click) -> str:
    """The `js` of a click that starts a job: a new id, in the click's values and in the tab's entry."""
    return (f"(...values) => {{ const click = {_NEW_ID}; values[{payload_index(inputs, click)}] = click; "
            f"{_TABLE}[{click._id}] = click; return values; }}")


def making_only(click) -> str:
    """The `js` of a click whose job is its next step (`sending` there): a new id in the tab's entry only."""
    return f"(...values) => {{ {_TABLE}[{click._id}] = {_NEW_ID}; return values; }}"


def sending(inputs: set, click) -> str:
    """The `js` of a Stop (or of a job's step after `making_only`): the tab's last id in its values."""
    return f"(...values) => {{ values[{payload_index(inputs, click)}] = {_TABLE}[{click._id}] || ''; return values; }}"
