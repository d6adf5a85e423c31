"""The rules of docs/ARCHITECTURE.md, enforced on the source (AST only: nothing is imported).

- Layers by directory: each folder of the package may import the root and itself, plus what its row
  in ARCHITECTURE.md allows. A new file is covered by its folder's rule without editing this test.
- No import cycles between modules, lazy (function-level) and type-checking (`if TYPE_CHECKING:`) imports included.
- No module over 500 lines; importing the package's public surface loads no torch, gradio or onnxruntime.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cosyvoice_ui"
ROOT = "cosyvoice_ui"
MAX_LINES = 500
FOLDERS = ("cosyvoice", "offline", "asr", "watermark", "serving", "studio", "api", "ui", "cli", "web", "cluster",
           "testing")
MODEL_LIBRARIES = {"torch", "onnxruntime", "onnx", "transformers", "pocketsphinx"}
WEB_LIBRARIES = {"fastapi", "starlette", "uvicorn"}
UI_LIBRARIES = {"gradio", "gradio_client"}
SCALE_LIBRARIES = {"ray"}  # the optional extra: only cluster/ may import it

# folder -> (package prefixes it may import besides the root and itself, third-party libraries it must not import)
ALLOWED: dict[str, tuple[tuple[str, ...], set[str]]] = {
    "": ((), MODEL_LIBRARIES | WEB_LIBRARIES | UI_LIBRARIES | SCALE_LIBRARIES),
    "cosyvoice": ((), WEB_LIBRARIES | UI_LIBRARIES | SCALE_LIBRARIES),
    # The offline voice reuses the CosyVoice frontend's resampler and Slaney mel filters (one copy of the DSP).
    "offline": (("cosyvoice.frontend.features",), WEB_LIBRARIES | UI_LIBRARIES | SCALE_LIBRARIES),
    # The transcription backend (Whisper through transformers, pocketsphinx): model code over the root only.
    "asr": ((), WEB_LIBRARIES | UI_LIBRARIES | SCALE_LIBRARIES),
    # The PerTh watermark (its network and front end, torch): model code over the root only.
    "watermark": ((), WEB_LIBRARIES | UI_LIBRARIES | SCALE_LIBRARIES),
    "serving": (("cosyvoice", "offline", "asr", "watermark"), WEB_LIBRARIES | UI_LIBRARIES | SCALE_LIBRARIES),
    # Long-form work (scripts, takes, audiobooks, subtitles) drives an Engine it is given: no model code.
    "studio": (("serving",), MODEL_LIBRARIES | WEB_LIBRARIES | UI_LIBRARIES | SCALE_LIBRARIES),
    "api": (("serving", "studio"), MODEL_LIBRARIES | UI_LIBRARIES | SCALE_LIBRARIES),
    "ui": (("serving", "studio", "api.service", "api.schemas"), MODEL_LIBRARIES | WEB_LIBRARIES | SCALE_LIBRARIES),
    "cli": (("serving", "studio", "cosyvoice.hub", "cosyvoice.parity", "web", "cluster"),
            WEB_LIBRARIES | UI_LIBRARIES | SCALE_LIBRARIES),
    "web": (("cosyvoice", "offline", "asr", "serving", "studio", "api", "ui", "cli"), MODEL_LIBRARIES | SCALE_LIBRARIES),
    # Scale-out on Ray Serve composes a process like web/ does (the REST app over engine replicas); model code
    # stays behind serving/, and the UI is a separate thin client.
    "cluster": (("serving", "api", "web"), MODEL_LIBRARIES | UI_LIBRARIES),
    "testing": (FOLDERS, set()),
}
# Where serving/ may reach into a backend (and nothing else of serving/ may): the dispatch by model id, the
# transcription service into the ASR backend, the watermark service into the watermark.
SERVING_TO_BACKENDS = {"serving/backends.py": ("cosyvoice", "offline"), "serving/transcription.py": ("asr",),
                       "serving/watermarking.py": ("watermark",)}
# The package's entry points: `load_engine` in __init__ loads a CosyVoice folder, and __init__ imports the families'
# light data so the root's table of known models is full (`known_models.py`); `python -m` runs the CLI.
ENTRY_POINTS = {ROOT: (f"{ROOT}.cosyvoice.loader", f"{ROOT}.cosyvoice.engine", f"{ROOT}.cosyvoice.families"),
                f"{ROOT}.__main__": (f"{ROOT}.cli",)}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, modules: dict[str, Path], name: str | None = None) -> set[str]:
    """Names imported by `path`, at run time or for type checking (an `if TYPE_CHECKING:` import is an edge too:
    a circle through type hints is still a circle): package modules resolved (a name that is a submodule counts
    as that module), third-party modules by their top-level name. `name`: the module's (default: from its path)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    current = (name or _module_name(path)).split(".")
    package = current if path.name == "__init__.py" else current[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
    return found


def _folder_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FOLDERS) else ""


