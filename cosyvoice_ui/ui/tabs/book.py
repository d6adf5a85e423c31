"""The Book tab (issue 15). Placeholder wiring made by the lead so layout.py can place the tab; its owner
replaces this module's body."""

from __future__ import annotations

from dataclasses import dataclass

from ...types import EngineInfo
from ..page import Page


@dataclass(frozen=True)
class BookTab:
    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        return {}


def build_book(page: Page) -> BookTab:
    return BookTab()
