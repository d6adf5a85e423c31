"""Model catalogue, local model discovery and huggingface-hub downloads with progress and resume.

Offline, a download fails within seconds with a message that says how to place the folder by hand;
nothing else in the app depends on the network.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..errors import DownloadError
from ..hub_download import byte_progress, endpoint, hub_reachable
from ..types import ProgressCallback, ProgressEvent
from .families import FAMILIES, FamilySpec, is_model_folder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CatalogueEntry:
    """An official checkpoint (`families.Checkpoint`) and the family it belongs to."""

    name: str  # folder name under pretrained_models/
    repo_id: str  # Hugging Face repository
    size_gb: float
    description: str
    family: FamilySpec

    @property
    def supported(self) -> bool:
        """False: listed for completeness, not runnable by this engine yet (the family's fact)."""
        return self.family.supported


def catalogue() -> tuple[CatalogueEntry, ...]:
    """Every family's checkpoints, in the families' order (read at each call: a family registered later is in)."""
    return tuple(CatalogueEntry(c.name, c.repo_id, c.size_gb, c.description, family)
                 for family in FAMILIES for c in family.checkpoints)


def catalogue_entry(name: str) -> CatalogueEntry:
    entries = catalogue()
    for entry in entries:
        if entry.name.lower() == name.lower() or entry.repo_id.lower() == name.lower():
            return entry
    raise DownloadError(f"unknown model {name!r}; choose one of: {', '.join(e.name for e in entries)}")


def find_models(models_dir: Path) -> list[Path]:
    """Model folders (any CosyVoice generation) directly under `models_dir`, sorted by name."""
    if not models_dir.is_dir():
        return []
    return sorted(p for p in models_dir.iterdir() if is_model_folder(p))


def manual_instructions(entry: CatalogueEntry, target: Path) -> str:
    """How to place the folder by hand, named where the app looks for it (`target`, in its models folder): the
    `hf` command of huggingface-hub (its old `huggingface-cli` is gone) or git."""
    return (f"To install {entry.name} by hand, run `hf download {entry.repo_id} --local-dir {target}` (or "
            f"`git clone https://huggingface.co/{entry.repo_id} {target}`) once there is internet; on another "
            f"machine, run it there and copy the folder to {target} here "
            "(it must contain the yaml, llm.pt, flow.pt, hift.pt and the .onnx files).")


def download(name: str, models_dir: Path, progress: ProgressCallback | None = None) -> Path:
    """Download (or resume) a catalogue model into `models_dir/NAME` and return the folder."""
    entry = catalogue_entry(name)
    target = models_dir / entry.name
    if not hub_reachable():
        raise DownloadError(f"cannot reach {endpoint()} (offline?). " + manual_instructions(entry, target))
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise DownloadError("huggingface-hub is not installed; run `pip install -r requirements.txt`") from exc
    target.mkdir(parents=True, exist_ok=True)
    if progress is not None:
        progress(ProgressEvent("download", 0.0, f"downloading {entry.name} ({entry.size_gb:.1f} GB)"))
    try:
        snapshot_download(entry.repo_id, local_dir=str(target), tqdm_class=byte_progress(progress, entry.name))
    except Exception as exc:  # network, auth, disk: every failure becomes one actionable message
        raise DownloadError(f"downloading {entry.name} failed ({type(exc).__name__}: {exc}). Run the download "
                            "again to resume, or: " + manual_instructions(entry, target)) from exc
    if progress is not None:
        progress(ProgressEvent("download", 1.0, f"{entry.name} ready"))
    return target
