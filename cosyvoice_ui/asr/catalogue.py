"""The Whisper checkpoints users can download, finding downloaded ones, and the download itself (with progress).

A Whisper folder is what `hf download openai/whisper-small` leaves: `config.json` (model_type
"whisper"), `model.safetensors`, `preprocessor_config.json`, `generation_config.json` and the tokenizer files. Only
the safetensors weights are fetched (the repositories also hold PyTorch-pickle, TensorFlow and Flax copies).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import DownloadError
from ..hub_download import byte_progress, endpoint, hub_reachable
from ..types import ProgressCallback, ProgressEvent

# What a usable folder must hold (the tokenizer: tokenizer.json, or the older vocab.json + merges.txt pair).
REQUIRED_FILES = ("config.json", "model.safetensors", "preprocessor_config.json", "generation_config.json")
ALLOW_PATTERNS = ["*.json", "merges.txt", "model.safetensors"]


@dataclass(frozen=True)
class AsrEntry:
    """A downloadable Whisper checkpoint."""

    name: str  # folder name under pretrained_models/asr/
    repo_id: str  # Hugging Face repository
    size_gb: float  # the safetensors weights, roughly
    description: str


# Best first: the first one downloaded is the default recogniser.
CATALOGUE: tuple[AsrEntry, ...] = (
    AsrEntry("whisper-large-v3-turbo", "openai/whisper-large-v3-turbo", 1.6,
             "Whisper large-v3 turbo (809M, 99 languages): the most accurate; fast on a GPU, slow on a CPU"),
    AsrEntry("whisper-small", "openai/whisper-small", 1.0,
             "Whisper small (244M, 99 languages): a good balance on a CPU"),
    AsrEntry("whisper-base", "openai/whisper-base", 0.3,
             "Whisper base (74M, 99 languages): quick, less accurate"),
    AsrEntry("whisper-tiny", "openai/whisper-tiny", 0.15,
             "Whisper tiny (39M, 99 languages): the quickest, rough on accents and noise"),
)


def catalogue_entry(name: str) -> AsrEntry:
    """The entry called `name` (folder name or repository id, any case)."""
    for entry in CATALOGUE:
        if name.lower() in (entry.name.lower(), entry.repo_id.lower()):
            return entry
    raise DownloadError(f"unknown speech recogniser {name!r}; choose one of: {', '.join(e.name for e in CATALOGUE)}")


def is_whisper_folder(folder: Path) -> bool:
    """True when `folder` holds a complete Hugging Face Whisper checkpoint (safetensors weights)."""
    if not all((folder / name).is_file() for name in REQUIRED_FILES):
        return False
    if not ((folder / "tokenizer.json").is_file() or
            ((folder / "vocab.json").is_file() and (folder / "merges.txt").is_file())):
        return False
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") == "whisper"


def find_whisper_models(asr_dir: Path) -> list[Path]:
    """Whisper folders directly under `asr_dir`: catalogue ones first (best first), then others by name."""
    if not asr_dir.is_dir():
        return []
    found = [p for p in asr_dir.iterdir() if p.is_dir() and is_whisper_folder(p)]
    rank = {entry.name: i for i, entry in enumerate(CATALOGUE)}
    return sorted(found, key=lambda p: (rank.get(p.name, len(rank)), p.name))


def by_hand(entry: AsrEntry, target: Path) -> str:
    """How to place the folder without this app's downloader, named where the app looks for it (`target`, in the
    asr folder of its models folder)."""
    return (f"to install it by hand, run `hf download {entry.repo_id} --local-dir {target}` once there is "
            f"internet (on another machine: run it there and copy the folder to {target} here)")


def download(name: str, asr_dir: Path, progress: ProgressCallback | None = None) -> Path:
    """Download (or resume) catalogue entry `name` into `asr_dir/NAME` and return the folder."""
    entry = catalogue_entry(name)
    target = asr_dir / entry.name
    if is_whisper_folder(target):
        if progress is not None:
            progress(ProgressEvent("download", 1.0, f"{entry.name} is already downloaded"))
        return target
    if not hub_reachable():
        raise DownloadError(f"cannot reach {endpoint()} (offline?); {by_hand(entry, target)}")
    from huggingface_hub import snapshot_download

    target.mkdir(parents=True, exist_ok=True)
    if progress is not None:
        progress(ProgressEvent("download", 0.0, f"downloading {entry.name} (about {entry.size_gb:.1f} GB)"))
    try:
        snapshot_download(entry.repo_id, local_dir=str(target), allow_patterns=ALLOW_PATTERNS,
                          tqdm_class=byte_progress(progress, entry.name))
    except Exception as exc:  # network, auth, disk: every failure becomes one actionable message
        raise DownloadError(f"downloading {entry.name} failed ({type(exc).__name__}); run the download again "
                            f"to resume, or {by_hand(entry, target)}") from exc
    if not is_whisper_folder(target):
        raise DownloadError(f"the download of {entry.name} is incomplete; run it again to resume, or "
                            f"{by_hand(entry, target)}")
    if progress is not None:
        progress(ProgressEvent("download", 1.0, f"{entry.name} ready"))
    return target
