"""Architecture rules of design.md, enforced: the engine imports no UI/web code; the UI, API and CLI
import no model code; importing the package loads no torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cosyvoice_ui"
ENGINE_SIDE = ["engine.py", "manager.py", "loader.py", "checkpoint.py", "config.py", "families.py", "streaming.py",
               "frontend", "models"]
UI_SIDE = ["ui", "api.py", "cli.py"]
WEB_MODULES = {"gradio", "fastapi", "uvicorn", "starlette"}
MODEL_MODULES = {"torch", "cosyvoice_ui.cosyvoice.models", "cosyvoice_ui.cosyvoice.frontend", "cosyvoice_ui.cosyvoice.checkpoint",
                 "cosyvoice_ui.cosyvoice.config", "cosyvoice_ui.cosyvoice.loader", "cosyvoice_ui.cosyvoice.streaming"}


def _files(entries: list[str]) -> list[Path]:
    found = []
    for entry in entries:
        path = PACKAGE / entry
        if path.is_dir():
            found += sorted(path.rglob("*.py"))
        elif path.is_file():
            found.append(path)
    return found


def _imports(path: Path) -> set[str]:
    """Absolute module names imported by a file (relative imports resolved against the package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package_parts = ["cosyvoice_ui"] + list(path.relative_to(PACKAGE).parent.parts)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
            elif node.module:
                names.add(node.module)
    return names


def _hits(names: set[str], forbidden: set[str]) -> set[str]:
    return {n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden)}


def test_engine_imports_no_web_code() -> None:
    for path in _files(ENGINE_SIDE):
        bad = _hits(_imports(path), WEB_MODULES | {"cosyvoice_ui.ui", "cosyvoice_ui.api.routes"})
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_ui_api_cli_import_no_model_code() -> None:
    for path in _files(UI_SIDE):
        bad = _hits(_imports(path), MODEL_MODULES)
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_importing_the_package_is_light() -> None:
    code = ("import sys, cosyvoice_ui, cosyvoice_ui.types, cosyvoice_ui.errors, cosyvoice_ui.validation; "
            "heavy = [m for m in ('torch', 'gradio', 'onnxruntime') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout.strip()
    assert out == "[]", f"importing the package pulled in {out}"
