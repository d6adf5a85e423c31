"""Which backend serves a model id: a CosyVoice folder, or the offline default voice (OFFLINE_ID).

Loading and describing dispatch here, so the manager, the web app and the CLI never branch on backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..engine import Engine
from ..settings import LoadOptions
from ..types import EngineInfo, ProgressCallback

OFFLINE_ID = "offline-default"
OFFLINE_NAME_KEY = "offline_choice"


@dataclass(frozen=True)
class ModelChoice:
    model_id: str  # a folder path, or OFFLINE_ID
    label: str
    label_key: str = ""  # the UI's string-table key of a localised label ("" = show `label`)
    key: str = ""  # what a page sees instead of the path: the folder below --models-dir (or its name), OFFLINE_ID

    @property
    def public_key(self) -> str:
        return self.key or Path(self.model_id).name


def name_key(model_id: str) -> str:
    """The UI's string-table key of a model's localised name ("" = its own name is the name to show)."""
    return OFFLINE_NAME_KEY if model_id == OFFLINE_ID else ""


def model_choices(models_dir: Path | None, current_id: str) -> list[ModelChoice]:
    """The folders under `models_dir` (and the current model if it lives elsewhere), then the offline voice."""
    from ..cosyvoice.hub import find_models

    found = [ModelChoice(str(p), p.name, key=_below(p, models_dir)) for p in find_models(models_dir)] \
        if models_dir else []
    if current_id != OFFLINE_ID and all(c.model_id != current_id for c in found):
        name = Path(current_id).name
        key = name if all(c.public_key != name for c in found) else f"{name} (--model-dir)"
        found.insert(0, ModelChoice(current_id, name, key=key))
    return found + [ModelChoice(OFFLINE_ID, "Offline default (no download)", OFFLINE_NAME_KEY, key=OFFLINE_ID)]


def _below(path: Path, root: Path) -> str:
    """`path` relative to `root` (posix), or its name when it is not below it."""
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except (ValueError, OSError):
        return Path(path).name


def default_model_id(model_dir: Path | None, models_dir: Path) -> str:
    """The explicit folder, else the first CosyVoice folder under models_dir, else the offline default."""
    from ..cosyvoice.families import is_model_folder
    from ..cosyvoice.hub import find_models

    if model_dir is not None:
        return str(model_dir)
    found = [p for p in find_models(models_dir) if is_model_folder(p, supported_only=True)]
    return str(found[0]) if found else OFFLINE_ID


def load_any(model_id: str, options: LoadOptions | None = None, progress: ProgressCallback | None = None) -> Engine:
    """Load a CosyVoice folder or, for OFFLINE_ID, the embedded offline default."""
    options = options or LoadOptions()
    if model_id == OFFLINE_ID:
        from ..offline import load_default_engine

        return load_default_engine(device=options.device, progress=progress, voices_dir=options.voices_dir)
    from ..cosyvoice.engine import load_engine

    return load_engine(model_id, device=options.device, progress=progress, precision=options.precision,
                       max_text_chars=options.max_text_chars, threads=options.threads,
                       batch_width=options.batch_width)


def describe(model_id: str) -> EngineInfo:
    """What a model can do, without loading its weights."""
    if model_id == OFFLINE_ID:
        from ..offline import describe_default

        return describe_default()
    from ..cosyvoice.loader import describe_cosyvoice

    return describe_cosyvoice(Path(model_id))


def open_engine(model_dir: Path | None, models_dir: Path, options: LoadOptions | None = None,
                progress: ProgressCallback | None = None) -> Engine:
    """Load the engine a CLI invocation asked for (or the default one)."""
    return load_any(default_model_id(model_dir, models_dir), options, progress)


def downloadable_models() -> list[str]:
    """Catalogue models this app can run, the recommended one first."""
    from ..cosyvoice.hub import catalogue

    return [entry.name for entry in catalogue() if entry.supported]


def download_model(name: str, models_dir: Path, progress: ProgressCallback | None = None) -> Path:
    """Fetch a catalogue model into `models_dir/NAME` (resumable); see `cosyvoice.hub.download`."""
    from ..cosyvoice.hub import download

    return download(name, models_dir, progress=progress)


def precision_modes() -> tuple[str, ...]:
    """The precision modes a CosyVoice folder loads with, fastest last (`cosyvoice/precision.py`)."""
    from ..cosyvoice.precision import PRECISIONS

    return PRECISIONS


def resolve_load_options(options: LoadOptions) -> LoadOptions:
    """`options` with precision "auto" replaced by the mode it means on their device (fast on a CPU, stock on a
    GPU; `cosyvoice/precision.py`'s `resolve_precision`); other options are returned as they are."""
    if options.precision != "auto":
        return options
    from ..cosyvoice.precision import resolve_precision

    return options.with_(precision=resolve_precision(options.precision, options.device))


def fast_flow_steps() -> int:
    """The flow's diffusion steps in fast mode, for texts that say what fast changes."""
    from ..cosyvoice.precision import settings_for

    return settings_for("fast").n_timesteps