def _inside(module: str, prefix: str) -> bool:
    name = f"{ROOT}.{prefix}"
    return module == name or module.startswith(name + ".")


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> what it imports (package modules and third-party top-level names)."""
    return {m: imports_of(p, modules) for m, p in modules.items()}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, names in graph.items():
        folder = _folder_of(module)
        allowed, banned = ALLOWED[folder]
        rel = module.removeprefix(ROOT + ".").replace(".", "/") + ".py"
        for name in sorted(names):
            top = name.split(".")[0]
            if top != ROOT:
                if top in banned:
                    problems.append(f"{module} imports {top}")
                continue
            target = _folder_of(name)
            entry = ENTRY_POINTS.get(module, ())
            if target in ("", folder) or any(name == e or name.startswith(e + ".") for e in entry):
                continue
            if not any(_inside(name, prefix) for prefix in allowed):
                problems.append(f"{module} imports {name}")
            elif folder == "serving" and target in ("cosyvoice", "offline", "asr", "watermark") \
                    and target not in SERVING_TO_BACKENDS.get(rel, ()):
                problems.append(f"{module} imports {name} (only serving/backends.py dispatches to a model "
                                "backend, serving/transcription.py to the ASR one and serving/watermarking.py to "
                                "the watermark)")
    return problems


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more package modules (Tarjan's algorithm)."""
    edges = {m: {n for n in names if n in graph and n != m} for m, names in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                group.append(item)
                if item == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in edges:
        if node not in index:
            visit(node)
    return sorted(groups)


def test_every_folder_keeps_to_its_layer() -> None:
    modules = _modules()
    assert {_folder_of(m) for m in modules} <= set(ALLOWED), "a new folder needs its row in ALLOWED"
    assert layer_violations(import_graph(modules)) == []


def test_there_are_no_import_cycles() -> None:
    assert import_cycles(import_graph(_modules())) == []


def test_no_module_is_over_the_line_limit() -> None:
    long = {p.relative_to(PACKAGE).as_posix(): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_checks_catch_what_they_are_for() -> None:
    """A layer breach, a banned library and a lazy-import cycle in a synthetic graph are all reported."""
    graph = {f"{ROOT}.api.bad": {"torch", f"{ROOT}.cosyvoice.engine"},
             f"{ROOT}.serving.a": {f"{ROOT}.serving.b"}, f"{ROOT}.serving.b": {f"{ROOT}.serving.a"},
             f"{ROOT}.serving.voices": {f"{ROOT}.offline.engine"}, f"{ROOT}.ui.tab": {f"{ROOT}.api.service"}}
    problems = layer_violations(graph)
    assert f"{ROOT}.api.bad imports torch" in problems
    assert f"{ROOT}.api.bad imports {ROOT}.cosyvoice.engine" in problems
    assert any(p.startswith(f"{ROOT}.serving.voices imports") for p in problems)
    assert not any(p.startswith(f"{ROOT}.ui.tab") for p in problems)  # ui may use the API service
    assert import_cycles(graph) == [[f"{ROOT}.serving.a", f"{ROOT}.serving.b"]]


def test_type_checking_imports_are_edges(tmp_path: Path) -> None:
    """An import only for type hints still makes a circle (the circle `config` ↔ `models` hid behind one)."""
    package = tmp_path / ROOT / "serving"
    package.mkdir(parents=True)
    (package / "a.py").write_text("from .b import B\n", encoding="utf-8")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
                                  encoding="utf-8")
    modules = {f"{ROOT}.serving.a": package / "a.py", f"{ROOT}.serving.b": package / "b.py"}
    graph = {m: imports_of(p, modules, m) for m, p in modules.items()}
    assert graph[f"{ROOT}.serving.b"] == {"typing", f"{ROOT}.serving.a"}
    assert import_cycles(graph) == [[f"{ROOT}.serving.a", f"{ROOT}.serving.b"]]


def test_resolving_relative_imports_matches_the_files() -> None:
    modules = _modules()
    names = imports_of(PACKAGE / "api" / "routes.py", modules)
    assert f"{ROOT}.api.service" in names or f"{ROOT}.api.errors" in names
    assert f"{ROOT}.serving.manager" in imports_of(PACKAGE / "web" / "server.py", modules)


@pytest.mark.parametrize("entry", ["cosyvoice_ui", "cosyvoice_ui.types", "cosyvoice_ui.errors",
                                   "cosyvoice_ui.validation", "cosyvoice_ui.engine", "cosyvoice_ui.audio"])
def test_importing_the_public_surface_is_light(entry: str) -> None:
    code = (f"import sys, {entry}; heavy = [m for m in ('torch', 'gradio', 'onnxruntime', 'fastapi') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout.strip()
    assert out == "[]", f"importing {entry} pulled in {out}"
