"""No module checks a CosyVoice family except the two whose job it is (docs/ARCHITECTURE.md, Families).

`cosyvoice/families.py` holds each family's facts and `cosyvoice/registry.py` maps families to classes;
anywhere else in the package a family-name literal ("v1", "v2", "v3"), a yaml file name
("cosyvoice.yaml", "cosyvoice2.yaml", "cosyvoice3.yaml"), a family sample rate (22050, 24000) or a
comparison with a family spec (`family is V1`) means a family check crept in: ask the `FamilySpec`
(or the registry) instead. Read on the AST, so comments are free and docstrings are documentation.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cosyvoice_ui"
# The two modules whose job is to know the families.
FAMILY_MODULES = {"cosyvoice/families.py", "cosyvoice/registry.py"}
# testing/ writes tiny official-format model folders, which have a family's yaml name and sample rate.
EXCLUDED_FOLDERS = ("testing/",)
# Rates that belong to other engines, not to a CosyVoice family: excused only as the named constant's
# value, so any other use of the number in these files is still reported.
OWN_RATES = {
    ("offline/kokoro.py", "SAMPLE_RATE"),  # Kokoro-82M, the offline backend, speaks at 24 kHz
    ("offline/fallback.py", "ESPEAK_RATE"),  # espeak-ng's output rate, the offline fallback's
    ("serving/watermarking.py", "CHECK_RATE"),  # the rate the watermark check has ffmpeg decode files to
    ("studio/dub.py", "VOICE_RATE"),  # the rate a dub cuts a speaker's voice from the source at
}
FAMILY_NAMES = {"v1", "v2", "v3"}
YAML_NAME = re.compile(r"\bcosyvoice[23]?\.yaml\b")
SAMPLE_RATES = {22050, 24000}
FAMILY_SPECS = {"V1", "V2", "V3"}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are module, class or function docstrings."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    found.add(id(first.value))
    return found


def _excused_rates(tree: ast.AST, rel: str) -> set[int]:
    """ids of the number nodes assigned to this file's own-rate constant (see OWN_RATES)."""
    names = {name for path, name in OWN_RATES if path == rel}
    excused = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id in names for t in targets) and isinstance(node.value, ast.Constant):
            excused.add(id(node.value))
    return excused


def _is_spec(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in FAMILY_SPECS) or (
        isinstance(node, ast.Attribute) and node.attr in FAMILY_SPECS)


def family_checks(source: str, rel: str) -> list[str]:
    """Every family check in one module's source (`rel`: its path inside the package, for exclusions)."""
    if rel in FAMILY_MODULES or rel.startswith(EXCLUDED_FOLDERS):
        return []
    tree = ast.parse(source)
    skip = _docstrings(tree) | _excused_rates(tree, rel)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_is_spec(n) for n in [node.left, *node.comparators]):
            found.append(f"{rel}:{node.lineno}: compares with a family spec ({ast.unparse(node)})")
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        value = node.value
        if isinstance(value, str):
            if value.strip() in FAMILY_NAMES:
                found.append(f"{rel}:{node.lineno}: family name {value!r}")
            elif YAML_NAME.search(value):
                found.append(f"{rel}:{node.lineno}: yaml file name in {value!r}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value in SAMPLE_RATES:
            found.append(f"{rel}:{node.lineno}: family sample rate {value!r}")
    return found


def test_only_families_and_registry_check_families() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        found += family_checks(path.read_text(encoding="utf-8"), rel)
    assert found == [], "family checks outside cosyvoice/families.py and registry.py:\n" + "\n".join(found)


def test_the_excused_files_exist() -> None:
    """An exclusion that points at nothing would silently excuse a future file of that name."""
    for rel in FAMILY_MODULES | {path for path, _ in OWN_RATES}:
        assert (PACKAGE / rel).is_file(), rel
    for folder in EXCLUDED_FOLDERS:
        assert (PACKAGE / folder).is_dir(), folder


def test_a_new_family_check_is_caught() -> None:
    snippet = '''
"""A docstring may mention cosyvoice.yaml, v1 and 22050 Hz."""
from .families import V1

RATE = 24000


def pick(folder, family):
    """So may a function's: v2."""
    if family.name == "v2" or family is V1:
        return folder / "cosyvoice3.yaml"
    return f"{folder}/cosyvoice.yaml" if family.sample_rate != 22050.0 else None
'''
    found = family_checks(snippet, "serving/new_module.py")
    assert len(found) == 6, found  # nothing from the docstrings
    report = "\n".join(found)
    for expected in ("5: family sample rate 24000", "10: family name 'v2'", "10: compares with a family spec",
                     "11: yaml file name in 'cosyvoice3.yaml'", "12: yaml file name in '/cosyvoice.yaml'",
                     "12: family sample rate 22050.0"):
        assert expected in report, expected
    # The same code is fine where knowing families is the job, and in the tiny-model writer.
    assert family_checks(snippet, "cosyvoice/registry.py") == []
    assert family_checks(snippet, "testing/tiny_model.py") == []


def test_an_own_rate_is_excused_only_as_its_constant() -> None:
    own = "SAMPLE_RATE = 24000\n"
    assert family_checks(own, "offline/kokoro.py") == []
    assert family_checks(own, "offline/engine.py") != []  # the same line elsewhere is a family rate
    assert family_checks(own + "OTHER = 24000\n", "offline/kokoro.py") == [
        "offline/kokoro.py:2: family sample rate 24000"]
