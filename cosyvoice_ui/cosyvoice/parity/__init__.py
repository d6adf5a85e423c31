"""`python -m cosyvoice_ui parity FIXTURE_DIR`: run every golden of an upstream fixture folder through this
engine and print one row per stage (max abs diff vs tolerance).

The fixture format is described in the folder's README.md (goldens as safetensors, shapes and tolerances in
manifest.json). Random draws that upstream made are injected from the saved tensors or regenerated from the
manifest's recipes, so every comparison is deterministic. Which run a family has is its registry entry's
(`FamilyBackend.parity`; one module per family: `v1.py`, `v2.py`, `v3.py`; `qwen.py` and `common.py` hold what
they share).
"""

from __future__ import annotations

import math
from pathlib import Path

from ...errors import CosyVoiceError
from ..families import FAMILIES, FamilySpec, folder_family
from ..registry import BACKENDS
from .common import ParityRun, StageResult

__all__ = ["StageResult", "format_table", "parity_runs", "run_parity", "verdict"]


def parity_runs() -> dict[FamilySpec, type[ParityRun]]:
    """Each family's parity run (its golden groups and how each stage is computed), from the registry."""
    return {family: backend.parity() for family, backend in BACKENDS.items() if backend.parity is not None}


def run_parity(fixture_dir: Path) -> list[StageResult]:
    """Every stage result for a fixture folder of a family with a parity run. Raises CosyVoiceError for
    other folders."""
    fixture_dir = Path(fixture_dir)
    family = folder_family(fixture_dir)
    runs = parity_runs()
    if family is None or family not in runs or not (fixture_dir / "manifest.json").is_file():
        found = [f.yaml_name for f in FAMILIES if (fixture_dir / f.yaml_name).is_file()]
        runnable = ", ".join(f"{f.title} ({f.yaml_name})" for f in FAMILIES if f in runs)
        what = ", ".join(found) or "no model yaml"
        if family is not None and not (fixture_dir / "manifest.json").is_file():
            what += " but no manifest.json (not a golden fixture folder)"
        raise CosyVoiceError(f"{fixture_dir} holds {what}; this engine checks fixtures of {runnable} only")
    return runs[family](fixture_dir, BACKENDS[family]).run_all()


def format_table(results: list[StageResult]) -> str:
    width = max(len(r.stage) for r in results) if results else 10
    lines = [f"{'stage':<{width}}  {'max abs diff':>12}  {'tolerance':>9}  ok"]
    for r in results:
        diff = "crash" if math.isinf(r.diff) else f"{r.diff:.3g}"
        lines.append(f"{r.stage:<{width}}  {diff:>12}  {r.tolerance:>9.1g}  {'yes' if r.ok else 'NO'}"
                     + (f"  ({r.note})" if r.note else ""))
    return "\n".join(lines)


def verdict(results: list[StageResult]) -> tuple[bool, str]:
    """(passed, the closing line: "parity: PASS (62 stages)" or "parity: FAIL (2 of 62 stages)")."""
    failed = sum(not r.ok for r in results)
    if failed:
        return False, f"parity: FAIL ({failed} of {len(results)} stages)"
    return True, f"parity: PASS ({len(results)} stages)"
