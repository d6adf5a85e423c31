"""No emoji or pictographs in what the UI shows: without an emoji font (many Linux desktops, servers' browsers)
they render as empty boxes, so a button labelled 🎲 or a status 🟢 says nothing. Words, or symbols of the Basic
Multilingual Plane that every text font has (arrows, the middle dot), are used instead."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cosyvoice_ui.ui import strings

UI = Path(__file__).resolve().parents[2] / "cosyvoice_ui" / "ui"
# Code points drawn from an emoji font: joiners and presentation selectors, the emoji of Letterlike Symbols,
# Miscellaneous Technical and Enclosed Alphanumerics, Geometric Shapes (● ▶), Miscellaneous Symbols,
# Dingbats (✓ ✔), Miscellaneous Symbols and Arrows (⭐), and the CJK-block emoji (〰 ㊗).
SINGLES = {0x200D, 0x20E3, 0xFE0E, 0xFE0F, 0x2122, 0x2139, 0x231A, 0x231B, 0x2328, 0x23CF, 0x24C2, 0x3030, 0x303D,
           0x3297, 0x3299}
RANGES = ((0x23E9, 0x23FA), (0x25A0, 0x25FF), (0x2600, 0x27BF), (0x2B00, 0x2BFF))


def pictographic(char: str) -> bool:
    cp = ord(char)
    return cp > 0xFFFF or cp in SINGLES or any(low <= cp <= high for low, high in RANGES)


def offending(text: str) -> str:
    return "".join(sorted({c for c in text if pictographic(c)}))


def test_the_check_knows_emoji_from_plain_symbols() -> None:
    assert all(pictographic(c) for c in "🎲🟢⚠✓🔒🌐ℹ●▶⭐\ufe0f")
    assert not any(pictographic(c) for c in "→·—…“”（）：、 éǐ汉字かなA1")


@pytest.mark.parametrize("table", ["LABELS_EN", "LABELS_ZH", "MESSAGES_ZH"])
def test_no_label_or_message_holds_an_emoji(table: str) -> None:
    bad = {key: offending(text) for key, text in getattr(strings, table).items() if offending(text)}
    assert not bad, bad


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are docstrings (not shown to users)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def test_no_string_in_the_ui_code_holds_an_emoji() -> None:
    files = sorted(UI.rglob("*.py"))
    assert len(files) > 20  # the whole package, i18n tables, tabs and studio included
    bad = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                if offending(node.value):
                    bad.append(f"{path.relative_to(UI)}:{node.lineno} {offending(node.value)}")
    assert not bad, bad
