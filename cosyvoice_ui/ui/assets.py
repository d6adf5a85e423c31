"""The page's own stylesheet and script (`assets/page.css`, `assets/page.js`), handed to Gradio when the app is
mounted: what Gradio's component options cannot say (a refusal beside Generate, Stop's running colour, a tab bar
that keeps every name on a phone)."""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).parent / "assets"


def page_css() -> str:
    return (ASSETS / "page.css").read_text(encoding="utf-8")


def page_js() -> str:
    """A function Gradio runs once the page is drawn."""
    return (ASSETS / "page.js").read_text(encoding="utf-8")
